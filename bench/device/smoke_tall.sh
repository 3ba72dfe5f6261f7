#!/usr/bin/env bash
# The general kernel's cooperative 256-row tile (library_gemm(..., bm=256); sm90_gemm.cu) on the H200, and the
# sanitizer runs of the fp8 192-wide tile, from the repository root with the package installed (or
# PYTHONPATH=src), the builds prebuilt with NVRTC where they can be (the experiment's configs; the GPU tests'
# fused-epilogue builds compile there):
#   OUT=/tmp/out bash bench/device/smoke_tall.sh
# Steps in order of what matters most, each under its own time limit (about 540 s if every step ran to its
# limit): the 256-row GPU tests (tests/test_tall_tile_gpu.py); bench/experiments/pingpong.py --set mid with the
# 256-row builds beside the cooperative 128-row ones, the 64-row ping-pong build, the route, cuBLAS and eager
# torch, interleaved -> $OUT/tall/pingpong.json and .md; compute-sanitizer racecheck and memcheck on the
# experiment's --sanitize launches of the 256-row builds; then bench/device/smoke_fp8wide.sh's sanitizer steps.
# Writes $OUT/tall/smoke.log. Exit status: 0 when every step passed; the failed steps are named on the log's
# last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_tall tall
step pytest 130 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_tall_tile_gpu.py
step bench 200 python3 bench/experiments/pingpong.py --set mid --configs '^(coop|tall|pp BN 256 c1)' -o "$DEST"
step racecheck 60 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 \
  python3 bench/experiments/pingpong.py --sanitize --configs '^tall BN (64|128 c1|192)'
step memcheck 40 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 \
  python3 bench/experiments/pingpong.py --sanitize --configs '^tall'
for tool in racecheck memcheck; do
  step "fp8wide_$tool" 50 compute-sanitizer --report-api-errors no --tool "$tool" --error-exitcode 1 \
    python3 bench/experiments/fp8_variants.py --check-only --variants bn192 --schemes blockwise,tensorwise \
    --shapes 300x1000x2064,1540x776x2064 -o "$DEST/fp8wide_check.json"
done
smoke_end smoke_tall 'passed|failed|error|ERROR|WRONG|UNEQUAL|SUMMARY|tall|sanitize:'  # 0 when every step passed
