#!/usr/bin/env bash
# fp8 scaled_mm smoke run on the H200 (issue 25), from the repository root:
#   PYTHONPATH=src GEMM_LADDER_CACHE=... OUT=... bash bench/device/smoke_fp8.sh
# Steps, each under its own time limit (a kernel deadlock ends as rc=124, not a hung session), all output
# in $OUT/smoke_fp8.log; the bench JSON lands in $OUT. Prints the step summary at the end. Typically
# about 6-8 minutes (prebuild under a minute on 16 cores); at most 15 if every step runs to its limit.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/smoke_fp8.log"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-$PWD/.kcache}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
step() {  # NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  echo "== $name ($secs s): $*" >>"$LOG"
  local start=$(date +%s)
  timeout "$secs" "$@" >>"$LOG" 2>&1
  echo "== $name rc=$? in $(( $(date +%s) - start )) s" >>"$LOG"
}
{
  echo "== smoke_fp8 $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT"
  nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
} >>"$LOG" 2>&1
# Every build the tests and the bench use, compiled in parallel first (nvcc runs in subprocesses).
step prebuild 150 python3 - <<'PY'
import itertools, time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.fp8 import Fp8Kernel
ks = [Fp8Kernel(m, out_dtype=o, bias=b, bn=n) for m, o, b, n in itertools.product(
      ("tensorwise", "rowwise", "blockwise"), ("bf16", "fp16", "fp32", "fp8"), (False, True), (64, 128))
      if not (o == "fp8" and n == 64)]
ks += [Fp8Kernel("blockwise", a_dtype="e5m2", bn=n) for n in (64, 128)]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(lambda k: k.build(), ks))
print(f"{len(ks)} builds in {time.time() - t:.0f} s")
PY
# One call of each scale mode first: a wrong or hanging kernel shows here in seconds.
step probe 120 python3 - <<'PY'
import torch, gemm_ladder
from gemm_ladder.library.fp8 import quantize_fp8, dequantize
B = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}
for m, n, k in ((128, 128, 128), (300, 333, 272), (4096, 4096, 4096)):
    a = torch.randn(m, k, device="cuda"); w = torch.randn(n, k, device="cuda") / k ** 0.5
    for mode, (ba, bw) in B.items():
        qa, sa = quantize_fp8(a, ba); qw, sw = quantize_fp8(w, bw)
        sb = sw.T if sw.dim() == 2 else sw
        y = gemm_ladder.scaled_mm(qa, qw.T, sa, sb); torch.cuda.synchronize()
        ref = dequantize(qa, sa, ba) @ dequantize(qw, sw, bw).T
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        try:
            t = torch._scaled_mm(qa, qw.T, sa, sb, out_dtype=torch.bfloat16)
            et = ((t.double() - ref).abs().max() / ref.abs().max()).item()
        except Exception as e:
            et = f"refused: {str(e).splitlines()[0][:120]}"
        print(f"{m}x{n}x{k} {mode}: err {err:.3e} torch {et}")
        v, s = gemm_ladder.scaled_mm(qa, qw.T, sa, sb, out_dtype=torch.float8_e4m3fn)
        rv, rs = quantize_fp8(gemm_ladder.scaled_mm(qa, qw.T, sa, sb, out_dtype=torch.float32), (1, 128))
        print(f"   fp8 out: scales equal {torch.equal(s, rs)}, values equal {torch.equal(v.view(torch.uint8), rv.view(torch.uint8))}")
PY
step pytest 300 python3 -m pytest -q -m gpu tests/test_fp8_cpu.py tests/test_fp8_gpu.py
step bench 200 python3 bench/fp8.py --quick
step sanitize 150 compute-sanitizer --tool memcheck --error-exitcode 1 python3 -c "
import torch, gemm_ladder
from gemm_ladder.library.fp8 import quantize_fp8
for mode, (ba, bw) in {'tensorwise': ((-1, -1), (-1, -1)), 'rowwise': ((1, -1), (1, -1)), 'blockwise': ((1, 128), (128, 128))}.items():
    for m, n, k in ((1, 97, 16), (200, 300, 272), (130, 256, 1024)):
        qa, sa = quantize_fp8(torch.randn(m, k, device='cuda'), ba); qw, sw = quantize_fp8(torch.randn(n, k, device='cuda'), bw)
        gemm_ladder.scaled_mm(qa, qw.T, sa, sw.T if sw.dim() == 2 else sw, bias=torch.randn(n, device='cuda'))
torch.cuda.synchronize(); print('sanitize cases done')
"
grep '^== ' "$LOG"
