#!/usr/bin/env bash
# swiglu's small-M path in one launch (the small-M kernel's gated build, library/swiglu_small_m.py) on the
# H200, from the repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gated.sh
# Also the general kernel's 64-row tile with two CTAs per SM (library_gemm(..., ctas_per_sm=2), a measuring
# build): its GPU tests and bench/experiments/two_ctas_per_sm.py -> $OUT/gated/two_ctas_per_sm.json.
# Steps in order of what matters most, each under its own time limit (610 s if every step ran to its limit,
# past the device's 600 s call: the last steps are the ones cut): the gated builds and the two-CTA build
# compiled in parallel, each checked for spills; the GPU tests (tests/test_swiglu_small_m_gated_gpu.py,
# tests/test_swiglu_small_m_gpu.py, tests/test_two_ctas_per_sm_gpu.py); bench/sanitize_swiglu_small_m.py plain
# and under compute-sanitizer racecheck; bench/swiglu_small_m.py on the three MLPs at M = 1-192 (the pair, the
# gated build as one_launch, the fused kernel and eager interleaved) -> $OUT/gated/swiglu_small_m.json; the
# two-CTA experiment; then memcheck and synccheck of the sanitizer script.
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
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.swiglu_small_m import BUCKETS, swiglu_small_m_kernel
jobs = [(f"gated BN {bn}", swiglu_small_m_kernel(bn), d) for bn in BUCKETS for d in ("bf16", "fp16")]
jobs += [("bm64 bn64 c1 x2", library_gemm("k", "k", 64, cluster=1, bm=64, ctas_per_sm=2), d) for d in ("bf16", "fp16")]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda j: j[1].build(j[2]), jobs))
print(f"{len(jobs)} builds in {time.time() - t:.0f} s")
bad = 0
for (label, _, d), b in zip(jobs, built):
    u = parse_ptxas_log(b.ptxas_log)[b.kernel_name]
    bad += u.spill_stores + u.spill_loads > 0
    print(f"{label} {d}: {u.registers} registers, {u.spill_stores + u.spill_loads} spill bytes")
print(f"builds with spills: {bad}")
raise SystemExit(1 if bad else 0)
PY
step pytest 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 -rfE --tb=short \
  tests/test_swiglu_small_m_gated_gpu.py tests/test_swiglu_small_m_gpu.py tests/test_two_ctas_per_sm_gpu.py
step sanitize_plain 30 python3 bench/sanitize_swiglu_small_m.py
step racecheck 80 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/sanitize_swiglu_small_m.py
step bench 140 python3 bench/swiglu_small_m.py --ms 1,7,16,32,64,96,128,160,192 --no-compile --budget 0.05 \
  -o "$DEST/swiglu_small_m.json"
step two_ctas 80 python3 bench/experiments/two_ctas_per_sm.py -o "$DEST/two_ctas_per_sm.json"
step memcheck 50 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/sanitize_swiglu_small_m.py
step synccheck 50 compute-sanitizer --report-api-errors no --tool synccheck --error-exitcode 1 python3 bench/sanitize_swiglu_small_m.py
smoke_end smoke_gated 'passed|failed|error|ERROR|WRONG|rel err|builds in|registers|one_launch|threshold|best x'  # 0 when every step passed
