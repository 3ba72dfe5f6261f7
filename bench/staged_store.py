"""The general kernel's three output stores timed forced, interleaved with cuBLAS in one run (issue 12:
outputs a TMA store cannot write):

* ``TMA``: the TMA-store build (``library_gemm(a, b, bn)``), only where it can write the output (an
  aligned bf16 output);
* ``creg``: the register-store build (``c_from_registers=True``: 4-byte bf16 / 8-byte fp32 pair stores);
* ``cstage``: the staged build (``c_staged=True``: per-warp shared-memory buffers, 16-byte stores).

    python bench/staged_store.py [--budget 0.15] [-o OUT.json]

Shapes: 4096x4096x4096 (an aligned output: all three stores on the same output), 4096x4095x4096 (N =
4095, odd rows), 2048x2048x4096; each at BN 256 and 128, bf16 and float32 output; a = x (M, K) row-major,
b = w.T (F.linear's layout: both K-major, no repack). And 4097x4095x4093 through the dispatcher: the
route ``gemm_ladder.mm`` takes (operands repacked, the output in place) run with the register-store
build and with the staged build (dispatch/kernels.py's STAGED_STORE off and on), beside ``mm`` itself.
Each forced output is poisoned (NaN) and checked against float64 on its first 256 rows before timing.
The JSON (``$OUT`` when set) holds microseconds per entry and each entry's ratio to cuBLAS; the table
printed says which store is fastest per (shape, BN, output dtype). About 2-3 minutes on the H200,
most of it nvcc building the 12 builds at first (in parallel).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import reference
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.execute import run as run_route
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view
from suite import add_output_argument, require_gpu, save

SHAPES = [(4096, 4096, 4096), (4096, 4095, 4096), (2048, 2048, 4096)]
MM_SHAPE = (4097, 4095, 4093)
BNS = (256, 128)


def builds() -> dict[str, object]:
    """{label: kernel} of every forced entry: TMA (bf16 out), creg and cstage (bf16 and fp32 out), per BN."""
    out = {}
    for bn in BNS:
        out[f"BN {bn} TMA bf16"] = library_gemm("k", "k", bn)
        for fp32 in (False, True):
            tag = "fp32" if fp32 else "bf16"
            out[f"BN {bn} creg {tag}"] = library_gemm("k", "k", bn, c_from_registers=True, out_fp32=fp32)
            out[f"BN {bn} cstage {tag}"] = library_gemm("k", "k", bn, c_from_registers=True, out_fp32=fp32, c_staged=True)
    return out


def rel_err(c: torch.Tensor, ref: torch.Tensor, rows: int = 256) -> float:
    return ((c[:rows].double() - ref[:rows]).norm() / ref[:rows].norm()).item()


def forced_shape(m: int, n: int, k: int, kernels: dict, budget: float, seed: int) -> dict:
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=seed)  # x (M, K), w (N, K): F.linear's operands
    va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    ref = reference(x[:256], w)
    fns = {"cuBLAS": lambda p, q: torch.mm(p, q.T)}
    errors, skipped = {}, {}
    for label, kernel in kernels.items():
        c = torch.full((m, n), float("nan"), dtype=torch.float32 if "fp32" in label else torch.bfloat16, device="cuda")
        reason = kernel.supports(va, vb, c)
        if reason is not None:
            skipped[label] = reason
            continue
        kernel.launch(va, vb, c)
        torch.cuda.synchronize()
        err = rel_err(c, ref)
        if not math.isfinite(err) or err > 1e-2:
            raise RuntimeError(f"{label} is wrong at {m}x{n}x{k}: relative error {err:.3g}")
        errors[label] = err
        fns[label] = lambda p, q, kernel=kernel, c=c: kernel.launch(va, vb, c)
    t = time_fns(fns, x, w, budget_s=budget, rounds=4, warmup=5)
    return _row(m, n, k, t, errors, skipped)


def mm_shape(m: int, n: int, k: int, budget: float, seed: int) -> dict:
    """4097x4095x4093 through the dispatcher's route, with each of the two stores for the output."""
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=seed)
    a, b = x, w.T.contiguous()  # mm(a, b): a (M, K), b (K, N), both row-major
    ref = reference(a[:256], b.T)
    routes = {}
    for staged in (False, True):
        K.STAGED_STORE = staged
        dispatch.clear_cache()
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        routes["mm route, cstage" if staged else "mm route, creg"] = (dispatch.decide(a, b, c, given=False), c)
    K.STAGED_STORE = False
    dispatch.clear_cache()
    fns = {"cuBLAS": lambda p, q: torch.mm(p, q), "gemm_ladder.mm": lambda p, q: gemm_ladder.mm(p, q)}
    errors = {}
    for label, (route, c) in routes.items():
        c.fill_(float("nan"))
        run_route(route, a, b, c)
        torch.cuda.synchronize()
        err = rel_err(c, ref)
        if not math.isfinite(err) or err > 1e-2:
            raise RuntimeError(f"{label} ({route.kernel.name}) is wrong at {m}x{n}x{k}: relative error {err:.3g}")
        errors[f"{label} ({route.kernel.name})"] = err
        fns[label] = lambda p, q, route=route, c=c: run_route(route, p, q, c)
    t = time_fns(fns, a, b, budget_s=budget, rounds=4, warmup=5)
    row = _row(m, n, k, t, errors, {})
    row["kernels"] = {label: route.kernel.name for label, (route, _) in routes.items()}
    return row


def _row(m, n, k, t, errors, skipped) -> dict:
    cub = t["cuBLAS"].median_ms
    row = {"m": m, "n": n, "k": k, "cublas_us": cub * 1e3,
           "us": {name: tm.median_ms * 1e3 for name, tm in t.items()},
           "vs_cublas": {name: cub / tm.median_ms for name, tm in t.items()},
           "spread": {name: tm.spread for name, tm in t.items()}, "rel_err": errors, "skipped": skipped}
    print(f"{m}x{n}x{k}: cuBLAS {cub * 1e3:.1f} us; " + "; ".join(
        f"{name} {tm.median_ms * 1e3:.1f} us" for name, tm in t.items() if name != "cuBLAS"), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=0.15, help="seconds of timed calls per entry and shape")
    add_output_argument(parser)
    args = parser.parse_args()
    require_gpu(__file__)
    kernels = builds()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:  # nvcc in parallel, before any timing
        jobs = list(kernels.values()) + [K.general_from_registers("k", "k", bn) for bn in BNS]
        list(pool.map(lambda kern: kern.build("bf16"), jobs))
    rows = [forced_shape(m, n, k, kernels, args.budget, seed=9000 + i) for i, (m, n, k) in enumerate(SHAPES)]
    rows.append(mm_shape(*MM_SHAPE, args.budget, seed=9100))
    summary = []
    for r in rows[:-1]:
        for bn in BNS:
            for tag in ("bf16", "fp32"):
                cands = {s: r["us"].get(f"BN {bn} {s} {tag}") for s in ("TMA", "creg", "cstage")}
                cands = {s: v for s, v in cands.items() if v is not None}
                if cands:
                    summary.append({"shape": f"{r['m']}x{r['n']}x{r['k']}", "bn": bn, "out": tag, **cands,
                                    "fastest": min(cands, key=cands.get)})
    for s in summary:
        print(f"{s['shape']:16} BN {s['bn']:3} {s['out']}: " + ", ".join(
            f"{k} {s[k]:.1f}" for k in ("TMA", "creg", "cstage") if k in s) + f" us -> {s['fastest']}")
    save({"rows": rows, "summary": summary}, "staged_store", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
