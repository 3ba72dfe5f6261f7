# The smoke scripts' one step, sourced by them after they set LOG:
#   step NAME SECONDS COMMAND...
# runs COMMAND under `timeout SECONDS` (a deadlock ends as rc=124, not a hung session), appends a start
# line, its output and an end line (rc, seconds) to $LOG, adds NAME to $FAILED when it fails, and
# returns its exit status.
FAILED=${FAILED:-}
step() {  # NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  echo "== $name ($secs s): $*" >>"$LOG"
  local start=$(date +%s)
  timeout "$secs" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $(( $(date +%s) - start )) s" >>"$LOG"
  [ $rc -eq 0 ] || FAILED="$FAILED $name"
  return $rc
}
