#!/usr/bin/env bash
# The grouped GEMM's GPU smoke run (issue 24), from the repo root on the H200 with PYTHONPATH=src and
# GEMM_LADDER_CACHE set: build every grouped kernel variant (8 in parallel), the GPU tests, a quick bench.
# Logs under $OUT (build.log, canary.log, pytest.log, bench.log; the bench's JSON too); at most about 590 s.
# Exit status: the tests' (the canary's when it fails: then nothing else runs).
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"  # absolute: the bench step runs from bench/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >"$OUT/build.log" 2>&1
timeout 150 python3 - >>"$OUT/build.log" 2>&1 <<'PY'
# every build the GPU tests and the bench use, 8 at a time (nvcc subprocesses)
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.grouped import grouped_gemm
cfgs = [dict(bn=bn, b_major=m) for bn in (128, 256) for m in ("k", "mn")]
cfgs += [dict(bn=bn, b_major="mn", k_grouped=True) for bn in (128, 256)]
cfgs += [dict(bn=128, bias=True), dict(bn=128, b_major="mn", out_fp32=True), dict(bn=128, masked=True)]
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
# A canary first (a hung kernel would eat the whole budget in pytest): one launch of each mode, 60 s.
timeout 60 python3 - >"$OUT/canary.log" 2>&1 <<'PY'
import torch
from gemm_ladder.api_grouped import grouped_mm_direct
torch.manual_seed(0)
sizes = [100, 0, 1, 300, 27]
offs = torch.tensor(sizes).cumsum(0).to(torch.int32).cuda()
x = torch.randn(sum(sizes), 256, dtype=torch.bfloat16, device="cuda")
w = torch.randn(len(sizes), 384, 256, dtype=torch.bfloat16, device="cuda")
for bn in (128, 256):
    y = grouped_mm_direct(x, w.transpose(1, 2), offs, bn=bn); torch.cuda.synchronize()
    ref = torch.cat([x[s:e].double() @ w[i].double().T for i, (s, e) in enumerate(zip([0] + offs.tolist()[:-1], offs.tolist()))])
    print("fwd bn", bn, "rel err", float((y.double() - ref).norm() / ref.norm()))
    g = grouped_mm_direct(x.t(), y, offs, bn=bn); torch.cuda.synchronize()
    ref = torch.stack([x[s:e].double().T @ y[s:e].double() for s, e in zip([0] + offs.tolist()[:-1], offs.tolist())])
    print("k-grouped bn", bn, "rel err", float((g.double() - ref).norm() / ref.norm()))
PY
crc=$?
echo "canary rc=$crc" >>"$OUT/canary.log"
rc=$crc
if [ $crc -eq 0 ]; then
  timeout 260 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_grouped*.py >"$OUT/pytest.log" 2>&1
  rc=$?
  echo "pytest rc=$rc" >>"$OUT/pytest.log"
  (cd bench && timeout 120 python3 grouped.py --quick --directions fwd,grad_x,grad_w) >"$OUT/bench.log" 2>&1
  echo "bench rc=$?" >>"$OUT/bench.log"
fi
tail -n 40 "$OUT/build.log" "$OUT/canary.log" "$OUT/pytest.log" "$OUT/bench.log" 2>/dev/null
exit $rc
