"""The library's benchmark: ``gemm_ladder.mm`` against cuBLAS (torch.mm on the same tensors), per class.

    python bench/library.py [--classes square,llm,layouts,unaligned,small_m,mid] [--dtype bf16]
                            [--quick] [--tune] [-o OUT.json]
    python bench/library.py --forced [--forced-shapes 1024x1024x1024,...] [-o OUT.json]
    compute-sanitizer --tool memcheck python bench/library.py --sanitize

Classes and their targets (issue 12):

* ``square``   1024^3 .. 8192^3, a row-major, b = w.T (F.linear's layout): reported.
* ``llm``      M = 4096 against Llama-3 layers' (N, K), same layout: reported.
* ``layouts``  4096^3 and 8192^3 in all four operand orders: >= 0.97x cuBLAS on the same layout, and
               each order within 3% of the row/w.T order measured in the same pass.
* ``unaligned`` 4097x4095x4093, 4096x4096x4093, 8192x8192x8191 (contiguous, odd K and N): >= 4x
               cuBLAS; aim >= 0.9x of the aligned neighbour (4096^3, 8192^3), timed in the same run.
               Where the output is stored from registers (N = 4095), the route it replaced (the
               output through a workspace and copied back) is timed in the same run too
               (``copy_back_route_ms``).
* ``small_m``  M in {1, 16, 64, 128, 256} on the llm (N, K): >= 1.3x cuBLAS for M in {1, 16, 64} at
               4096x4096, >= 1.0x everywhere else; the weight's bytes over the time, against the
               measured copy bandwidth (aim >= 80% at M <= 64).
* ``mid``      1024^3, 2048^3, 4096x1024x4096: >= 0.95x cuBLAS.

Method: per shape, fresh random operands (gates.correctness.random_operands), mm's result checked
against float64 on its first 256 rows, then ours and cuBLAS timed interleaved in one call of
gates.performance.time_fns (L2 flushed before each call, the host's launch latency hidden, median
of the calls, 4 rounds with the first one rotating). Each row carries explain()'s decision (the
designer's full plan left out). A markdown table is printed last. ``--quick`` (about 3 minutes on
the H200 once kernels are compiled) times fewer shapes for less time each.

``--tune``: times every (BN, split) the general kernel supports on a grid of shapes, fits the cost
model (dispatch.heuristic.fit) and rewrites this GPU's table (``src/gemm_ladder/dispatch/table_<name>.json``
where the package has one naming it, e.g. the H100's; else ``table.json``) with provenance "tuned on <GPU>
<date> <commit>"; the timings go in the JSON. Commit the table it writes.

``--refit RESULTS.json``: fit the cost model again to the timings a ``--tune`` run saved (its
``tune.timings``, with the model's terms as they are now: dispatch.heuristic.features) and rewrite the
table, keeping the tune's provenance; no GPU needed.

``--forced``: per shape (default FORCED_SHAPES: the mid sizes and 1024x4096x4096, row,w.T), cuBLAS,
``gemm_ladder.mm`` (the dispatcher's choice) and the general kernel forced to each built tile width and
split (``library_gemm("k", "k", bn).launch(a, b, c, split=...)``, as the tune launches them), timed
interleaved in one time_fns call; each forced configuration's output is first checked against float64
(NaN-poisoned before its launch). About 1-2 minutes on the H200 with the kernels compiled (the
builds it needs are compiled first, in parallel). Nothing is
written to the table.

``--sanitize``: every path once on small shapes (repacks, copy back, the four orders, small M and N,
K = 1, a split tail), checked against float64, for compute-sanitizer; nothing timed.

A row whose result is wrong or whose call raised (a failed build) is recorded with ``ok`` false and its
``error`` (``met`` None), and the run goes on; so is a wrong forced configuration (``--forced``: the row's
``wrong``).

Exit status: 0 when every row is correct, every target is met and every build built; 1 when a row is
wrong or failed, a target is missed (``targets_met``) or a build failed (``build_failures``), the result
written all the same; 2 for bad input (one line: ``--classes``, ``--forced-shapes``, an unreadable
``--refit`` file, an unwritable ``-o``) or no CUDA GPU, before anything runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import DTYPES, reference
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import measure_dram_bandwidth, time_fns
from gemm_ladder.shapes import SHAPE_SETS, gemm_min_bytes
from outputs import check_output, comma_list, refuse, shapes_of
from suite import RESULTS, add_output_argument, cost_table_provenance, require_gpu, result_name, save
from suite import meta as suite_meta

CLASSES = ("square", "llm", "layouts", "unaligned", "small_m", "mid")
LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)]
ORDERS = ("row,w.T", "row,row", "col,w.T", "col,row")  # a's order, b's order (w.T: K-major B)


def shapes_for(cls: str, quick: bool) -> list[tuple[str, tuple[int, int, int], float | None]]:
    """(layout, (M, N, K), target vs cuBLAS or None) of a class."""
    if cls == "square":
        sizes = (1024, 2048, 4096) if quick else (1024, 2048, 4096, 8192)
        return [("row,w.T", (s, s, s), None) for s in sizes]
    if cls == "llm":
        llm = SHAPE_SETS["llm"][:3] if quick else SHAPE_SETS["llm"]
        return [("row,w.T", s, None) for s in llm]
    if cls == "layouts":
        sizes = (4096,) if quick else (4096, 8192)
        return [(o, (s, s, s), 0.97) for s in sizes for o in ORDERS]
    if cls == "unaligned":
        shapes = [(4097, 4095, 4093), (4096, 4096, 4093)] + ([] if quick else [(8192, 8192, 8191)])
        return [("row,w.T", s, 4.0) for s in shapes]
    if cls == "small_m":
        ms = (1, 16, 64) if quick else (1, 16, 64, 128, 256)
        nks = LLM_NK[:2] if quick else LLM_NK
        return [("row,w.T", (m, n, k), 1.3 if (n, k) == (4096, 4096) and m <= 64 else 1.0) for n, k in nks for m in ms]
    if cls == "mid":
        return [("row,w.T", s, 0.95) for s in ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 4096))]
    raise ValueError(f"unknown class {cls!r}: use {', '.join(CLASSES)}")


def operands(layout: str, m: int, n: int, k: int, dtype: str, seed: int):
    """(x, y) for ``x @ y`` in ``layout``; a is (M, K), w is (N, K) from the gate's random_operands."""
    a, w = random_operands(m, n, k, dtype, "cuda", seed)
    a_order, b_order = layout.split(",")
    x = a if a_order == "row" else a.T.contiguous().T
    y = w.T if b_order == "w.T" else w.T.contiguous()
    return x, y


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / (ms * 1e-3) / 1e12


def check(x: torch.Tensor, y: torch.Tensor, rows: int = 256) -> float:
    """Relative error of mm's first ``rows`` rows against float64 (raises if not finite)."""
    c = gemm_ladder.mm(x, y)
    ref = reference(x[:rows], y.T)
    err = ((c[:rows].double() - ref).norm() / ref.norm()).item()
    if not math.isfinite(err) or err > 1e-2:
        raise RuntimeError(f"gemm_ladder.mm is wrong here: relative error {err:.3g} on the first {rows} rows")
    return err


def decision(x, y) -> dict:
    d = gemm_ladder.explain(x, y).to_dict()
    if d.get("plan"):
        d["plan"] = {"conclusion": d["plan"].get("conclusion")}
    return d


def bench_shape(cls, layout, shape, target, dtype, budget, seed, extra=None) -> dict:
    m, n, k = shape
    x, y = operands(layout, m, n, k, dtype, seed)
    err = check(x, y)
    fns = {"gemm_ladder": lambda p, q: gemm_ladder.mm(p, q), "cuBLAS": lambda p, q: torch.mm(p, q)}
    if extra:
        fns.update(extra)
    t = time_fns(fns, x, y, budget_s=budget, rounds=4, warmup=5)
    ours, cub = t["gemm_ladder"].median_ms, t["cuBLAS"].median_ms
    row = {"class": cls, "layout": layout, "m": m, "n": n, "k": k, "dtype": dtype, "rel_err_256_rows": err,
           "ours_ms": ours, "cublas_ms": cub, "ours_tflops": tflops(m, n, k, ours),
           "cublas_tflops": tflops(m, n, k, cub), "vs_cublas": cub / ours, "target_vs_cublas": target,
           "met": None if target is None else cub / ours >= target,
           "spread": {name: tm.spread for name, tm in t.items()}, "host_ms": {name: tm.host_ms for name, tm in t.items()},
           "decision": decision(x, y), "ok": True}
    for name in t:
        if name not in ("gemm_ladder", "cuBLAS"):
            row[f"{name}_ms"] = t[name].median_ms
    return row


def copy_back_route(x: torch.Tensor, y: torch.Tensor):
    """The route ``x @ y`` took before the register-store build: the general kernel's TMA store into
    a workspace, copied back (found with that build withheld from the search); None when the route
    does not store C from registers anyway."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.dispatch.route import choose, device_facts, find_routes

    c = torch.empty(x.shape[0], y.shape[1], dtype=x.dtype, device=x.device)
    if dispatch.decide(x, y, c, given=False).c_path.store != "C from registers":
        return None
    saved = K.general_from_registers
    K.general_from_registers = lambda *args, **kw: None  # the search as it was: no register-store build
    try:
        routes, _ = find_routes(x, y, c, given=False, device=device_facts(x.device))
        return choose(routes, dispatch.cost_model(device_facts(x.device)))
    finally:
        K.general_from_registers = saved


def failed_row(cls: str, layout: str, shape: tuple[int, int, int], target: float | None, dtype: str,
               exc: Exception) -> dict:
    """The row of a shape whose result was wrong or whose call raised (a failed build): recorded with its
    error, so the run goes on and the rows measured are kept; ``met`` None (a failed row meets nothing)."""
    m, n, k = shape
    return {"class": cls, "layout": layout, "m": m, "n": n, "k": k, "dtype": dtype, "target_vs_cublas": target,
            "met": None, "ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def run_class(cls: str, dtype: str, quick: bool, budget: float, copy_gbs: float | None) -> list[dict]:
    """Every shape of a class, timed (:func:`measure`); a shape that fails is a :func:`failed_row`."""
    rows = []
    for i, (layout, shape, target) in enumerate(shapes_for(cls, quick)):
        try:
            row = measure(cls, i, layout, shape, target, dtype, budget, copy_gbs)
        except Exception as exc:  # noqa: BLE001 - a wrong result or failed build: recorded, the run goes on
            row = failed_row(cls, layout, shape, target, dtype, exc)
            print(f"{cls:9} {layout:8} {'x'.join(map(str, shape))}: FAILED: {row['error']}", flush=True)
        rows.append(row)
    if cls == "layouts":  # each order against the row/w.T order of the same size, same run
        for r in rows:
            base = next((b for b in rows if b["m"] == r["m"] and b["layout"] == "row,w.T" and b["ok"]), None)
            if r["ok"] and base is not None:
                r["vs_row_wT_order"] = base["ours_ms"] / r["ours_ms"]
                r["met"] = r["met"] and r["vs_row_wT_order"] >= 0.97
    return rows


def measure(cls: str, i: int, layout: str, shape: tuple[int, int, int], target: float | None, dtype: str,
            budget: float, copy_gbs: float | None) -> dict:
    """One shape's row (:func:`bench_shape`, with the class's extras: the unaligned class's aligned neighbour
    and copy-back route, the small-M class's bandwidth); raises where the result is wrong."""
    m, n, k = shape
    extra = None
    if cls == "unaligned":  # the aligned neighbour, timed in the same run on its own operands
        s = 8192 if max(shape) > 4097 else 4096
        xn, yn = operands("row,w.T", s, s, s, dtype, seed=i)
        extra = {"aligned_neighbour": lambda p, q, xn=xn, yn=yn: gemm_ladder.mm(xn, yn)}
        route = copy_back_route(*operands_empty(layout, m, n, k, dtype))
        if route is not None:  # the same call through the workspace and copy-back, for the A/B
            from gemm_ladder.dispatch.execute import run

            extra["copy_back_route"] = lambda p, q, r=route: run(
                r, p, q, torch.empty(p.shape[0], q.shape[1], dtype=p.dtype, device=p.device))
    row = bench_shape(cls, layout, shape, target, dtype, budget, seed=1000 * i + m + n + k, extra=extra)
    if cls == "unaligned":
        s = 8192 if max(shape) > 4097 else 4096
        rate = row["ours_tflops"] / tflops(s, s, s, row["aligned_neighbour_ms"])
        row["vs_aligned_neighbour"] = rate
        row["aim_vs_aligned_neighbour"] = 0.9
        if "copy_back_route_ms" in row:
            row["vs_copy_back_route"] = row["copy_back_route_ms"] / row["ours_ms"]
            print(f"          from registers {row['ours_ms']:.3f} ms vs workspace + copy back "
                  f"{row['copy_back_route_ms']:.3f} ms = {row['vs_copy_back_route']:.3f}x", flush=True)
    if cls == "small_m" and copy_gbs:
        # The fewest bytes the call moves (each input read once, the output written once) against the
        # DRAM rate a device-to-device copy reaches (it counts the bytes it reads and writes).
        row["min_bytes_gbs"] = gemm_min_bytes(m, n, k, DTYPES[dtype].itemsize) / (row["ours_ms"] * 1e-3) / 1e9
        row["fraction_of_copy_bandwidth"] = row["min_bytes_gbs"] / copy_gbs
    print(f"{cls:9} {layout:8} {m}x{n}x{k}: {row['ours_tflops']:7.1f} vs cuBLAS {row['cublas_tflops']:7.1f} "
          f"TFLOP/s = {row['vs_cublas']:.3f}x", flush=True)
    return row


def exit_status(result: dict) -> int:
    """1 when a row is wrong or failed (``ok`` false), a target is missed or a build failed; else 0."""
    rows = result.get("rows", [])
    bad = any(r.get("ok") is False or r.get("met") is False for r in rows)
    return 1 if bad or result.get("build_failures") else 0


def prebuild(classes: list[str], dtype: str, quick: bool) -> list[str]:
    """Compile every kernel the timed shapes route to, in parallel (nvcc runs ~20 s a kernel; the
    cache keeps them): returns what failed to build."""
    from concurrent.futures import ThreadPoolExecutor

    from gemm_ladder.library.repack import REPACK

    kernels = {id(REPACK): REPACK}
    for cls in classes:
        for layout, (m, n, k), _ in shapes_for(cls, quick):
            x, y = operands_empty(layout, m, n, k, dtype)
            route = dispatch.decide(x, y, torch.empty(m, n, dtype=x.dtype, device="cuda"), given=False)
            kernels[id(route.kernel)] = route.kernel
            if cls == "unaligned" and (old := copy_back_route(x, y)) is not None:  # the A/B's other route
                kernels[id(old.kernel)] = old.kernel

    def build(kernel) -> str | None:
        try:
            kernel.build(dtype)
            return None
        except Exception as exc:  # noqa: BLE001 - reported, and the timed call will raise it again
            return f"{getattr(kernel, 'name', kernel)}: {type(exc).__name__}: {exc}".splitlines()[0]

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        return [e for e in pool.map(build, kernels.values()) if e]


def operands_empty(layout: str, m: int, n: int, k: int, dtype: str):
    """Uninitialised (x, y) in ``layout``: the route depends on layout, not values."""
    a = torch.empty(m, k, dtype=DTYPES[dtype], device="cuda")
    w = torch.empty(n, k, dtype=DTYPES[dtype], device="cuda")
    a_order, b_order = layout.split(",")
    return (a if a_order == "row" else torch.empty(k, m, dtype=a.dtype, device="cuda").T,
            w.T if b_order == "w.T" else torch.empty(k, n, dtype=a.dtype, device="cuda"))


# --- tuning -------------------------------------------------------------------------------------


def prebuild_general(dtype: str, a_major: str = "k", b_major: str = "k") -> list[str]:
    """Compile the general kernel at every built tile width for one operand order, in parallel (the
    timed calls would otherwise compile them one after another inside the timing loop)."""
    from concurrent.futures import ThreadPoolExecutor

    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import library_gemm

    def build(bn: int) -> str | None:
        try:
            library_gemm(a_major, b_major, bn).build(dtype)
            return None
        except Exception as exc:  # noqa: BLE001 - reported; the timed call raises it again
            return f"BN {bn}: {type(exc).__name__}: {exc}".splitlines()[0]

    with ThreadPoolExecutor(max_workers=3) as pool:
        return [e for e in pool.map(build, [bn for bn in K.general_bns() if K.general_built(b_major, bn)]) if e]


def cite_results(model, result_file: str):
    """``model`` with each fitted parameter's rule naming the results file its timings are saved in
    (``bench/results/<file> ('tune')``, where the lead commits it); unchanged for an empty name."""
    if not result_file:
        return model
    return replace(model, rules={name: f"{rule}: bench/results/{result_file} ('tune')"
                                 for name, rule in model.rules.items()})


def tune(dtype: str, quick: bool, budget: float, result_file: str = "") -> dict:
    """Time every (BN, split) of the general kernel on a grid, fit the cost model, write the table.

    ``result_file``: the name of the JSON this run's timings are saved in, written into each fitted
    parameter's rule (so the table names its measurement)."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.dispatch.execute import _prepare
    from gemm_ladder.dispatch.heuristic import fit, table_path_for, work

    for failure in prebuild_general(dtype):
        print(f"tune: build failed: {failure}", file=sys.stderr)
    sizes = (1024, 2048, 4096) if quick else (512, 1024, 2048, 4096, 8192)
    # K = 16384 beside 1024 and 4096: the model's per-iteration rates fitted on short K alone mis-ranked
    # long-K mid-M layers (Qwen2.5 down 1000 x 3584 x 18944: BN 192 "tail" predicted 198.1 us, ran 210.7,
    # BN 256 "none" 203.5; 2026-12-04_tiles_forced_clusters_08fda8b.json)
    shapes = sorted({(m, n, k) for m in sizes for n in sizes for k in (1024, 4096, 16384) if m * n * k <= 2**36})
    samples, timings = [], []
    clusters = dispatch.route.device_facts(torch.device("cuda")).clusters
    for m, n, k in shapes:
        x, y = operands("row,w.T", m, n, k, dtype, seed=m + n + k)
        c = torch.empty(m, n, dtype=x.dtype, device="cuda")
        route = dispatch.decide(x, y, c, given=False)
        if route.kind != "general" or route.c_path.transposed or route.c_path.workspace:
            print(f"tune {m}x{n}x{k}: not on the general kernel in place ({route.kind}); skipped", flush=True)
            continue
        jobs: list = []
        va, vb = _prepare(route.a_path, x, jobs), _prepare(route.b_path, y.T, jobs)
        assert not jobs, "an aligned row,w.T operand was repacked"
        fns = {}
        for bn in K.general_bns():
            if not K.general_built(route.b_path.major, bn):
                continue
            kernel = library_gemm(route.a_path.major, route.b_path.major, bn)
            if kernel is None or kernel.supports(va, vb, c) is not None:
                continue
            for split in kernel.splits:
                fns[(bn, split)] = lambda p, q, kernel=kernel, split=split: kernel.launch(va, vb, c, split=split)
        t = time_fns({f"{bn} {s}": f for (bn, s), f in fns.items()}, x, y, budget_s=budget, rounds=2, warmup=3)
        for (bn, split) in fns:
            us = t[f"{bn} {split}"].median_ms * 1e3
            samples.append((work(m, n, k, bn, split, clusters), us))
            timings.append({"m": m, "n": n, "k": k, "bn": bn, "split": split, "us": us})
        print(f"tune {m}x{n}x{k}: " + ", ".join(f"{name} {tm.median_ms * 1e3:.1f} us" for name, tm in t.items()),
              flush=True)
    meta = suite_meta()
    gpu = (meta.get("gpu") or {}).get("name", "unknown GPU")
    provenance = f"tuned on {gpu} {dt.date.today().isoformat()} {(meta.get('git_commit') or 'unknown')[:7]}"
    # This GPU's table: its own where the package has one (dispatch/table_<name>.json), else table.json.
    target = table_path_for(gpu)
    table = json.loads(target.read_text())
    model = cite_results(fit(samples, provenance, **beyond_l2(table)), result_file)
    # the cost model's keys; other entries (table.json's small-M "small_m", a device table's "devices") kept
    table.update(merged_model_json(table, model))
    text = json.dumps(table, indent=1) + "\n"
    target.write_text(text)
    if os.environ.get("OUT"):  # a lent machine's copy of the tree does not come back: the table does
        Path(os.environ["OUT"], target.name).write_text(text)
    dispatch.clear_cache()
    print(f"wrote {target} ({provenance}); copy it to src/gemm_ladder/dispatch/{target.name} and commit it")
    return {"provenance": provenance, "model": model.to_json(), "timings": timings}


def beyond_l2(table: dict) -> dict:
    """The table's factor on split iterations beyond L2 (heuristic.CostModel.split_iter_scale), as ``fit``'s
    keywords: the tune keeps it (fitted on other timings, not the tune's) and fits the split terms under it."""
    return {"l2_bytes": table.get("l2_bytes", 0), "split_beyond_l2_scale": table.get("split_beyond_l2_scale", 1.0)}


def merged_model_json(table: dict, model) -> dict:
    """A fitted model's table entries, keeping the table's measured (not fitted) cluster-1 and 64-row scales
    and the rules of its factor on split iterations beyond L2 (which the model carries: :func:`beyond_l2`):
    the tune times the 2-CTA, 128-row builds only."""
    out = model.to_json()
    kept = {k: v for k, v in table.get("rules", {}).items()
            if k.startswith(("cluster1_", "bm64_", "l2_bytes", "split_beyond_l2_scale"))}
    out["rules"] = {**out["rules"], **kept}
    return out


def refit(path: str) -> dict:
    """Fit the cost model to the timings of a saved ``--tune`` run (``path``'s ``tune.timings``) on the
    SM count of its GPU, and write it to the package's table; returns the model's JSON."""
    from gemm_ladder.dispatch.heuristic import fit, table_path_for, work

    saved = json.loads(Path(path).read_text())
    sms = ((saved.get("meta") or {}).get("gpu") or {}).get("sm_count") or 132
    clusters = dispatch.route.DeviceFacts("saved", sms).clusters
    samples = [(work(t["m"], t["n"], t["k"], t["bn"], t["split"], clusters), t["us"])
               for t in saved["tune"]["timings"] if t["split"] in ("none", "tail", "all", "wave")]
    provenance = saved["tune"]["provenance"]
    target = table_path_for(((saved.get("meta") or {}).get("gpu") or {}).get("name"))  # the tuned GPU's table
    table = json.loads(target.read_text())
    model = cite_results(fit(samples, provenance, **beyond_l2(table)), Path(path).name)
    table.update(merged_model_json(table, model))
    target.write_text(json.dumps(table, indent=1) + "\n")
    dispatch.clear_cache()
    print(f"refitted {target} from {len(samples)} timings of {path} ({provenance})")
    return model.to_json()


# --- forced configurations ------------------------------------------------------------------------

#: The shapes --forced times by default: the mid class (issue 12's >= 0.95x target) and its transpose.
FORCED_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 4096), (1024, 4096, 4096))


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """'MxNxK,MxNxK' -> [(M, N, K), ...]; raises ValueError naming the bad entry (or an empty list)."""
    return shapes_of("--forced-shapes", text)


def forced(dtype: str, shapes, budget: float) -> list[dict]:
    """cuBLAS, gemm_ladder.mm and every (BN, split) of the general kernel forced, interleaved per shape."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.operand import operand_view

    for failure in prebuild_general(dtype):
        print(f"forced: build failed: {failure}", file=sys.stderr)
    rows = []
    for i, (m, n, k) in enumerate(shapes):
        x, y = operands("row,w.T", m, n, k, dtype, seed=7000 + i)
        va, vb = operand_view(x, k_dim=1), operand_view(y.T, k_dim=1)
        ref = reference(x, y.T)
        fns = {"cuBLAS": lambda p, q: torch.mm(p, q), "gemm_ladder.mm": lambda p, q: gemm_ladder.mm(p, q)}
        errors, wrong = {}, {}
        for bn in K.general_bns():
            kernel = library_gemm("k", "k", bn)
            c = torch.empty(m, n, dtype=x.dtype, device="cuda")
            for split in kernel.splits:
                c.fill_(float("nan"))  # poisoned: a tile the launch misses stays NaN
                try:
                    kernel.launch(va, vb, c, split=split)
                    err = ((c.double() - ref).norm() / ref.norm()).item()
                except Exception as exc:  # noqa: BLE001 - a failed build: recorded, the others timed
                    wrong[f"BN {bn} {split}"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                    continue
                if not math.isfinite(err) or err > 1e-2:  # wrong: recorded, not timed
                    wrong[f"BN {bn} {split}"] = f"relative error {err:.3g}"
                    print(f"forced: BN {bn} split {split} is wrong at {m}x{n}x{k}: relative error {err:.3g}",
                          file=sys.stderr)
                    continue
                errors[f"BN {bn} {split}"] = err
                fns[f"BN {bn} {split}"] = lambda p, q, kernel=kernel, split=split, c=c: kernel.launch(va, vb, c,
                                                                                                    split=split)
        t = time_fns(fns, x, y, budget_s=budget, rounds=4, warmup=5)
        cub = t["cuBLAS"].median_ms
        chosen = decision(x, y)
        row = {"m": m, "n": n, "k": k, "dtype": dtype, "cublas_us": cub * 1e3,
               "us": {name: tm.median_ms * 1e3 for name, tm in t.items()},
               "vs_cublas": {name: cub / tm.median_ms for name, tm in t.items()},
               "spread": {name: tm.spread for name, tm in t.items()}, "rel_err": errors,
               "ok": not wrong, "wrong": wrong,
               "decision": {key: chosen.get(key) for key in ("tile", "split", "heuristic")}}
        best = min((name for name in t if name.startswith("BN ")), key=lambda name: t[name].median_ms, default=None)
        row["best_forced"] = best
        rows.append(row)
        print(f"forced {m}x{n}x{k}: cuBLAS {cub * 1e3:.1f} us; " + ", ".join(
            f"{name} {tm.median_ms * 1e3:.1f} us ({cub / tm.median_ms:.3f}x)" for name, tm in t.items()
            if name != "cuBLAS") + f"; best forced {best}", flush=True)
    return rows


def forced_markdown(rows: list[dict]) -> str:
    names = [name for name in rows[0]["us"] if name != "cuBLAS"] if rows else []
    out = ["| M x N x K | cuBLAS us | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in rows:
        out.append(f"| {r['m']}x{r['n']}x{r['k']} | {r['cublas_us']:.1f} | "
                   + " | ".join(f"{r['us'][nm]:.1f} ({r['vs_cublas'][nm]:.2f}x)" for nm in names) + " |")
    return "\n".join(out)


def sanitize_cases():
    """(name, x, y, out) small calls through every path: odd K and N (both operands repacked in one
    launch, the output copied back), offset bases, padded pitches, a strided view, an odd-pitch and a
    transposed out, the four orders, small M (and small N, transposed), K = 1, the split tail."""
    gen = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape):
        return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)

    yield "odd K, N", r(300, 133), r(133, 201), None  # C from registers since the register-store build
    yield "offset a", r(300 * 136 + 1)[1:].view(300, 136), r(136, 264).T.contiguous().T, None
    yield "padded b", r(264, 136), r(264, 139)[:, :136].T, None
    yield "strided a", r(300, 272)[:, ::2], r(264, 136).T, None
    yield "out odd pitch", r(300, 136), r(264, 136).T, torch.empty(300, 267, dtype=torch.bfloat16, device="cuda")[:, :264]
    yield "out transposed", r(300, 136), r(136, 264), torch.empty(264, 300, dtype=torch.bfloat16, device="cuda").T
    yield "col, row", r(136, 300).T, r(136, 264), None
    yield "K = 1", r(129, 1), r(1, 130), None
    yield "small M", r(7, 520), r(1000, 520).T, None
    yield "small N", r(1000, 520), r(520, 5), None
    yield "tail split", r(3 * 128 + 8, 200), r(200, 3 * 256 + 8), None


def forced_sanitize_cases():
    """(name, kernel, split, x, y, c) for every general build's stream-K paths, whatever the cost table
    would choose: each tile width with the TMA store and with C from registers (an odd-pitch c), split
    "tail", "all" and "wave", on a shape with M and N tails and a split tail (392 x 776 x 200); and "wave"
    over two waves of units at BN 64 (4200 x 520 x 200), where it differs from "all"."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import library_gemm

    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(392, 200, generator=gen, device="cuda").to(torch.bfloat16)
    y = torch.randn(776, 200, generator=gen, device="cuda").to(torch.bfloat16).T
    for bn in K.general_bns():  # y.T is K-major: every width, BN 192 included
        for store, kernel in (("TMA store", library_gemm("k", "k", bn)), ("C from registers", library_gemm("k", "k", bn, c_from_registers=True))):
            for split in ("tail", "all", "wave"):
                c = torch.empty(392, 779, dtype=torch.bfloat16, device="cuda")[:, :776] if store != "TMA store" \
                    else torch.empty(392, 776, dtype=torch.bfloat16, device="cuda")
                yield f"BN {bn} {store} split {split}", kernel, split, x, y, c
    # "wave" proper needs two waves of units: 33 M tiles (17 cluster rows, the last half empty) x 9 N tiles of
    # 64 = 153 units on 66 clusters, a tail of 21 + 66 units with an N tail.
    xw = torch.randn(4200, 200, generator=gen, device="cuda").to(torch.bfloat16)
    yw = torch.randn(520, 200, generator=gen, device="cuda").to(torch.bfloat16).T
    for store, kernel in (("TMA store", library_gemm("k", "k", 64)), ("C from registers", library_gemm("k", "k", 64, c_from_registers=True))):
        c = torch.empty(4200, 523, dtype=torch.bfloat16, device="cuda")[:, :520] if store != "TMA store" \
            else torch.empty(4200, 520, dtype=torch.bfloat16, device="cuda")
        yield f"BN 64 {store} split wave, two waves", kernel, "wave", xw, yw, c


def sanitize(only: str | None = None) -> int:
    """Each sanitize case once, checked against float64, then every general build's split paths forced
    (:func:`forced_sanitize_cases`); for compute-sanitizer. ``only``: just the forced cases whose name
    holds it (say "BN 192": fewer builds). Exit 1 on a wrong one."""
    from gemm_ladder.library.operand import operand_view

    bad = 0

    def check(name, x, y, c):
        nonlocal bad
        torch.cuda.synchronize()
        ref = reference(x, y.T)
        err = ((c.double() - ref).norm() / ref.norm()).item()
        ok = err < 1e-2 and not torch.isnan(c).any()
        bad += not ok
        print(f"{name}: {tuple(x.shape)} @ {tuple(y.shape)} rel_err={err:.2e} {'ok' if ok else 'WRONG'}", flush=True)

    for name, x, y, out in () if only else sanitize_cases():
        check(name, x, y, gemm_ladder.mm(x, y, out=out))
    for name, kernel, split, x, y, c in forced_sanitize_cases():
        if only and only not in name:
            continue
        c.fill_(float("nan"))
        kernel.launch(operand_view(x, k_dim=1), operand_view(y.T, k_dim=1), c, split=split)
        check(name, x, y, c)
    return 1 if bad else 0


# --- report -------------------------------------------------------------------------------------


def markdown(rows: list[dict]) -> str:
    out = ["| class | layout | M x N x K | ours TFLOP/s | cuBLAS TFLOP/s | vs cuBLAS | target | met | route |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("ok") is False:
            out.append(f"| {r['class']} | {r['layout']} | {r['m']}x{r['n']}x{r['k']} | FAILED: {r['error']} |||||| |")
            continue
        d = r["decision"]
        route = f"{d['kind']} {(d.get('kernel') or {}).get('name', '')}, split {d.get('split')}"
        repacked = [op["argument"] for op in d.get("operands", []) if op["path"] == "repacked"]
        if repacked:
            route += ", repacks " + "+".join(repacked)
        if (d.get("output") or {}).get("path", "in place") != "in place":
            route += ", c copied back"
        elif (d.get("output") or {}).get("output_path") == "C from registers":
            route += ", C from registers"
        target = "" if r["target_vs_cublas"] is None else f">= {r['target_vs_cublas']}x"
        if "vs_aligned_neighbour" in r:
            target += f"; {r['vs_aligned_neighbour']:.2f}x of aligned"
        if "fraction_of_copy_bandwidth" in r:
            target += f"; {100 * r['fraction_of_copy_bandwidth']:.0f}% of copy bw"
        if "vs_row_wT_order" in r:
            target += f"; {r['vs_row_wT_order']:.3f}x of row,w.T"
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        out.append(f"| {r['class']} | {r['layout']} | {r['m']}x{r['n']}x{r['k']} | {r['ours_tflops']:.1f} | "
                   f"{r['cublas_tflops']:.1f} | {r['vs_cublas']:.3f} | {target} | {met} | {route} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", default=",".join(CLASSES), help=f"comma list of {', '.join(CLASSES)}")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--quick", action="store_true", help="fewer shapes, less time each (about 3 minutes)")
    p.add_argument("--tune", action="store_true", help="regenerate dispatch/table.json first")
    p.add_argument("--sanitize-only", default=None, metavar="TEXT", help="with --sanitize: only the forced cases "
                   "whose name holds TEXT (say 'BN 192')")
    p.add_argument("--sanitize", action="store_true", help="run every path once on small shapes (for "
                   "compute-sanitizer) and exit; nothing timed")
    p.add_argument("--forced", action="store_true", help="time cuBLAS, mm and each (BN, split) forced on a few "
                   "shapes, interleaved (about 1-2 minutes); nothing else is run")
    p.add_argument("--forced-shapes", default=",".join("x".join(map(str, s)) for s in FORCED_SHAPES),
                   help="comma list of MxNxK for --forced")
    p.add_argument("--refit", default=None, metavar="RESULTS.json", help="fit the cost model to a saved --tune run's "
                   "timings and rewrite the table (no GPU)")
    add_output_argument(p)
    args = p.parse_args(argv)
    if args.refit:
        try:
            refit(args.refit)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            refuse(__file__, f"--refit {args.refit}: not a readable --tune result ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else exc!r})")
        return 0
    classes = comma_list(__file__, "--classes", args.classes)
    if unknown := [c for c in classes if c not in CLASSES]:
        refuse(__file__, f"--classes: unknown class {unknown}: use {', '.join(CLASSES)}")
    if args.forced:  # a bad shape list is refused before anything needs the GPU
        try:
            shapes = parse_shapes(args.forced_shapes)
        except ValueError as exc:
            refuse(__file__, str(exc))
    check_output(__file__, args.output)
    require_gpu(__file__)
    if args.sanitize:
        return sanitize(args.sanitize_only)
    if args.forced:
        rows = forced(args.dtype, shapes, 0.1)
        save({"forced": rows, "table_provenance": cost_table_provenance()}, "library_forced", args.output)
        print(forced_markdown(rows))
        return exit_status({"rows": rows})
    budget = 0.1 if args.quick else 0.3
    result: dict = {"classes": classes, "quick": args.quick}
    name = f"library_{'_'.join(classes) if len(classes) < len(CLASSES) else 'all'}{'_quick' if args.quick else ''}"
    output = args.output
    if args.tune:
        # Named before the tune rewrites table.json (which would mark the tree dirty and change the
        # default name): the table's rules cite this file, and the results are saved under it.
        if output is None:
            output = Path(os.environ.get("OUT") or RESULTS) / result_name(name, suite_meta())
        result["tune"] = tune(args.dtype, args.quick, budget, output.name)
    failed = prebuild(classes, args.dtype, args.quick)
    for f in failed:
        print(f"build failed: {f}", file=sys.stderr)
    result["build_failures"] = failed
    copy_gbs = measure_dram_bandwidth("cuda") if "small_m" in classes else None
    result["copy_gbs"] = copy_gbs
    result["table_provenance"] = cost_table_provenance()
    rows = []
    for cls in classes:
        rows += run_class(cls, args.dtype, args.quick, budget, copy_gbs)
    result["rows"] = rows
    result["targets_met"] = {f"{r['class']} {r['layout']} {r['m']}x{r['n']}x{r['k']}": r["met"]
                             for r in rows if r["met"] is not None}
    save(result, name, output)
    print(markdown(rows))
    return exit_status(result)


if __name__ == "__main__":
    sys.exit(main())
