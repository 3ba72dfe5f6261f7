#!/usr/bin/env bash
# compute-sanitizer on the two launches added last (the fp8 192-wide tile, library/fp8.py wide_tile_rule, and
# grouped_linear's fused activation, library/grouped.py activation=), the routed fp8 launch's GPU test, then
# bench/fp8.py with the wide tile also timed off, from the repository root with the package installed (or
# PYTHONPATH=src), its builds prebuilt with NVRTC where carried:
#   OUT=/tmp/out bash bench/device/smoke_sanitize.sh
# Steps in order of what matters most, each under its own time limit (about 470 s if each ran to its limit):
# tests/test_fp8_bn192_gpu.py; racecheck and memcheck of --check-only launches of the 192-wide build (two
# small shapes with tails); memcheck and racecheck of the fused activation's GPU test's first case;
# bench/fp8.py --alt WIDE_TILE=0 -> $OUT/sanitize/fp8.json. Writes $OUT/sanitize/smoke.log. Exit status: 0
# when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_sanitize sanitize
V=bench/experiments/fp8_variants.py
SMALL=300x1000x2064,1540x776x2064
SAN="compute-sanitizer --report-api-errors no --error-exitcode 1"
step fp8_tests 60 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_fp8_bn192_gpu.py
for tool in racecheck memcheck; do
  step "fp8_$tool" 70 $SAN --tool "$tool" \
    python3 "$V" --check-only --variants bn192 --schemes blockwise,tensorwise --shapes "$SMALL"
done
for tool in memcheck racecheck; do
  step "gact_$tool" 50 $SAN --tool "$tool" python3 -m pytest -q -p no:cacheprovider -m gpu -x \
    "tests/test_grouped_activation_gpu.py::test_fused_activation_matches_float64_no_worse_than_unfused[empty_one_unaligned-gelu-bias-384-264]"
done
step fp8 170 python3 bench/fp8.py --alt WIDE_TILE=0 -o "$DEST/fp8.json"
smoke_end smoke_sanitize 'passed|failed|error|ERROR|WRONG|UNEQUAL|TFLOP|SUMMARY|x the time'  # 0 when every step passed
