"""The benchmark that holds level 9's speed targets against cuBLAS (issue 4).

    python bench/l9_targets.py [--passes 5] [--dtype bf16] [-o OUT.json]

Targets: at least 1.05x cuBLAS (torch.matmul) at 4096^3 and 8192^3, and a geometric mean of at
least 1.0x over the ``llm`` shape set; bf16, random normal data.

Method: per shape, fresh random operands; ``--passes`` passes, each timing cuBLAS and level 9
interleaved in 4 rounds (gates.performance.time_fns: L2 flushed before every call, the host's
launch latency hidden, median of the calls), the order of the two alternating between passes. The
ratio of a pass is cuBLAS's median time over level 9's; the table gives the median, minimum and
maximum over passes, so the spread between passes (the GPU's clock and power state) is on the page
rather than averaged away. Level 9's output is checked against float64 on 256 rows first.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

from rich.console import Console
from rich.table import Table
from suite import add_output_argument, require_gpu, save
from variants import check_targets

from gemm_ladder.contract import DTYPES, cublas
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS
from gemm_ladder.shapes import SHAPE_SETS

TARGET_CUBED, TARGET_LLM_GEOMEAN = 1.05, 1.0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    l9 = LEVELS[9]
    shapes = [("square", (4096, 4096, 4096)), ("square", (8192, 8192, 8192))]
    shapes += [("llm", s) for s in SHAPE_SETS["llm"]]
    rows = []
    for set_name, (m, n, k) in shapes:
        a, b = random_operands(m, n, k, args.dtype, "cuda", seed=m * 7 + n * 3 + k)
        _, errors, failures = check_targets({"L9": l9}, a, b)
        if failures:
            raise RuntimeError(f"level 9 failed on {m}x{n}x{k}: {failures['L9']}")
        err = errors["L9"]
        ratios, tfl, tfc = [], [], []
        for i in range(args.passes):
            order = {"L9": l9, "cuBLAS": cublas} if i % 2 else {"cuBLAS": cublas, "L9": l9}
            t = time_fns(order, a, b, budget_s=0.3, rounds=4, warmup=5)
            ratios.append(t["cuBLAS"].median_ms / t["L9"].median_ms)
            tfl.append(2 * m * n * k / (t["L9"].median_ms * 1e-3) / 1e12)
            tfc.append(2 * m * n * k / (t["cuBLAS"].median_ms * 1e-3) / 1e12)
        rows.append({"set": set_name, "m": m, "n": n, "k": k, "dtype": args.dtype, "rel_err_256_rows": err,
                     "vs_cublas_per_pass": ratios, "l9_tflops_per_pass": tfl, "cublas_tflops_per_pass": tfc,
                     "vs_cublas_median": statistics.median(ratios), "vs_cublas_min": min(ratios),
                     "vs_cublas_max": max(ratios), "l9_tflops_median": statistics.median(tfl),
                     "cublas_tflops_median": statistics.median(tfc)})
    llm = [r["vs_cublas_median"] for r in rows if r["set"] == "llm"]
    geomean = math.exp(sum(map(math.log, llm)) / len(llm))
    verdicts = {f"{r['m']}^3 >= {TARGET_CUBED}x": r["vs_cublas_median"] >= TARGET_CUBED
                for r in rows if r["set"] == "square"}
    verdicts[f"llm geomean >= {TARGET_LLM_GEOMEAN}x"] = geomean >= TARGET_LLM_GEOMEAN
    table = Table(title=f"level 9 vs cuBLAS, {args.dtype}, {args.passes} passes")
    for col in ("set", "M x N x K", "L9 TFLOP/s", "cuBLAS TFLOP/s", "ratio median", "min", "max"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["set"], f"{r['m']}x{r['n']}x{r['k']}", f"{r['l9_tflops_median']:.0f}",
                      f"{r['cublas_tflops_median']:.0f}", f"{r['vs_cublas_median']:.3f}", f"{r['vs_cublas_min']:.3f}",
                      f"{r['vs_cublas_max']:.3f}")
    console = Console(width=140)
    console.print(table)
    console.print(f"llm geomean of median ratios: {geomean:.3f}")
    for what, ok in verdicts.items():
        console.print(f"{'met' if ok else 'NOT met'}: {what}")
    save({"rows": rows, "llm_geomean": geomean, "targets": verdicts}, f"l9_targets_{args.dtype}", args.output)
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
