"""Does the layouts kernel keep level 9's speed in every operand order? (issue 12, item 1)

    python bench/library_layouts.py [--sizes 4096,8192] [--passes 3] [--dtype bf16] [--bn 256] [-o OUT.json]

Targets, per size (M = N = K): each layout within 3% of the native one (A and B K-major, level 9's)
and at least 0.97x cuBLAS on the same layout.

The four layouts of ``torch.mm(a, b)``: ``a`` row- or column-major (A K- or MN-major) x ``b`` row-major
(B MN-major) or column-major (B K-major, ``w.T`` of a row-major weight). Per size, fresh random
operands are laid out four ways (dense, each view over its own storage); cuBLAS runs ``torch.mm`` on
the same views into a preallocated output, the library kernel ``library_gemm(a_major, b_major, bn)``
on the same storage. Every output is checked against float64 on its first 256 rows first. Then
``--passes`` passes, each timing all eight callables interleaved in 4 rounds
(gates.performance.time_fns: L2 flushed before every call, the host's launch latency hidden, median of
the calls), the order rotated between passes. A pass's ratio vs cuBLAS is cuBLAS's median time over
ours on the same layout; vs native, the native layout's median over this layout's. The JSON keeps
every pass; the table gives medians, minimum and maximum over passes.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table
from suite import add_output_argument, require_gpu, save
from variants import check_targets

from gemm_ladder.contract import DTYPES
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.library.gemm import MAJORS, SPLITS, TILE_N, library_gemm
from gemm_ladder.library.operand import operand_view

TARGET_VS_NATIVE, TARGET_VS_CUBLAS = 0.97, 0.97
NATIVE = "k/k"  # layout names: "A major/B major"


def laid_out(a: torch.Tensor, b: torch.Tensor, a_major: str, b_major: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.mm``'s operands for a (M, K) and b (N, K) in the given majors: (M, K) and (K, N) views."""
    mm_a = a if a_major == "k" else a.T.contiguous().T  # column-major (M, K)
    mm_b = b.T if b_major == "k" else b.T.contiguous()  # K-major B: (K, N) column-major; MN-major: row-major
    return mm_a, mm_b


def targets(a, b, dtype: str, bn: int, split: str) -> dict:
    """{name: fn(a, b) -> c}: ours and cuBLAS on each layout, each writing a preallocated output."""
    fns = {}
    m, n = a.shape[0], b.shape[0]
    for a_major in MAJORS:
        for b_major in MAJORS:
            mm_a, mm_b = laid_out(a, b, a_major, b_major)
            va, vb = operand_view(mm_a, k_dim=1), operand_view(mm_b, k_dim=0)
            assert (va.major, vb.major) == (a_major, b_major)
            kernel = library_gemm(a_major, b_major, bn)
            c_ours, c_blas = (torch.empty(m, n, dtype=DTYPES[dtype], device="cuda") for _ in range(2))
            reason = kernel.supports(va, vb, c_ours)
            if reason is not None:
                raise RuntimeError(f"{a_major}/{b_major}: {reason}")

            def ours(_a, _b, kernel=kernel, va=va, vb=vb, c=c_ours):
                kernel.launch(va, vb, c, split=split)
                return c

            def blas(_a, _b, x=mm_a, y=mm_b, c=c_blas):
                return torch.mm(x, y, out=c)

            fns[f"ours {a_major}/{b_major}"] = ours
            fns[f"cuBLAS {a_major}/{b_major}"] = blas
    return fns


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--bn", type=int, default=256, choices=TILE_N)
    p.add_argument("--split", default="tail", choices=SPLITS)
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    layouts = [f"{x}/{y}" for x in MAJORS for y in MAJORS]
    rows, verdicts = [], {}
    for size in (int(s) for s in args.sizes.split(",")):
        m = n = k = size
        a, b = random_operands(m, n, k, args.dtype, "cuda", seed=size)
        fns = targets(a, b, args.dtype, args.bn, args.split)
        _, errors, failures = check_targets(fns, a, b)
        if failures:
            raise RuntimeError(f"{size}^3: {failures}")
        names = list(fns)
        per_pass = {name: [] for name in names}
        for i in range(args.passes):
            order = names[i % len(names):] + names[:i % len(names)]
            t = time_fns({name: fns[name] for name in order}, a, b, budget_s=0.3, rounds=4, warmup=5)
            for name in names:
                per_pass[name].append(t[name].median_ms)
        flop = 2 * m * n * k
        for lay in layouts:
            ours, blas, native = per_pass[f"ours {lay}"], per_pass[f"cuBLAS {lay}"], per_pass[f"ours {NATIVE}"]
            vs_blas = [bl / o for bl, o in zip(blas, ours)]
            vs_native = [nat / o for nat, o in zip(native, ours)]
            row = {"m": m, "n": n, "k": k, "dtype": args.dtype, "bn": args.bn, "split": args.split, "layout": lay,
                   "a_major": lay.split("/")[0], "b_major": lay.split("/")[1],
                   "rel_err_256_rows": errors[f"ours {lay}"], "cublas_rel_err_256_rows": errors[f"cuBLAS {lay}"],
                   "ours_ms_per_pass": ours, "cublas_ms_per_pass": blas,
                   "ours_tflops_median": flop / (statistics.median(ours) * 1e-3) / 1e12,
                   "cublas_tflops_median": flop / (statistics.median(blas) * 1e-3) / 1e12,
                   "vs_cublas_per_pass": vs_blas, "vs_native_per_pass": vs_native,
                   "vs_cublas_median": statistics.median(vs_blas), "vs_cublas_min": min(vs_blas),
                   "vs_cublas_max": max(vs_blas), "vs_native_median": statistics.median(vs_native),
                   "vs_native_min": min(vs_native), "vs_native_max": max(vs_native)}
            rows.append(row)
            verdicts[f"{size}^3 {lay} >= {TARGET_VS_CUBLAS}x cuBLAS {lay}"] = row["vs_cublas_median"] >= TARGET_VS_CUBLAS
            if lay != NATIVE:
                verdicts[f"{size}^3 {lay} >= {TARGET_VS_NATIVE}x native"] = row["vs_native_median"] >= TARGET_VS_NATIVE
    table = Table(title=f"layouts kernel (BN {args.bn}, split {args.split}) vs cuBLAS on the same layout, "
                        f"{args.dtype}, {args.passes} passes (layout: A major, B major)")
    for col in ("M=N=K", "layout", "ours TFLOP/s", "cuBLAS TFLOP/s", "vs cuBLAS", "min", "max", "vs native", "min",
                "max"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["m"]), r["layout"], f"{r['ours_tflops_median']:.0f}", f"{r['cublas_tflops_median']:.0f}",
                      f"{r['vs_cublas_median']:.3f}", f"{r['vs_cublas_min']:.3f}", f"{r['vs_cublas_max']:.3f}",
                      f"{r['vs_native_median']:.3f}", f"{r['vs_native_min']:.3f}", f"{r['vs_native_max']:.3f}")
    console = Console(width=160)
    console.print(table)
    for what, ok in verdicts.items():
        console.print(f"{'met' if ok else 'NOT met'}: {what}")
    save({"rows": rows, "targets": verdicts}, f"library_layouts_{args.dtype}", args.output)
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
