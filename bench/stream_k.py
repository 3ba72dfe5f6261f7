"""Level 9 with and without its stream-K tail: correctness of the fixup, then speed against cuBLAS.

    python bench/stream_k.py [--passes 3] [--skip-timing] [-o OUT.json]

Correctness (every shape, bf16): fresh random operands; the whole output (the tail tiles are the
last in the grouped order, so a check of the first rows would miss them) against the float64
reference, the output poisoned with NaN before each of three launches; the three outputs must be
bitwise equal (the fixup adds partials in K order whoever arrives last, and the counters must
come back to zero between launches). The shapes give tails of 1 to 11 contributors per tile, K of
one tile, and a unit count below the cluster count (no tail).

Speed: level 9 as shipped ("L9": the tail split where design.stream_k.plan_tail says it pays),
the same kernel splitting every tail ("L9 split"), and computing every tail whole ("L9 whole"),
and cuBLAS, interleaved (gates.performance.time_fns), ``--passes`` passes. Correctness is checked
on "L9 split", which exercises the fixup on every shape that has a tail.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table

from suite import add_output_argument, require_gpu, save

from gemm_ladder.contract import cublas
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS
from gemm_ladder.shapes import SHAPE_SETS

CHECK_SHAPES = [(4096, 4096, 4096), (2304, 2048, 4096), (2304, 2048, 64), (2304, 2048, 200), (2304, 2048, 1000),
                (4352, 4096, 520), (4096, 1024, 4096), (8192, 8192, 8192), (1000, 3000, 2048)]
TIME_SHAPES = [("square", (4096, 4096, 4096)), ("square", (8192, 8192, 8192))] + [("llm", s) for s in SHAPE_SETS["llm"]]


def check(level, m: int, n: int, k: int) -> dict:
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=m * 31 + n * 7 + k)
    ref = a.double() @ b.double().T
    outs = []
    for _ in range(3):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        level.launch(a, b, c)
        torch.cuda.synchronize()
        outs.append(c)
    ref_norm = ref.norm().item()
    err = ((outs[0].double() - ref).norm() / ref_norm).item()
    cublas_err = ((cublas(a, b).double() - ref).norm() / ref_norm).item()
    tail = level.stream_k_tail(m, n, k, "bf16", a.device)
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    finite = bool(torch.isfinite(outs[0]).all())
    ok = finite and same and err <= 2 * cublas_err + 1e-6
    return {"m": m, "n": n, "k": k, "tail": tail.to_json(), "rel_err": err, "cublas_rel_err": cublas_err,
            "bitwise_repeatable": same, "finite": finite, "ok": ok}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--skip-timing", action="store_true")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    l9 = LEVELS[9]
    whole = l9.variant(stream_k_min_idle=2.0)  # never splits: every unit computed whole
    split = l9.variant(stream_k_min_idle=0.0)  # splits every tail it may
    console = Console(width=150)
    checks = [check(split, *s) for s in CHECK_SHAPES]
    t = Table(title="level 9 stream-K tail: correctness (bf16, whole output vs float64)")
    for col in ("M x N x K", "tail units", "max contributors", "rel err", "cuBLAS rel err", "repeatable", "ok"):
        t.add_column(col, justify="right")
    for r in checks:
        t.add_row(f"{r['m']}x{r['n']}x{r['k']}", str(r["tail"]["tail_units"]), str(r["tail"]["max_contributors"]),
                  f"{r['rel_err']:.3e}", f"{r['cublas_rel_err']:.3e}", str(r["bitwise_repeatable"]), str(r["ok"]))
    console.print(t)
    rows = []
    if not args.skip_timing:
        for set_name, (m, n, k) in TIME_SHAPES:
            a, b = random_operands(m, n, k, "bf16", "cuda", seed=m + 3 * n + 7 * k)
            fns = {"L9": l9, "L9 split": split, "L9 whole": whole, "cuBLAS": cublas}
            per = {nm: [] for nm in fns}
            names = list(per)
            for i in range(args.passes):
                order = names[i % len(names):] + names[:i % len(names)]
                res = time_fns({nm: fns[nm] for nm in order}, a, b, budget_s=0.3, rounds=4, warmup=5)
                for nm in names:
                    per[nm].append(2 * m * n * k / (res[nm].median_ms * 1e-3) / 1e12)
            med = {nm: statistics.median(v) for nm, v in per.items()}
            tail = split.stream_k_tail(m, n, k, "bf16", a.device)
            rows.append({"set": set_name, "m": m, "n": n, "k": k, "tail": tail.to_json(),
                         "shipped_tail_units": l9.stream_k_tail(m, n, k, "bf16", a.device).tail_units,
                         "tflops_per_pass": per,
                         "tflops_median": med, "vs_cublas": med["L9"] / med["cuBLAS"],
                         "split_vs_cublas": med["L9 split"] / med["cuBLAS"],
                         "whole_vs_cublas": med["L9 whole"] / med["cuBLAS"],
                         "split_gain": med["L9 split"] / med["L9 whole"]})
        t = Table(title=f"level 9 with / without the stream-K tail vs cuBLAS (bf16, {args.passes} passes, medians)")
        for col in ("set", "M x N x K", "tail units", "L9", "L9 split", "L9 whole", "cuBLAS", "L9/cuBLAS",
                    "split/whole"):
            t.add_column(col, justify="right")
        for r in rows:
            md = r["tflops_median"]
            t.add_row(r["set"], f"{r['m']}x{r['n']}x{r['k']}", str(r["tail"]["tail_units"]), f"{md['L9']:.0f}",
                      f"{md['L9 split']:.0f}", f"{md['L9 whole']:.0f}", f"{md['cuBLAS']:.0f}", f"{r['vs_cublas']:.3f}",
                      f"{r['split_gain']:.3f}")
        console.print(t)
    save({"checks": checks, "timing": rows}, "stream_k_check" if args.skip_timing else "stream_k", args.output)
    return 0 if all(r["ok"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
