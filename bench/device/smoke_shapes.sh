#!/usr/bin/env bash
# The shapes branch's GPU checkpoint (issue 23): its GPU tests, the swiglu small-M threshold bench and
# bench/shapes_real.py --quick, each under its own time limit (about 9 minutes in all). Run from the
# repository root on the H200 with PYTHONPATH=src and GEMM_LADDER_CACHE set:
#
#   OUT=/tmp/out bash bench/device/smoke_shapes.sh
#
# Logs ($OUT/smoke_shapes.log, one per step) and the result JSONs land in $OUT.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/smoke_shapes.log"
{
  echo "== smoke_shapes $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache ${GEMM_LADDER_CACHE:-unset}"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
} >>"$LOG" 2>&1
step() {  # NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  local start=$(date +%s)
  echo "== $name ($secs s): $*" >>"$LOG"
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 60 "$OUT/$name.log" >>"$LOG"
  echo "== $name rc=$rc in $(( $(date +%s) - start )) s" >>"$LOG"
}
step pytest_shapes 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_swiglu_small_m_gpu.py \
  tests/test_activations_gpu.py tests/test_library_swiglu_gpu.py
step pytest_gelu 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_epilogue_gpu.py -k gelu
step swiglu_small_m 100 python3 bench/swiglu_small_m.py --no-compile --budget 0.05
step shapes_real_quick 240 python3 bench/shapes_real.py --quick
grep '^== ' "$LOG"
