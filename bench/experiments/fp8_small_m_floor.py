"""Where the time goes in fp8 scaled_mm at decode M (issue 25's M <= 128 target): the kernels each call
launches and their device durations, ours (gemm_ladder.scaled_mm) against torch._scaled_mm of the same
scaling (cuBLASLt), from torch.profiler (CUPTI); with triton's do_bench per call (L2 flushed), the
explain of our launch (BN, split, grid, contributors), and each output's error against float64 of the
dequantized inputs.

    python3 bench/experiments/fp8_small_m_floor.py      # on the H200; writes $OUT/fp8_small_m_floor.json

The question it answers: at M = 64, torch's tensorwise ran 1.4-1.6x faster than ours and than its own
rowwise (bench/results/2026-12-04_fp8_quick_2134406.json); is the difference the GEMM kernel's time, a
second kernel (ours: the split's counters; theirs: a split-K reduction), or the tile cuBLAS picks (its
kernel names)?"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from suite import meta, require_gpu  # noqa: E402

require_gpu(__file__)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import gemm_ladder  # noqa: E402
from gemm_ladder.library.quantized import SCHEME_BLOCKS, dequantize, quantize_fp8  # noqa: E402

SHAPES = [(64, 4096, 14336), (64, 1536, 7168), (64, 7168, 2048), (64, 6144, 4096), (128, 7168, 2048)]
BLOCKS = SCHEME_BLOCKS


def kernels(fn) -> dict:
    """Kernel name -> (launches per call, mean device microseconds) over 20 calls."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    ks = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            ks[e.name].append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
    return {k[:90]: (len(v) / 20, round(sum(v) / len(v), 2)) for k, v in ks.items()}


out = []
torch.manual_seed(0)
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda") / k ** 0.5
    for scheme, (ba, bw) in BLOCKS.items():
        qa, sa = quantize_fp8(a, ba)
        qw, sw = quantize_fp8(w, bw)
        sb = sw.T if sw.dim() == 2 else sw
        ref = dequantize(qa, sa, ba) @ dequantize(qw, sw, bw).T
        fns = {"ours": lambda: gemm_ladder.scaled_mm(qa, qw.T, sa, sb),
               "torch": lambda: torch._scaled_mm(qa, qw.T, sa, sb, out_dtype=torch.bfloat16)}
        e = gemm_ladder.explain_scaled_mm(qa, qw.T, sa, sb)
        row = {"M": m, "N": n, "K": k, "scheme": scheme,
               "ours_launch": {key: e[key] for key in ("tile", "stages", "split", "grid", "contributors", "store")}}
        for name, fn in fns.items():
            try:
                y = fn()
            except (RuntimeError, ValueError) as exc:
                row[name + "_refused"] = str(exc).splitlines()[0][:200]
                continue
            torch.cuda.synchronize()
            row[name + "_err"] = float(((y.double() - ref).abs().max() / ref.abs().max()))
            row[name + "_kernels"] = kernels(fn)
            row[name + "_dobench_us"] = round(do_bench(fn, warmup=25, rep=100) * 1000, 2)
        print(json.dumps(row), flush=True)
        out.append(row)
json.dump({"meta": meta(), "rows": out},
          open(os.path.join(os.environ.get("OUT", "."), "fp8_small_m_floor.json"), "w"), indent=1)
