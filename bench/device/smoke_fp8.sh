#!/usr/bin/env bash
# fp8 scaled_mm smoke run on the H200 (issue 25), from the repository root:
#   PYTHONPATH=src GEMM_LADDER_CACHE=... OUT=... bash bench/device/smoke_fp8.sh
# Steps, each under its own time limit (a kernel deadlock ends as rc=124, not a hung session), all output
# in the one file $OUT/smoke_fp8.log; the bench JSON lands in $OUT (nothing else is written there). Prints
# the step summary at the end. Typically about 2.5 minutes; at most 8 if every step runs to its limit.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/smoke_fp8.log"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_CACHE=${GEMM_LADDER_CACHE:-$PWD/.kcache}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
source "$(dirname "$0")/step.sh"  # step NAME SECONDS COMMAND...
{
  echo "== smoke_fp8 $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT"
  nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
} >>"$LOG" 2>&1
# Every build the tests and the bench use, compiled in parallel first (nvcc runs in subprocesses).
step prebuild 90 python3 - <<'PY'
import itertools, time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.fp8 import Fp8Kernel
ks = [Fp8Kernel(m, out_dtype=o, bias=b, bn=n) for m, o, b, n in itertools.product(
      ("tensorwise", "rowwise", "blockwise"), ("bf16", "fp16", "fp32", "fp8"), (False, True), (64, 128))
      if not (o == "fp8" and n == 64)]
ks += [Fp8Kernel("blockwise", a_dtype="e5m2", bn=n) for n in (64, 128)]
ks += [Fp8Kernel(m, overlap=False) for m in ("tensorwise", "rowwise", "blockwise")]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(lambda k: k.build(), ks))
print(f"{len(ks)} builds in {time.time() - t:.0f} s")
PY
# The promotion overlapped (default) against the serial one, interleaved, on two of the issue's shapes.
step overlap_ab 60 python3 - <<'PY'
import torch, gemm_ladder
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import quantize_fp8
from gemm_ladder.gates.performance import time_fns
B = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}
for m, n, k in ((4096, 7168, 16384), (4096, 24576, 1536)):
    a = torch.randn(m, k, device="cuda"); w = torch.randn(n, k, device="cuda") / k ** 0.5
    fns = {}
    for mode, (ba, bw) in B.items():
        qa, sa = quantize_fp8(a, ba); qw, sw = quantize_fp8(w, bw)
        args = (qa, qw.T, sa, sw.T if sw.dim() == 2 else sw)
        def run(x, y, args=args, ov=True):
            fp8.OVERLAP_PROMOTION = ov
            gemm_ladder.scaled_mm(*args)
        fns[f"{mode}_overlap"] = run
        fns[f"{mode}_serial"] = lambda x, y, args=args, run=run: run(x, y, args, False)
        fp8.OVERLAP_PROMOTION = True; y1 = gemm_ladder.scaled_mm(*args)
        fp8.OVERLAP_PROMOTION = False; y0 = gemm_ladder.scaled_mm(*args)
        print(f"{m}x{n}x{k} {mode}: overlap and serial bitwise equal: {torch.equal(y0, y1)}")
    t = time_fns(fns, a, w, budget_s=0.1, rounds=2)
    fl = 2 * m * n * k
    print(f"{m}x{n}x{k} " + "  ".join(f"{name} {fl / v.median_ms / 1e9:.0f}" for name, v in t.items()))
    fp8.OVERLAP_PROMOTION = True
PY
step pytest 120 python3 -m pytest -q -m gpu tests/test_fp8_cpu.py tests/test_fp8_gpu.py
step bench 120 python3 bench/fp8.py --quick
step sanitize 90 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 -c "
import torch, gemm_ladder
from gemm_ladder.library.fp8 import quantize_fp8
for mode, (ba, bw) in {'tensorwise': ((-1, -1), (-1, -1)), 'rowwise': ((1, -1), (1, -1)), 'blockwise': ((1, 128), (128, 128))}.items():
    for m, n, k in ((1, 97, 16), (200, 300, 272), (130, 256, 1024)):
        qa, sa = quantize_fp8(torch.randn(m, k, device='cuda'), ba); qw, sw = quantize_fp8(torch.randn(n, k, device='cuda'), bw)
        gemm_ladder.scaled_mm(qa, qw.T, sa, sw.T if sw.dim() == 2 else sw, bias=torch.randn(n, device='cuda'))
torch.cuda.synchronize(); print('sanitize cases done')
"
grep '^== ' "$LOG"
