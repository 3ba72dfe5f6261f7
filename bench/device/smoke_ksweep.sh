#!/usr/bin/env bash
# The K sweep (bench/experiments/k_sweep.py) on the H200, from the repository root with the package
# installed (or PYTHONPATH=src): where each library kernel's time goes, mainloop rate against fixed cost,
# ours against torch, for mm (bf16), scaled_mm (fp8, three scalings) and the grouped GEMM (fwd, grad_w).
#
#   OUT=/tmp/out bash bench/device/smoke_ksweep.sh
#   OUT=/tmp/out KSWEEP_ARGS="--quick" bash bench/device/smoke_ksweep.sh   # 3 K points, half the budget: ~50 s
#
# Writes $OUT/ksweep/k_sweep.log and the result JSON ($OUT/ksweep/DATE_k_sweep_COMMIT.json), nothing else.
# About 90 s with cold kernel builds (about 25 builds in parallel first); no case starts after 110 s
# (recorded as not run) and the process is stopped at 150 s (rc=124).
# Exit status: the script's (1 when a result was wrong or a case failed).
set -u
OUT=${OUT:-/tmp/out}
DEST="$OUT/ksweep"
mkdir -p "$DEST"
LOG="$DEST/k_sweep.log"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_HOST=${GEMM_LADDER_HOST:-0}  # GPU time is measured: the host module's build is not needed
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "== smoke_ksweep $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache ${GEMM_LADDER_CACHE:-unset}"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
} >>"$LOG" 2>&1
start=$(date +%s)
OUT="$DEST" timeout 150 python3 bench/experiments/k_sweep.py --deadline 110 ${KSWEEP_ARGS:-} >>"$LOG" 2>&1
rc=$?
echo "== k_sweep rc=$rc in $(( $(date +%s) - start )) s" >>"$LOG"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >>"$LOG" 2>&1
tail -n 45 "$LOG"
exit $rc
