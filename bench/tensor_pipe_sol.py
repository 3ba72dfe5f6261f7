"""The math alone (SOL), against cuBLAS and level 9 at 4096^3 and 8192^3, in one run.

    python bench/tensor_pipe_sol.py [--sizes 4096,8192] [--passes 3] [--set main|wait] [-o OUT.json]

``SOL`` is bench/kernels/tensor_pipe_sol.cu: level 9's launch with nothing but the math left, the
problem's FLOPs shared evenly over every CTA (no last partial wave), operands already in shared
memory (no loads after the first stages), no epilogue. Its "TFLOP/s" are the problem's 2 M N K over
its time: how fast the math alone runs on this GPU, at the clock the GPU grants work that moves no
data. That clock is higher than a real GEMM's (Nsight Compute: 1.70 against 1.57 GHz at 4096^3), and
per cycle its loop is no faster than level 9's main loop (bench/l9_timeline.py), so it is a
reference point, not a bound a data-moving kernel could reach.

With ``--set wait``, ``SOL no wait`` never waits on its wgmma inside the loop (only at the end):
whether the loop's wait_group 1, copied from level 9, slows it (at 4096^3 it did not: 817 against
825 TFLOP/s; at 8192^3, power-limited, 878 against 859, within that size's run-to-run spread).

``L9 deferred`` is level 9 with every panel of a tile's epilogue stored during the next tile's K
iterations (none right at the tile boundary, where the tensor pipe waits): one more lever measured
beside it.

SOL never writes its output, so its error column shows whatever memory the allocator handed it.

Each target is timed alone in its own window (gates.performance.time_fns: L2 flushed, launch latency
hidden) so nvidia-smi's SM clock and power samples (every 100 ms) can be told apart by target (the
runs at 07321ef and cccce5b cut the samples' timestamps to whole seconds and looked back one second,
so in their JSONs neighbouring targets share samples); the target order
rotates from pass to pass and each ratio is the median over passes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from suite import add_output_argument, require_gpu, save
from variants import check_targets, with_defines, with_edit, with_source
from wave_quantization import Sampler

from gemm_ladder.contract import cublas
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS

SOL_SOURCE = Path(__file__).resolve().parent / "kernels" / "tensor_pipe_sol.cu"


def _all_panels_deferred(src: str) -> str:
    line = "constexpr int kEarlyPanels = GL_C_RING < GL_C_PANELS ? GL_C_RING : GL_C_PANELS;"
    assert line in src, "level 9's kEarlyPanels changed; update this variant"
    return src.replace(line, "constexpr int kEarlyPanels = 0;", 1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--set", default="main", choices=["main", "wait"],
                   help="main: cuBLAS, level 9, level 9 deferred, SOL; wait: cuBLAS, SOL, SOL without waits in its loop")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    targets = {"cuBLAS": cublas, "L9": LEVELS[9],
               "L9 deferred": with_edit(LEVELS[9], "l9_all_panels_deferred", _all_panels_deferred),
               "SOL": with_source(LEVELS[9], SOL_SOURCE)}
    if args.set == "wait":  # whether the loop's wait_group 1 slows SOL
        targets = {"cuBLAS": cublas, "SOL": targets["SOL"],
                   "SOL no wait": with_defines(targets["SOL"], {"GL_SOL_PENDING": -1})}
    sampler = Sampler()
    rows, windows = [], []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            a, b = random_operands(size, size, size, "bf16", "cuda", seed=size)
            live, errors, failures = check_targets(targets, a, b)
            for name, error in failures.items():
                rows.append({"size": size, "name": name, "error": error})
            names = list(live)
            for i in range(args.passes):
                for name in names[i % len(names):] + names[:i % len(names)]:
                    t0 = time.time()
                    t = time_fns({name: live[name]}, a, b, budget_s=0.4, warmup=5)[name]
                    windows.append({"size": size, "pass": i, "name": name, "median_ms": t.median_ms,
                                    "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "repeats": t.repeats,
                                    "tflops": 2 * size**3 / (t.median_ms * 1e-3) / 1e12, "window": (t0, time.time()),
                                    "rel_err_256_rows": errors[name]})
    finally:
        sampler.stop()
    for w in windows:
        w.update(sampler.window(*w.pop("window")))
    for size in sorted({w["size"] for w in windows}):
        cu = {w["pass"]: w["median_ms"] for w in windows if w["size"] == size and w["name"] == "cuBLAS"}
        for name in dict.fromkeys(w["name"] for w in windows if w["size"] == size):
            mine = [w for w in windows if w["size"] == size and w["name"] == name]
            rows.append({"size": size, "name": name,
                         "tflops": statistics.median(w["tflops"] for w in mine),
                         "vs_cublas": statistics.median(cu[w["pass"]] / w["median_ms"] for w in mine),
                         "vs_cublas_per_pass": [cu[w["pass"]] / w["median_ms"] for w in mine],
                         "sm_mhz": statistics.median(w["sm_mhz"] for w in mine if w["sm_mhz"] is not None)
                         if any(w["sm_mhz"] is not None for w in mine) else None,
                         "watts": statistics.median(w["watts"] for w in mine if w["watts"] is not None)
                         if any(w["watts"] is not None for w in mine) else None,
                         "rel_err_256_rows": mine[0]["rel_err_256_rows"]})
    table = Table(title="the math alone (SOL) against cuBLAS and level 9 (bf16)")
    for col in ("size", "target", "TFLOP/s", "vs cuBLAS", "per pass", "SM MHz", "W", "rel err"):
        table.add_column(col, justify="right")
    for r in rows:
        if "error" in r:
            table.add_row(str(r["size"]), r["name"], "failed", r["error"][:60], "", "", "", "")
            continue
        table.add_row(str(r["size"]), r["name"], f"{r['tflops']:.0f}", f"{r['vs_cublas']:.3f}",
                      " ".join(f"{x:.3f}" for x in r["vs_cublas_per_pass"]), str(r["sm_mhz"]), str(r["watts"]),
                      f"{r['rel_err_256_rows']:.1e}")
    Console(width=160).print(table)
    save({"rows": rows, "windows": windows}, "tensor_pipe_sol" if args.set == "main" else f"tensor_pipe_sol_{args.set}", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
