#!/usr/bin/env bash
# The grouped GEMM's cluster build (grouped_gemm(..., cluster=2): pairs of M tiles sharing the weight tile
# by TMA multicast; not the default) on the H200, from the repository root with the package installed
# (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gcluster.sh
# Steps, each under its own time limit (a deadlock ends as rc=124, not a hung session), at most 200 s in
# all: every grouped build the tests use, cluster 1 and 2, compiled in parallel (the kernel's code
# changed for every build); the grouped GPU tests (tests/test_grouped_gpu.py: the cluster build's own and
# the existing ones; tests/test_grouped_swiglu_gpu.py, whose backward runs grouped builds);
# compute-sanitizer memcheck and racecheck on small calls forcing the cluster build through each mode
# (K- and N-major weight, bias, fp32 out, masked, along K; pairs straddling groups, a rank without a tile),
# each checked against float64; then bench/grouped.py --cluster both --check64: cluster 1 (grouped) and
# cluster 2 (grouped_c2) against torch._grouped_mm and a loop of torch.mm, interleaved, every output
# checked against float64 first, on Mixtral E=8 (gate+up 28672 x 4096, down 4096 x 14336 skewed, 16384
# rows), Qwen3-30B-A3B E=128 (1536 x 2048, 2048 x 768), and Mixtral down's weight gradient.
# Writes $OUT/gcluster/smoke.log and the bench's two JSONs there. Exit status: 0 when every step passed;
# the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
export GEMM_LADDER_HOST=${GEMM_LADDER_HOST:-0}
smoke_begin smoke_gcluster gcluster
step prebuild 25 python3 - <<'PY'
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.library.grouped import KERNEL_NAME, grouped_gemm
cfgs = [dict(bn=bn, b_major=m) for bn in (128, 256) for m in ("k", "mn")]
cfgs += [dict(bn=bn, b_major="mn", k_grouped=True) for bn in (128, 256)]
cfgs += [dict(bn=bn, masked=True) for bn in (128, 256)]
cfgs += [dict(bn=128, bias=True), dict(bn=128, out_fp32=True), dict(bn=128, b_major="mn", out_fp32=True),
         dict(bn=128, b_major="mn", k_grouped=True, out_fp32=True)]
jobs = [(dict(c, cluster=cl), d) for c in cfgs for cl in (1, 2) for d in ("bf16", "fp16")]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda j: grouped_gemm(**j[0]).build(j[1]), jobs))
print(f"{len(jobs)} builds in {time.time() - t:.0f} s")
bad = 0
for (kw, d), b in zip(jobs, built):
    u = parse_ptxas_log(b.ptxas_log)[KERNEL_NAME]
    bad += u.spill_stores + u.spill_loads > 0
    if kw["cluster"] == 2 and d == "bf16":
        print(f"{grouped_gemm(**kw).name} {d}: {u.registers} registers, {u.spill_stores + u.spill_loads} spill bytes")
print(f"builds with spills: {bad}")
raise SystemExit(1 if bad else 0)
PY
step pytest 55 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --tb=short tests/test_grouped_gpu.py \
  tests/test_grouped_swiglu_gpu.py
SAN='
import torch
from gemm_ladder.api_grouped import grouped_mm_direct, grouped_mm_masked_direct
torch.manual_seed(0)
sizes = [0, 1, 70, 129, 0, 33, 300]  # M tiles 0,1,1,2,0,1,3: pairs straddle groups, pairs shared, an odd last
ends = [0] + torch.tensor(sizes).cumsum(0).tolist()
offs = torch.tensor(ends[1:], dtype=torch.int32, device="cuda")
bad = 0
def check(tag, got, ref):
    global bad
    err = float((got.double() - ref).norm() / ref.norm().clamp_min(1e-30))
    verdict = "ok" if err <= 2e-2 else "WRONG"
    bad += verdict != "ok"
    print(f"{tag:36s} rel err vs float64 {err:.2e} {verdict}", flush=True)
dt, e, n, k = torch.bfloat16, len(sizes), 136, 200
x = torch.randn(ends[-1], k, dtype=dt, device="cuda")
w = torch.randn(e, n, k, dtype=dt, device="cuda")
bias = torch.randn(e, n, dtype=dt, device="cuda")
ref = torch.cat([x[ends[i]:ends[i + 1]].double() @ w[i].double().T for i in range(e)])
for bn in (128, 256):
    check(f"fwd bn {bn}", grouped_mm_direct(x, w.transpose(1, 2), offs, bn=bn, cluster=2), ref)
    check(f"n-major (grad_x) bn {bn}", grouped_mm_direct(x, w.transpose(1, 2).contiguous(), offs, bn=bn, cluster=2), ref)
    gy = torch.randn(ends[-1], 136, dtype=dt, device="cuda")
    want = torch.stack([x[ends[i]:ends[i + 1]].double().T @ gy[ends[i]:ends[i + 1]].double() for i in range(e)])
    check(f"along K (grad_w) bn {bn}", grouped_mm_direct(x.t(), gy, offs, bn=bn, cluster=2), want)
rows_bias = torch.cat([bias[i].double().expand(ends[i + 1] - ends[i], -1) for i in range(e)])
check("bias", grouped_mm_direct(x, w.transpose(1, 2), offs, bias=bias, cluster=2), ref + rows_bias)
check("fp32 out", grouped_mm_direct(x, w.transpose(1, 2), offs, out_dtype=torch.float32, cluster=2), ref)
counts = torch.tensor([3, 0, 200, 1, 129, 256, 90], dtype=torch.int32, device="cuda")
a = torch.randn(e, 256, k, dtype=dt, device="cuda")
got = grouped_mm_masked_direct(a, w.transpose(1, 2), counts, cluster=2)
cs = counts.tolist()
check("masked", torch.cat([got[i, :c] for i, c in enumerate(cs)]),
      torch.cat([a[i, :c].double() @ w[i].double().T for i, c in enumerate(cs)]))
torch.cuda.synchronize()
print(f"sanitize cases done, {bad} wrong")
raise SystemExit(1 if bad else 0)
'
step memcheck 20 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 -c "$SAN"
step racecheck 60 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 -c "$SAN"
step bench_fwd 25 python3 bench/grouped.py --quick --swiglu none --cluster both --check64 \
  --cases mixtral_gate_up,mixtral_down_skewed,qwen3_gate_up,qwen3_down --directions fwd -o "$DEST/grouped_fwd.json"
step bench_grad_w 15 python3 bench/grouped.py --quick --swiglu none --cluster both --check64 \
  --cases mixtral_down_skewed --directions grad_w -o "$DEST/grouped_grad_w.json"
smoke_end smoke_gcluster 'passed|failed|error|ERROR|WRONG|cluster2|builds in|registers'  # exit status: 0 when every step passed
