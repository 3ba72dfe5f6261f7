"""Which ring depth (PIPE_DEPTH, stages) is fastest for a TMA level, at 4096^3 and 8192^3, bf16.

    python bench/pipe_depth_sweep.py [--level 5] [--sizes 4096,8192] [--rounds 4] [-o OUT.json]

Each depth from 2 up is compiled from the designer's plan until the plan refuses one (shared memory
no longer fits; the refusal is recorded), its output checked against float64 on the first 256 rows,
and every depth that runs is timed with cuBLAS interleaved in the same run
(gates.performance.time_fns: L2 flushed before every call, the host's launch latency hidden,
``--rounds`` rounds). Each row also records the CTAs an SM holds at that depth, which is what
usually decides the sweep. Level 5's shipped depth (levels/__init__.py) came from this sweep
(docs/ladder.md).
"""

from __future__ import annotations

import argparse
import json
import sys

from suite import add_output_argument, require_gpu, save
from variants import check_targets

from gemm_ladder.contract import cublas
from gemm_ladder.design.problem import PlanRefused
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS
from gemm_ladder.levels.tma import TmaLevel
from gemm_ladder.shapes import gemm_flops

MAX_STAGES = 8


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", type=int, default=5, choices=[n for n, lv in sorted(LEVELS.items()) if isinstance(lv, TmaLevel)],
                   help="a TMA level (default: 5)")
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--rounds", type=int, default=4)
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    base = LEVELS[args.level]
    depths, refused = {}, []
    for stages in range(2, MAX_STAGES + 1):
        level = base.variant(stages=stages)
        try:
            level.defines("bf16")
        except PlanRefused as exc:
            refused.append({"stages": stages, "refused": str(exc)})
            break
        depths[f"S={stages}"] = level
    rows = list(refused)
    for size in (int(s) for s in args.sizes.split(",")):
        a, b = random_operands(size, size, size, "bf16", "cuda", seed=size)
        live, errors, failures = check_targets({"cuBLAS": cublas, **depths}, a, b)
        rows += [{"size": size, "name": name, "error": error} for name, error in failures.items()]
        timings = time_fns(live, a, b, budget_s=0.4, rounds=args.rounds, warmup=5)
        for name, t in timings.items():
            level = depths.get(name)
            rows.append({"size": size, "name": name, "stages": level.stages if level else None,
                         "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "repeats": t.repeats,
                         "rounds": args.rounds, "tflops": gemm_flops(size, size, size) / (t.median_ms * 1e-3) / 1e12,
                         "vs_cublas": timings["cuBLAS"].median_ms / t.median_ms, "rel_err_256_rows": errors[name],
                         "ctas_per_sm": level.loaded("bf16", a.device).max_active_ctas_per_sm() if level else None})
    for r in rows:
        print(json.dumps(r), flush=True)
    save({"level": args.level, "rows": rows}, f"pipe_depth_sweep_L{args.level}", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
