#!/usr/bin/env bash
# The tiles branch's third GPU checkpoint (issue 23, step 2), at most 300 s on the H200 (every sm90_gemm build
# compiles again: the kernel source changed; about 100 s of it): the 128 x 192 tile
# (BN 192, K-major B) forced against the route and cuBLAS on the real layer shapes (bench/tiles_forced.py
# --check: every output checked against float64 first), and compute-sanitizer memcheck over
# bench/library.py --sanitize --sanitize-only "BN 192" (BN 192 forced, TMA store and C from registers, each split). Run from
# the repository root on the H200 with the package installed:
#
#   OUT=/tmp/out bash bench/device/smoke_tiles3.sh
#
# Writes $OUT/tiles/smoke_tiles3.log and tiles_forced.json / .md, nothing else.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tiles"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-/tmp/cache_tiles}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/tiles/smoke_tiles3.log"
{
  echo "== smoke_tiles3 $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache $GEMM_LADDER_CACHE"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
} >>"$LOG" 2>&1
source "$(dirname "$0")/step.sh"  # step NAME SECONDS COMMAND...
step tiles_forced 220 python3 bench/tiles_forced.py --budget 0.03 --check -o "$OUT/tiles"
step sanitize 75 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 \
  python3 bench/library.py --sanitize --sanitize-only "BN 192"
grep '^== \|WRONG\|ERROR SUMMARY\|BN 192\|cuBLAS .* us, route\|^total' "$LOG"
