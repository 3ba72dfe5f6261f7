#!/usr/bin/env bash
# The grouped kernel's fused gated-MLP build (grouped_swiglu without a backward; ops_grouped_swiglu.FUSED_DEFAULT,
# on since 2526218) on the H200, from the repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gswiglu.sh
# Steps, each under its own time limit, about 480 s at most in all: the fused build's GPU tests and
# grouped_swiglu's (tests/test_grouped_swiglu_fused_gpu.py, tests/test_grouped_swiglu_gpu.py: float64 per group,
# rows past the last group untouched, bitwise repeats, compile and graph replay, the backward on the two
# GEMMs); compute-sanitizer memcheck and racecheck on bench/grouped.py --sanitize (which runs the fused build);
# then bench/grouped.py's swiglu rows (every gate+up and decode case, forward and forward + backward), the
# fused forward timed beside the two-GEMM forward and torch's composition in the same rounds
# (ratio_fused, ratio_torch_grouped_fused). Writes $OUT/gswiglu/smoke.log and the bench's JSON there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_gswiglu gswiglu
step pytest 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_swiglu_fused_gpu.py tests/test_grouped_swiglu_gpu.py
step memcheck 60 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step racecheck 120 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step bench 150 python3 bench/grouped.py --cases decode_128 --directions fwd \
  --swiglu mixtral_gate_up,mixtral_decode,qwen3_gate_up,decode_128,deepseek_v3_gate_up,deepseek_v3_decode,gptoss_gate_up,gptoss_decode \
  -o "$DEST/$(date -u +%F)_grouped_swiglu_fused_${GEMM_LADDER_GIT_COMMIT}.json"
smoke_end smoke_gswiglu 'passed|failed|error|ERROR|WRONG|SUMMARY|swiglu'  # exit status: 0 when every step passed
