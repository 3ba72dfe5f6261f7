#!/usr/bin/env bash
# The GPU tests of the mends made after the last GPU run (swiglu's host path, nn.replace_gated_mlp, the shared GPU
# fixture, the planned-settings check), then issue 24's benchmark on every case and direction, on one GPU, from the
# repository root with the package installed and GEMM_LADDER_HOST unset:
#   OUT=/tmp/out bash bench/device/smoke_s65.sh
# Steps (about 560 s if each ran to its limit): the host module built; the swiglu, gated-MLP and host-path GPU
# tests; bench/grouped.py over the issue's cases (-> $OUT/s65/grouped_issue_cases.json) and the models' own shapes
# (-> grouped_model_cases.json); bench/experiments/gated_mlp.py (-> gated_mlp.json). Writes $OUT/s65/smoke.log.
# Exit status: 0 when every step passed.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_s65 s65
step host 120 python3 -c 'import sys, torch, gemm_ladder.ops as o, gemm_ladder.ops_grouped_swiglu
sys.exit(0 if o.host_module() is not None else "no host module")'
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 -rfE --tb=short tests/test_swiglu_host_gpu.py \
  tests/test_library_swiglu_gpu.py tests/test_swiglu_small_m_gated_gpu.py tests/test_gated_mlp_gpu.py \
  tests/test_host_gpu.py tests/test_grouped_host_gpu.py
step grouped_issue 110 python3 bench/grouped.py --swiglu none \
  --cases mixtral_gate_up,mixtral_down_skewed,qwen3_gate_up,qwen3_down,decode_128,deepseek_v3_32 \
  -o "$DEST/grouped_issue_cases.json"
step grouped_models 130 python3 bench/grouped.py --swiglu none \
  --cases mixtral_decode,deepseek_v3_gate_up,deepseek_v3_down,deepseek_v3_decode,gptoss_gate_up,gptoss_down,gptoss_decode \
  -o "$DEST/grouped_model_cases.json"
step gated_rows 50 python3 bench/experiments/gated_mlp.py -o "$DEST/gated_mlp.json"
smoke_end smoke_s65 'passed|failed|error|ERROR|speedup|x |geomean'
