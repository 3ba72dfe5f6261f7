#!/usr/bin/env bash
# The grouped ops' C++ kernels (the compiled host path) on the GPU, from the repository root with the package
# installed and GEMM_LADDER_HOST unset (the host module on):
#   OUT=/tmp/out bash bench/device/smoke_grouped_host.sh
# Steps (about 560 s if each ran to its limit): the host module built (torch's extension build, once per machine);
# tests/test_grouped_host_gpu.py and every grouped and MoE GPU test file (their public calls now take the C++ kernels);
# bench/experiments/moe_host_profile.py at 16 and 333 tokens with a training step -> $OUT/grouped_host/moe_host_profile.json.
# Writes $OUT/grouped_host/smoke.log. Exit status: 0 when every step passed; the failed steps on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_grouped_host grouped_host
step host 200 python3 -c 'import sys, torch, gemm_ladder.ops as o, gemm_ladder.ops_grouped_swiglu, gemm_ladder.host as h
sys.exit(0 if o.host_module() is not None else "no host module"); ' && python3 -c 'import gemm_ladder.host as h; print(h.describe())' >>"$LOG" 2>&1
step tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 -rfE --tb=short tests/test_grouped_host_gpu.py \
  tests/test_moe_gpu.py tests/test_grouped_gpu.py tests/test_grouped_swiglu_gpu.py tests/test_grouped_activation_gpu.py \
  tests/test_grouped_swiglu_fused_gpu.py
step profile 120 python3 bench/experiments/moe_host_profile.py --tokens ${GROUPED_HOST_TOKENS:-16,333} --train \
  -o "$DEST/moe_host_profile.json"
smoke_end smoke_grouped_host 'passed|failed|error|ERROR| us$'  # 0 when every step passed
