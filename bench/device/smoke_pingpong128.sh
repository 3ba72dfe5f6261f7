#!/usr/bin/env bash
# The ping-pong build's 128-row tiles (sm90_gemm.cu's GL_PINGPONG at BM 128: each consumer holds a whole
# 128 x BN tile as two 64-row fragments) on the H200, from the repository root with the package installed
# (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_pingpong128.sh
# Steps in order of what matters most, each under its own time limit (about 520 s if every step ran to its
# limit): the 128-row GPU tests (tests/test_pingpong_128_gpu.py; the 64-row builds' machine code is unchanged);
# bench/experiments/pingpong.py --set mid (issue 23's mid-M misses and a few large short-K shapes: the 128-row
# builds against the cooperative ones, the 64-row ping-pong builds the route takes, the route, cuBLAS and eager
# torch, interleaved) -> $OUT/pingpong128/pingpong.json and .md; then compute-sanitizer racecheck, memcheck
# and synccheck on the experiment's --sanitize launches of the 128-row builds.
# Writes $OUT/pingpong128/smoke.log. Exit status: 0 when every step passed; the failed steps are named on the
# log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_pingpong128 pingpong128
step pytest 140 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_pingpong_128_gpu.py
step bench 200 python3 bench/experiments/pingpong.py --set mid --configs '^(coop|pp128|pp BN (192|256) c1)' -o "$DEST"
step racecheck 80 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 \
  python3 bench/experiments/pingpong.py --sanitize --configs '^pp128'
step memcheck 45 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 \
  python3 bench/experiments/pingpong.py --sanitize --configs '^pp128'
step synccheck 45 compute-sanitizer --report-api-errors no --tool synccheck --error-exitcode 1 \
  python3 bench/experiments/pingpong.py --sanitize --configs '^pp128'
smoke_end smoke_pingpong128 'passed|failed|error|ERROR|WRONG|SUMMARY|pp128|sanitize:'  # 0 when every step passed
