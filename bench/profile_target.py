"""One launch each of level 9 and cuBLAS inside the NVTX range "prof", for Nsight Compute.

    ncu --clock-control none --nvtx --nvtx-include "prof/" --section SpeedOfLight ... \
        python bench/profile_target.py [--shape 4096,4096,4096] [--levels 9] [--split]

With ``--split``, level 9 is profiled twice more, after the levels: its last partial wave computed
whole (``L9 whole``), then split by K over every cluster (``L9 split``, stream-K), so their DRAM
traffic and L2 hit rates can be set side by side. Launch order inside the range: the levels, then
those two, then cuBLAS. With ``--sol``, the math-alone kernel of bench/tensor_pipe_sol.py comes
last, so its SM clock and tensor-pipe activity can be read beside theirs.

Both are warmed up (compiled, loaded, cuBLAS's heuristics run) outside the range, so the profiled
launches are the steady ones. bf16, random normal data.
"""

from __future__ import annotations

import argparse
import sys

import torch

from suite import require_gpu
from gemm_ladder.contract import cublas
from gemm_ladder.levels import LEVELS


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="4096,4096,4096")
    p.add_argument("--levels", default="9", help="comma-separated level numbers")
    p.add_argument("--split", action="store_true", help="also level 9 with its tail whole, then split")
    p.add_argument("--sol", action="store_true", help="also the math-alone kernel (bench/tensor_pipe_sol.py), last")
    args = p.parse_args()
    require_gpu(__file__)
    m, n, k = (int(x) for x in args.shape.split(","))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    fns = {f"L{i}": LEVELS[int(i)] for i in args.levels.split(",")}
    if args.split:
        fns["L9 whole"] = LEVELS[9].variant(stream_k_min_idle=2.0)  # never splits
        fns["L9 split"] = LEVELS[9].variant(stream_k_min_idle=0.0)  # splits every tail it may
    fns["cuBLAS"] = cublas
    if args.sol:
        from tensor_pipe_sol import SOL_SOURCE
        from variants import with_source

        fns["SOL"] = with_source(LEVELS[9], SOL_SOURCE)
    for fn in fns.values():
        for _ in range(3):
            fn(a, b)
    torch.cuda.synchronize()
    for name, fn in fns.items():
        torch.cuda.nvtx.range_push("prof")
        fn(a, b)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
