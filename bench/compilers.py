"""Does NVRTC's build of a kernel run as fast as nvcc's? Level 9 built by each compiler from the same
source and flags, timed interleaved with cuBLAS on the same operands.

    python3 bench/compilers.py                         # bf16, 4096^3, 8192^3 and the llm set, 3 passes
    python3 bench/compilers.py --quick                 # 4096^3 and 8192^3, 2 passes

NVRTC's machine code differs from nvcc's by 1-2% integer instructions (64-bit shared-memory pointers:
docs/install.md); this measures whether that costs time. Both builds are checked against float64 on
their first 256 rows before timing (bench/variants.py check_targets), timed with
gates.performance.time_fns (L2 flushed, interleaved, the first callable rotating by pass). Needs a GPU,
nvcc (the toolkit) and NVRTC (the nvidia-cuda-nvrtc wheel). Exit status: 0 measured, 1 a build was
wrong, 2 no GPU or a compiler missing.
"""

from __future__ import annotations

import argparse
import os
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


def built_with(compiler: str, dtype: str, device):
    """Level 9 (a fresh copy: its own caches) built by ``compiler`` and loaded on ``device``."""
    level = LEVELS[9].variant()
    os.environ["GEMM_LADDER_COMPILER"] = compiler
    try:
        level.loaded(dtype, device)
        build = level.build(dtype)
    finally:
        os.environ.pop("GEMM_LADDER_COMPILER", None)
    return level, build


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="4096^3 and 8192^3 only, 2 passes")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    import torch

    from gemm_ladder.runtime.compiler import CompilerNotFoundError, compiler_identity

    os.environ["GEMM_LADDER_AOT"] = "0"
    device = torch.device("cuda")
    try:
        levels, identities = {}, {}
        for compiler in ("nvcc", "nvrtc"):
            levels[compiler], _ = built_with(compiler, args.dtype, device)
            identities[compiler] = compiler_identity(compiler)
    except CompilerNotFoundError as exc:
        print(f"compilers.py: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    passes = 2 if args.quick else args.passes
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)] + ([] if args.quick else list(SHAPE_SETS["llm"]))
    targets = {"nvcc": levels["nvcc"], "nvrtc": levels["nvrtc"], "cuBLAS": cublas}
    rows = []
    for m, n, k in shapes:
        a, b = random_operands(m, n, k, args.dtype, "cuda", seed=m * 7 + n * 3 + k)
        _, errors, failures = check_targets(targets, a, b)
        if failures:
            print(f"compilers.py: {m}x{n}x{k}: {failures}", file=sys.stderr)
            return 1
        ratio, tf = [], {name: [] for name in targets}
        for i in range(passes):
            names = list(targets)[i % 3:] + list(targets)[:i % 3]
            t = time_fns({name: targets[name] for name in names}, a, b, budget_s=0.3, rounds=4, warmup=5)
            ratio.append(t["nvcc"].median_ms / t["nvrtc"].median_ms)
            for name in targets:
                tf[name].append(2 * m * n * k / (t[name].median_ms * 1e-3) / 1e12)
        rows.append({"m": m, "n": n, "k": k, "dtype": args.dtype, "rel_err_256_rows": errors,
                     "nvrtc_speed_vs_nvcc_per_pass": ratio, "nvrtc_speed_vs_nvcc_median": statistics.median(ratio),
                     "tflops_median": {name: statistics.median(v) for name, v in tf.items()}})
    table = Table(title=f"level 9 built by nvcc and by NVRTC, {args.dtype}, {passes} passes")
    for col in ("M x N x K", "nvcc TFLOP/s", "NVRTC TFLOP/s", "cuBLAS TFLOP/s", "NVRTC speed / nvcc (median)"):
        table.add_column(col, justify="right")
    for r in rows:
        t = r["tflops_median"]
        table.add_row(f"{r['m']}x{r['n']}x{r['k']}", f"{t['nvcc']:.0f}", f"{t['nvrtc']:.0f}", f"{t['cuBLAS']:.0f}",
                      f"{r['nvrtc_speed_vs_nvcc_median']:.3f}")
    Console(width=140).print(table)
    save({"compilers": identities, "rows": rows}, f"compilers_{args.dtype}" + ("_quick" if args.quick else ""),
         args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
