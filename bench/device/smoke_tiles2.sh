#!/usr/bin/env bash
# The tiles branch's second GPU checkpoint (issue 23, step 2), about 200 s on the H200: the split policy
# "wave" and the refitted cost model. (1) GPU tests of every stream-K policy, "wave" among them (outputs
# gated against float64, repeated launches bitwise equal); (2) compute-sanitizer memcheck over
# bench/library.py --sanitize (every general build's split paths forced, "wave" over two waves); (3)
# bench/tiles_forced.py --check: every configuration forced against the route and cuBLAS. Run from the
# repository root on the H200 with the package installed:
#
#   OUT=/tmp/out bash bench/device/smoke_tiles2.sh
#
# Writes $OUT/tiles/smoke_tiles2.log and tiles_forced.json / .md, nothing else.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tiles"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-/tmp/cache_tiles}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/tiles/smoke_tiles2.log"
{
  echo "== smoke_tiles2 $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache $GEMM_LADDER_CACHE"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
} >>"$LOG" 2>&1
source "$(dirname "$0")/step.sh"  # step NAME SECONDS COMMAND...
step pytest 100 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_library_gemm_gpu.py \
  tests/test_library_gemm_regstore_gpu.py -k wave
step sanitize 90 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 \
  python3 bench/library.py --sanitize
step tiles_forced 90 python3 bench/tiles_forced.py --budget 0.03 --check -o "$OUT/tiles"
grep '^== \|passed\|failed\|WRONG\|ERROR SUMMARY\|cuBLAS .* us, route\|^total' "$LOG"
