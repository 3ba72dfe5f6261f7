#!/usr/bin/env bash
# Issue 24's committed run on one GPU, from the repository root with the package installed and GEMM_LADDER_HOST unset:
#   OUT=/tmp/out bash bench/device/smoke_issue24.sh
# Steps (about 560 s if each ran to its limit): the host module built; every grouped and MoE GPU test file and the
# grouped ops' C++ kernels' (tests/test_grouped_host_gpu.py); bench/grouped.py over every case and direction in two
# runs (the issue's table -> $OUT/issue24/grouped_issue_cases.json, the models' own shapes -> grouped_model_cases.json;
# no swiglu rows: their fwd_bwd loop over 256 experts alone outlasts a call); compute-sanitizer racecheck and memcheck of
# `bench/grouped.py --sanitize` (every build once on small shapes); bench/moe_models.py's eager prefill and decode rows
# (the routing flips counted) -> moe_models.json. Writes $OUT/issue24/smoke.log. Exit status: 0 when every step passed.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_issue24 issue24
step host 120 python3 -c 'import sys, torch, gemm_ladder.ops as o, gemm_ladder.ops_grouped_swiglu
sys.exit(0 if o.host_module() is not None else "no host module")'
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 -rfE --tb=short tests/test_grouped_host_gpu.py \
  tests/test_moe_gpu.py tests/test_grouped_gpu.py tests/test_grouped_swiglu_gpu.py tests/test_grouped_activation_gpu.py \
  tests/test_grouped_swiglu_fused_gpu.py
step grouped_issue 120 python3 bench/grouped.py --swiglu none \
  --cases mixtral_gate_up,mixtral_down_skewed,qwen3_gate_up,qwen3_down,decode_128,deepseek_v3_32 \
  -o "$DEST/grouped_issue_cases.json"
step grouped_models 150 python3 bench/grouped.py --swiglu none \
  --cases mixtral_decode,deepseek_v3_gate_up,deepseek_v3_down,deepseek_v3_decode,gptoss_gate_up,gptoss_down,gptoss_decode \
  -o "$DEST/grouped_model_cases.json"
step racecheck 80 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step memcheck 80 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/grouped.py --sanitize
smoke_end smoke_issue24 'passed|failed|error|ERROR|SUMMARY|x torch|wrote'  # 0 when every step passed
