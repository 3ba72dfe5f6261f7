#!/usr/bin/env bash
# Where the blockwise fp8 K loop's time goes beside tensorwise's (bench/experiments/fp8_variants.py's
# diagnostics: the promotion scales set to 1, scale_b only, scale_a only; and scale_a read by LDS), then,
# on an H200, the issue's tables on the machine it names: bench/fp8.py --quick and bench/shapes_real.py
# --autotune on the bf16 set (as many rows as 125 s allow); on another GPU, bench/fp8.py on the full set. One `run` call, at most
# about 280 s. From the repository root with the carry unpacked (bench/device/prepare.sh):
#   OUT=/tmp/out bash bench/device/smoke_fp8diag.sh
# Writes $OUT/fp8diag/smoke.log and the benches' JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_fp8diag fp8diag
step diagnostics 60 python3 bench/experiments/fp8_variants.py --schemes blockwise,tensorwise --variants scales_one,sa_one,sb_one,sa_lds -o "$DEST/fp8_diagnostics.json"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step fp8_quick 60 python3 bench/fp8.py --quick -o "$DEST/fp8_quick.json"
  step shapes_real 150 python3 bench/shapes_real.py --dtype bf16 --autotune --budget 0.04 --deadline 125 -o "$DEST/shapes_real_bf16_autotune.json"
else
  step fp8_full 200 python3 bench/fp8.py -o "$DEST/fp8.json"
fi
smoke_end smoke_fp8diag 'passed|failed|error|WRONG|UNEQUAL|target|autotune:|TFLOP|blockwise|tensorwise'
