"""Where level 9 loses time that does not grow with K (development tool).

    python bench/fixed_costs.py [-o OUT.json]

For M = N in (4096, 8192) and K in (1024 .. 8192), cuBLAS and level 9 are timed interleaved
(gates.performance.time_fns); a least-squares line t = a + b K per (M, N) gives the fixed cost a
(kernel start, pipeline fill and drain, tile boundaries, wave tail) and the cost per unit of K, b.
Comparing a at two tile counts separates a per-kernel cost from a per-tile one.
"""

from __future__ import annotations

import argparse
import sys

import torch

from suite import add_output_argument, require_gpu, save

from gemm_ladder.contract import cublas
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS

KS = (1024, 2048, 4096, 8192)


def fit(xs, ys):
    """Least-squares (intercept, slope)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> int:
    p = argparse.ArgumentParser()
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    rows, fits = [], []
    for mn in (4096, 8192):
        times = {"cuBLAS": [], "L9": []}
        for k in KS:
            a = torch.randn(mn, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(mn, k, device="cuda", dtype=torch.bfloat16)
            t = time_fns({"cuBLAS": cublas, "L9": LEVELS[9]}, a, b, budget_s=0.3, rounds=4, warmup=5)
            for name in times:
                times[name].append(t[name].median_ms * 1e3)
                rows.append({"m": mn, "n": mn, "k": k, "name": name, "median_us": t[name].median_ms * 1e3,
                             "tflops": 2 * mn * mn * k / (t[name].median_ms * 1e-3) / 1e12})
                print(rows[-1], flush=True)
        for name, ys in times.items():
            a0, b0 = fit(KS, ys)
            fits.append({"m": mn, "n": mn, "name": name, "fixed_us": a0, "us_per_k": b0})
            print(fits[-1], flush=True)
    save({"rows": rows, "fits": fits}, "fixed_costs", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
