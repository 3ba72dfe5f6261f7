#!/usr/bin/env bash
# The general kernel's timeline build (sm90_gemm.cu's GL_TIMELINE) on the H200, from the repository root
# with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gemm_timeline.sh [CASES]
# Steps, each under its own time limit, about 360 s at most in all: the timeline GPU tests
# (tests/test_gemm_timeline_gpu.py: bit for bit the shipped build, stamps as the schedule says) and the
# release-lag-2 build's (tests/test_release_lag_gpu.py: bit for bit the shipped build), then
# bench/experiments/gemm_timeline.py (CASES: its --cases, default its mid-size misses and controls) on the
# route and four forced builds per case (BUILDS). Writes $OUT/gemm_timeline/smoke.log and the experiment's JSON and
# table there. Exit status: 0 when every step passed; the failed steps are named on the log's last line.
# Prebuild here first (no GPU needed) and carry the cache: GEMM_LADDER_CACHE=.kcache python3
# bench/experiments/gemm_timeline.py --prebuild [--cases CASES].
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_gemm_timeline gemm_timeline
step pytest 120 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --tb=short tests/test_gemm_timeline_gpu.py tests/test_release_lag_gpu.py
step bench 240 python3 bench/experiments/gemm_timeline.py ${1:+--cases "$1"} -o "$DEST"
smoke_end smoke_gemm_timeline 'passed|failed|error|ERROR|WRONG|^\|'  # exit status: 0 when every step passed
