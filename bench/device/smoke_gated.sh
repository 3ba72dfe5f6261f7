#!/usr/bin/env bash
# swiglu's small-M path in one launch (the small-M kernel's gated build, library/swiglu_small_m.py) on the
# H200, from the repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gated.sh
# Steps, each under its own time limit, at most 530 s in all: the gated builds and the pair's compiled in
# parallel, each checked for spills; its GPU tests and the pair's (tests/test_swiglu_small_m_gated_gpu.py,
# tests/test_swiglu_small_m_gpu.py); bench/sanitize_swiglu_small_m.py plain, then under compute-sanitizer
# memcheck, racecheck and synccheck; bench/swiglu_small_m.py on the three MLPs at M = 1-192 (the pair, the
# gated build as one_launch, the fused kernel and eager interleaved) -> $OUT/gated/swiglu_small_m.json.
# Writes $OUT/gated/smoke.log. Exit status: 0 when every step passed; the failed steps are named on the log's
# last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
export GEMM_LADDER_HOST=${GEMM_LADDER_HOST:-0}
smoke_begin smoke_gated gated
step prebuild 60 python3 - <<'PY'
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.library.swiglu_small_m import BUCKETS, KERNEL_NAME, swiglu_small_m_kernel
jobs = [(bn, d) for bn in BUCKETS for d in ("bf16", "fp16")]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda j: swiglu_small_m_kernel(j[0]).build(j[1]), jobs))
print(f"{len(jobs)} builds in {time.time() - t:.0f} s")
bad = 0
for (bn, d), b in zip(jobs, built):
    u = parse_ptxas_log(b.ptxas_log)[KERNEL_NAME]
    bad += u.spill_stores + u.spill_loads > 0
    print(f"gated BN {bn} {d}: {u.registers} registers, {u.spill_stores + u.spill_loads} spill bytes")
print(f"builds with spills: {bad}")
raise SystemExit(1 if bad else 0)
PY
step pytest 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 -rfE --tb=short \
  tests/test_swiglu_small_m_gated_gpu.py tests/test_swiglu_small_m_gpu.py
step sanitize_plain 30 python3 bench/sanitize_swiglu_small_m.py
step memcheck 50 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/sanitize_swiglu_small_m.py
step racecheck 80 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/sanitize_swiglu_small_m.py
step synccheck 50 compute-sanitizer --report-api-errors no --tool synccheck --error-exitcode 1 python3 bench/sanitize_swiglu_small_m.py
step bench 140 python3 bench/swiglu_small_m.py --ms 1,7,16,32,64,96,128,160,192 --no-compile --budget 0.05 \
  -o "$DEST/swiglu_small_m.json"
smoke_end smoke_gated 'passed|failed|error|ERROR|WRONG|rel err|builds in|registers|one_launch|threshold'  # 0 when every step passed
