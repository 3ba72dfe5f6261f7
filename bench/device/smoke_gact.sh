#!/usr/bin/env bash
# grouped_linear's activation fused in the grouped kernel's epilogue (library/grouped.py activation=; docs/grouped.md)
# on the H200, from the repository root with the package installed (or PYTHONPATH=src), its builds prebuilt with
# NVRTC where carried (the GPU tests' builds compile there otherwise):
#   OUT=/tmp/out bash bench/device/smoke_gact.sh
# Steps in order of what matters most, each under its own time limit (about 440 s if each ran to its limit): the
# activation's GPU tests (tests/test_grouped_activation_gpu.py), the grouped GPU tests (the kernel file changed),
# bench/experiments/grouped_activation.py (fused, the activation build forced, the unfused form and torch, interleaved) ->
# $OUT/gact/grouped_activation.json, then compute-sanitizer memcheck and racecheck of the fused launches' GPU tests'
# first case. Writes $OUT/gact/smoke.log. Exit status: 0 when every step passed; the failed steps are named on the
# log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_gact gact
step tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_activation_gpu.py
step grouped_tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_gpu.py
step bench 90 python3 bench/experiments/grouped_activation.py --activations gelu,relu -o "$DEST/grouped_activation.json"
for tool in memcheck racecheck; do
  step "$tool" 40 compute-sanitizer --report-api-errors no --tool "$tool" --error-exitcode 1 \
    python3 -m pytest -q -p no:cacheprovider -m gpu -x \
    "tests/test_grouped_activation_gpu.py::test_fused_activation_matches_float64_no_worse_than_unfused[empty_one_unaligned-gelu-bias-384-264]"
done
smoke_end smoke_gact 'passed|failed|error|ERROR|WRONG|SUMMARY| us'  # 0 when every step passed
