#!/usr/bin/env bash
# transformers' mixture-of-experts models with their experts on gemm-ladder (gemm_ladder.moe), from the repository
# root with the package installed (or PYTHONPATH=src); the grouped builds compile at first use where not carried:
#   OUT=/tmp/out bash bench/device/smoke_moe_models.sh
# Steps, each under its own time limit (about 540 s if each ran to its limit, 120 more for the host module's build
# unless GEMM_LADDER_HOST=0; MOE_COMPILED_MODELS=qwen3_moe: 100 less): bench/moe_models.py's eager modes
# with transformers' loop too (--eager; MOE_EAGER= leaves it out) -> $OUT/moe/moe_models.json; tests/test_moe_gpu.py (float64, gradients,
# compile, graphs, Qwen3-MoE and Mixtral models against grouped_mm; MOE_MORE_TESTS: more test files); then the compiled modes (torch.compile and
# reduce-overhead), one model a step -> $OUT/moe/moe_models_compiled_{qwen3_moe,mixtral}.json. Writes $OUT/moe/smoke.log. Exit status: 0 when every
# step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_moe_models moe
if [ "${GEMM_LADDER_HOST:-1}" != 0 ]; then  # the compiled host module built once, before the timed steps
  step host 120 python3 -c 'import sys, torch, gemm_ladder.ops as o; sys.exit(0 if o.host_module() else "no host module")'
fi
step bench 240 python3 bench/moe_models.py ${MOE_EAGER---eager} --modes prefill,decode,train -o "$DEST/moe_models.json"
step tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 -rfE --tb=short tests/test_moe_gpu.py ${MOE_MORE_TESTS:-}
for model in ${MOE_COMPILED_MODELS:-qwen3_moe mixtral}; do  # MOE_COMPILED_MODELS: fewer, where the call has less time
  step "compiled_$model" 100 python3 bench/moe_models.py --only "$model" --modes compile,graphs --reps 10 \
    -o "$DEST/moe_models_compiled_$model.json"
done
smoke_end smoke_moe_models 'passed|failed|error|ERROR|x grouped_mm|geomean'  # 0 when every step passed
