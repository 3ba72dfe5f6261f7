"""The small-M kernel's split-K reduction: through a cluster's distributed shared memory against through
global memory, beside cuBLAS (issue 12).

    python bench/small_m_cluster.py [--dtype bf16] [--passes 3] [--budget 0.1] [-o OUT.json]

Shapes: (N, K) in {4096 x 4096, 4096 x 14336} x M in {16, 64, 128, 256}, y = x @ w.T (``F.linear``'s
layout), each in one M tile (the smallest bucket >= M) and in two (the bucket of ceil(M / 2): the
M-tile table's other choice, dispatch/small_m_tiles.py). Per shape and tiling, with the default grid
rule (SmallMGemm.ctas): ``cluster`` (the cluster build, cluster_reduce=True, where SmallMGemm.cluster_ways
allows it; the row says which S, or that it did not, and then times the global reduction twice) and ``global`` (cluster_reduce=False: the workspace
reduction on the same grid). Both are checked against float64 under the correctness gate's bounds and
must agree bitwise with each other (the same partials added in the same K order); then ``--passes``
passes time them interleaved with cuBLAS (gates.performance.time_fns: L2 flushed before every call,
4 rounds, ``--budget`` seconds per callable and pass, the order alternating between passes). The table
gives medians over passes in microseconds and cuBLAS / ours; the JSON (in $OUT on a lent machine) has
every pass. It also says, per (N, K, M), which tiling is faster with each reduction: the M-tile table
(bench/library_small_m.py --tune) was fitted with the global reduction and may change with the cheaper
one. Run time on the H200: about 1.5 minutes (the builds first, in parallel). Exit status 0 unless a
result is wrong.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
from rich.console import Console
from rich.table import Table

from gemm_ladder.contract import DTYPES, cublas, reference
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import small_m_kernel
from suite import add_output_argument, require_gpu, save

M_VALUES = (16, 64, 128, 256)
NK = ((4096, 4096), (4096, 14336))


def _fn(kernel, c, cluster_reduce):
    def fn(x, w):
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, cluster_reduce=cluster_reduce)
        return c
    return fn


def _check(c: torch.Tensor, x, w, dtype: str) -> float:
    torch.cuda.synchronize()
    ref = reference(x, w)
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    base = ((cublas(x, w).double() - ref).norm() / ref.norm()).item()
    if torch.isnan(c).any() or not (rel <= error_bound(base, dtype) and (c.double() - ref).abs().max().item()
                                     <= absolute_cap(x, w, ref.abs().max().item(), dtype)):
        raise RuntimeError(f"wrong result on {tuple(x.shape)} x {tuple(w.shape)}: rel err {rel:.3g}, cuBLAS {base:.3g}")
    return rel


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--budget", type=float, default=0.1, help="seconds of timed calls per callable and pass")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    from gemm_ladder.dispatch.small_m_tiles import one_tile_bn, two_tile_bn

    device, dtype = torch.device("cuda"), args.dtype
    plans = []  # (n, k, m, tiling, kernel)
    for n, k in NK:
        for m in M_VALUES:
            for tiling, bn in (("one tile", one_tile_bn(m)), ("two tiles", two_tile_bn(m))):
                kernel = small_m_kernel(bn)
                plans.append((n, k, m, tiling, kernel))
    # every build first, nvcc in parallel: the plain ones and the cluster builds the rule may take
    builds = {(kr.bn, s) for *_, kr in plans for s in (1, 2, 4, 8)}
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda b: (small_m_kernel(b[0]) if b[1] == 1 else small_m_kernel(b[0]).clustered(b[1]))
                      .build(dtype), sorted(builds)))
    rows = []
    for n, k, m, tiling, kernel in plans:
        x, w = random_operands(m, n, k, dtype, device, seed=m * 131 + n * 7 + k)
        ctas = kernel.ctas(m, n, k, kernel.loaded(dtype, device).max_active_clusters(device))
        ways = kernel.cluster_ways(m, n, k, ctas, lambda s: kernel.clustered(s).loaded(dtype, device)
                                   .max_active_clusters(device))
        fns = {"cluster": _fn(kernel, torch.empty(m, n, dtype=DTYPES[dtype], device=device), ways > 1 or None),
               "global": _fn(kernel, torch.empty(m, n, dtype=DTYPES[dtype], device=device), False)}
        outs = {}
        for name, fn in fns.items():
            fn(x, w).fill_(float("nan"))  # the first call binds (and loads); then poisoned, launched again
            outs[name] = fn(x, w).clone()
        errors = {name: _check(c, x, w, dtype) for name, c in outs.items()}
        if not torch.equal(outs["cluster"], outs["global"]):
            raise RuntimeError(f"M={m} {n}x{k} {tiling}: the cluster and global reductions differ bitwise")
        times: dict[str, list[float]] = {name: [] for name in [*fns, "cuBLAS"]}
        for i in range(args.passes):
            order = {"cuBLAS": cublas, **fns} if i % 2 == 0 else {**fns, "cuBLAS": cublas}
            for name, t in time_fns(order, x, w, budget_s=args.budget, rounds=4, warmup=5).items():
                times[name].append(t.median_ms * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        row = {"m": m, "n": n, "k": k, "dtype": dtype, "tiling": tiling, "bn": kernel.bn, "units": kernel.units(m, n),
               "ctas": ctas, "cluster_ways": ways, "us_per_pass": times, "median_us": med, "rel_err": errors,
               "vs_cublas": {name: med["cuBLAS"] / med[name] for name in fns}}
        rows.append(row)
        print(f"M={m} {n}x{k} {tiling} (BN {kernel.bn}, {ctas} CTAs, S={ways}): cluster {med['cluster']:.1f} us, "
              f"global {med['global']:.1f} us, cuBLAS {med['cuBLAS']:.1f} us", flush=True)

    best = {}
    for r in rows:
        key = (r["m"], r["n"], r["k"])
        for name in ("cluster", "global"):
            cur = best.setdefault(key, {}).get(name)
            if cur is None or r["median_us"][name] < cur[1]:
                best[key][name] = (r["tiling"], r["median_us"][name])
    console = Console(width=160)
    table = Table(title=f"small-M split-K reduction: cluster (DSMEM) vs global, {dtype}, {args.passes} passes, "
                        "L2 flushed; microseconds (median over passes)")
    for col in ("M", "N x K", "tiling", "BN", "CTAs", "S", "cluster us", "global us", "cuBLAS us",
                "cuBLAS/cluster", "cuBLAS/global"):
        table.add_column(col, justify="right")
    for r in rows:
        t = r["median_us"]
        table.add_row(str(r["m"]), f"{r['n']}x{r['k']}", r["tiling"], str(r["bn"]), str(r["ctas"]),
                      str(r["cluster_ways"]) if r["cluster_ways"] > 1 else "- (global)", f"{t['cluster']:.1f}",
                      f"{t['global']:.1f}", f"{t['cuBLAS']:.1f}", f"{r['vs_cublas']['cluster']:.2f}",
                      f"{r['vs_cublas']['global']:.2f}")
    console.print(table)
    for (m, n, k), b in best.items():
        console.print(f"M={m} {n}x{k}: fastest tiling with the cluster reduction: {b['cluster'][0]} "
                      f"({b['cluster'][1]:.1f} us); with the global one: {b['global'][0]} ({b['global'][1]:.1f} us)")
    save({"rows": rows, "best_tiling": [{"m": m, "n": n, "k": k, **{f"{name}_tiling": v[0] for name, v in b.items()}}
                                        for (m, n, k), b in best.items()]},
         f"small_m_cluster_{dtype}", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
