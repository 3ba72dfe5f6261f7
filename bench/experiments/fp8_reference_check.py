"""Which fp8 GEMM is wrong? bench/experiments/k_sweep.py at f8a20ee marked fp8 blockwise 4096x24576x1536 wrong
(ours against torch._scaled_mm, relative error 0.9999 at one of its K points). Here each output, ours
and torch's, bf16 and float32, is compared with float64 of the dequantized inputs, at the sweep's K
points and beside. Run on the H200 (torch 2.11+cu130) at f8a20ee: ours within 1.7e-3 (bf16) and 1.3e-4
(fp32) everywhere; torch._scaled_mm blockwise at K = 768 wrong (4.4e3 and 5.1e34), right at K >= 1536
(bench/results/logs/2026-12-03_fp8_check_models_shapes_f8a20ee.log).

    python3 bench/experiments/fp8_reference_check.py      # prints one FP8CHECK line per case
"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py
from suite import require_gpu  # noqa: E402

require_gpu(__file__)

import torch  # noqa: E402

import gemm_ladder  # noqa: E402
from gemm_ladder.library.quantized import SCHEME_BLOCKS, dequantize, quantize_fp8  # noqa: E402

BLOCKS = SCHEME_BLOCKS
def rel(x, r): return ((x.double() - r).norm() / r.norm()).item()
torch.manual_seed(0)
for (m, n, ks, modes) in ((4096, 24576, (768, 1536, 3072), ("blockwise", "rowwise", "tensorwise")),
                          (4096, 7168, (768, 1536), ("blockwise",)), (1024, 24576, (1536,), ("blockwise",)),
                          (4096, 16384, (1536,), ("blockwise",)), (4096, 20480, (1536,), ("blockwise",))):
    for k in ks:
        for mode in modes:
            ba, bw = BLOCKS[mode]
            a32 = torch.randn(m, k, device="cuda"); w32 = torch.randn(n, k, device="cuda") / math.sqrt(k)
            qa, sa = quantize_fp8(a32, ba); qw, sw = quantize_fp8(w32, bw)
            args = (qa, qw.T, sa, sw.T if sw.dim() == 2 else sw)
            ref = dequantize(qa, sa, ba).double() @ dequantize(qw, sw, bw).double().T
            res = {}
            for name, fn in (("ours", lambda: gemm_ladder.scaled_mm(*args)),
                             ("ours32", lambda: gemm_ladder.scaled_mm(*args, out_dtype=torch.float32)),
                             ("torch", lambda: torch._scaled_mm(*args, out_dtype=torch.bfloat16)),
                             ("torch32", lambda: torch._scaled_mm(*args, out_dtype=torch.float32))):
                try:
                    out = fn(); torch.cuda.synchronize(); res[name] = f"{rel(out, ref):.2e}"
                    if name == "ours": res["ours_zero_frac"] = f"{(out == 0).float().mean().item():.3f}"
                except Exception as e:  # noqa: BLE001
                    res[name] = f"{type(e).__name__}: {str(e)[:80]}"
            print(f"FP8CHECK {m}x{n}x{k} {mode}: {res}", flush=True)
            del a32, w32, qa, qw, ref; torch.cuda.empty_cache()
