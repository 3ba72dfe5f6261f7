#!/usr/bin/env bash
# Nsight Compute on issue 23's mid-size shapes (bench/experiments/profile_mid.py: forced general builds and
# cuBLAS, one launch each inside the NVTX range "prof"), from the repository root with the package
# installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_mid_profile.sh
# Steps, about 300 s at most in all: ncu on 512x1024x4096 (the 64 x 64 tile both sides use) and on
# 1023x768x3072 (the route's 64 x 128 pair, one CTA's 64 x 128 and 64 x 64), each 64-row one-CTA build also
# with two wgmma groups in flight (lag2), sections SpeedOfLight,
# WarpStateStats, MemoryWorkloadAnalysis, SchedulerStats, LaunchStats and Occupancy, clocks not locked
# (the device's own boost, as the benchmarks run). Writes $OUT/mid_profile/ncu_MxNxK.txt and smoke.log.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
# Prebuild here first (no GPU needed): bench/device/prepare.sh does (profile_mid.py --prebuild).
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_mid_profile mid_profile
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECTIONS=(--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats
          --section LaunchStats --section Occupancy)
profile() {  # SHAPE BUILDS
  # ncu's report goes to the text file; profile_mid.py's check lines (and any error) are copied into the
  # log, where smoke_end's pattern finds them, and a WRONG build fails the step whatever ncu returns.
  local txt="$DEST/ncu_${1//,/x}.txt"
  step "ncu_$1" 150 bash -c "'$NCU' --clock-control none --nvtx --nvtx-include 'prof/' ${SECTIONS[*]} \
    python3 bench/experiments/profile_mid.py --shape '$1' --builds '$2' > '$txt' 2>&1; rc=\$?
    grep -E 'rel err|launch order|==ERROR==|Error' '$txt'; ! grep -q WRONG '$txt' || rc=1; exit \$rc"
}
if [ -z "$NCU" ]; then
  echo "== ncu not found" >>"$LOG"; FAILED="$FAILED ncu"
else
  profile 512,1024,4096 "route;c1 bm64 bn64 none;c1 bm64 lag2 bn64 none;bm64 bn64 none"
  profile 1023,768,3072 "route;c1 bm64 bn128 none;c1 bm64 lag2 bn128 none;c1 bm64 bn64 none"
fi
smoke_end smoke_mid_profile 'ok|WRONG|rel err|Error|error'
