#!/usr/bin/env bash
# The grouped kernel's deeper output rings (library/grouped.py RINGS) on the H200, from the repository
# root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gring.sh [CASES]
# Steps, each under its own time limit (a deadlock ends as rc=124, not a hung session), about 480 s at
# most in all: the carried-panel GPU tests on every ring (tests/test_grouped_gpu.py -k carried_panel: bit
# for bit the register store, float64-right per group); compute-sanitizer memcheck and racecheck on
# bench/grouped.py --sanitize (which runs the ring 2 and 4 builds); then the weight gradients (CASES: a
# comma list for --cases, default all) with the one-buffer ring as `grouped` and ring 4 as `grouped_r4`,
# timed in the same rounds against torch._grouped_mm and the loop, every output checked against float64
# (--check64). Writes $OUT/gring/smoke.log and the bench's JSON there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_gring gring
step pytest 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_gpu.py -k carried_panel
step memcheck 60 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step racecheck 120 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step bench 180 python3 bench/grouped.py --directions grad_w --swiglu none --ring 1,4 --check64 ${1:+--cases "$1"} -o "$DEST"
smoke_end smoke_gring 'passed|failed|error|ERROR|WRONG|SUMMARY|ring4/ring1|grad_w'  # exit status: 0 when every step passed
