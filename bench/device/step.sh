# The smoke scripts' shared steps, sourced by them:
#   smoke_begin NAME DIR   sets DEST=$OUT/DIR and LOG=$DEST/smoke.log, the environment every smoke step
#                          runs in, writes the log's header (the commit, the GPU's name and clocks) and
#                          runs a step "gpu" that fails where torch sees no CUDA device;
#   step NAME SECONDS COMMAND...
#                          runs COMMAND under `timeout SECONDS` (a deadlock ends as rc=124, not a hung
#                          session), appends a start line, its output and an end line (rc, seconds) to
#                          $LOG, adds NAME to $FAILED when it fails, and returns its exit status; a NAME listed
#                          in $SKIP (space-separated) is not run, its line says so (a call with less time);
#   smoke_end NAME PATTERN the closing clocks and the failed steps on the log's last line, the log's lines
#                          matching PATTERN (and the step lines) printed; its status is the script's: 0
#                          when every step passed.
# A script that sets LOG itself may use `step` alone.
FAILED=${FAILED:-}

smoke_begin() {  # NAME DIR
  OUT=${OUT:-/tmp/out}
  DEST="$OUT/$2"
  mkdir -p "$DEST"
  LOG="$DEST/smoke.log"
  export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
  export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-$PWD/.kcache}
  export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  {
    echo "== $1 $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT"
    nvidia-smi --query-gpu=name,clocks.sm,power.limit,temperature.gpu --format=csv
  } >>"$LOG" 2>&1
  # A GPU test step whose tests all skip exits 0: without a GPU this step is what fails the run.
  step gpu 30 python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible")'
}

step() {  # NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then
    echo "== $name skipped (SKIP)" >>"$LOG"
    return 0
  fi
  echo "== $name ($secs s): $*" >>"$LOG"
  local start=$(date +%s)
  timeout "$secs" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $(( $(date +%s) - start )) s" >>"$LOG"
  [ $rc -eq 0 ] || FAILED="$FAILED $name"
  return $rc
}

smoke_end() {  # NAME PATTERN
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >>"$LOG" 2>&1
  echo "== $1 failed:${FAILED:- none}" >>"$LOG"
  grep -E "^== |$2" "$LOG" | tail -n 70
  [ -z "$FAILED" ]
}
