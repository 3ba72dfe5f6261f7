"""Two CTAs per SM for the 64-row tile (library_gemm(..., ctas_per_sm=2), a measuring build) against one, the
route and cuBLAS on issue 23's mid-M shapes (one-off).

    python bench/experiments/two_ctas_per_sm.py [--shapes NAME,...] [--budget 0.03] [-o OUT.json]
    python bench/experiments/two_ctas_per_sm.py --prebuild     # compile its builds, no GPU

Why: the timeline (docs/where-time-goes.md) found the 64 x 64 tile's K loop at a third of the tensor pipe's
rate behind its one consumer warpgroup, with neither the data feed nor a second wgmma group in flight (release
lag 2) the limit: the wgmma latency of a short group from one consumer. Two CTAs resident per SM put two
consumers' groups from independent tiles on the pipe, with no new schedule: the same kernel, launch bounds of
two CTAs (128 registers a thread), the ring in half the shared memory (6 stages against 13), a persistent grid
of twice the SMs.

Per shape (x (M, K), w (N, K) row-major bf16, fresh random operands): cuBLAS (F.linear), the route
(gemm_ladder.linear), and the 64 x 64 one-CTA-per-cluster build with one and with two CTAs per SM under the split
policies "none" and "tail"; every output NaN-poisoned, computed once and checked against float64 (the gates'
bound and absolute cap), then all timed interleaved (gates.performance.time_fns: L2 flushed before every call,
launch latency hidden, median over 4 rounds). Prints a table; writes the JSON (two_ctas_per_sm). Exit status 1
when an output is wrong.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py
from suite import add_output_argument, require_gpu, save  # noqa: E402

#: (name, M, N, K): the plain rows most below cuBLAS in bench/results/2026-12-06_shapes_real_h200_d726cbf.json
#: (mid M, short K), and two with 64-row routes.
SHAPES = (
    ("vit_l16 attn.qkv", 1576, 3072, 1024), ("vit_l16 mlp.fc1", 1576, 4096, 1024),
    ("vit_l16 attn.proj", 1576, 1024, 1024), ("vit_l16 mlp.fc2", 1576, 1024, 4096),
    ("gpt2 attn.c_attn", 1023, 2304, 768), ("gpt2 mlp.c_proj", 1023, 768, 3072),
    ("bert_large output.dense", 512, 1024, 4096), ("t5_base wo", 2048, 768, 3072), ("t5_base q", 2048, 768, 768),
    ("qwen2.5_7b qkv_proj", 1000, 4608, 3584), ("phi3_mini o_proj", 333, 3072, 3072),
    ("phi3_mini down_proj", 333, 3072, 8192), ("gpt2 mlp.c_proj 8k", 8192, 768, 3072),
)
SPLITS = ("none", "tail")


def builds():
    from gemm_ladder.library.gemm import library_gemm

    return {x: library_gemm("k", "k", 64, cluster=1, bm=64, ctas_per_sm=x) for x in (1, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=None, help="comma list of shape names (default: all)")
    p.add_argument("--budget", type=float, default=0.03, help="seconds of timed calls per callable and round")
    p.add_argument("--prebuild", action="store_true", help="compile the builds, no GPU")
    add_output_argument(p)
    args = p.parse_args(argv)
    names = [s[0] for s in SHAPES]
    want = names if args.shapes is None else [s.strip() for s in args.shapes.split(",")]
    if any(w not in names for w in want):
        print(f"two_ctas_per_sm.py: --shapes {args.shapes!r}: names are {', '.join(names)}", file=sys.stderr)
        return 2
    if args.prebuild:
        for kernel in builds().values():
            kernel.build("bf16")
        return 0
    require_gpu(__file__)
    import torch.nn.functional as F

    import gemm_ladder
    from gemm_ladder.contract import reference
    from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
    from gemm_ladder.gates.performance import time_fns
    from gemm_ladder.library.operand import operand_view

    kernels = builds()
    rows, ok_all = [], True
    for seed, (name, m, n, k) in enumerate(s for s in SHAPES if s[0] in want):
        x, w = random_operands(m, n, k, "bf16", "cuda", seed)
        ref = reference(x, w)
        bound = error_bound(((F.linear(x, w).double() - ref).norm() / ref.norm()).item(), "bf16")
        cap = absolute_cap(x, w, ref.abs().max().item(), "bf16")
        va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
        fns = {"cuBLAS": lambda p_, q_: F.linear(p_, q_), "route": lambda p_, q_: gemm_ladder.linear(p_, q_)}
        row = {"shape": name, "m": m, "n": n, "k": k, "bound": bound, "grid": {}, "errors": {}}
        for x_per_sm, kernel in kernels.items():
            for split in SPLITS:
                label = f"bm64 bn64 c1 x{x_per_sm} {split}"
                c = torch.full((m, n), float("nan"), dtype=x.dtype, device="cuda")
                launch = kernel.bind(va, vb, c, split=split)
                launch()
                torch.cuda.synchronize()
                d = c.double() - ref
                err = (d.norm() / ref.norm()).item()
                right = math.isfinite(err) and err <= bound and d.abs().max().item() <= cap
                row["errors"][label] = err
                ok_all &= right
                if right:
                    fns[label] = lambda p_, q_, launch=launch: launch()
                else:
                    print(f"{name}: {label} WRONG (rel err {err:.3g}, bound {bound:.3g})", flush=True)
            row["grid"][f"x{x_per_sm}"] = kernel.loaded("bf16", x.device).max_active_clusters(x.device)
        t = time_fns(fns, x, w, budget_s=args.budget, rounds=4, warmup=3, max_repeats=200)
        row["us"] = {label: tm.median_ms * 1e3 for label, tm in t.items()}
        cub = row["us"]["cuBLAS"]
        row["vs_cublas"] = {label: cub / us for label, us in row["us"].items()}
        best = {xs: min((us for lb, us in row["us"].items() if f" x{xs} " in lb), default=None) for xs in (1, 2)}
        row["x2_over_x1"] = best[1] / best[2] if best[1] and best[2] else None
        rows.append(row)
        said = ", ".join(f"best x{xs} {us:.1f}" for xs, us in best.items() if us is not None)
        ratio = f"x2 {row['x2_over_x1']:.3f}x x1's speed; " if row["x2_over_x1"] else ""
        print(f"{name} {m}x{n}x{k}: cuBLAS {cub:.1f} us, route {row['us']['route']:.1f}, {said} ({ratio}resident CTAs "
              f"{row['grid']})", flush=True)
    save({"shapes": want, "splits": list(SPLITS), "rows": rows}, "two_ctas_per_sm", args.output)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
