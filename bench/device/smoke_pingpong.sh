#!/usr/bin/env bash
# The ping-pong build of the layouts kernel (sm90_gemm.cu's GL_PINGPONG) on the H200, from the
# repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_pingpong.sh [SHAPES]
# Steps, each under its own time limit (a deadlock ends as rc=124, not a hung session), about 450 s at most in
# all: the ping-pong GPU tests (tests/test_pingpong_gpu.py) and the cooperative library GEMM's that
# share its source (tests/test_library_gemm_gpu.py -k "tail_shapes or repeat"); compute-sanitizer
# memcheck, racecheck and synccheck on bench/experiments/pingpong.py --sanitize; then the experiment
# itself (SHAPES: its --shapes, default all), ping-pong against level 9's cooperative builds, the route,
# cuBLAS and eager torch. Writes $OUT/pingpong/smoke.log and the experiment's JSON and table there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_pingpong pingpong
step pytest 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_pingpong_gpu.py \
  tests/test_library_gemm_gpu.py -k "pingpong or tail_shapes or repeatable or cooperative"
step memcheck 60 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/experiments/pingpong.py --sanitize
step racecheck 150 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/experiments/pingpong.py --sanitize
step synccheck 60 compute-sanitizer --report-api-errors no --tool synccheck --error-exitcode 1 python3 bench/experiments/pingpong.py --sanitize
step bench 200 python3 bench/experiments/pingpong.py ${1:+--shapes "$1"} -o "$DEST"
smoke_end smoke_pingpong 'passed|failed|error|ERROR|WRONG|SUMMARY|pp/coop|sanitize:'  # exit status: 0 when every step passed
