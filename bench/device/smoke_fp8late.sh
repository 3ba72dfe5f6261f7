#!/usr/bin/env bash
# The fp8 blockwise launch as it stands after 2026-12-05 (each K block's promotion scales read once the
# previous block's are in use and multiplied after the wait for the block's wgmmas; scale_b read from a
# shared copy of the tile's column at 16-128 K blocks, else loaded one block ahead), not yet run on a GPU:
# one `run` call, about 420 s at most. From the repository root with the carry unpacked
# (bench/device/prepare.sh, then `python3 bench/experiments/fp8_variants.py --prebuild --variants
# early,behind,ahead,scales_one --shapes ...` as below, re-packed):
#   OUT=/tmp/out bash bench/device/smoke_fp8late.sh
# Steps, each under its own time limit: bench/experiments/fp8_variants.py (early: the scales as formed
# before; behind, ahead: the other scale_b sources; scales_one: both scales 1, the diagnostic ceiling;
# blockwise, the issue's five shapes and two long-K layers); the fp8 GPU tests, tests/test_fp8_scale_b_gpu.py
# (the three scale_b sources bitwise) among them; compute-sanitizer racecheck and memcheck of
# bench/sanitize_families.py (its blockwise cases at K = 2176 take the shared copy, by both stores).
# Writes $OUT/fp8late/smoke.log and the variants' JSON there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8late fp8late
FP8_TESTS="tests/test_fp8_gpu.py tests/test_fp8_split_gpu.py tests/test_fp8_store_gpu.py tests/test_fp8_64_rows_gpu.py tests/test_fp8_host_gpu.py tests/test_quantized_output_gpu.py tests/test_fp8_scale_b_gpu.py"
step variants 100 python3 bench/experiments/fp8_variants.py --schemes blockwise --variants early,behind,ahead,scales_one --shapes 4096x7168x16384,4096x4096x4096,8192x8192x8192,4096x24576x1536,128x7168x2048,4096x7168x14336,4096x4096x2048 -o "$DEST/fp8_variants.json"
step tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short $FP8_TESTS
step racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 1 python3 bench/sanitize_families.py
step memcheck 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 python3 bench/sanitize_families.py
smoke_end smoke_fp8late 'passed|failed|error|WRONG|UNEQUAL|TFLOP|blockwise:|ERROR SUMMARY|RACECHECK SUMMARY'
