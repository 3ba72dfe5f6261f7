#!/usr/bin/env bash
# The fp8 launch as it stands after 2026-12-05 (blockwise scale_b read from a shared copy of the tile's
# column at 16-128 K blocks, else loaded one block ahead), not yet run on a GPU in its final form: one `run`
# call, about 480 s at most. From the repository root with the carry unpacked (bench/device/prepare.sh, then
# the fp8 builds prebuilt: `python3 bench/experiments/fp8_variants.py --prebuild ...` with this script's
# variants and shapes, and with bench/fp8.py's shapes for the three schemes, re-packed):
#   OUT=/tmp/out bash bench/device/smoke_fp8final.sh
# Steps, each under its own time limit: the fp8 GPU tests, tests/test_fp8_scale_b_gpu.py (the three scale_b
# sources bitwise) among them; bench/experiments/fp8_variants.py (behind, ahead, shared, scales_before and scales_after
# against the default, blockwise, the issue's five shapes and two long-K layers); bench/fp8.py on the full
# set (the issue's table); compute-sanitizer memcheck of bench/sanitize_families.py (its blockwise cases at
# K = 2176 take the shared copy, by both stores). Racecheck, slower, is a call of its own.
# Writes $OUT/fp8final/smoke.log and the benches' JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8final fp8final
FP8_TESTS="tests/test_fp8_gpu.py tests/test_fp8_split_gpu.py tests/test_fp8_store_gpu.py tests/test_fp8_64_rows_gpu.py tests/test_fp8_host_gpu.py tests/test_quantized_output_gpu.py tests/test_fp8_scale_b_gpu.py"
step tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short $FP8_TESTS
step variants 80 python3 bench/experiments/fp8_variants.py --schemes blockwise --variants behind,ahead,shared,scales_before,scales_after --shapes 4096x7168x16384,4096x4096x4096,8192x8192x8192,4096x24576x1536,128x7168x2048,4096x7168x14336,4096x4096x2048 -o "$DEST/fp8_variants.json"
step fp8_full 200 python3 bench/fp8.py -o "$DEST/fp8.json"
step memcheck 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 python3 bench/sanitize_families.py
smoke_end smoke_fp8final 'passed|failed|error|WRONG|UNEQUAL|TFLOP|blockwise:|ERROR SUMMARY'
