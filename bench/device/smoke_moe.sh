#!/usr/bin/env bash
# The mixture-of-experts smoke run on the H200 (issue 24: grouped_swiglu, repeatability, the MoE layer),
# from the repository root with the package installed:
#   OUT=... bash bench/device/smoke_moe.sh
# Steps, each under its own time limit (a deadlock ends as rc=124): every build the tests and the bench
# use (in parallel), the GPU tests of tests/test_grouped_swiglu_gpu.py (-n 8), compute-sanitizer memcheck and
# racecheck on bench/sanitize_grouped.py, and bench/grouped.py --quick. Everything in $OUT/moe/smoke_moe.log,
# the bench JSON in $OUT/moe/. About 270 s (builds about 70, tests 45, sanitizers 100, bench 60); at most
# 570 s if every step runs to its limit. Exit status: 0 when the tests, both sanitizers and the bench pass.
set -u
OUT=${OUT:-/tmp/out}
DIR="$OUT/moe"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)  # absolute: the sanitizer and bench steps run from bench/
LOG="$DIR/smoke_moe.log"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-$PWD/.kcache}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
FAILED=""
source "$(dirname "$0")/step.sh"  # step NAME SECONDS COMMAND...
T0=$(date +%s)
{
  echo "== smoke_moe $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT"
  nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
} >>"$LOG" 2>&1
step prebuild 120 python3 - <<'PY'
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.grouped import grouped_gemm
both = [dict(bn=128), dict(bn=128, b_major="mn"), dict(bn=128, out_fp32=True), dict(bn=128, b_major="mn", out_fp32=True),
        dict(bn=128, b_major="mn", k_grouped=True)]
bf16 = [dict(bn=256), dict(bn=256, out_fp32=True), dict(bn=128, masked=True), dict(bn=256, masked=True)]
jobs = [(c, d) for c in both for d in ("bf16", "fp16")] + [(c, "bf16") for c in bf16]
t = time.time()
with ThreadPoolExecutor(16) as pool:
    built = list(pool.map(lambda j: grouped_gemm(**j[0]).build(j[1]), jobs))
spills = [k.kernel_name for k in built if "0 bytes spill stores, 0 bytes spill loads" not in k.ptxas_log]
print(f"{len(built)} builds in {time.time() - t:.0f} s; with spills: {spills or 'none'}")
PY
step pytest 120 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -rfE --tb=short tests/test_grouped_swiglu_gpu.py
(cd bench && step memcheck 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
  python3 sanitize_grouped.py)
(cd bench && step racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 3 python3 sanitize_grouped.py)
(cd bench && export OUT="$DIR" && step bench 120 python3 grouped.py --quick)
# The subshells' failures: read back from the log.
FAILED="$FAILED $(grep -E '^== (memcheck|racecheck|bench) rc=[1-9]' "$LOG" | awk '{print $2}' | tr '\n' ' ')"
echo "== smoke_moe done in $(( $(date +%s) - T0 )) s; failed:${FAILED:- none}" >>"$LOG"
grep -E "^== |passed|failed|builds in|ERROR SUMMARY|RACECHECK SUMMARY|WRONG" "$LOG"
[ -z "${FAILED// /}" ]
