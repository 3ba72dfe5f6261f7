#!/usr/bin/env bash
# The 16-bit GEMM's quantized output (linear, mm and swiglu with out_dtype=torch.float8_e4m3fn; issue 25) on
# the H200, from the repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_quantized.sh ["BENCH ARGS"]    e.g. "--quick --no-compile"
# Steps, each under its own time limit, about 560 s at most in all: its GPU tests
# (tests/test_quantized_output_gpu.py: quantize_fp8 of the float32 build, float64 with every epilogue, tails,
# NaN, bitwise repeats, split, compile, graph replay, the chains into scaled_mm; swiglu's); compute-sanitizer
# memcheck and racecheck on bench/sanitize_families.py (which runs it through linear, split along K and
# swiglu); then bench/quantized_linear.py with BENCH ARGS (--quick: M = 4096, the GELU fc1s and the gated MLP;
# --no-compile: no torch.compile path, whose first compiles may not fit the step's 170 s) against the GEMM
# then quantize_fp8, eager torch and torch.compile, every output checked against float64 first. Writes $OUT/quantized/smoke.log and the
# bench's JSON there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_quantized quantized
step pytest 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 -rfE --tb=short tests/test_quantized_output_gpu.py
step memcheck 90 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/sanitize_families.py
step racecheck 150 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/sanitize_families.py
step bench 170 python3 bench/quantized_linear.py ${1:-} -o "$DEST/$(date -u +%F)_quantized_linear${1:+_quick}_${GEMM_LADDER_GIT_COMMIT}.json"  # ${1:-}: BENCH ARGS, unquoted on purpose
smoke_end smoke_quantized 'passed|failed|error|ERROR|WRONG|SUMMARY|e4m3|vs ours unfused'  # exit status: 0 when every step passed
