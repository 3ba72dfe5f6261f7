#!/usr/bin/env bash
# linear's bias by the tensor cores (sm90_gemm.cu's bias stage) on one GPU, from the repository root with the
# package installed, the carry's kernel cache unpacked into .kcache (bench/experiments/bias_mma.py --prebuild with
# NVRTC) and GEMM_LADDER_HOST unset:
#   OUT=/tmp/out bash bench/device/smoke_bias_mma.sh
# Steps (about 820 s if each ran to its limit: SKIP some on one call), the most needed first: the bias stage's GPU
# tests; bench/experiments/bias_mma.py on its default shapes (-> $OUT/bias_mma/bias_mma.json); compute-sanitizer
# memcheck, racecheck (78 s on an H100 at 11af8d0, unsplit; 90 s cut it) and synccheck of bias_mma.py --sanitize
# --split all on two shapes the stage takes (every unit's bias on the stream-K piece that ends its K); the
# fp16 bench (-> bias_mma_fp16.json); the epilogue's GPU tests (which take the stage wherever a bias comes
# without alpha).
# SKIP="name ..." leaves those steps out (step.sh). Writes $OUT/bias_mma/smoke.log. Exit status: 0
# when every step that ran passed.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_bias_mma bias_mma
step tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_bias_mma_gpu.py
step bench 110 python3 bench/experiments/bias_mma.py -o "$DEST/bias_mma.json"
SAN="bench/experiments/bias_mma.py --sanitize --split all --shapes 520x264x776,1000x4608x3584 -o $DEST/sanitize.json"
step memcheck 60 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 $SAN
step racecheck 250 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 $SAN
step synccheck 60 compute-sanitizer --report-api-errors no --tool synccheck --error-exitcode 1 python3 $SAN
step bench_fp16 70 python3 bench/experiments/bias_mma.py --dtype fp16 \
  --shapes 1576x3072x1024,1000x4608x3584,1023x2304x768,8192x2304x768,4096x4096x1024:gelu -o "$DEST/bias_mma_fp16.json"
step epilogue_tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_epilogue_gpu.py
smoke_end smoke_bias_mma 'passed|failed|error|ERROR|WRONG|UNEQUAL|geomean|mma/epi|SUMMARY'
