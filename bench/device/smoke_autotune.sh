#!/usr/bin/env bash
# The autotune and the cost table it corrected, on the H200, about 560 s at most (one `run` call; the GPU
# suite goes in a call of its own, 330 s). From the repository root with the carry unpacked
# (bench/device/prepare.sh):
#   OUT=/tmp/out bash bench/device/smoke_autotune.sh
# Steps, each under its own time limit: the autotune GPU tests; bench/shapes_real.py --autotune on the bf16
# set (the default route with the table at HEAD against cuBLAS, then the autotune's phase with the model's
# own choice timed in the same rounds: ratio_tuned_vs_model); the grouped forward and grad_x with the output
# ring 1 and 4 at BN 256 (bench/grouped.py --prebuild compiles those builds beforehand).
# Writes $OUT/autotune/smoke.log and the benches' JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_autotune autotune
step pytest 70 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --tb=short tests/test_autotune_gpu.py
step shapes_real 340 python3 bench/shapes_real.py --dtype bf16 --autotune --budget 0.04 --deadline 300 -o "$DEST/shapes_real_bf16_autotune.json"
step gring_fwd 120 python3 bench/grouped.py --directions fwd,grad_x --bn 256 --swiglu none --ring 1,4 --check64 --cases qwen3_gate_up,qwen3_down,deepseek_v3_down,mixtral_down_skewed -o "$DEST/grouped_ring_fwd.json"
smoke_end smoke_autotune 'passed|failed|error|WRONG|target|autotune:|ring4/ring1'  # exit status: 0 when every step passed
