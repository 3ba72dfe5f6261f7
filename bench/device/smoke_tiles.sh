#!/usr/bin/env bash
# The tiles branch's GPU checkpoint (issue 23, step 1), about 120 s on the H200 (builds included): every
# existing configuration forced on the 11 real layer shapes the route loses most on, against cuBLAS and
# the route, interleaved, each output checked against float64 (bench/tiles_forced.py). Run from the
# repository root on the H200 with the package installed:
#
#   OUT=/tmp/out bash bench/device/smoke_tiles.sh
#
# Writes $OUT/tiles/smoke_tiles.log, tiles_forced.json and tiles_forced.md, nothing else.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tiles"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-/tmp/cache_tiles}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/tiles/smoke_tiles.log"
{
  echo "== smoke_tiles $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache $GEMM_LADDER_CACHE"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
} >>"$LOG" 2>&1
start=$(date +%s)
timeout 170 python3 bench/tiles_forced.py --budget 0.03 -o "$OUT/tiles" >>"$LOG" 2>&1
echo "== tiles_forced rc=$? in $(( $(date +%s) - start )) s" >>"$LOG"
grep '^== \|^builds\|cuBLAS .* us, route\|^total' "$LOG"
