"""Where the small-M kernel's time goes inside one launch, and the variants worth timing against it.

    python bench/small_m_timeline.py [--cases "1,4096,4096;16,28672,8192"] [--passes 2]
                                     [--trace-flush write,read] [--trace-repeats 3] [-o OUT.json]

Cases: M in {1, 16, 64, 128, 256} on 4096 x 4096, M = 16 on 28672 x 8192 and 14336 x 4096 (y = x @ w.T,
x (M, K) and w (N, K) row-major, bf16: F.linear's layout, as bench/library_small_m.py).

**Timeline.** The kernel's measuring build (``SmallMGemm(bn, timeline=True)``: GL_TIMELINE, the stamps
of its TimelineSlot enum, kernels/include/gemm_ladder/timeline.cuh) writes, per CTA, %globaltimer (ns)
and clock64 at: entry, setup done (barriers initialised, __syncthreads), the producer's first and last
load, consumer 0 ready, its first stage full, its last K tile done, its last partial handed in, its
last reduction done, its last store issued, and each consumer's exit; and the CTA's SM, segment count,
hand-ins and reductions. Per case the script launches it ``--trace-repeats`` times after each
``--trace-flush`` mode (``write``: the timed benchmarks' L2 flush, which leaves L2 full of dirty lines;
``read``: L2 cold and clean), each launch between two CUDA events with the host's launch hidden (a
spin kernel queued before the start event), and reads the stamps back (the read/zero helpers are
bench/l9_timeline.py's). %globaltimer and the events are different clocks, so no stamp is compared
with an event: the launch's own span (first CTA entry to last CTA exit, on %globaltimer) is compared
with the event-timed duration of the same launch, and the difference ("outside") is what the CTAs
never see: the front end starting the grid, the first CTA's launch, and the grid's completion reaching
the end event. An empty launch (one element filled, same method) gives that difference's floor.

**Timing.** cuBLAS, the shipped kernel, its timeline build (what the stamps cost) and the variants,
timed interleaved in ``--passes`` passes (gates.performance.time_fns, L2 flushed by writes before every
call, the order alternating between passes, as bench/library_small_m.py; its ``ours`` and ``check``
are reused): every variant's result is checked against float64 first, and one that fails or is
refused is reported, not timed. Variants (all plan options that exist: nothing here changes a
kernel):

* ``half ring``: SmallMGemm(bn, stages = half the deepest ring), still one CTA per SM (384 threads x
  168 registers fill the SM's register file whatever the ring), so a shallower ring alone;
* ``2 CTAs/SM``: SmallMGemm(bn, ctas_per_sm=2) at BN <= 64: launch bounds of two CTAs per SM (80
  registers, 96 for the consumers) and the deepest ring that fits in half the SM, so twice the CTAs
  (the grid rule takes the build's occupancy) each with half the stages: the "half ring, two CTAs
  per SM" experiment;
* ``splits=s``: each unit's K in s even ranges (classic split-K) instead of the rule's choice (s = 8
  only where that stays within two CTAs per SM);
* ``BN=b``: the bucket that takes M in two M tiles (more units, a smaller x tile, a deeper ring; each
  weight tile is read once per M tile, the second time from L2 if the first is still there);
* ``general BN=b``: the general library kernel (library.gemm.library_gemm) at M >= 128, split "all"
  (stream-K over every tile), x on its M: the dispatcher never picks it there.

The timeline build is traced for the shipped choice, the half ring, two CTAs per SM and, at M >= 128,
the two-tile bucket.

Output: three tables and one JSON (bench/suite.py's save: GPU, clocks, date, commit; per case the
dispatcher's route on this device (``explain``), every variant's pass medians and error, and each
traced launch's readings, the first of each flush mode with its per-CTA stamps under ``raw``).

* one launch as a whole: ``event`` (event-timed launch), ``span`` (first CTA entry to last CTA exit),
  ``outside`` (event - span: grid start and completion, never seen by a CTA; compare with the empty
  launch in the title), ``entry skew`` (when the last CTA started), ``stream window`` (first stage
  full anywhere to last K tile done anywhere) with the weight's bytes and every stage's bytes over
  it (GB/s, to set against the copy rate), the last CTA to exit with its span split in entry offset +
  entry to first stage full + streaming + after its last K tile, and the SM clock;
* each CTA's phases (median (min-max) over CTAs): ``setup`` (entry to barriers ready), ``1st load
  latency`` (the producer's first load to the first stage full), ``to 1st full``, ``stream`` (first
  stage full to last K tile done), ``hand-in`` (last K tile to partial counted), ``reduce`` (the last
  contributor's reduction), ``after loop`` (last K tile to exit), ``exit gap`` (last exit - this exit);
* interleaved timings: per variant its us (and the passes' range), cuBLAS's time over it, the shipped
  build's time over it, and the fewest bytes over its time against the copy rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
from l9_timeline import read_global, spread, timeline_enum, zero_global
from library_small_m import check, ours
from rich.console import Console
from rich.table import Table
from suite import add_output_argument, require_gpu, save

from gemm_ladder import explain
from gemm_ladder.contract import DTYPES, cublas
from gemm_ladder.design.problem import ceil_div
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import SPIN_CLOCK_HZ, measure_dram_bandwidth, time_fns
from gemm_ladder.gpu import l2_bytes
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import BK, SOURCE, TILE_ROWS, SmallMGemm, bucket, small_m_gemm
from gemm_ladder.shapes import gemm_min_bytes

CASES = ((1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096),
         (16, 28672, 8192), (16, 14336, 4096))
#: Rows of the kernel's stamp arrays (timeline.cuh's defaults).
TIMELINE_CTAS, TIMELINE_SLOTS = 4096, 16


def timeline_slots() -> dict[str, int]:
    """The kernel's TimelineSlot enum (name without its k -> slot), read from its source: one truth."""
    slots = timeline_enum(SOURCE)
    assert sorted(slots.values()) == list(range(len(slots))) and len(slots) <= TIMELINE_SLOTS, slots
    return slots


def _us(ns: float) -> float:
    return ns / 1e3


def analyse(ns: list[list[int]], clk: list[list[int]], *, slots: dict[str, int], iters: list[int],
            stage_bytes: int, weight_bytes: int, event_us: float | None) -> dict:
    """The readings of one traced launch from its per-CTA stamps (``ns``/``clk``: one row per CTA of the
    grid, indexed by ``slots``; ``iters``: each CTA's K iterations, from the schedule).

    Times in us. ``span``: first entry to last exit; ``outside``: ``event_us`` - span; ``entry_skew``:
    last entry - first; ``setup``, ``first_load`` (entry to the producer's first load), ``first_full``
    (entry to the first stage full), ``first_load_latency`` (first load to first stage full),
    ``stream`` (first stage full to last K tile done), ``after_loop`` (last K tile to exit: hand-in,
    reduction, store), ``hand_in`` (last K tile to partial handed in, CTAs that handed one in),
    ``reduce`` (hand-in to reduction done, reducing CTAs), ``exit_gap`` (last exit - this exit):
    median/min/max over CTAs. ``stream_window``: first stage full anywhere to the last K tile done
    anywhere; ``weight_gbs_window`` the weight's bytes over it, ``stage_gbs_window`` every stage byte
    (weight and x tiles) over it; ``critical``: the last CTA to exit, its time split in entry offset,
    to first full, stream and after_loop (they add up to the span).
    """
    s = slots
    exits = [max(r[s["Exit0"]], r[s["Exit1"]]) for r in ns]
    t0, t_end = min(r[s["Entry"]] for r in ns), max(exits)
    span = _us(t_end - t0)

    def per_cta(a: str, b: str, rows=None) -> list[float]:
        rows = range(len(ns)) if rows is None else rows
        return [_us(ns[i][s[b]] - ns[i][s[a]]) for i in rows]

    handed = [i for i, r in enumerate(ns) if r[s["HandIns"]] > 0]
    reduced = [i for i, r in enumerate(ns) if r[s["Reductions"]] > 0]
    stream = per_cta("FirstFull", "LoopEnd")
    window = _us(max(r[s["LoopEnd"]] for r in ns) - min(r[s["FirstFull"]] for r in ns))
    last = max(range(len(ns)), key=lambda i: exits[i])
    r = ns[last]
    sms = [r[s["SmId"]] for r in ns]
    per_sm = max(sms.count(x) for x in set(sms))
    ghz = [(c[s["Exit0"]] - c[s["Entry"]]) / (r[s["Exit0"]] - r[s["Entry"]]) for r, c in zip(ns, clk)
           if r[s["Exit0"]] > r[s["Entry"]]]
    out = {
        "ctas": len(ns), "sms": len(set(sms)), "ctas_per_sm_max": per_sm, "span_us": span,
        "event_us": event_us, "outside_us": None if event_us is None else event_us - span,
        "entry_skew_us": _us(max(r[s["Entry"]] for r in ns) - t0),
        "setup_us": spread(per_cta("Entry", "Setup")), "first_load_us": spread(per_cta("Entry", "FirstLoad")),
        "first_full_us": spread(per_cta("Entry", "FirstFull")),
        "first_load_latency_us": spread(per_cta("FirstLoad", "FirstFull")),
        "stream_us": spread(stream), "stream_window_us": window,
        "weight_gbs_window": weight_bytes / (window * 1e-6) / 1e9 if window > 0 else None,
        "stage_gbs_window": sum(iters) * stage_bytes / (window * 1e-6) / 1e9 if window > 0 else None,
        "stage_gbs_per_cta": spread([it * stage_bytes / (t * 1e-6) / 1e9 for it, t in zip(iters, stream) if t > 0]),
        "after_loop_us": spread([_us(exits[i] - ns[i][s["LoopEnd"]]) for i in range(len(ns))]),
        "hand_in_us": spread(per_cta("LoopEnd", "HandIn", handed)),
        "reduce_us": spread(per_cta("HandIn", "ReduceEnd", reduced)),
        "ctas_reducing": len(reduced), "ctas_handing_in": len(handed),
        "exit_gap_us": spread([_us(t_end - e) for e in exits]),
        "critical": {"cta": last, "entry_offset_us": _us(r[s["Entry"]] - t0),
                     "to_first_full_us": _us(r[s["FirstFull"]] - r[s["Entry"]]),
                     "stream_us": _us(r[s["LoopEnd"]] - r[s["FirstFull"]]),
                     "after_loop_us": _us(exits[last] - r[s["LoopEnd"]]), "iters": iters[last]},
        "clock_ghz": spread(ghz),
    }
    return out


def _flush(buf: torch.Tensor, mode: str) -> None:
    if mode == "write":
        buf.fill_(1)  # L2 left full of dirty lines (the timed benchmarks' flush)
    elif mode == "read":
        buf.max()  # L2 left holding clean lines of the buffer
    else:
        raise ValueError(f"flush {mode!r}: use write or read")


def event_timed(fn, buf: torch.Tensor, mode: str) -> float:
    """One call of ``fn`` after an L2 flush, between two CUDA events, in us; a spin kernel queued before
    the start event keeps the GPU busy while the host submits ``fn`` (as gates.performance.time_fn)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _flush(buf, mode)
    torch.cuda._sleep(int(SPIN_CLOCK_HZ * 1e-4))
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def trace(kernel: SmallMGemm, x, w, c, splits, buf, modes, repeats: int, slots: dict[str, int]) -> list[dict]:
    """``repeats`` traced launches of the timeline build ``kernel`` per flush mode: their readings."""
    dtype = "bf16" if x.dtype == torch.bfloat16 else "fp16"
    m, n, k = x.shape[0], w.shape[0], x.shape[1]
    loaded = kernel.loaded(dtype, x.device)
    bound = kernel.bind(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, splits=splits)
    sched = kernel.schedule(m, n, k, kernel.ctas(m, n, k, loaded.max_active_clusters(x.device), splits))
    assert sched.clusters <= TIMELINE_CTAS, f"{sched.clusters} CTAs: more than the stamp arrays' {TIMELINE_CTAS} rows"
    iters = [sched.begin(i + 1) - sched.begin(i) for i in range(sched.clusters)]
    stage_bytes = (TILE_ROWS + kernel.bn) * BK * x.element_size()
    for _ in range(3):
        bound()
    torch.cuda.synchronize()
    out = []
    for mode in modes:
        for rep in range(repeats):
            for name in ("gl_timeline_ns", "gl_timeline_clk"):  # counts add up; stale stamps would read as these
                zero_global(loaded, name)
            ev = event_timed(bound, buf, mode)
            ns = read_global(loaded, "gl_timeline_ns", (TIMELINE_CTAS, TIMELINE_SLOTS), torch.int64)[:sched.clusters]
            clk = read_global(loaded, "gl_timeline_clk", (TIMELINE_CTAS, TIMELINE_SLOTS), torch.int64)[:sched.clusters]
            ns, clk = ns.tolist(), clk.tolist()
            segs = [r[slots["Segments"]] for r in ns]
            expected = [len(sched.segments(i)) for i in range(sched.clusters)]
            assert segs == expected, "the stamps' segment counts are not the schedule's: stale or wrong stamps"
            row = analyse(ns, clk, slots=slots, iters=iters, stage_bytes=stage_bytes,
                          weight_bytes=n * k * x.element_size(), event_us=ev)
            row.update(flush=mode, repeat=rep, units=sched.units, k_tiles=sched.k_tiles,
                       max_contributors=sched.max_contributors)
            if rep == 0:
                row["raw"] = {"slots": slots, "ns": ns, "clk": clk, "iters": iters}
            out.append(row)
    return out


def variants(m: int, n: int, k: int, dtype: str) -> dict[str, tuple]:
    """name -> (kernel, splits or general split, traced?) for one case (see the module docstring)."""
    shipped = small_m_gemm(m)
    bn = shipped.bn
    half = SmallMGemm(bn, stages=max(2, shipped.ring_stages(dtype) // 2))
    out = {"shipped": (shipped, None, True), f"half ring S={half.stages}": (half, None, True)}
    if bn <= 64:
        two = SmallMGemm(bn, ctas_per_sm=2)
        out[f"2 CTAs/SM S={two.ring_stages(dtype)}"] = (two, None, True)
    units = ceil_div(n, TILE_ROWS) * ceil_div(m, bn)
    for s in (2, 8) if 8 * units <= 264 else (2,):  # 8 splits of 100+ units: several waves, not worth a slot
        out[f"splits={s}"] = (shipped, s, False)
    two_tiles = bucket(ceil_div(m, 2))  # the bucket that takes M in two tiles
    if two_tiles < bn:
        out[f"BN={two_tiles}"] = (SmallMGemm(two_tiles), None, m >= 128)
    if m >= 128:
        for gbn in (128, 256):
            out[f"general BN={gbn}"] = (library_gemm("k", "k", gbn), "all", False)
    return out


def _fn(kernel, opt, c):
    if isinstance(kernel, SmallMGemm):
        return ours(kernel, c, splits=opt)

    def general(x, w):
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=opt)
        return c
    return general


def _timeline_of(kernel: SmallMGemm) -> SmallMGemm:
    return SmallMGemm(kernel.bn, stages=kernel.stages, timeline=True, ctas_per_sm=kernel.ctas_per_sm)


def precompile(cases, dtype: str) -> None:
    """Every build the run needs, in parallel (nvcc runs as its own process), so no timing waits on one."""
    jobs = {}
    for m, n, k in cases:
        for kernel, _, traced in variants(m, n, k, dtype).values():
            for kk in [kernel, _timeline_of(kernel)] if traced else [kernel]:
                key = (kk.bn, kk.stages, kk.timeline, kk.ctas_per_sm) if isinstance(kk, SmallMGemm) else id(kk)
                jobs.setdefault(key, kk)
    with ThreadPoolExecutor(os.cpu_count() or 4) as ex:
        list(ex.map(lambda kk: kk.build(dtype), jobs.values()))


def fmt(s: dict, d: int = 1) -> str:
    """``spread``'s dict as "median [min-max]"."""
    return f"{s['median']:.{d}f} [{s['min']:.{d}f}-{s['max']:.{d}f}]" if s else "-"


def tables(results: list[dict], modes: list[str], *, empty_us: float, copy_gbs: float, passes: int) -> list[Table]:
    """The run's three tables: each traced launch as a whole, its CTAs' phases, the interleaved timings."""
    launch = Table(title="small-M kernel, one launch as a whole (us; median over the launches of a flush mode; "
                         f"an empty launch, event-timed: {empty_us:.1f} us)")
    phases = Table(title="small-M kernel, each CTA's phases (us; the first launch of a flush mode; median, then "
                         "(min-max) over CTAs)")
    for col in ("case", "build", "flush", "CTAs/SMs", "event", "span", "outside", "entry skew", "stream window",
                "weight GB/s", "stage GB/s", "last CTA: entry+to 1st full+stream+after", "GHz"):
        launch.add_column(col, justify="right")
    for col in ("case", "build", "flush", "setup", "1st load latency", "to 1st full", "stream", "hand-in",
                "reduce", "after loop", "exit gap"):
        phases.add_column(col, justify="right")
    for r in results:
        case = f"{r['m']}x{r['n']}x{r['k']}"
        for name, launches in r["traces"].items():
            for mode in modes:
                ls = [x for x in launches if x["flush"] == mode]
                if not ls:
                    continue

                def med(key: str, d: int = 1) -> str:
                    xs = [x[key] for x in ls if x[key] is not None]
                    return f"{statistics.median(xs):.{d}f}" if xs else "-"

                first, cp = ls[0], ls[0]["critical"]
                launch.add_row(case, name, mode, f"{first['ctas']}/{first['sms']}", med("event_us"), med("span_us"),
                               med("outside_us"), med("entry_skew_us", 2), med("stream_window_us"),
                               med("weight_gbs_window", 0), med("stage_gbs_window", 0),
                               f"{cp['entry_offset_us']:.1f}+{cp['to_first_full_us']:.1f}+{cp['stream_us']:.1f}"
                               f"+{cp['after_loop_us']:.1f}", fmt(first["clock_ghz"], 2))
                phases.add_row(case, name, mode, *(fmt(first[key], 2) for key in (
                    "setup_us", "first_load_latency_us", "first_full_us", "stream_us", "hand_in_us", "reduce_us",
                    "after_loop_us", "exit_gap_us")))
    timing = Table(title=f"interleaved, L2 flushed by writes, {passes} passes (median of the pass medians); "
                         f"copy {copy_gbs:.0f} GB/s")
    for col in ("case", "BN/S", "CTAs", "variant", "us", "passes", "x cuBLAS", "x shipped", "% copy"):
        timing.add_column(col, justify="right")
    for r in results:
        case = f"{r['m']}x{r['n']}x{r['k']}"
        for name, t in r["us"].items():
            per_pass = r["us_per_pass"][name]
            timing.add_row(case, f"{r['bn']}/{r['stages']}", str(r["ctas"]), name, f"{t:.1f}",
                           f"{min(per_pass):.1f}-{max(per_pass):.1f}", f"{r['vs_cublas'][name]:.2f}",
                           f"{r['us']['shipped'] / t:.2f}" if "shipped" in r["us"] else "-",
                           f"{r['min_bytes'] / (t * 1e-6) / 1e9 / copy_gbs:.0%}")
            case = ""
        for name in r["failures"]:
            timing.add_row("", "", "", name, "fail", "", "", "", "")
    return [launch, phases, timing]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=";".join(",".join(map(str, c)) for c in CASES), help="M,N,K;M,N,K...")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--budget", type=float, default=0.1, help="seconds of timed calls per callable and pass")
    p.add_argument("--trace-flush", default="write,read", help="comma list of write, read (see event_timed)")
    p.add_argument("--trace-repeats", type=int, default=3)
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    cases = [tuple(int(v) for v in c.split(",")) for c in args.cases.split(";")]
    modes = args.trace_flush.split(",")
    device = torch.device("cuda")
    slots = timeline_slots()
    precompile(cases, args.dtype)
    copy_gbs = measure_dram_bandwidth(device)
    buf = torch.empty(2 * l2_bytes(device), dtype=torch.uint8, device=device)
    scratch = torch.empty(1, device=device)
    empty = sorted(event_timed(scratch.zero_, buf, mode) for mode in modes for _ in range(5))
    results = []
    for m, n, k in cases:
        x, w = random_operands(m, n, k, args.dtype, device, seed=m * 131 + n * 7 + k)
        c = torch.empty(m, n, dtype=DTYPES[args.dtype], device=device)
        vs = variants(m, n, k, args.dtype)
        fns, errors, failures, traces = {}, {}, {}, {}
        for name, (kernel, opt, traced) in vs.items():
            targets = {name: (kernel, opt)}
            timeline = _timeline_of(kernel) if traced else None  # one instance: one module, one stamp array
            if traced:
                targets[f"{name} (timeline build)"] = (timeline, opt)
            for label, (kk, o) in targets.items():
                try:
                    fn = _fn(kk, o, c)
                    errors[label] = check(fn, x, w, args.dtype)
                    fns[label] = fn
                except Exception as exc:  # noqa: BLE001 - a variant that fails or is refused is a result
                    if label == "shipped":
                        raise
                    failures[label] = repr(exc)[:300]
            if traced and f"{name} (timeline build)" in fns:
                try:
                    traces[name] = trace(timeline, x, w, c, opt, buf, modes, args.trace_repeats, slots)
                except Exception as exc:  # noqa: BLE001 - reported; the other builds' readings still count
                    failures[f"{name} (trace)"] = repr(exc)[:300]
        medians: dict[str, list[float]] = {name: [] for name in ["cuBLAS", *fns]}
        for i in range(args.passes):
            order = {"cuBLAS": cublas, **fns} if i % 2 == 0 else {**fns, "cuBLAS": cublas}
            for name, t in time_fns(order, x, w, budget_s=args.budget, rounds=4, warmup=5).items():
                medians[name].append(t.median_ms * 1e3)
        us = {name: statistics.median(v) for name, v in medians.items()}
        shipped = vs["shipped"][0]
        e = explain(x, w.T)  # what gemm_ladder.mm runs on this device (its occupancy, not meta's)
        route = {"kind": e.kind, "kernel": (e.kernel or {}).get("name"), "tile": e.tile, "stages": e.stages,
                 "grid": e.grid, "split": e.split}
        ctas = shipped.ctas(m, n, k, shipped.loaded(args.dtype, device).max_active_clusters(device))
        results.append({"m": m, "n": n, "k": k, "bn": shipped.bn, "stages": shipped.ring_stages(args.dtype),
                        "ctas": ctas, "route": route, "min_bytes": gemm_min_bytes(m, n, k, DTYPES[args.dtype].itemsize),
                        "rel_err": errors, "failures": failures, "us_per_pass": medians, "us": us,
                        "vs_cublas": {name: us["cuBLAS"] / t for name, t in us.items()}, "traces": traces})

    console = Console(width=250)
    for table in tables(results, modes, empty_us=statistics.median(empty), copy_gbs=copy_gbs, passes=args.passes):
        console.print(table)
    for r in results:
        for name, why in r["failures"].items():
            console.print(f"{r['m']}x{r['n']}x{r['k']} {name}: {why}")
    save({"dtype": args.dtype, "copy_gb_per_s": copy_gbs, "empty_launch_event_us": empty, "slots": slots,
          "trace_flush": modes, "cases": results}, f"small_m_timeline_{args.dtype}", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
