#!/usr/bin/env bash
# The grouped GEMM's GPU smoke run (issue 24), from the repo root on the H200 with PYTHONPATH=src and
# GEMM_LADDER_CACHE set: build every grouped kernel variant (8 in parallel), the GPU tests, a quick bench.
# Logs under $OUT (build.log, pytest.log, bench.log; the bench's JSON too). Exit status: the tests'.
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"  # absolute: the bench step runs from bench/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >"$OUT/build.log" 2>&1
timeout 300 python3 - >>"$OUT/build.log" 2>&1 <<'PY'
# every build the GPU tests and the bench use, 8 at a time (nvcc subprocesses)
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.grouped import grouped_gemm
cfgs = [dict(bn=bn, b_major=m) for bn in (128, 256) for m in ("k", "mn")]
cfgs += [dict(bn=bn, b_major="mn", k_grouped=True) for bn in (128, 256)]
cfgs += [dict(bn=128, bias=True), dict(bn=128, b_major="mn", out_fp32=True)]
jobs = [(c, dt) for c in cfgs for dt in ("bf16", "fp16")]
def build(job):
    c, dt = job
    t = time.time(); k = grouped_gemm(**c).build(dt)
    return c, dt, round(time.time() - t, 1), [l.strip() for l in k.ptxas_log.splitlines() if "spill" in l or "registers" in l]
with ThreadPoolExecutor(8) as pool:
    for r in pool.map(build, jobs):
        print(*r)
PY
echo "build rc=$?" >>"$OUT/build.log"
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_grouped*.py >"$OUT/pytest.log" 2>&1
rc=$?
echo "pytest rc=$rc" >>"$OUT/pytest.log"
(cd bench && timeout 240 python3 grouped.py --quick) >"$OUT/bench.log" 2>&1
echo "bench rc=$?" >>"$OUT/bench.log"
tail -n 40 "$OUT/build.log" "$OUT/pytest.log" "$OUT/bench.log"
exit $rc
