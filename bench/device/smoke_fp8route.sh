#!/usr/bin/env bash
# The fp8 launch with its 192-wide tile routed (library/fp8.py wide_tile_rule) on the H200, from the repository
# root with the package installed (or PYTHONPATH=src), its builds prebuilt with NVRTC where they can be
# (`python3 bench/fp8.py --prebuild --alt WIDE_TILE=0`; the GPU tests' builds compile there if not carried):
#   OUT=/tmp/out bash bench/device/smoke_fp8route.sh
# Steps in order of what matters most, each under its own time limit (about 520 s if each ran to its limit): the
# fp8 GPU tests (the routed launch's among them: tests/test_fp8_bn192_gpu.py); bench/fp8.py over its full set
# with each scheme also timed with the wide tile off (--alt WIDE_TILE=0), interleaved, against torch._scaled_mm
# -> $OUT/fp8route/fp8.json; compute-sanitizer racecheck on --check-only launches of the 192-wide build (two
# small shapes with tails); the 256-row bf16 tile's experiment with its TMA-store builds only (issue 23; the
# register-store ones ran 0.66-0.85x the route on an H100) -> pingpong.json, .md; memcheck as racecheck.
# Writes $OUT/fp8route/smoke.log. Exit status: 0 when every step passed; the failed steps are named on the
# log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8route fp8route
V=bench/experiments/fp8_variants.py
SMALL=300x1000x2064,1540x776x2064
step tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short \
  tests/test_fp8_bn192_gpu.py tests/test_fp8_gpu.py tests/test_fp8_store_gpu.py tests/test_fp8_scale_b_gpu.py \
  tests/test_fp8_split_gpu.py tests/test_fp8_wave_split_gpu.py tests/test_fp8_64_rows_gpu.py tests/test_fp8_host_gpu.py \
  tests/test_quantized_output_gpu.py
step fp8 180 python3 bench/fp8.py --alt WIDE_TILE=0 -o "$DEST/fp8.json"
step racecheck 80 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 \
  python3 "$V" --check-only --variants bn192 --schemes blockwise,tensorwise --shapes "$SMALL"
step tall_bench 70 python3 bench/experiments/pingpong.py --set mid --budget 0.02 \
  --configs '^(tall BN (64|128) c[12]$|coop BM 128 BN (128|192|256) (c1 )?(none|tail)|pp BN 256 c1)' -o "$DEST"
step memcheck 60 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 \
  python3 "$V" --check-only --variants bn192 --schemes blockwise,tensorwise --shapes "$SMALL"
smoke_end smoke_fp8route 'passed|failed|error|ERROR|WRONG|UNEQUAL|TFLOP|SUMMARY|x the time'  # 0 when every step passed
