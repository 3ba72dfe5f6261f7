#!/usr/bin/env bash
# The two checks of 2026-12-07 that matter most, in one call (device time was short): the fp8 launch with its
# 192-wide tile routed (smoke_fp8route.sh's first two steps) and grouped_linear's fused activation
# (smoke_gact.sh's first and third), from the repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_fp8route_gact.sh
# Steps, each under its own time limit (about 520 s if each ran to its limit): the fp8 GPU tests; bench/fp8.py with
# the wide tile timed on and off -> $OUT/both/fp8.json; the fused activation's GPU tests; its bench ->
# $OUT/both/grouped_activation.json. The sanitizers, the grouped suite and the 256-row experiment are the two
# scripts' own. Writes $OUT/both/smoke.log. Exit status: 0 when every step passed; the failed steps are named on
# the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8route_gact both
step fp8_tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short \
  tests/test_fp8_bn192_gpu.py tests/test_fp8_gpu.py tests/test_fp8_store_gpu.py tests/test_fp8_scale_b_gpu.py \
  tests/test_fp8_split_gpu.py tests/test_fp8_wave_split_gpu.py tests/test_fp8_64_rows_gpu.py tests/test_fp8_host_gpu.py \
  tests/test_quantized_output_gpu.py
step fp8 180 python3 bench/fp8.py --alt WIDE_TILE=0 -o "$DEST/fp8.json"
step gact_tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_activation_gpu.py
step gact_bench 90 python3 bench/experiments/grouped_activation.py --activations gelu,relu -o "$DEST/grouped_activation.json"
smoke_end smoke_fp8route_gact 'passed|failed|error|ERROR|WRONG|UNEQUAL|TFLOP|SUMMARY|x the time| us'  # 0 when every step passed
