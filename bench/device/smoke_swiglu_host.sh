#!/usr/bin/env bash
# swiglu on the compiled host path, and the MoE models' routing flips, from the repository root with the package
# installed and GEMM_LADDER_HOST unset:
#   OUT=/tmp/out bash bench/device/smoke_swiglu_host.sh
# Steps (about 560 s if each ran to its limit): the host module built; the host path's GPU tests (swiglu's, mm and
# linear's, the grouped ops', scaled_mm's) and every swiglu GPU test file; bench/host_overhead.py --model --extra
# (swiglu as a model calls it against silu(F.linear) * F.linear) -> $OUT/swiglu_host/host_overhead.json;
# bench/moe_models.py's eager prefill and decode rows (routing flips counted) -> moe_models.json; the grouped
# bench's Qwen3 gate+up forward with both cluster builds -> grouped_cluster.json. Writes $OUT/swiglu_host/smoke.log.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_swiglu_host swiglu_host
step host 120 python3 -c 'import sys, torch, gemm_ladder.ops as o
sys.exit(0 if o.host_module() is not None else "no host module")'
step tests 180 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 -rfE --tb=short tests/test_swiglu_host_gpu.py \
  tests/test_host_gpu.py tests/test_grouped_host_gpu.py tests/test_fp8_host_gpu.py tests/test_library_swiglu_gpu.py \
  tests/test_swiglu_small_m_gated_gpu.py tests/test_swiglu_small_m_gpu.py
step overhead 90 python3 bench/host_overhead.py --model --extra --calls 1000 -o "$DEST/host_overhead.json"
step moe 160 python3 bench/moe_models.py --modes prefill,decode -o "$DEST/moe_models.json"
step cluster 40 python3 bench/grouped.py --swiglu none --cases qwen3_gate_up --directions fwd --cluster both \
  -o "$DEST/grouped_cluster.json"
smoke_end smoke_swiglu_host 'passed|failed|error|ERROR| us|flip|x grouped_mm|cluster'  # 0 when every step passed
