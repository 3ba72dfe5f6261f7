#!/usr/bin/env bash
# Where a MoE layer's host time goes on gemm-ladder against transformers' grouped_mm path, and the GPU tests mended
# without a GPU since their last run; from the repository root with the package installed:
#   OUT=/tmp/out bash bench/device/smoke_moe_host.sh
# Steps (about 330 s if each ran to its limit): bench/experiments/moe_host_profile.py at 16, 128 and 333 tokens with
# a training step and torch.profiler traces -> $OUT/moe_host/moe_host_profile.json; tests/test_moe_gpu.py (and
# MOE_HOST_MORE_TESTS, more test files).
# Writes $OUT/moe_host/smoke.log. Exit status: 0 when every step passed; the failed steps on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_moe_host moe_host
step profile 150 python3 bench/experiments/moe_host_profile.py --train -o "$DEST/moe_host_profile.json"
step tests 180 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 -rfE --tb=short tests/test_moe_gpu.py \
  ${MOE_HOST_MORE_TESTS:-}
smoke_end smoke_moe_host 'passed|failed|error|ERROR| us$'  # 0 when every step passed
