"""The small-M library kernel against cuBLAS, and against the memory's copy rate (issue 12, item 3).

    python bench/library_small_m.py [--dtype bf16] [--passes 3] [--sweep] [-o OUT.json]
    python bench/library_small_m.py --tune [--passes 3] [--budget 0.1]   # regenerate table.json's "small_m"
    python bench/library_small_m.py --tune --nk 4096x4096,1024x1024 [--m 128,197]   # one part of it
    python bench/library_small_m.py --tune --dry-run [--nk ...] [--m ...]   # what it would time, how long (no GPU)
    python bench/library_small_m.py --merge PART.json PART.json ...   # fit the parts' rows into the table (no GPU)
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

``--tune`` instead decides how many M tiles the dispatcher computes M in, and whether a general kernel
configuration runs instead (dispatch/small_m_tiles.py): per (N, K) in :data:`TUNE_NK` and M in
:data:`TUNE_M`, the small-M kernel in one tile (the smallest bucket >= M) and in two, three and four
tiles (the smallest bucket holding ceil(M / t) rows, for each count t whose bucket exists and differs
from a smaller count's: small_m_tiles.tile_counts), the general kernel's route (the one dispatch takes
when the small-M kernel is set aside: the fewest copies, then the build and (BN, split) the cost model
ranks fastest; :func:`general_route`), and the general kernel forced to its 64-row build with one CTA
per cluster at the (BN, split) the cost model ranks fastest for that build (:func:`general_bm64_route`;
not timed apart where the route is that same build and split) are checked against float64, then timed
interleaved with cuBLAS (``--passes`` passes of 4 rounds, ``--budget`` seconds per callable and pass,
L2 flushed, order alternating); the rule (each candidate, from the simplest launch, taken when its
median over passes is more than 2% below the current choice's: one, two, three, four tiles; then the
route; then the 64-row build) fits the entry (small_m_tiles.fit), with provenance "tuned on <GPU>
<date> <commit>: <this run's JSON>", written into src/gemm_ladder/dispatch/table.json (the cost model's
keys kept) and, on a lent machine, into $OUT/table.json: copy that over the package's table and commit
both. The timings go in the JSON. Exit status 0 unless a result is wrong. Before timing it prints what
it will time and an estimate of how long (:func:`estimate`); ``--dry-run`` prints only that, without a
GPU (routes decided on meta tensors for the H200's 132 SMs).

A tune split into parts (``--nk`` and ``--m`` pick a subset of :data:`TUNE_NK` and :data:`TUNE_M`, so
each part fits a device call) writes only its JSON (``library_small_m_tune_DTYPE_part_...``), not the
table: ``--merge`` then fits every part's rows together (no GPU), writes the table and a merged JSON
(``library_small_m_tune_DTYPE_merged``) whose provenance names the parts; an (M, N, K) in two parts is
refused.

The three- and four-tile counts, the 64-row build, M = 197 and the N x K from 1024 x 4096 on in
:data:`TUNE_NK` were added to the tune on 2026-12-04; the shipped entry is their run (its provenance).

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
#: (N, K) the tune decides at: NK and short-K shapes (ViT-L's attn.proj is 1024 x 1024), so that
#: short-K layers are not decided by 4096 x 4096's times (docs/library.md says what they measured), and
#: the N x K of the real layers bench/tiles_forced.py --small-m timed at M <= 256
#: (bench/results/2026-12-04_tiles_forced_small_m_bm64_7555144.json) that are far from these in the
#: lookup's log distance: BERT-large's output.dense and ViT-L's fc2 (1024 x 4096), ViT-L's qkv (3072 x
#: 1024), GPT-2's MLP (768 x 3072 and 3072 x 768). Its 768 x 768 and 3584 x 3584 are left to 1024 x 1024's
#: and 4096 x 4096's decisions. And three weights larger than their nearest timed shape's, whose decisions
#: would otherwise come from a weight that L2 holds t times over and theirs does not: Llama-3's qkv
#: (6144 x 4096: 4096 x 4096's four tiles ran it 2x slower, 46.1 against 23.7 us at M = 64,
#: bench/results/2026-12-04_shapes_real_5models_20a70b3.json), Phi-3's qkv (9216 x 3072) and Qwen2.5's
#: down (3584 x 18944).
TUNE_NK = NK + ((1024, 1024), (4096, 1024), (1024, 4096), (3072, 1024), (768, 3072), (3072, 768),
                (6144, 4096), (9216, 3072), (3584, 18944))
TARGET_FAST, TARGET_FAST_M, TARGET_ALL, AIM_COPY_FRACTION = 1.3, (1, 16, 64), 1.0, 0.8
#: M values the tune decides at: the top of each bucket with a smaller one to split into, 96, and
#: ViT's 197 (196 patches and the class token; the forced run's M = 64, 128 and 256 are here already).
TUNE_M = (16, 32, 64, 96, 128, 192, 197, 256)
#: Seconds one timed callable takes per pass (budget 0.1 s, 4 rounds): the 2026-12-01 db221bc tune
#: timed 336 (28 shapes x 4 callables x 3 passes) in 63 s, start-up and checks included
#: (bench/results/logs/2026-12-01_session_db221bc_small_m_tune_general.log). time_fns caps a callable at
#: 500 calls a pass, which binds for kernels under budget / 500, so a smaller budget saves little here.
SECONDS_PER_CALLABLE_PASS = 0.19
#: The timed callables' names, in :func:`tune_rows`' order (cuBLAS's is "cuBLAS").
TILE_NAMES = {1: "one tile", 2: "two tiles", 3: "three tiles", 4: "four tiles"}
GENERAL_NAME, BM64_NAME = "general", "general BM 64 1 CTA"


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


def _general_routes(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor) -> list:
    """Every route dispatch finds for ``c = x @ w.T`` (dispatch.route.find_routes), on x's device."""
    from gemm_ladder.dispatch.route import device_facts, find_routes

    return find_routes(x, w.T, c, given=True, device=device_facts(x.device))[0]


def _runner(route, c: torch.Tensor):
    """``fn(x, w)`` running ``route`` for ``c = x @ w.T`` into ``c``."""
    from gemm_ladder.dispatch.execute import run

    def fn(x, w):
        run(route, x, w.T, c)
        return c
    return fn


def general_route(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor):
    """The route dispatch would take for ``c = x @ w.T`` were the small-M kernel not there: the general
    kernel's routes only, chosen as dispatch.route.choose chooses them (fewest copies, then the cost
    model's (BN, split)); and ``fn(x, w)`` running it into ``c``."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.route import choose

    route = choose([r for r in _general_routes(x, w, c) if r.kind == "general"],
                   dispatch.cost_model(dispatch.device_facts(x.device)))
    if route is None:
        raise RuntimeError(f"no general-kernel route for {tuple(x.shape)} x {tuple(w.shape)}.T")
    return route, _runner(route, c)


def general_bm64_route(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor):
    """The general kernel forced to its 64-row build with one CTA per cluster for ``c = x @ w.T``, at the
    (BN, split) the cost model ranks fastest for that build (dispatch.route.choose_general_build: what
    dispatch runs where the small-M table says GENERAL_BM64, there at the table's BN); and ``fn(x, w)``
    running it into ``c``. (None, None) where that build has no route."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.route import choose_general_build
    from gemm_ladder.dispatch.small_m_tiles import BM64_CLUSTER, BM64_TILE_M

    route = choose_general_build(_general_routes(x, w, c), dispatch.cost_model(dispatch.device_facts(x.device)), bm=BM64_TILE_M,
                                 cluster=BM64_CLUSTER)
    return (None, None) if route is None else (route, _runner(route, c))


def same_launch(a, b) -> bool:
    """Whether two general routes launch the same build, orientation and split."""
    return (a.config == b.config and a.c_path.transposed == b.c_path.transposed
            and dict(a.options).get("split") == dict(b.options).get("split"))


def describe_general(route) -> str:
    """The general route in words: 'general BN 256, split none'; 'general BM 64 BN 64, 1 CTA per cluster,
    split none' for a 64-row, one-CTA build."""
    rows = " BM 64" if route.config.tile[0] == 64 else ""
    cluster = ", 1 CTA per cluster" if route.config.cluster == 1 else ""
    return f"general{rows} BN {route.bn}{cluster}, split {dict(route.options).get('split')}"


def tune_plan(dtype: str, nk=TUNE_NK, ms=TUNE_M) -> list[dict]:
    """What the tune times, decided without a GPU (routes on meta tensors, for the H200's 132 SMs): per
    (N, K) and M, the tile counts with a bucket of their own, the general route, the 64-row one-CTA build
    (None where it is the route's launch or has no route), and the names of the callables timed."""
    from gemm_ladder.dispatch.small_m_tiles import tile_bn, tile_counts

    plan = []
    for n, k in nk:
        for m in ms:
            x, w, c = (torch.empty(*s, dtype=DTYPES[dtype], device="meta") for s in ((m, k), (n, k), (m, n)))
            general, _ = general_route(x, w, c)
            bm64, _ = general_bm64_route(x, w, c)
            if bm64 is not None and same_launch(bm64, general):
                bm64 = None
            counts = tile_counts(m)
            names = [TILE_NAMES[t] for t in counts] + [GENERAL_NAME] + ([BM64_NAME] if bm64 else []) + ["cuBLAS"]
            plan.append({"m": m, "n": n, "k": k, "buckets": {t: tile_bn(m, t) for t in counts},
                         "general": describe_general(general), "bm64": describe_general(bm64) if bm64 else None,
                         "callables": names})
    return plan


def estimate(plan: list[dict], passes: int) -> tuple[int, float]:
    """The callables the tune times (cuBLAS included) and the seconds of timing expected
    (SECONDS_PER_CALLABLE_PASS each, per pass; builds not counted)."""
    callables = sum(len(p["callables"]) for p in plan)
    return callables, callables * passes * SECONDS_PER_CALLABLE_PASS


def print_plan(plan: list[dict], passes: int, detail: bool = True) -> None:
    """The estimate's line, after one line per (M, N, K) with ``detail``."""
    for p in plan if detail else ():
        extra = f", {p['bm64']}" if p["bm64"] else " (the 64-row one-CTA build: the route's own launch, or none)"
        tiles = ", ".join(f"{t} (BN {bn})" for t, bn in p["buckets"].items())
        print(f"plan M={p['m']} {p['n']}x{p['k']}: tiles {tiles}; {p['general']}{extra}; "
              f"{len(p['callables'])} callables")
    callables, seconds = estimate(plan, passes)
    print(f"tune: {len(plan)} (M, N, K), {callables} timed callables (cuBLAS included) x {passes} passes = "
          f"{callables * passes} callable-passes: about {seconds:.0f} s of timing at "
          f"{SECONDS_PER_CALLABLE_PASS} s each (the 2026-12-01 tune's rate), builds and start-up besides", flush=True)


def tune_rows(dtype: str, passes: int, budget: float, flush: str, nk=TUNE_NK, ms=TUNE_M) -> list[dict]:
    """Per (N, K) in ``nk`` and M in ``ms``: the small-M kernel in each tile count with a bucket of its
    own, the general kernel's route (:func:`general_route`) and its 64-row one-CTA build
    (:func:`general_bm64_route`, where that is another launch) checked against float64, then timed
    interleaved with cuBLAS; rows for small_m_tiles.fit (per-pass medians in microseconds). Raises
    RuntimeError on a wrong result."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.dispatch.small_m_tiles import WORDS, tile_bn, tile_counts
    from gemm_ladder.library.gemm import library_gemm

    builds = [small_m_kernel(bn) for bn in BUCKETS] + [
        library_gemm("k", "k", bn, cluster=cl, bm=bm) for bn in K.general_bns() for cl in K.general_clusters()
        for bm in K.general_tile_ms()]
    with ThreadPoolExecutor(max_workers=len(builds)) as pool:  # nvcc in parallel before the first shape
        list(pool.map(lambda kernel: kernel.build(dtype), builds))
    device = torch.device("cuda")
    rows = []
    for n, k in nk:
        for m in ms:
            x, w = random_operands(m, n, k, dtype, device, seed=m * 131 + n * 7 + k + 1)
            kernels = {t: small_m_kernel(tile_bn(m, t)) for t in tile_counts(m)}
            general, general_fn = general_route(x, w, torch.empty(m, n, dtype=DTYPES[dtype], device=device))
            bm64, bm64_fn = general_bm64_route(x, w, torch.empty(m, n, dtype=DTYPES[dtype], device=device))
            if bm64 is not None and same_launch(bm64, general):
                bm64 = None
            fns = {TILE_NAMES[t]: ours(kern, torch.empty(m, n, dtype=DTYPES[dtype], device=device))
                   for t, kern in kernels.items()}
            fns[GENERAL_NAME] = general_fn
            if bm64 is not None:
                fns[BM64_NAME] = bm64_fn
            errors = {name: check(fn, x, w, dtype) for name, fn in fns.items()}
            times: dict[str, list[float]] = {name: [] for name in [*fns, "cuBLAS"]}
            for i in range(passes):
                order = {"cuBLAS": cublas, **fns} if i % 2 == 0 else {**fns, "cuBLAS": cublas}
                for name, t in time_fns(order, x, w, budget_s=budget, rounds=4, warmup=5, flush_l2=flush).items():
                    times[name].append(t.median_ms * 1e3)
            row = {"m": m, "n": n, "k": k, "dtype": dtype}
            for t, kern in kernels.items():
                row.update({f"{WORDS[t]}_tile_bn": kern.bn, f"{WORDS[t]}_tile_us": times[TILE_NAMES[t]]})
            row.update(general_us=times[GENERAL_NAME], general_route=describe_general(general))
            if bm64 is not None:
                row.update(general_bm64_us=times[BM64_NAME], general_bm64_bn=bm64.bn,
                           general_bm64_route=describe_general(bm64))
            row.update(cublas_us=times["cuBLAS"], rel_err=errors)
            rows.append(row)
            med = {name: statistics.median(v) for name, v in times.items()}
            tiles = ", ".join(f"{TILE_NAMES[t]} (BN {kern.bn}) {med[TILE_NAMES[t]]:.1f} us"
                              for t, kern in kernels.items())
            forced = f", {describe_general(bm64)} {med[BM64_NAME]:.1f} us" if bm64 is not None else ""
            print(f"tune M={m} {n}x{k}: {tiles}, {describe_general(general)} {med[GENERAL_NAME]:.1f} us{forced}, "
                  f"cuBLAS {med['cuBLAS']:.1f} us", flush=True)
    return rows


def tuned_table(rows: list[dict], provenance: str, table: dict) -> dict:
    """``table`` (the dispatch table's JSON) with its "small_m" entry fitted to ``rows`` (tune_rows'),
    the cost model's keys unchanged."""
    from gemm_ladder.dispatch.small_m_tiles import KEY, fit

    return {**table, KEY: fit(rows, provenance).to_json()}


def parse_nk(text: str) -> tuple[tuple[int, int], ...]:
    """``--nk``: 'NxK,NxK,...' (e.g. '4096x4096,1024x1024')."""
    try:
        out = tuple((int(n), int(k)) for n, k in (item.lower().split("x") for item in text.split(",") if item))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nk {text!r}: NxK pairs separated by commas, e.g. 4096x4096,1024x1024")
    if not out or any(min(s) < 1 for s in out):
        raise argparse.ArgumentTypeError(f"--nk {text!r}: positive NxK pairs")
    return out


def parse_ms(text: str) -> tuple[int, ...]:
    """``--m``: 'M,M,...', each in 9..256 (M <= 8 has one bucket: nothing to decide)."""
    try:
        out = tuple(int(m) for m in text.split(",") if m)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--m {text!r}: integers separated by commas")
    if not out or not all(9 <= m <= 256 for m in out):
        raise argparse.ArgumentTypeError(f"--m {text!r}: each M in 9..256")
    return out


def part_name(dtype: str, nk, ms) -> str | None:
    """The results name of a tune of part of TUNE_NK x TUNE_M (None: the whole tune)."""
    if tuple(nk) == TUNE_NK and tuple(ms) == TUNE_M:
        return None
    shapes = "_".join(f"{n}x{k}" for n, k in nk) if len(nk) <= 2 else f"{nk[0][0]}x{nk[0][1]}_and_{len(nk) - 1}_more"
    rows = "" if tuple(ms) == TUNE_M else "_m" + "-".join(map(str, ms))
    return f"library_small_m_tune_{dtype}_part_{shapes}{rows}"


def _provenance(gpu: str, date: str, commit: str, output: Path, passes, flush: str, more: str = "") -> str:
    return (f"tuned on {gpu} {date} {commit}: bench/results/{output.name} (bench/library_small_m.py --tune, "
            f"{passes} passes, L2 flushed by {flush}s{more})")


def _write_table(table: dict) -> None:
    """The package's table, and on a lent machine $OUT/table.json (its copy of the tree does not come back)."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.heuristic import TABLE_PATH

    text = json.dumps(table, indent=1) + "\n"
    TABLE_PATH.write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "table.json").write_text(text)
    dispatch.clear_cache()


def _print_entry(entry: dict) -> None:
    for d in entry["decisions"]:
        tiles = ", ".join(f"{word} {d[f'{word}_tile_us']:.1f} us" for word in ("one", "two", "three", "four")
                          if f"{word}_tile_us" in d)
        forced = (f", {d['general_bm64_route']} {d['general_bm64_us']:.1f} us" if "general_bm64_us" in d else "")
        print(f"M={d['m']} {d['n']}x{d['k']}: {d.get('kernel', 'small_m')}, {d['tiles']} tile(s) "
              f"({tiles}, {d.get('general_route')} {d.get('general_us', float('nan')):.1f} us{forced})")


def tune(args) -> int:
    """--tune: time, fit, write the table (and $OUT/table.json) and the timings' JSON; a part (``--nk``
    or ``--m`` a subset) writes only its JSON, for --merge."""
    from gemm_ladder.dispatch.heuristic import TABLE_PATH
    from gemm_ladder.dispatch.small_m_tiles import fit

    nk = getattr(args, "nk", None) or TUNE_NK
    ms = getattr(args, "m", None) or TUNE_M
    print_plan(tune_plan(args.dtype, nk, ms), args.passes, detail=getattr(args, "dry_run", False))
    if getattr(args, "dry_run", False):
        return 0
    described = meta()
    part = part_name(args.dtype, nk, ms)
    name = part or f"library_small_m_tune_{args.dtype}"
    output = args.output or Path(os.environ.get("OUT") or RESULTS) / result_name(name, described)
    rows = tune_rows(args.dtype, args.passes, args.budget, args.flush, nk, ms)
    gpu = (described.get("gpu") or {}).get("name", "unknown GPU")
    provenance = _provenance(gpu, str(described.get("date") or "")[:10], (described.get("git_commit") or "unknown")[:7],
                             output, args.passes, args.flush,
                             ", a part: --merge fits the parts together" if part else "")
    record = {"provenance": provenance, "args": {"dtype": args.dtype, "passes": args.passes, "budget": args.budget,
                                                 "flush": args.flush, "nk": [list(s) for s in nk], "m": list(ms)}}
    if part:
        entry = fit(rows, provenance).to_json()
        _print_entry(entry)
        print(f"a part of the tune: the table is not written. Copy this JSON into bench/results/ with the other "
              f"parts' and run: python bench/library_small_m.py --merge bench/results/<each part>.json")
        save({"tune": {**record, "part": True, "entry": entry, "rows": rows}}, name, output)
        return 0
    table = tuned_table(rows, provenance, json.loads(TABLE_PATH.read_text()))
    _write_table(table)
    _print_entry(table["small_m"])
    print(f"wrote {TABLE_PATH} ({provenance}); copy it to src/gemm_ladder/dispatch/table.json and commit it")
    save({"tune": {**record, "entry": table["small_m"], "rows": rows}}, name, output)
    return 0


def merge(args) -> int:
    """--merge: the rows of every part's JSON (tune()'s), fitted together into the table; a merged JSON
    (its ``tune.parts`` naming the parts) written where the provenance says. No GPU."""
    import re

    from gemm_ladder.dispatch.heuristic import TABLE_PATH

    files = [Path(f) for f in args.merge]
    parts = [json.loads(f.read_text()) for f in files]
    rows = [r for p in parts for r in p["tune"]["rows"]]
    dtypes = sorted({str(r.get("dtype", args.dtype)) for r in rows})
    if len(dtypes) != 1:
        raise SystemExit(f"--merge: the parts time different dtypes ({', '.join(dtypes)})")
    for f in files:
        if f.resolve().parent != RESULTS.resolve():
            print(f"note: {f} is not in bench/results/; the provenance cites bench/results/{f.name}")

    def said(p, key, pattern):
        given = (p["tune"].get("args") or {}).get(key)
        found = re.search(pattern, p["tune"].get("provenance", ""))
        return str(given if given is not None else (found.group(1) if found else "?"))

    def joined(values):
        return " and ".join(dict.fromkeys(values))

    metas = [p.get("meta") or {} for p in parts]
    gpu = joined((m.get("gpu") or {}).get("name", "unknown GPU") for m in metas)
    dates = joined(str(m.get("date") or "")[:10] for m in metas)
    commits = joined(str(m.get("git_commit") or "unknown")[:7] for m in metas)
    passes = joined(said(p, "passes", r"(\d+) passes") for p in parts)
    flush = joined(said(p, "flush", r"L2 flushed by (\w+?)s\b") for p in parts)
    described = meta()
    name = f"library_small_m_tune_{dtypes[0]}_merged"
    output = args.output or Path(os.environ.get("OUT") or RESULTS) / result_name(name, described)
    cited = ", ".join(f"bench/results/{f.name}" for f in files)
    provenance = _provenance(gpu, dates, commits, output, passes, flush,
                             f": the rows of {cited}, fitted together by bench/library_small_m.py --merge")
    table = tuned_table(rows, provenance, json.loads(TABLE_PATH.read_text()))  # fit refuses an (M, N, K) twice
    _write_table(table)
    _print_entry(table["small_m"])
    print(f"wrote {TABLE_PATH} ({provenance}); commit it with {output.name} and the parts")
    save({"tune": {"provenance": provenance, "parts": [f.name for f in files], "entry": table["small_m"],
                   "rows": rows}}, name, output)
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
    p.add_argument("--nk", type=parse_nk, default=None,
                   help="--tune: only these N x K (e.g. 4096x4096,1024x1024; default TUNE_NK): a part, for --merge")
    p.add_argument("--m", type=parse_ms, default=None,
                   help="--tune: only these M (e.g. 128,197; default TUNE_M): a part, for --merge")
    p.add_argument("--dry-run", action="store_true",
                   help="--tune: print what it would time and the expected time, without a GPU")
    p.add_argument("--merge", nargs="+", metavar="PART_JSON", default=None,
                   help="fit the rows of these --tune parts' JSONs together into the table (no GPU)")
    add_output_argument(p)
    args = p.parse_args()
    if not args.tune and (args.dry_run or args.nk or args.m):
        p.error("--dry-run, --nk and --m go with --tune")  # exit status 2, before anything runs
    if args.merge:
        return merge(args)
    if args.tune and args.dry_run:
        return tune(args)
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
