#!/usr/bin/env bash
# Where a 256-row tile's launch goes (issue 23's mid-M miss): the timeline builds (sm90_gemm.cu's GL_TIMELINE) of
# the cooperative 256-row tile and the 128-row ping-pong tile (BN 128 and 192, TMA store; 256 x 192 with the register store too) traced beside the route and the 128 x 128 tile on
# the shapes where one wave of 256-row tiles was predicted to beat cuBLAS and did not (docs/where-time-goes.md:
# ViT-L qkv at 1576 rows, 256 x 192 in one wave, 31.8 us measured on an H100 against 16.8 predicted), from the
# repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_tall_timeline.sh
# Steps, each under its own time limit (about 330 s if both ran to their limits): the timeline GPU tests, then
# bench/experiments/gemm_timeline.py over CASES and BUILDS below. Writes $OUT/tall_timeline/smoke.log and the
# experiment's JSON and table there. Exit status: 0 when every step passed; the failed steps are named on the
# log's last line. Prebuild here first (no GPU needed) and carry the cache: GEMM_LADDER_CACHE=.kcache python3
# bench/experiments/gemm_timeline.py --prebuild --cases "$CASES" --builds "$BUILDS".
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
CASES="1576,3072,1024;1000,4608,3584;1023,2304,768"
BUILDS="route;c1 bn128 none;c1 bm256 bn128 none;c1 bm256 bn192 none;c1 bm256 reg bn192 none;c1 pp bn128 none;c1 pp bn192 none"
smoke_begin smoke_tall_timeline tall_timeline
step pytest 90 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --tb=short tests/test_gemm_timeline_gpu.py
step bench 240 python3 bench/experiments/gemm_timeline.py --cases "$CASES" --builds "$BUILDS" -o "$DEST"
smoke_end smoke_tall_timeline 'passed|failed|error|ERROR|WRONG|^\|'  # exit status: 0 when every step passed
