"""Does ``gemm_ladder.nn.replace_gated_mlp`` make a Llama MLP faster at inference, and at which rows?

    python bench/experiments/gated_mlp.py [--rows 1,16,64,128,256,512,1000,2048,4096] [--reps 30] [-o OUT.json]

One transformers ``LlamaMLP`` at Llama-3-8B's dimensions (hidden 4096, intermediate 14336), bf16, random
``nn.Parameter`` weights, under ``torch.no_grad()``, three sides on the same weights: torch's module (cuBLAS and two
pointwise kernels), a copy after ``replace_linear`` (three gemm-ladder GEMMs, torch's silu and product), and a copy
after ``replace_linear`` and ``replace_gated_mlp`` (one ``swiglu`` launch, then the down projection, at every M: the
run sets ``gated_mlp.MIN_ROWS_OVER_GEMM_LADDER``, the threshold it measures, to 0). Each call gets
the next of 16 fresh activations (x (M, 4096), a new address every call). Wall time per call between two CUDA
synchronisations (host included), the sides interleaved over ``--reps`` rounds after a warm-up, medians;
``rel_err``: each gemm-ladder side's output against float64 of the same weights, beside torch's own.

Result: ``DATE_gated_mlp_COMMIT.json`` with ``rows: [{M, torch_ms, linear_ms, gated_ms, gated_vs_torch,
gated_vs_linear, rel_err_torch, rel_err_linear, rel_err_gated}]``. Exit 2 without a GPU or transformers >= 5; 1 when
a gemm-ladder side's error exceeds twice torch's (and 1e-2).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from suite import add_output_argument, require_gpu, require_transformers, save  # noqa: E402

HIDDEN, INTER = 4096, 14336
ACTIVATIONS = 16


def reference(mlp, x):
    xd = x.double()
    g = F.linear(xd, mlp.gate_proj.weight.double())
    u = F.linear(xd, mlp.up_proj.weight.double())
    return F.linear(F.silu(g) * u, mlp.down_proj.weight.double())


def rel(a, b) -> float:
    return float((a.double() - b).norm() / b.norm())


def timed(fns, xs, warmup: int, reps: int) -> list[float]:
    """Median wall ms per call of each fn, interleaved, a new activation every call."""
    it = [0]

    def call(fn):
        it[0] = (it[0] + 1) % len(xs)
        fn(xs[it[0]])

    for _ in range(warmup):
        for fn in fns:
            call(fn)
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    for r in range(reps):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = time.perf_counter()
            call(fns[i])
            torch.cuda.synchronize()
            times[i].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1,16,64,128,256,512,1000,2048,4096")
    p.add_argument("--reps", type=int, default=30)
    add_output_argument(p)
    args = p.parse_args()
    try:
        rows = [int(v) for v in args.rows.split(",")]
        if not rows or min(rows) < 1 or args.reps < 1:
            raise ValueError
    except ValueError:
        print(f"gated_mlp.py: --rows {args.rows!r} --reps {args.reps}: positive integers", file=sys.stderr)
        return 2
    require_gpu(__file__)
    require_transformers(__file__)
    import gemm_ladder
    import gemm_ladder.gated_mlp
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER)
    with torch.device("cuda"):
        ref = LlamaMLP(config).to(torch.bfloat16).eval()
    linear = gemm_ladder.nn.replace_linear(copy.deepcopy(ref))
    gated = gemm_ladder.nn.replace_gated_mlp(gemm_ladder.nn.replace_linear(copy.deepcopy(ref)))
    assert isinstance(gated, gemm_ladder.nn.GatedMLP)
    gemm_ladder.gated_mlp.MIN_ROWS_OVER_GEMM_LADDER = 0  # swiglu at every M: the rule this run measures
    out, worst = [], 0
    with torch.no_grad():
        for m in rows:
            xs = [torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16) for _ in range(ACTIVATIONS)]
            assert gated.path(xs[0]) == "swiglu", gated.path(xs[0])
            want = reference(ref, xs[0])
            errs = [rel(side(xs[0]), want) for side in (ref, linear, gated)]
            t = timed([ref, linear, gated], xs, warmup=5, reps=args.reps)
            row = {"M": m, "torch_ms": t[0], "linear_ms": t[1], "gated_ms": t[2], "gated_vs_torch": t[0] / t[2],
                   "gated_vs_linear": t[1] / t[2], "rel_err_torch": errs[0], "rel_err_linear": errs[1],
                   "rel_err_gated": errs[2]}
            bad = max(errs[1:]) > max(2 * errs[0], 1e-2)
            worst |= bad
            out.append(row)
            print(f"M {m:5d}  torch {t[0]:7.3f} ms  linear {t[1]:7.3f}  gated {t[2]:7.3f}  "
                  f"gated x{row['gated_vs_torch']:.3f} torch, x{row['gated_vs_linear']:.3f} linear  "
                  f"err {errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e}{'  TOO FAR' if bad else ''}", flush=True)
    save({"rows": out, "settings": {"hidden": HIDDEN, "intermediate": INTER, "reps": args.reps}}, "gated_mlp",
         args.output)
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
