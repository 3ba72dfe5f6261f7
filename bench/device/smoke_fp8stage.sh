#!/usr/bin/env bash
# The fp8 kernel's blockwise scale_b loaded ahead (the default) and the TMA store's one-panel staging
# (GL_FP8_STAGING_PANELS=1: a 6-stage blockwise ring), then the bf16 set on an H200: one `run` call, about
# 560 s at most. From the repository root with the carry unpacked (bench/device/prepare.sh):
#   OUT=/tmp/out bash bench/device/smoke_fp8stage.sh
# Steps, each under its own time limit: the fp8 GPU tests with the default builds and again with one-panel
# staging; bench/experiments/fp8_variants.py (behind, stages5, onepanel against the default, every scheme,
# the issue's five shapes, bitwise); bench/fp8.py --quick (the issue's table); compute-sanitizer racecheck
# and memcheck of the one-panel build; on an H200 only, bench/shapes_real.py --autotune on the bf16 set.
# Writes $OUT/fp8stage/smoke.log and the benches' JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8stage fp8stage
FP8_TESTS="tests/test_fp8_gpu.py tests/test_fp8_split_gpu.py tests/test_fp8_store_gpu.py tests/test_fp8_64_rows_gpu.py tests/test_fp8_host_gpu.py tests/test_quantized_output_gpu.py"
step tests 90 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short $FP8_TESTS
step tests_onepanel 90 env GL_FP8_STAGING_PANELS=1 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short $FP8_TESTS
step variants 90 python3 bench/experiments/fp8_variants.py --schemes blockwise,tensorwise,rowwise -o "$DEST/fp8_variants.json"
step fp8_quick 80 python3 bench/fp8.py --quick -o "$DEST/fp8_quick.json"
step racecheck 60 env GL_FP8_STAGING_PANELS=1 compute-sanitizer --tool racecheck --error-exitcode 1 python3 bench/experiments/fp8_variants.py --schemes blockwise --variants behind --shapes 1536x1536x256 --check-only -o "$DEST/fp8_racecheck.json"
step memcheck 60 env GL_FP8_STAGING_PANELS=1 compute-sanitizer --tool memcheck --error-exitcode 1 python3 bench/experiments/fp8_variants.py --schemes blockwise,tensorwise --variants behind --shapes 1540x1544x272 --check-only -o "$DEST/fp8_memcheck.json"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step shapes_real 190 python3 bench/shapes_real.py --dtype bf16 --autotune --budget 0.04 --deadline 160 -o "$DEST/shapes_real_bf16_autotune.json"
fi
smoke_end smoke_fp8stage 'passed|failed|error|WRONG|UNEQUAL|target|autotune:|TFLOP|ERROR SUMMARY|RACECHECK SUMMARY'
