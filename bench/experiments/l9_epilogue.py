"""Level 9's epilogue and ring depth, and how the timing method moves the ratios (one-off experiment).

    python bench/experiments/l9_epilogue.py [--old-source FILE.cu] [--ring-source FILE.cu] [--sizes 4096,8192]
                                [--methods both|hidden] [--rounds 1] [-o OUT.json]

In one run, on the same operands, L2 flushed before every call, median of the timed calls:

* cuBLAS (torch.matmul), levels 7 and 8, and level 9 in these forms:
  - ``L9 whole-tile staging, S=3``: the kernel as it was at commit fb927b1 (one 64 KiB staging
    buffer for both consumers, one store issuer; only 3 stages fit), from ``--old-source``;
  - ``L9 panel ring, S=3`` and ``S=4``: per-consumer rings of two 8 KiB panel buffers (c_ring=2),
    which leave room for the fourth stage; S=3 isolates the epilogue change from the extra stage.
    With ``--ring-source`` (the kernel at commit 416b8e4) these are that kernel, which stores every
    panel at the end of its tile; otherwise they are the shipped kernel;
  - ``L9 ... group_m=G``: the shipped form with another grouped-order height (tile_scheduler.cuh).
* with ``--methods both``, each timed twice: with ``hide_launch`` off (the events also see the host's
  launch latency when the GPU idles waiting for it) and on (a spin kernel keeps the GPU busy while
  the host enqueues); ``host_ms`` is the host's enqueue time per call. The whole sequence runs
  ``--passes`` times so that a drift of the clocks shows as a difference between passes; with
  ``--rounds`` > 1 the callables are timed interleaved (gates.performance.time_fns).

Each variant's output is checked against a float64 reference on its first 256 rows first.

One-off (bench/README.md): the record of how bench/results/2026-11-29_l9_epilogue.json and
2026-11-29_l9_overlap.json were measured, against level 9's sources at fb927b1 and 416b8e4; not
maintained. It times with hide_launch off on purpose (to compare timing methods), which the
maintained scripts never do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, variants.py
from suite import add_output_argument, require_gpu, save  # noqa: E402
from variants import check_targets, with_defines, with_source  # noqa: E402

from gemm_ladder.contract import cublas
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--old-source", type=Path, help="level 9's kernel file before the panel ring (git show fb927b1:...)")
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--ring-source", type=Path, help="level 9's kernel file with the panel ring, before the overlap (416b8e4)")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--methods", default="both", choices=["both", "hidden"])
    p.add_argument("--group-m", default="4,16", help="grouped-order heights to try besides the default (empty: none)")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)

    l9 = LEVELS[9]
    targets = {"cuBLAS": cublas, "L7": LEVELS[7], "L8": LEVELS[8]}
    if args.old_source:
        targets["L9 whole-tile staging, S=3"] = with_source(l9, args.old_source, stages=3, c_ring=0)
    if args.ring_source:
        targets["L9 panel ring, S=4, end-of-tile stores"] = with_source(l9, args.ring_source)
        targets["L9 panel ring, S=4, overlapped stores (shipped)"] = l9
    else:
        targets["L9 panel ring, S=3"] = l9.variant(stages=3)
        targets["L9 panel ring, S=4 (shipped)"] = l9
    for g in (int(x) for x in args.group_m.split(",") if x):
        targets[f"L9 panel ring, S=4, group_m={g}"] = with_defines(l9, {"GL_GROUP_M": g})

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        a, b = random_operands(size, size, size, "bf16", "cuda", seed=size)
        live, ok, failures = check_targets(targets, a, b)
        for name, error in failures.items():
            rows.append({"size": size, "name": name, "error": error})
            print(json.dumps(rows[-1]), flush=True)
        for pass_no in range(args.passes):
            for hide in ((False, True) if args.methods == "both" else (True,)):
                timings = time_fns(live, a, b, budget_s=0.4, rounds=args.rounds, warmup=5, hide_launch=hide)
                for name, t in timings.items():
                    rows.append({"size": size, "pass": pass_no, "hide_launch": hide, "rounds": args.rounds, "name": name,
                                 "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                                 "host_ms": t.host_ms, "repeats": t.repeats,
                                 "tflops": 2 * size**3 / (t.median_ms * 1e-3) / 1e12, "rel_err_256_rows": ok[name]})
                    print(json.dumps(rows[-1]), flush=True)
    for r in rows:  # ratio to cuBLAS of the same size, pass and method
        base = next((x for x in rows if x.get("name") == "cuBLAS" and x.get("size") == r["size"]
                     and x.get("pass") == r.get("pass") and x.get("hide_launch") == r.get("hide_launch")), None)
        if base and "median_ms" in r:
            r["vs_cublas"] = base["median_ms"] / r["median_ms"]
    save({"rows": rows}, "l9_epilogue", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
