"""Sweep PIPE_DEPTH of level 5 (and, with --level, any TMA level) at 4096^3 and 8192^3, bf16.

    python bench/pipe_depth_sweep.py [--level 5] [--out DIR]

Each depth is compiled from the designer's plan (depths that do not fit are refused by it and
reported), checked against float64 on a small shape, and timed beside cuBLAS in the same run with
L2 flushed before each repeat. Writes pipe_depth_sweep.json under --out.
"""

import argparse
import json
import os
import sys

import torch

from gemm_ladder.contract import cublas
from gemm_ladder.gates.climb import run_meta
from gemm_ladder.design.problem import PlanRefused
from triton.testing import do_bench  # flushes L2 between repeats
from gemm_ladder.levels import LEVELS
from gemm_ladder.shapes import gemm_flops


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--level", type=int, default=5)
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    base = LEVELS[args.level]
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        ref_ms = do_bench(lambda: cublas(a, b), warmup=50, rep=300, return_mode="median")
        rows.append({"size": size, "stages": None, "name": "cuBLAS", "median_ms": ref_ms,
                     "tflops": gemm_flops(size, size, size) / ref_ms / 1e9})
        for stages in range(2, 9):
            level = base.variant(stages=stages)
            try:
                level.defines("bf16")
            except PlanRefused as exc:
                rows.append({"size": size, "stages": stages, "refused": str(exc)})
                break
            c = level(a, b)
            err = ((c.double() - a.double() @ b.double().T).norm() / (a.double() @ b.double().T).norm()).item() if size <= 4096 else None
            t_ms = do_bench(lambda: level(a, b), warmup=50, rep=300, return_mode="median")
            rows.append({"size": size, "stages": stages, "median_ms": t_ms,
                         "tflops": gemm_flops(size, size, size) / t_ms / 1e9, "vs_cublas": ref_ms / t_ms,
                         "rel_err": err, "ctas_per_sm": level.loaded("bf16", a.device).max_active_ctas_per_sm()})
    for r in rows:
        print(json.dumps(r))
    with open(os.path.join(args.out, f"pipe_depth_sweep_L{args.level}.json"), "w") as f:
        json.dump({"meta": run_meta(" ".join(sys.argv)), "level": args.level, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
