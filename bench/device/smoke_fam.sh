#!/usr/bin/env bash
# Branch fam (issue 22: the grouped GEMM and fp8 kernels as KernelConfig families, their kernels as one
# templated body each): the grouped and fp8 GPU tests, the families' protocol path against the public
# calls, and a short grouped bench (8 + 8 grouped builds changed SASS by instruction order only:
# bench/results/logs/2026-12-03_sass_fingerprint_grouped_fp8_fam.log). From the repository root on the
# H200 with the package installed:
#   OUT=... bash bench/device/smoke_fam.sh
# Everything goes to $OUT/fam/log.txt. Expected about 150 s (prebuild ~50, tests ~60, protocol ~10, bench ~30);
# each step has its own limit (a deadlock ends as rc=124), at most 330 s. Exit status: the tests'.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/fam"
LOG="$OUT/fam/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-$PWD/.kcache}
source "$(dirname "$0")/step.sh"  # step NAME SECONDS COMMAND...
{
  echo "== smoke_fam $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
} >>"$LOG" 2>&1
# Every build the tests use, compiled in parallel first (nvcc runs in subprocesses), through the families.
step prebuild 120 python3 - <<'PY'
import itertools, time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.fp8 import Fp8Kernel
from gemm_ladder.library.grouped import grouped_gemm
cfgs = [dict(bn=bn, b_major=m) for bn in (128, 256) for m in ("k", "mn")]
cfgs += [dict(bn=bn, b_major="mn", k_grouped=True) for bn in (128, 256)]
cfgs += [dict(bn=128, bias=True), dict(bn=128, b_major="mn", out_fp32=True), dict(bn=128, masked=True)]
jobs = [lambda c=c, d=d: grouped_gemm(**c).build(d) for c in cfgs for d in ("bf16", "fp16")]
ks = [Fp8Kernel(m, out_dtype=o, bias=b, bn=n) for m, o, b, n in itertools.product(
      ("tensorwise", "rowwise", "blockwise"), ("bf16", "fp16", "fp32", "fp8"), (False, True), (64, 128))
      if not (o == "fp8" and n == 64)]
ks += [Fp8Kernel("blockwise", a_dtype="e5m2", bn=n) for n in (64, 128)]
ks += [Fp8Kernel(m, overlap=False) for m in ("tensorwise", "rowwise", "blockwise")]
jobs += [k.build for k in ks]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda j: j(), jobs))
spills = [k.kernel_name for k in built if "0 bytes spill stores, 0 bytes spill loads" not in k.ptxas_log]
print(f"{len(built)} builds in {time.time() - t:.0f} s; with spills: {spills or 'none'}")
PY
step pytest 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short -n 8 \
  tests/test_grouped_gpu.py tests/test_fp8_gpu.py tests/test_fp8_cpu.py tests/test_grouped.py
TESTS=$?
# The families' protocol path (config -> bind -> launch) gives the public calls' results bitwise.
step protocol 60 python3 - <<'PY'
import torch, gemm_ladder
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.library.kernel import Operands, GROUP_K
from gemm_ladder.library.fp8 import quantize_fp8
from gemm_ladder.api_grouped import grouped_mm_direct
torch.manual_seed(0)
dev = "cuda"
x = torch.randn(1000, 512, device=dev, dtype=torch.bfloat16)
w = torch.randn(8, 768, 512, device=dev, dtype=torch.bfloat16)  # (E, N, K) K-major
offs = torch.tensor([0, 100, 100, 350, 600, 601, 900, 1000], device=dev, dtype=torch.int32)
ref = grouped_mm_direct(x, w.transpose(1, 2), offs, bn=128)
G = K.family("sm90_grouped_gemm")
out = torch.full_like(ref, float("nan"))
cfg = G.config(128, "k", "bf16")
assert G.supports(cfg, Operands(x, w, out, more=(offs,))) is None
G.launch(G.bind(cfg, Operands(x, w, out, more=(offs,))))
rows = int(offs[-1])
print("grouped M via protocol bitwise equal:", torch.equal(out[:rows], ref[:rows]))
a = torch.randn(256, 1000, device=dev, dtype=torch.bfloat16).t().contiguous().t()  # (M, total K) M-major
b = torch.randn(1000, 384, device=dev, dtype=torch.bfloat16)
refk = grouped_mm_direct(a, b, offs, bn=128)
outk = torch.empty_like(refk)
cfgk = G.config(128, "mn", "bf16", grouping=GROUP_K)
G.launch(G.bind(cfgk, Operands(a, b, outk, more=(offs,))))
print("grouped K via protocol bitwise equal:", torch.equal(outk, refk))
F = K.family("sm90_fp8_gemm")
qa, sa = quantize_fp8(torch.randn(300, 1024, device=dev), (1, 128))
qw, sw = quantize_fp8(torch.randn(512, 1024, device=dev), (128, 128))
ref8 = gemm_ladder.scaled_mm(qa, qw.T, sa, sw.T)
for bn in (128, 64):  # scaled_mm picks one of them (tile_n); each K block's sum is the same per element
    cfg8 = F.config("blockwise", bn=bn)
    assert F.supports(cfg8, Operands(qa, qw.T, None, more=(sa, sw.T, None))) is None
    y = F.launch(F.bind(cfg8, Operands(qa, qw.T, None, more=(sa, sw.T, None))))
    print(f"fp8 blockwise BN {bn} via protocol bitwise equal to scaled_mm: {torch.equal(y, ref8)}; "
          f"max abs diff {(y.float() - ref8.float()).abs().max().item():.3g}")
PY
step bench 60 bash -c 'cd bench && python3 grouped.py --quick --cases qwen3_gate_up,mixtral_down_skewed,decode_128 --directions fwd,grad_w -o /tmp/fam_grouped.json 2>&1 | grep -v "^wrote" | tail -n 12'
grep -E "^== |passed|failed|error|builds|bitwise|equal" "$LOG"
exit $TESTS
