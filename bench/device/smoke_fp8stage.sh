#!/usr/bin/env bash
# The fp8 kernel's blockwise scale_b loaded ahead (the default) against its variants, then the bf16 set on an
# H200: one `run` call, about 500 s at most. (Its first run, 2026-12-05, also measured the TMA store's
# one-panel staging, GL_FP8_STAGING_PANELS=1, since removed: docs/fp8.md, "Tried and removed".)
# From the repository root with the carry unpacked (bench/device/prepare.sh):
#   OUT=/tmp/out bash bench/device/smoke_fp8stage.sh
# Steps, each under its own time limit: the fp8 GPU tests; bench/experiments/fp8_variants.py (behind and
# stages5 against the default, every scheme, the issue's five shapes, bitwise); bench/fp8.py --quick (the
# issue's table); compute-sanitizer racecheck and memcheck (API errors not reported: cuGetProcAddress's
# lookups are not kernel errors) of the default blockwise and tensorwise builds, whole tiles with tails and
# the 64-row split (--check-only launches no torch: racecheck reports hazards in cuBLAS's blockwise kernel);
# on an H200 only, bench/shapes_real.py --autotune on the bf16 set.
# Writes $OUT/fp8stage/smoke.log and the benches' JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8stage fp8stage
FP8_TESTS="tests/test_fp8_gpu.py tests/test_fp8_split_gpu.py tests/test_fp8_store_gpu.py tests/test_fp8_64_rows_gpu.py tests/test_fp8_host_gpu.py tests/test_quantized_output_gpu.py"
step tests 90 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short $FP8_TESTS
step variants 90 python3 bench/experiments/fp8_variants.py --schemes blockwise,tensorwise,rowwise -o "$DEST/fp8_variants.json"
step fp8_quick 80 python3 bench/fp8.py --quick -o "$DEST/fp8_quick.json"
step racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 bench/experiments/fp8_variants.py --schemes blockwise,tensorwise --variants behind --shapes 1540x1544x272,64x4096x7168 --check-only -o "$DEST/fp8_racecheck.json"
step memcheck 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 python3 bench/experiments/fp8_variants.py --schemes blockwise,tensorwise --variants behind --shapes 1540x1544x272,200x384x1040,64x4096x7168 --check-only -o "$DEST/fp8_memcheck.json"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step shapes_real 190 python3 bench/shapes_real.py --dtype bf16 --autotune --budget 0.04 --deadline 160 -o "$DEST/shapes_real_bf16_autotune.json"
fi
smoke_end smoke_fp8stage 'passed|failed|error|WRONG|UNEQUAL|target|autotune:|TFLOP|ERROR SUMMARY|RACECHECK SUMMARY'
