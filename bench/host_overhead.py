"""Host time per call of the launch path, level by level, against cuBLAS (development tool).

    python bench/host_overhead.py [--shape 256x256x256] [--calls 2000] [-o OUT.json]

Wall time of ``--calls`` back-to-back calls divided by their number, on a shape small enough that
the GPU keeps up, so the figure is what the host spends per call: operand checks, output
allocation, tensor-map and launch-config lookups and cuLaunchKernelEx (cuBLAS: torch.matmul).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from suite import add_output_argument, save

from gemm_ladder.contract import cublas
from gemm_ladder.levels import LEVELS
from gemm_ladder.shapes import parse_shape


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="256x256x256")
    p.add_argument("--calls", type=int, default=2000)
    add_output_argument(p)
    args = p.parse_args()
    m, n, k = parse_shape(args.shape)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    rows = []
    for name, fn in [("cuBLAS", cublas)] + [(f"L{i}", LEVELS[i]) for i in range(3, 10)]:
        for _ in range(50):
            fn(a, b)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn(a, b)
        host_us = (time.perf_counter() - t0) / args.calls * 1e6
        torch.cuda.synchronize()
        rows.append({"name": name, "m": m, "n": n, "k": k, "calls": args.calls, "host_us_per_call": host_us})
        print(rows[-1], flush=True)
    save({"rows": rows}, f"host_overhead_{m}x{n}x{k}", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
