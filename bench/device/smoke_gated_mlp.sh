#!/usr/bin/env bash
# swiglu's host path and nn.replace_gated_mlp on the GPU, from the repository root with the package installed and
# GEMM_LADDER_HOST unset:
#   OUT=/tmp/out bash bench/device/smoke_gated_mlp.sh
# Steps (about 720 s if each ran to its limit: drop a step where a call has less): the host module built; the swiglu
# GPU tests (the host path's, the library kernel's, the small-M builds'), tests/test_gated_mlp_gpu.py and the other
# host-path GPU tests (mm and linear's, the grouped ops'); bench/experiments/gated_mlp.py (one Llama MLP per row count
# on torch, replace_linear and replace_gated_mlp) -> $OUT/gated_mlp/gated_mlp.json; bench/models.py --quick on the Llama model's
# prefill and decode rows, on replace_linear alone -> $OUT/gated_mlp/models.json, and with --gated-mlp ->
# models_gated_mlp.json; the grouped forwards of every prefill case on both cluster builds (choose_cluster's evidence)
# -> grouped_cluster_fwd.json. Writes $OUT/gated_mlp/smoke.log. Exit status: 0 when every step passed.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_gated_mlp gated_mlp
step host 120 python3 -c 'import sys, gemm_ladder.ops as o; sys.exit(0 if o.host_module() is not None else "no host")'
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 -rfE --tb=short tests/test_swiglu_host_gpu.py \
  tests/test_library_swiglu_gpu.py tests/test_swiglu_small_m_gated_gpu.py tests/test_swiglu_small_m_gpu.py \
  tests/test_gated_mlp_gpu.py tests/test_host_gpu.py tests/test_grouped_host_gpu.py
step gated_rows 60 python3 bench/experiments/gated_mlp.py -o "$DEST/gated_mlp.json"
step models 130 python3 bench/models.py --quick --only llama_prefill,llama_decode --no-breakdown -o "$DEST/models.json"
step models_gated 130 python3 bench/models.py --quick --only llama_prefill,llama_decode --no-breakdown --gated-mlp \
  -o "$DEST/models_gated_mlp.json"
step cluster 110 python3 bench/grouped.py --swiglu none --directions fwd --cluster both \
  --cases mixtral_gate_up,mixtral_down_skewed,qwen3_gate_up,qwen3_down,deepseek_v3_32,deepseek_v3_gate_up,deepseek_v3_down,gptoss_gate_up,gptoss_down \
  -o "$DEST/grouped_cluster_fwd.json"
smoke_end smoke_gated_mlp 'passed|failed|error|ERROR|speedup|x |geomean|cluster2'  # 0 when every step passed
