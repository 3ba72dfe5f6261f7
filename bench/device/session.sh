#!/usr/bin/env bash
# One batched session on the H200 (the device machine): install, GPU facts, then each STEP given on
# the command line, each under its own time limit, all output appended to $OUT/session.log; result
# JSONs land in $OUT (bench/suite.py writes there when OUT is set).
#
#   bash bench/device/session.sh "pytest:300:python3 -m pytest -q -m gpu tests/test_api_gpu.py" \
#                                "bench:200:python3 bench/library.py --quick"
#
# A STEP is NAME:SECONDS:COMMAND. The prebuilt kernel cache travels as .kcache (carry it) so
# that nothing compiles there that compiled here.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/session.log"
export PYTHONUNBUFFERED=1 GEMM_LADDER_CACHE="$PWD/.kcache" PYTHONPATH="$PWD/src"
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "== session $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
} >>"$LOG" 2>&1
for step in "$@"; do
  name=${step%%:*}; rest=${step#*:}; secs=${rest%%:*}; cmd=${rest#*:}
  echo "== $name ($secs s): $cmd" >>"$LOG"
  start=$(date +%s)
  timeout "$secs" bash -c "$cmd" >>"$LOG" 2>&1
  echo "== $name rc=$? in $(( $(date +%s) - start )) s" >>"$LOG"
done
grep '^== ' "$LOG"
