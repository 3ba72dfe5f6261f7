"""One small call of each library kernel family through the public API, for compute-sanitizer.

    compute-sanitizer --tool racecheck python bench/sanitize_families.py

The general kernel (tails; a stream-K split), small-M, linear with fused epilogues, swiglu (small-M and
general), scaled_mm (tensorwise, rowwise, blockwise), grouped_mm (along M with empty and one-row
groups, along K), grouped_linear and grouped_mm_masked. Correctness is the GPU tests' job; this runs
each kernel once where the sanitizer can watch it. Prints the number of calls; exit 2 without a GPU.
"""

import torch

from suite import require_gpu
import gemm_ladder as g
from gemm_ladder.library.fp8 import quantize_fp8

require_gpu(__file__)
dev = "cuda"
torch.manual_seed(0)
bf = torch.bfloat16
def r(*s, dt=bf):
    return torch.randn(*s, device=dev, dtype=dt)
out = []
out.append(g.mm(r(300, 520), r(520, 264)))              # general, tails
out.append(g.mm(r(2048, 1024), r(1024, 2048)))          # general, stream-K
out.append(g.mm(r(7, 4096), r(4096, 1024)))             # small-M
out.append(g.linear(r(333, 768), r(512, 768), r(512), activation="gelu", residual=r(333, 512)))
out.append(g.linear(r(5, 768), r(512, 768), r(512), activation="silu"))
out.append(g.swiglu(r(64, 1024), r(1536, 1024), r(1536, 1024)))
out.append(g.swiglu(r(300, 1024), r(1536, 1024), r(1536, 1024)))
BLOCKS = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}
for mode, (ba, bw) in BLOCKS.items():
    a = torch.randn(384, 1024, device=dev); w = torch.randn(640, 1024, device=dev) / 32
    qa, sa = quantize_fp8(a, ba); qw, sw = quantize_fp8(w, bw)
    sb = sw.T if sw.dim() == 2 else sw
    out.append(g.scaled_mm(qa, qw.T, sa, sb))
E, K, N = 8, 512, 384
x = r(1000, K); w = r(E, K, N)
offs = torch.tensor([0, 1, 130, 130, 400, 777, 900, 1000], device=dev, dtype=torch.int32)
out.append(g.grouped_mm(x, w, offs))
out.append(g.grouped_mm(r(1000, N).T, r(1000, K), offs))                 # grouped along K (weight gradient)
wl = r(E, N, K, dt=bf); out.append(g.grouped_linear(x, wl, offs, r(E, N), activation="silu"))
counts = torch.tensor([0, 3, 64, 1, 17, 0, 5, 40], device=dev, dtype=torch.int32)
out.append(g.grouped_mm_masked(r(E, 64, K), w, counts))
torch.cuda.synchronize()
print(f"sanitize_families: {len(out)} calls ran")
