"""Levels beside one-knob variants of them, timed interleaved in one run (development tool).

    python bench/ladder_variants.py [--sizes 4096,8192] [--rounds 4] [-o OUT.json]

Each variant changes one thing of a level, to test a reason for its speed:

* ``L5 S=2``: level 5 with level 6's ring depth and occupancy (2 stages, 3 CTAs/SM instead of 2):
  what persistence alone costs, set against ``L6``;
* ``L6 row order``: level 6 walking tiles row by row (group height 1, the order of level 5's grid)
  instead of grouped: whether the tile order explains level 6's gap;
* ``L8 no multicast``: each CTA loads the whole B tile itself, the cluster kept: what multicast buys;
* ``L9 cluster 4``: B split over 4 CTAs (a quarter each), less L2 traffic per SM but clusters of 4
  must fit a GPC;
* with ``--set order``: levels 6 and 9 with other grouped-order heights (tile_scheduler.cuh);
* with ``--set bounds``: ``L9 no epilogue``, level 9 with its panel stores compiled out (the output is
  not written, so its error is meaningless): how much time hiding the epilogue could still win.

Timing is gates.performance.time_fns (L2 flushed, launch latency hidden, interleaved rounds); each
output's first 256 rows are checked against float64 first.
"""

from __future__ import annotations

import argparse
import json
import sys

from suite import add_output_argument, require_gpu, save
from variants import check_targets, function_source, no_multicast_edit, rename_calls, with_defines, with_edit

from gemm_ladder.contract import cublas
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import KERNEL_ROOT

def _no_stores(src: str) -> str:
    """Level 9 with store_panel returning before it stages anything, on a condition the compiler cannot
    decide (a column below 2^30): the packed outputs stay live, so the wgmma that make them stay whole.
    (Returning unconditionally let ptxas shrink the dead accumulators' HGMMA.64x256x16 to a 64x8 one.)
    store_panel lives in panel_ring.cuh: the edit puts a copy of it, with the return, in level 9's source."""
    header = (KERNEL_ROOT / "include" / "gemm_ladder" / "panel_ring.cuh").read_text()
    copy = function_source(header, "store_panel")
    head = "int z = -1) {"
    assert head in copy and "store_panel(" in src, "level 9's store_panel changed; update this variant"
    copy = copy.replace(head, head + "\n  if (n0 < (1 << 30)) return;", 1)
    src = src.replace("using namespace gl;", "using namespace gl;\n" + copy, 1)
    return rename_calls(src, ("store_panel",), "_no_stores")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--set", default="reasons", choices=["reasons", "order", "bounds"],
                   help="reasons: the variants above; order: tile-order heights of levels 6 and 9; "
                        "bounds: level 9 without its epilogue")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    targets = {
        "cuBLAS": cublas,
        "L5": LEVELS[5], "L5 S=2": LEVELS[5].variant(stages=2),
        "L6": LEVELS[6], "L6 row order": with_defines(LEVELS[6], {"GL_GROUP_M": 1}),
        "L7": LEVELS[7], "L8": LEVELS[8], "L8 no multicast": with_edit(LEVELS[8], "l8_no_multicast", no_multicast_edit),
        "L9": LEVELS[9], "L9 cluster 4": LEVELS[9].variant(cluster=4),
    }
    if args.set == "order":  # the tile order of the persistent levels: group heights 1 (row by row), 2, 8 (shipped), 32
        targets = {"cuBLAS": cublas, "L6": LEVELS[6], "L6 row order": targets["L6 row order"],
                   "L9": LEVELS[9], **{f"L9 group_m={g}": with_defines(LEVELS[9], {"GL_GROUP_M": g}) for g in (1, 2, 32)}}
    if args.set == "bounds":
        targets = {"cuBLAS": cublas, "L9": LEVELS[9], "L9 no epilogue": with_edit(LEVELS[9], "l9_no_epilogue", _no_stores)}
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        a, b = random_operands(size, size, size, "bf16", "cuda", seed=size)
        live, err, failures = check_targets(targets, a, b)
        rows += [{"size": size, "name": name, "error": error} for name, error in failures.items()]
        timings = time_fns(live, a, b, budget_s=0.4, rounds=args.rounds, warmup=5)
        for name, t in timings.items():
            rows.append({"size": size, "name": name, "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                         "host_ms": t.host_ms, "repeats": t.repeats, "rounds": args.rounds,
                         "tflops": 2 * size**3 / (t.median_ms * 1e-3) / 1e12,
                         "vs_cublas": timings["cuBLAS"].median_ms / t.median_ms, "rel_err_256_rows": err[name]})
        for r in rows:
            if r["size"] == size:
                print(json.dumps(r), flush=True)
    save({"rows": rows}, "ladder_variants" if args.set == "reasons" else f"ladder_variants_{args.set}", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
