#!/usr/bin/env bash
# transformers' mixture-of-experts models with their experts on gemm-ladder (gemm_ladder.moe), from the repository
# root with the package installed (or PYTHONPATH=src); the grouped builds compile at first use where not carried:
#   OUT=/tmp/out bash bench/device/smoke_moe_models.sh
# Steps, each under its own time limit (about 540 s if each ran to its limit; MOE_COMPILED_MODELS=qwen3_moe: 440): bench/moe_models.py's eager modes
# with transformers' loop too (--eager) -> $OUT/moe/moe_models.json; tests/test_moe_gpu.py (float64, gradients,
# compile, graphs, Qwen3-MoE and Mixtral models against grouped_mm); then the compiled modes (torch.compile and
# reduce-overhead), one model a step -> $OUT/moe/moe_models_compiled_{qwen3_moe,mixtral}.json. Writes $OUT/moe/smoke.log. Exit status: 0 when every
# step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_moe_models moe
step bench 240 python3 bench/moe_models.py --eager --modes prefill,decode,train -o "$DEST/moe_models.json"
step tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 -rfE --tb=short tests/test_moe_gpu.py
for model in ${MOE_COMPILED_MODELS:-qwen3_moe mixtral}; do  # MOE_COMPILED_MODELS: fewer, where the call has less time
  step "compiled_$model" 100 python3 bench/moe_models.py --only "$model" --modes compile,graphs --reps 10 \
    -o "$DEST/moe_models_compiled_$model.json"
done
smoke_end smoke_moe_models 'passed|failed|error|ERROR|x grouped_mm|geomean'  # 0 when every step passed
