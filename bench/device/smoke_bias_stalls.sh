#!/usr/bin/env bash
# Where a fused bias's time goes inside the general kernel (docs/epilogues.md, "Where a bias's cost comes
# from"): Nsight Compute on one launch of linear(x, w) and one of linear(x, w, bias) (bench/experiments/
# bias_cost.py --profile, NVTX range "prof"), from the repository root with the package installed (or
# PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_bias_stalls.sh [MxNxK]      (default 8192x2304x768)
# Steps, about 120 s: the warp stall reasons per issued instruction, instructions executed and active cycles
# (raw metrics, CSV: $OUT/bias_stalls/stalls.csv), then the SourceCounters section (its tables: the sampled
# stall reasons and their top SASS locations: $OUT/bias_stalls/source.txt). Clocks not locked (the device's
# own boost, as the benchmarks run). A step fails when ncu profiled no gemm_kernel launch (ncu itself exits
# 0 then) or printed an error; bias_cost.py's own line and ncu's errors are copied into the log.
# Which reason grows with the bias says what it costs: no_instruction (instruction fetch: the larger code),
# long_scoreboard or lg_throttle (the loads), barrier or membar (the panels' staging), wait or math (issue).
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
# Prebuild here first (no GPU needed): bench/device/prepare.sh does (bias_cost.py --prebuild, the default
# shapes); for another shape, GEMM_LADDER_COMPILER=nvrtc GEMM_LADDER_CACHE=$PWD/.kcache python3
# bench/experiments/bias_cost.py --prebuild --shapes MxNxK before packing the carry.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_bias_stalls bias_stalls
SHAPE=${1:-8192x2304x768}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
RUN=(python3 bench/experiments/bias_cost.py --profile --shapes "$SHAPE")
if [ -z "$NCU" ]; then
  echo "== ncu not found" >>"$LOG"; FAILED="$FAILED ncu"
else
  profile() {  # NAME SECONDS FILE NCU-ARGS...: ncu's output to FILE; its check lines into the log
    local name=$1 secs=$2 file=$3; shift 3
    step "$name" "$secs" bash -c "'$NCU' --clock-control none --nvtx --nvtx-include 'prof/' $* ${RUN[*]} > '$file' 2>&1
      rc=\$?; grep -E 'profiled|==ERROR==|==WARNING==|Error' '$file'
      grep -q gemm_kernel '$file' || { echo 'no gemm_kernel launch profiled'; rc=1; }
      ! grep -q '==ERROR==' '$file' || rc=1; exit \$rc"
  }
  profile stalls 60 "$DEST/stalls.csv" --csv --page raw \
    --metrics "'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_active.avg'"
  profile source 90 "$DEST/source.txt" --section SourceCounters
fi
smoke_end smoke_bias_stalls "profiled|==ERROR==|no gemm_kernel"
