"""The small-M library kernel against cuBLAS, and against the memory's copy rate (issue 12, item 3).

    python bench/library_small_m.py [--dtype bf16] [--passes 3] [--sweep] [-o OUT.json]
    python bench/library_small_m.py --tune [--passes 3] [--budget 0.1]   # regenerate table.json's "small_m"
    compute-sanitizer --tool memcheck python bench/library_small_m.py --sanitize   # also racecheck, synccheck

Shapes: M in {1, 16, 64, 128, 256} x (N, K) in {4096 x 4096, 14336 x 4096, 4096 x 14336, 28672 x 8192}
(the Llama-3 8B/70B layers of ``shapes.llm`` with the batch of a decode step), y = x @ w.T with x (M, K)
and w (N, K) row-major: ``F.linear(x, w)`` (cuBLAS) against ``small_m_gemm(M).launch`` on the same
tensors.

Method: per shape, fresh random operands; the kernel's output is first checked against float64 under
the correctness gate's bounds; then ``--passes`` passes, each timing cuBLAS and ours interleaved in 4
rounds (gates.performance.time_fns: L2 flushed before every call, so the weight comes from DRAM; the
host's launch latency hidden; median of the calls), the order alternating between passes. A pass's
ratio is cuBLAS's median time over ours; the table gives the median over passes and its range.
Achieved bandwidth is the fewest bytes the GEMM must move (x, w read once, y written once:
shapes.gemm_min_bytes) over the median time, against a device-to-device copy of 1 GiB timed in the
same run before and after the shapes (gates.performance.measure_dram_bandwidth: bytes read + written
per second).

``--sweep`` also times, per shape, the kernel with classic split-K grids (splits = 1, 2, 4, 8: each
unit's K in that many even ranges) and with half the ring (stages), beside the default rule, so a run
shows whether the grid rule and the ring depth are the right ones.

``--sanitize`` instead runs every bucket once on small shapes with tails (N not a multiple of 128, K
a multiple of 8 but not of 64, M above its bucket's BN for one of them), split three ways so that the
partials, the counters and the last contributor's reduction run, unsplit, and split with the weight
MN-major; it prints one line per launch and exits 1 if any result is wrong. That is the run for compute-sanitizer.

``--tune`` instead decides how many M tiles the dispatcher computes M in (dispatch/small_m_tiles.py):
per (N, K) above and M in {16, 32, 64, 96, 128, 192, 256}, the one-tile bucket (the smallest >= M)
and the two-tile bucket (the smallest holding ceil(M / 2) rows), and the general kernel's route (the
one dispatch takes when the small-M kernel is set aside: the fewest copies, then the (BN, split) the
cost model ranks fastest; :func:`general_route`), are checked against float64, then timed
interleaved with cuBLAS (``--passes`` passes of 4 rounds, ``--budget`` seconds per callable and pass,
L2 flushed, order alternating); the rule (two tiles when their median over passes is more than 2%
below one tile's; then the general kernel when its median is more than 2% below that) fits the entry
(small_m_tiles.fit), with provenance "tuned on <GPU> <date> <commit>:
<this run's JSON>", written into src/gemm_ladder/dispatch/table.json (the cost model's keys kept) and,
on a lent machine, into $OUT/table.json: copy that over the package's table and commit both. The
timings go in the JSON. Exit status 0 unless a result is wrong.

Targets (issue 12): >= 1.3x cuBLAS for M in {1, 16, 64} at 4096 x 4096; >= 1.0x for every shape;
aim >= 80% of the copy bandwidth at M <= 64. Exit status 0 when the first two hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from gemm_ladder.contract import DTYPES, cublas, reference
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
from gemm_ladder.gates.performance import measure_dram_bandwidth, time_fns
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import BUCKETS, SmallMGemm, small_m_gemm, small_m_kernel
from gemm_ladder.shapes import gemm_min_bytes
from suite import RESULTS, add_output_argument, meta, require_gpu, result_name, save

M_VALUES = (1, 16, 64, 128, 256)
NK = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192))
#: (N, K) the tune decides at: NK and two short-K shapes (ViT-L's attn.proj is 1024 x 1024), so that
#: short-K layers are not decided by 4096 x 4096's times (docs/library.md says what they measured).
TUNE_NK = NK + ((1024, 1024), (4096, 1024))
TARGET_FAST, TARGET_FAST_M, TARGET_ALL, AIM_COPY_FRACTION = 1.3, (1, 16, 64), 1.0, 0.8
#: M values the tune decides at: the top of each bucket with a smaller one to split into, and 96.
TUNE_M = (16, 32, 64, 96, 128, 192, 256)


def ours(kernel: SmallMGemm, c: torch.Tensor, splits=None):
    """``fn(x, w)`` launching ``kernel`` into the preallocated ``c`` (cuBLAS allocates its own)."""
    def fn(x, w):
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, splits=splits)
        return c
    return fn


def check(fn, x, w, dtype: str) -> float:
    """Relative error of fn against float64, after asserting the gate's bounds."""
    c = fn(x, w).clone()
    torch.cuda.synchronize()
    ref = reference(x, w)
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    base = ((cublas(x, w).double() - ref).norm() / ref.norm()).item()
    if not (rel <= error_bound(base, dtype)
            and (c.double() - ref).abs().max().item() <= absolute_cap(x, w, ref.abs().max().item(), dtype)):
        raise RuntimeError(f"wrong result on {tuple(x.shape)} x {tuple(w.shape)}: rel err {rel:.3g}, cuBLAS {base:.3g}")
    return rel


def sanitize(dtype: str) -> int:
    """One launch per bucket, shape and split on small tail shapes; the number of wrong results."""
    wrong = 0
    for bn in (8, 16, 32, 64, 128, 192, 256):
        kernel = SmallMGemm(bn)
        for m, n, k in ((min(bn, 7), 264, 200), (bn, 136, 72), (min(2 * bn, 256) if bn < 256 else 200, 264, 1032)):
            x, w = random_operands(m, n, k, dtype, "cuda", seed=bn + m + n + k)
            w_mn = w.T.contiguous().T  # the (K, N) row-major weight of x @ W: B MN-major
            for splits, weight in ((3, w), (1, w), (3, w_mn)):
                c = torch.full((m, n), float("nan"), dtype=DTYPES[dtype], device="cuda")
                kernel.launch(operand_view(x, k_dim=1), operand_view(weight, k_dim=1), c, splits=splits)
                torch.cuda.synchronize()
                ref = reference(x, w)
                err = ((c.double() - ref).norm() / ref.norm()).item()
                ok = err < 1e-2 and not torch.isnan(c).any()
                wrong += not ok
                print(f"small-M BN={bn} {m}x{n}x{k} splits={splits} B {operand_view(weight, k_dim=1).major}-major "
                      f"rel_err={err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return wrong


def general_route(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor):
    """The route dispatch would take for ``c = x @ w.T`` were the small-M kernel not there: the general
    kernel's routes only, chosen as dispatch.route.choose chooses them (fewest copies, then the cost
    model's (BN, split)); and ``fn(x, w)`` running it into ``c``."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.execute import run
    from gemm_ladder.dispatch.route import choose, device_facts, find_routes

    routes, _ = find_routes(x, w.T, c, given=True, device=device_facts(x.device))
    route = choose([r for r in routes if r.kind == "general"], dispatch.cost_model())
    if route is None:
        raise RuntimeError(f"no general-kernel route for {tuple(x.shape)} x {tuple(w.shape)}.T")

    def fn(x, w):
        run(route, x, w.T, c)
        return c
    return route, fn


def describe_general(route) -> str:
    """The general route in words: 'general BN 256, split none'."""
    return f"general BN {route.bn}, split {dict(route.options).get('split')}"


def tune_rows(dtype: str, passes: int, budget: float, flush: str) -> list[dict]:
    """Per (N, K) in TUNE_NK and M in TUNE_M: both buckets and the general kernel's route
    (:func:`general_route`) checked against float64, then timed interleaved with cuBLAS; rows for
    small_m_tiles.fit (per-pass medians in microseconds). Raises RuntimeError on a wrong result."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.dispatch.small_m_tiles import one_tile_bn, two_tile_bn

    builds = [small_m_kernel(bn) for bn in BUCKETS] + [library_gemm("k", "k", bn) for bn in K.general_bns()]
    with ThreadPoolExecutor(max_workers=len(builds)) as pool:  # nvcc in parallel before the first shape
        list(pool.map(lambda kernel: kernel.build(dtype), builds))
    device = torch.device("cuda")
    rows = []
    for n, k in TUNE_NK:
        for m in TUNE_M:
            x, w = random_operands(m, n, k, dtype, device, seed=m * 131 + n * 7 + k + 1)
            one, two = small_m_kernel(one_tile_bn(m)), small_m_kernel(two_tile_bn(m))
            general, general_fn = general_route(x, w, torch.empty(m, n, dtype=DTYPES[dtype], device=device))
            fns = {"one tile": ours(one, torch.empty(m, n, dtype=DTYPES[dtype], device=device)),
                   "two tiles": ours(two, torch.empty(m, n, dtype=DTYPES[dtype], device=device)),
                   "general": general_fn}
            errors = {name: check(fn, x, w, dtype) for name, fn in fns.items()}
            times: dict[str, list[float]] = {name: [] for name in [*fns, "cuBLAS"]}
            for i in range(passes):
                order = {"cuBLAS": cublas, **fns} if i % 2 == 0 else {**fns, "cuBLAS": cublas}
                for name, t in time_fns(order, x, w, budget_s=budget, rounds=4, warmup=5, flush_l2=flush).items():
                    times[name].append(t.median_ms * 1e3)
            row = {"m": m, "n": n, "k": k, "dtype": dtype, "one_tile_bn": one.bn, "two_tile_bn": two.bn,
                   "one_tile_us": times["one tile"], "two_tile_us": times["two tiles"], "general_us": times["general"],
                   "general_route": describe_general(general), "cublas_us": times["cuBLAS"], "rel_err": errors}
            rows.append(row)
            med = {name: statistics.median(v) for name, v in times.items()}
            print(f"tune M={m} {n}x{k}: one tile (BN {one.bn}) {med['one tile']:.1f} us, two tiles (BN {two.bn}) "
                  f"{med['two tiles']:.1f} us, {describe_general(general)} {med['general']:.1f} us, "
                  f"cuBLAS {med['cuBLAS']:.1f} us", flush=True)
    return rows


def tuned_table(rows: list[dict], provenance: str, table: dict) -> dict:
    """``table`` (the dispatch table's JSON) with its "small_m" entry fitted to ``rows`` (tune_rows'),
    the cost model's keys unchanged."""
    from gemm_ladder.dispatch.small_m_tiles import KEY, fit

    return {**table, KEY: fit(rows, provenance).to_json()}


def tune(args) -> int:
    """--tune: time, fit, write the table (and $OUT/table.json) and the timings' JSON."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.heuristic import TABLE_PATH

    described = meta()
    name = f"library_small_m_tune_{args.dtype}"
    output = args.output or Path(os.environ.get("OUT") or RESULTS) / result_name(name, described)
    rows = tune_rows(args.dtype, args.passes, args.budget, args.flush)
    gpu = (described.get("gpu") or {}).get("name", "unknown GPU")
    provenance = (f"tuned on {gpu} {str(described.get('date') or '')[:10]} "
                  f"{(described.get('git_commit') or 'unknown')[:7]}: bench/results/{output.name} "
                  f"(bench/library_small_m.py --tune, {args.passes} passes, L2 flushed by {args.flush}s)")
    table = tuned_table(rows, provenance, json.loads(TABLE_PATH.read_text()))
    text = json.dumps(table, indent=1) + "\n"
    TABLE_PATH.write_text(text)
    if os.environ.get("OUT"):  # a lent machine's copy of the tree does not come back: the table does
        Path(os.environ["OUT"], "table.json").write_text(text)
    dispatch.clear_cache()
    for d in table["small_m"]["decisions"]:
        print(f"M={d['m']} {d['n']}x{d['k']}: {d.get('kernel', 'small_m')}, {d['tiles']} tile(s) "
              f"(one {d['one_tile_us']:.1f} us, two {d['two_tile_us']:.1f} us, {d.get('general_route')} "
              f"{d.get('general_us', float('nan')):.1f} us)")
    print(f"wrote {TABLE_PATH} ({provenance}); copy it to src/gemm_ladder/dispatch/table.json and commit it")
    save({"tune": {"provenance": provenance, "entry": table["small_m"], "rows": rows}}, name, output)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--sweep", action="store_true", help="also time split-K grids and half the ring")
    p.add_argument("--sanitize", action="store_true", help="small tail shapes once each, for compute-sanitizer")
    p.add_argument("--tune", action="store_true", help="regenerate dispatch/table.json's small_m entry (M tiles)")
    p.add_argument("--budget", type=float, default=0.1, help="--tune: seconds of timed calls per callable and pass")
    p.add_argument("--flush", default="write", choices=("write", "read"),
                   help="how L2 is flushed before each timed call: by writes (L2 left dirty, the gates' default) "
                        "or by reads (L2 left clean); see gates.performance.time_fn")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    if args.sanitize:
        return 1 if sanitize(args.dtype) else 0
    if args.tune:
        return tune(args)
    device = torch.device("cuda")
    copy_before = measure_dram_bandwidth(device)
    rows = []
    for n, k in NK:
        for m in M_VALUES:
            x, w = random_operands(m, n, k, args.dtype, device, seed=m * 131 + n * 7 + k)
            c = torch.empty(m, n, dtype=DTYPES[args.dtype], device=device)
            kernel = small_m_gemm(m)
            fns = {"ours": ours(kernel, c)}
            if args.sweep:
                for s in (1, 2, 4, 8):
                    fns[f"splits={s}"] = ours(kernel, c, splits=s)
                half = SmallMGemm(kernel.bn, stages=max(2, kernel.ring_stages(args.dtype) // 2))
                fns[f"stages={half.stages}"] = ours(half, c)
            errors = {name: check(fn, x, w, args.dtype) for name, fn in fns.items()}
            resident = kernel.loaded(args.dtype, device).max_active_clusters(device)
            ctas = kernel.ctas(m, n, k, resident)
            sched = kernel.schedule(m, n, k, ctas)
            medians: dict[str, list[float]] = {name: [] for name in [*fns, "cuBLAS"]}
            for i in range(args.passes):
                order = {"cuBLAS": cublas, **fns} if i % 2 == 0 else {**fns, "cuBLAS": cublas}
                for name, t in time_fns(order, x, w, budget_s=0.2, rounds=4, warmup=5, flush_l2=args.flush).items():
                    medians[name].append(t.median_ms)
            nbytes = gemm_min_bytes(m, n, k, DTYPES[args.dtype].itemsize)
            row = {"m": m, "n": n, "k": k, "dtype": args.dtype, "bn": kernel.bn,
                   "stages": kernel.ring_stages(args.dtype), "ctas": ctas, "units": sched.units,
                   "k_tiles": sched.k_tiles, "max_contributors": sched.max_contributors, "min_bytes": nbytes,
                   "rel_err": errors, "median_ms_per_pass": medians}
            ratios = [cb / us for cb, us in zip(medians["cuBLAS"], medians["ours"])]
            row["vs_cublas_per_pass"] = ratios
            row["vs_cublas_median"] = statistics.median(ratios)
            for name, ms in medians.items():
                row.setdefault("median_ms", {})[name] = statistics.median(ms)
                row.setdefault("gb_per_s", {})[name] = nbytes / (statistics.median(ms) * 1e-3) / 1e9
            rows.append(row)
    copy_after = measure_dram_bandwidth(device)
    copy_gbs = statistics.mean([copy_before, copy_after])
    for row in rows:
        row["copy_fraction"] = {name: gbs / copy_gbs for name, gbs in row["gb_per_s"].items()}

    verdicts = {}
    fast = [r for r in rows if (r["n"], r["k"]) == (4096, 4096) and r["m"] in TARGET_FAST_M]
    verdicts[f">= {TARGET_FAST}x cuBLAS at M in {TARGET_FAST_M}, 4096 x 4096"] = all(
        r["vs_cublas_median"] >= TARGET_FAST for r in fast)
    verdicts[f">= {TARGET_ALL}x cuBLAS on every shape"] = all(r["vs_cublas_median"] >= TARGET_ALL for r in rows)
    aim = {f">= {AIM_COPY_FRACTION:.0%} of the copy bandwidth at M <= 64 (aim)":
           all(r["copy_fraction"]["ours"] >= AIM_COPY_FRACTION for r in rows if r["m"] <= 64)}

    console = Console(width=160)
    table = Table(title=f"small-M kernel vs cuBLAS, {args.dtype}, {args.passes} passes, L2 flushed by {args.flush}s; "
                        f"copy {copy_gbs:.0f} GB/s "
                        f"(before {copy_before:.0f}, after {copy_after:.0f})")
    extra = list(dict.fromkeys(name for r in rows for name in r["median_ms"] if name not in ("ours", "cuBLAS")))
    for col in ("M", "N x K", "BN/S", "CTAs", "contrib", "ours us", "cuBLAS us", "ratio (min-max)", "ours % copy",
                "cuBLAS % copy", *extra):
        table.add_column(col, justify="right")
    for r in rows:
        t = r["median_ms"]
        table.add_row(str(r["m"]), f"{r['n']}x{r['k']}", f"{r['bn']}/{r['stages']}", str(r["ctas"]),
                      str(r["max_contributors"]), f"{t['ours'] * 1e3:.1f}", f"{t['cuBLAS'] * 1e3:.1f}",
                      f"{r['vs_cublas_median']:.2f} ({min(r['vs_cublas_per_pass']):.2f}-{max(r['vs_cublas_per_pass']):.2f})",
                      f"{r['copy_fraction']['ours']:.0%}", f"{r['copy_fraction']['cuBLAS']:.0%}",
                      *(f"{t[name] * 1e3:.1f}" if name in t else "-" for name in extra))
    console.print(table)
    for what, ok in {**verdicts, **aim}.items():
        console.print(f"{'met' if ok else 'NOT met'}: {what}")
    save({"l2_flush": args.flush, "copy_gb_per_s": {"before": copy_before, "after": copy_after, "mean": copy_gbs},
          "rows": rows, "targets": verdicts, "aims": aim},
         f"library_small_m_{args.dtype}{'_sweep' if args.sweep else ''}{'_flushread' if args.flush == 'read' else ''}",
         args.output)
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
