#!/usr/bin/env bash
# The shapes branch's GPU checkpoint (issue 23), under 200 s: its new GPU tests (swiglu's small-M path,
# the erf GELU's polynomial form in the kernels), the swiglu small-M threshold bench (Llama-3-8B MLP) and
# bench/shapes_real.py --quick (rows not started by its deadline recorded as not run). Run from the
# repository root on the H200 with PYTHONPATH=src and GEMM_LADDER_CACHE set:
#
#   OUT=/tmp/out bash bench/device/smoke_shapes.sh
#
# Writes one log ($OUT/smoke_shapes.log) and the benches' JSONs in $OUT, nothing else.
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
source "$(dirname "$0")/step.sh"  # step NAME SECONDS COMMAND...
step pytest 65 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_swiglu_small_m_gpu.py \
  tests/test_activations_gpu.py -k "small_m or act_gelu or bias_gelu or batch or nan or compile or repeats"
step swiglu_small_m 30 python3 bench/swiglu_small_m.py --quick --no-compile --budget 0.03 --ms 1,7,16,32,64,128,192,256
step shapes_real_quick 100 python3 bench/shapes_real.py --quick --deadline 75
grep '^== ' "$LOG"
