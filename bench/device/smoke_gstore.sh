#!/usr/bin/env bash
# The grouped GEMM's TMA store (the output through level 9's panel ring; library/grouped.py C_RING,
# STORE_DEFAULT) on the H200, from the repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gstore.sh
# Steps, each under its own time limit (a deadlock ends as rc=124, not a hung session), about 520 s in
# all: every grouped build the tests use compiled in parallel; the grouped GPU tests (tests/test_grouped_gpu.py:
# the TMA store bit for bit the register store along M and K, the panel carried across tiles with more
# tiles than CTAs, the N = 100 padding left alone; tests/test_grouped_swiglu_gpu.py); compute-sanitizer
# memcheck and racecheck on bench/grouped.py --sanitize (its many-tile cases poisoned); then the full
# bench/grouped.py (fwd, grad_x, grad_w on every case, no swiglu rows), the issue's committed run.
# Writes $OUT/gstore/smoke.log and the bench's JSON there. Exit status: 0 when every step passed; the
# failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_gstore gstore
step prebuild 90 python3 - <<'PY'
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.grouped import grouped_gemm
cfgs = [dict(bn=bn, b_major=m, cluster=cl) for bn in (128, 256) for m in ("k", "mn") for cl in (1, 2)]
cfgs += [dict(bn=bn, b_major="mn", k_grouped=True, cluster=cl) for bn in (128, 256) for cl in (1, 2)]
cfgs += [dict(bn=bn, masked=True) for bn in (128, 256)] + [dict(bn=bn, bias=True) for bn in (128, 256)]
cfgs += [dict(bn=128, out_fp32=True)]
cfgs += [dict(bn=bn, b_major="mn", out_fp32=True) for bn in (128, 256)]
cfgs += [dict(bn=256, b_major="mn", k_grouped=True, out_fp32=True)]
jobs = [(c, d) for c in cfgs for d in ("bf16", "fp16")]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(lambda j: grouped_gemm(**j[0]).build(j[1]), jobs))
print(f"{len(jobs)} builds in {time.time() - t:.0f} s")
PY
step pytest 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_gpu.py \
  tests/test_grouped_swiglu_gpu.py
step memcheck 30 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step racecheck 80 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 bench/grouped.py --sanitize
step bench 170 python3 bench/grouped.py --directions fwd,grad_x,grad_w --swiglu none -o "$DEST/grouped.json"
smoke_end smoke_gstore 'passed|failed|error|ERROR|WRONG|builds in|torch_grouped'  # exit status: 0 when every step passed
