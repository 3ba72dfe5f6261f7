"""Where the general library kernel's time goes inside one launch, on issue 23's mid-size shapes:
per-CTA timestamps around its setup, each whole tile's main loop and boundary, the stream-K tail's
hand-in, reduction and stores, and its exit (one-off).

    python bench/experiments/gemm_timeline.py [--cases "512,1024,4096;1576,1024,4096"] [--builds "route;c1 bm64 bn64 none"]
                                              [--repeats 3] [--budget 0.03] [-o OUT_DIR]
    python bench/experiments/gemm_timeline.py --prebuild [--cases ...] [--builds ...]   # compile only, no GPU

Why: the K sweep (docs/where-time-goes.md) put most of the gap to cuBLAS on 1000 x 4608 x 3584 and
12608 x 1024 x 4096 in a fixed cost (13-14 us more than cuBLAS's, not growing with K), and the forced
builds (bench/results/2026-12-04_tiles_forced_*.json) leave 512 x 1024 x 4096, 1023 x 768 x 3072 and
1576 x 1024 x 4096 at 0.76-0.84x cuBLAS with the best build that exists; a stream-K split over every
tile ("all"), which should have halved 512 x 1024 x 4096's time at 128 x 128, was slower than no
split. Which part of a launch is it: the first loads, each tile's epilogue, the split's hand-in and
reduction, or the wave's end?

**The timeline build** (``library_gemm(..., timeline=True)``: sm90_gemm.cu's GL_TIMELINE) stamps,
per CTA, %globaltimer (ns) and clock64 at the points of its TimelineSlot enum (read from the source
here): entry, setup done, the producer's first and last loads, consumer 0 ready, its first stage full
(not in the cooperative TMA-store builds at BN 256: the stamp spilled there), each of its first
``kTiles`` whole tiles' main-loop end and boundary end (packing and the early panels stored), the end of
its whole tiles (kWholeEnd) and of its stream-K segments (kTailEnd), its last stores read out of shared
memory, each consumer's exit and the CTA's exit past the final barrier; the tail's loops, hand-ins,
reductions and stores as sums over every segment, and a ping-pong consumer's turn waits as a sum; and
the SM, whole tiles, segments, hand-ins and reductions as counts, which are checked against the
launch's schedule (design/stream_k.py). Without GL_TIMELINE the stamps compile to nothing (the shipped
builds' SASS is unchanged).

**Builds** per case (``--builds``, ';'-separated): ``route`` (the dispatcher's choice for
``gemm_ladder.linear(x, w)``, when it is the general kernel), or ``[c1] [bm64|bm256] [pp] [reg] [lag2] bnN
SPLIT``, e.g. ``c1 bm64 bn64 none`` (one CTA per cluster, 64-row tiles, BN 64, no split; ``bm256``: the 256-row
tile; ``pp``: the ping-pong schedule; ``reg``: the output stored from registers; ``lag2``: two wgmma groups left
in flight behind the newest, library_gemm's release_lag=2, a measuring build). Operands x (M, K) and w (N,
K) row-major (both K-major), bf16.

**Method.** Fresh random operands per case (gates.correctness.random_operands); each build and its
timeline build computed once into a NaN-poisoned output and checked against float64 (error_bound of
cuBLAS's error, absolute_cap), a wrong one reported and not timed; then cuBLAS (``F.linear``), each
build and its timeline build timed interleaved (gates.performance.time_fns: L2 flushed by writes, launch
hidden, median of 4 rounds): the stamps' own cost is the timeline build's time over the build's. Then
``--repeats`` traced launches per timeline build, each after the same flush, between two CUDA events
(bench/small_m_timeline.py's event_timed), the stamps read back (bench/l9_timeline.py's read_global).

**Readings** (:func:`analyse`, us, median/min/max over the CTAs): ``span`` (first entry to last exit,
%globaltimer) against the event-timed launch (``outside``: what no CTA sees); ``setup``; ``ramp``
(setup to the first tile's main loop end, minus the steady loop time: the first loads' latency; not for
ping-pong, whose ``turn_wait`` is given instead); ``loop`` (a whole tile's main loop after the first)
and ``boundary`` (its epilogue until the next tile's loop starts); ``unstamped_tiles`` (tiles past the
stamped ones); the tail's ``tail_loop``, ``hand_in``, ``reduce``, ``tail_store`` and ``tail_other``
(summed over the CTA's segments); ``drain`` (to the stores read out); ``exit_gap`` (last exit - this
CTA's); and the last CTA to exit's critical path split into those parts (they add up to its span).
Whether a whole tile's K loop waits for its data or for its own math: ``full_wait`` (consumer 0's clock64
cycles inside its full-barrier waits, kFullWaitClk, in us at the CTA's clock; per K iteration and as a
share of its loops) and ``producer_lead`` (how long before consumer 0's last whole loop ended the
producer had issued its last loads: about the ring's depth unless the producer itself is late).
Writes ``gemm_timeline.json`` (bench/suite.py's meta: GPU, clocks, date, commit) and ``gemm_timeline.md``.
Exit status 1 when a build is wrong or a stamp count disagrees with the schedule.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l9_timeline import read_global, spread, timeline_enum, zero_global  # noqa: E402

#: (name, M, N, K): the plain mid-size rows below 0.85x cuBLAS with every build forced (tiles_forced),
#: the two fixed-cost rows of the K sweep, and a control.
CASES = (
    ("bert_large output.dense 512", 512, 1024, 4096),
    ("gpt2 mlp.c_proj 1023", 1023, 768, 3072),
    ("vit_l16 mlp.fc2 1576", 1576, 1024, 4096),
    ("phi3_mini mlp.down_proj 333", 333, 3072, 8192),
    ("qwen2.5_7b qkv_proj 1000", 1000, 4608, 3584),
    ("vit_l16 mlp.fc2", 12608, 1024, 4096),
    ("square 4096", 4096, 4096, 4096),
)
#: The builds traced per case unless --builds says otherwise: the route, the best forced build at 512 x
#: 1024 x 4096 (BM 64 BN 64, one CTA), the same with two wgmma groups in flight (release lag 2), and the
#: 128 x 128 tile whole and split over every tile.
BUILDS = ("route", "c1 bm64 bn64 none", "c1 bm64 lag2 bn64 none", "c1 bn128 none", "c1 bn128 all")
SOURCE = "library/sm90_gemm.cu"
#: Rows of the stamp arrays (timeline.cuh's GL_TIMELINE_CTAS default).
TIMELINE_CTAS = 4096
#: A CTA's consecutive parts from its entry to its exit (:func:`analyse`).
PHASES = ("setup", "ramp_and_loops", "boundaries", "unstamped_tiles", "tail_loop", "hand_in", "reduce", "tail_store",
          "tail_other", "drain", "exit")


def parse_build(text: str) -> dict | None:
    """``route``, or ``[c1|c2] [bm64|bm128|bm256] [pp] [reg] [lag2] bnN SPLIT`` as library_gemm keywords plus
    ``split`` (``{"route": True}`` for the route; ``bm256``: the 256-row tile; ``pp``: the ping-pong schedule,
    library_gemm's pingpong=True; ``reg``: the output stored from registers, c_from_registers=True; ``lag2``: two
    wgmma groups in flight, release_lag=2); None when malformed or not a configuration library_gemm builds (BN 77,
    or the 256-row tile at BN 192 with the TMA store, say)."""
    words = text.split()
    if words == ["route"]:
        return {"route": True}
    out = {"cluster": 2, "bm": 128}
    for w in words[:-1]:
        if w in ("c1", "c2"):
            out["cluster"] = int(w[1])
        elif w in ("bm64", "bm128", "bm256"):
            out["bm"] = int(w[2:])
        elif w == "pp":
            out["pingpong"] = True
        elif w == "reg":
            out["c_from_registers"] = True
        elif re.fullmatch(r"bn\d+", w):
            out["bn"] = int(w[2:])
        elif w == "lag2":
            out["release_lag"] = 2
        else:
            return None
    from gemm_ladder.library.gemm import SPLITS

    if not words or words[-1] not in SPLITS or "bn" not in out:
        return None
    try:  # a width, tile height or lag the kernel is not built with is malformed too
        build_of(out)
    except ValueError:
        return None
    out["split"] = words[-1]
    return out


def build_of(spec: dict):
    """The library kernel of a parsed ``[c1|c2] ... bnN SPLIT`` spec (:func:`parse_build`); ValueError where
    library_gemm does not build it."""
    from gemm_ladder.library.gemm import library_gemm

    return library_gemm("k", "k", spec["bn"], cluster=spec["cluster"], bm=spec["bm"],
                        pingpong=spec.get("pingpong", False), c_from_registers=spec.get("c_from_registers", False),
                        release_lag=spec.get("release_lag", 1))


def timeline_slots() -> tuple[dict[str, int], int, int, int]:
    """The kernel's TimelineSlot enum and stamp-array width read from its source: (name without its k ->
    slot for the points and counts, the first whole tile's slot kTile0, the tiles stamped kTiles, the
    arrays' GL_TIMELINE_SLOTS)."""
    from gemm_ladder.runtime.compiler import KERNEL_ROOT

    width = re.search(r"#define GL_TIMELINE_SLOTS (\d+)", (KERNEL_ROOT / SOURCE).read_text())
    assert width, f"{SOURCE} has no GL_TIMELINE_SLOTS"
    values = timeline_enum(SOURCE)
    tile0, tiles = values.pop("Tile0"), values.pop("Tiles")
    assert sorted(values.values()) == list(range(len(values))) == list(range(tile0)), values
    assert tile0 + 2 * tiles <= int(width.group(1)), (tile0, tiles, width.group(1))
    return values, tile0, tiles, int(width.group(1))


def _us(ns: float) -> float:
    return ns / 1e3


def analyse(ns: list[list[int]], *, slots: dict[str, int], tile0: int, tiles: int, whole: list[int],
            segments: list[int], hand_ins: list[int], event_us: float | None, pingpong: bool = False,
            clk: list[list[int]] | None = None, k_tiles: int | None = None) -> dict:
    """The readings of one traced launch (module docstring) from its per-CTA stamps ``ns`` (one row per
    CTA, indexed by ``slots`` and kTile0 + 2i (+1)). ``whole``/``segments``/``hand_ins``: each CTA's whole
    tiles, stream-K segments and hand-ins (consumer 0's) by the launch's schedule; a count stamped
    otherwise raises AssertionError (stale or wrong stamps). Each CTA's time from entry to exit is split
    into the consecutive parts of :data:`PHASES` (so the critical path's parts add up to its span): the
    stamped whole tiles' loops and boundaries, the tiles past the stamped ones up to kWholeEnd, the
    stream-K tail from kWholeEnd to kTailEnd split by the kernel's sums over every segment (its loops,
    hand-ins, reductions and stores; ``tail_other`` the rest), the drain and the exit. ``pingpong``: a
    ping-pong build, whose consumer 0 waits for its turn inside each tile's interval (``turn_wait_us``),
    so a tile's ``loop`` is its period less its boundary, and ``ramp`` is not given.

    Where is a K loop's time, the consumer's or the feed's: ``full_wait_us`` (consumer 0's cycles in its
    whole tiles' waits for a stage's data, kFullWaitClk, in us at the CTA's own clock: ``clk``, the clock64
    stamps, gives its cycles per ns from kEntry to kExit), per K iteration (``k_tiles`` its iterations a
    tile) and as a share of its stamped loops (CTAs whose every whole tile is stamped). The bracket holds
    the wait's own stage and barrier arithmetic and one try_wait (tens of cycles an iteration: a review of
    the SASS), so a small figure is a floor, not zero. ``producer_lead_us``: how long before consumer 0's
    last whole loop ended the producer had issued the last whole tile's loads (kProducerWhole). The
    producer issues a stage's loads when that stage is freed, so the lead is about the ring's depth less
    one in iterations whether the consumer or the feed sets the pace; a much shorter lead shows a producer
    that is itself late (waiting on its issue, or on a peer CTA's release)."""
    s = slots
    for i, r in enumerate(ns):
        got = (r[s["WholeTiles"]], r[s["Segments"]], r[s["HandIns"]])
        assert got == (whole[i], segments[i], hand_ins[i]), f"CTA {i}: stamped {got}, scheduled {(whole[i], segments[i], hand_ins[i])}"
    exits = [r[s["Exit"]] for r in ns]
    t0, t_end = min(r[s["Entry"]] for r in ns), max(exits)

    def phases(i: int) -> dict[str, float]:
        """CTA i's time from entry to exit in consecutive parts (us); a boundary not stamped (0: the stamps
        are zeroed before each launch) is skipped."""
        r, out = ns[i], {}
        t = r[s["Entry"]]

        def part(name: str, until: int) -> None:
            nonlocal t
            if until >= t:
                out[name] = out.get(name, 0.0) + _us(until - t)
                t = until

        part("setup", r[s["Setup"]])
        loops = []
        for j in range(min(whole[i], tiles)):
            loops.append(_us(r[tile0 + 2 * j] - t))
            part("ramp_and_loops", r[tile0 + 2 * j])
            part("boundaries", r[tile0 + 2 * j + 1])
        # Tiles past the stamped ones, or (all stamped) the last tile's deferred panels: a boundary.
        part("unstamped_tiles" if whole[i] > tiles else "boundaries", r[s["WholeEnd"]])
        start = t
        tail_parts = {"tail_loop": s["TailLoopSum"], "hand_in": s["HandInSum"], "reduce": s["ReduceSum"],
                      "tail_store": s["TailStoreSum"]}
        for name, slot in tail_parts.items():
            out[name] = _us(r[slot])
        part("tail_other", r[s["TailEnd"]])
        out["tail_other"] = out.get("tail_other", 0.0) - sum(out[n] for n in tail_parts)
        if t == start:  # kTailEnd not past kWholeEnd: the sums must be zero too
            out["tail_other"] = 0.0
        part("drain", r[s["StoresRead"]])
        part("exit", r[s["Exit"]])
        out["_loops"] = loops
        return out

    per = [phases(i) for i in range(len(ns))]
    steady = [x for p in per for x in p["_loops"][1:]]
    loop_us = statistics.median(steady) if steady else None
    first = [p["_loops"][0] for p in per if p["_loops"]]
    last = max(range(len(ns)), key=lambda i: exits[i])
    per_tile_boundary = [p["boundaries"] / min(whole[i], tiles) for i, p in enumerate(per) if whole[i] and "boundaries" in p]
    span = _us(t_end - t0)

    def over(name: str, rows=None) -> dict:
        return spread([p.get(name, 0.0) for i, p in enumerate(per) if rows is None or rows(i)])

    # consumer 0's waits for data (cycles at the CTA's clock), where it has whole tiles
    waits = {}
    if clk is not None:
        for i, r in enumerate(ns):
            cycles, dt = r[s["FullWaitClk"]], r[s["Exit"]] - r[s["Entry"]]
            dclk = clk[i][s["Exit"]] - clk[i][s["Entry"]]  # 0 where the clock row was not stamped
            if whole[i] and cycles and dt > 0 and dclk > 0:
                waits[i] = cycles / (dclk / dt) / 1e3
    all_stamped = [i for i in waits if whole[i] <= tiles and per[i]["_loops"]]
    # the producer's lead on consumer 0's last stamped loop end, where every whole tile is stamped
    leads = [_us(ns[i][tile0 + 2 * (whole[i] - 1)] - ns[i][s["ProducerWhole"]]) for i in range(len(ns))
             if 0 < whole[i] <= tiles and ns[i][s["ProducerWhole"]] and not pingpong]

    return {
        "ctas": len(ns), "span_us": span, "event_us": event_us,
        "outside_us": None if event_us is None else event_us - span,
        "entry_skew_us": _us(max(r[s["Entry"]] for r in ns) - t0),
        "setup_us": over("setup"),
        "first_full_us": spread([_us(r[s["FirstFull"]] - r[s["Setup"]]) for r in ns if r[s["FirstFull"]]]),
        "loop_us": spread(steady), "first_loop_us": spread(first),
        "ramp_us": spread([f - loop_us for f in first]) if loop_us is not None and not pingpong else {},
        "boundary_per_tile_us": spread(per_tile_boundary),
        "turn_wait_us": spread([_us(r[s["TurnWaitSum"]]) for r in ns]) if pingpong else {},
        # ping-pong: a stamped tile's loop less its share of the CTA's turn waits (all its tiles' waits summed)
        "loop_less_turn_wait_us": spread([(sum(p["_loops"]) - _us(ns[i][s["TurnWaitSum"]]) * len(p["_loops"]) / whole[i])
                                          / len(p["_loops"]) for i, p in enumerate(per) if p["_loops"]]) if pingpong else {},
        "unstamped_tiles_us": over("unstamped_tiles", lambda i: whole[i] > tiles),
        "tail_loop_us": over("tail_loop", lambda i: segments[i] > 0),
        "hand_in_us": over("hand_in", lambda i: hand_ins[i] > 0),
        "reduce_us": over("reduce", lambda i: ns[i][s["Reductions"]] > 0),
        "tail_store_us": over("tail_store", lambda i: segments[i] > 0),
        "tail_other_us": over("tail_other", lambda i: segments[i] > 0),
        "drain_us": over("drain", lambda i: ns[i][s["StoresRead"]] > 0),
        "exit_gap_us": spread([_us(t_end - e) for e in exits]),
        "full_wait_us": spread(list(waits.values())),
        "full_wait_per_iteration_us": spread([w / (whole[i] * k_tiles) for i, w in waits.items()]) if k_tiles else {},
        "full_wait_share": spread([waits[i] / sum(per[i]["_loops"]) for i in all_stamped]),
        "producer_lead_us": spread(leads),
        "critical": {"cta": last, "entry_offset_us": _us(ns[last][s["Entry"]] - t0), "whole_tiles": whole[last],
                     "segments": segments[last], **{k + "_us": per[last].get(k, 0.0) for k in PHASES}},
    }


def schedule_counts(kernel, m: int, n: int, k: int, split: str, resident: int):
    """The launch's stream-K schedule (library.gemm.split_schedule) and, per CTA of its grid, consumer 0's
    whole tiles (a ping-pong build's consumer 0 takes every other one), segments and hand-ins (a segment
    of a split unit hands in)."""
    from gemm_ladder.design.problem import ceil_div
    from gemm_ladder.library.gemm import split_schedule

    tail = split_schedule(kernel._units(m, n), resident, ceil_div(k, kernel.tile[2]), split, kernel.stream_k_min_idle)
    whole_end = tail.first_unit if tail.tail_units else tail.units
    whole, segments, hand_ins = [], [], []
    for cta in range(tail.clusters * kernel.cluster):
        c = cta // kernel.cluster
        mine = range(c, whole_end, tail.clusters)
        whole.append(len(mine[::2]) if kernel.pingpong else len(mine))  # ping-pong: consumer 0 takes every other tile
        segs = tail.segments(c) if tail.tail_units else []
        segments.append(len(segs))
        hand_ins.append(sum(1 for g in segs if g.contributors > 1))
    return tail, whole, segments, hand_ins


def builds_for(case: tuple, specs: list[dict]):
    """label -> (library kernel, split) of the case's builds; the route only where it is the general kernel."""
    from gemm_ladder import dispatch
    from gemm_ladder.library.gemm import kernel_for

    name, m, n, k = case
    out = {}
    for spec in specs:
        if spec.get("route"):
            x = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
            w = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
            route = dispatch.decide(x, w.T, torch.empty(m, n, dtype=torch.bfloat16, device="meta"), given=False)
            if route.kind != "general" or route.c_path.transposed:
                continue
            kernel = kernel_for(route.config.with_epilogue(None))
            split = dict(route.options).get("split") or kernel.default_split
            out[f"route ({kernel.name} {split})"] = (kernel, split)
        else:
            kernel = build_of(spec)
            out[f"{kernel.name} {spec['split']}"] = (kernel, spec["split"])
    return out


def timeline_of(kernel):
    """The timeline build of ``kernel``'s configuration."""
    from gemm_ladder.library.gemm import library_gemm

    return library_gemm(kernel.a_major, kernel.b_major, kernel.tile[1], c_from_registers=kernel.c_from_registers,
                        cluster=kernel.cluster, bm=kernel.tile[0], pingpong=kernel.pingpong, timeline=True,
                        release_lag=kernel.release_lag)


def prebuild(cases, specs: list[dict]) -> int:
    """Compile every build the run would launch, and its timeline build, into the kernel cache (no GPU:
    the route is decided on meta tensors for the H200); 0 when all are ready."""
    from suite import prebuild as compile_all

    return compile_all([kern for case in cases for kernel, _ in builds_for(case, specs).values()
                        for kern in (kernel, timeline_of(kernel))])


def run_case(case: tuple, specs: list[dict], repeats: int, budget: float) -> dict:
    from small_m_timeline import event_timed

    from gemm_ladder.contract import reference
    from gemm_ladder.design.problem import ceil_div
    from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
    from gemm_ladder.gates.performance import time_fns
    from gemm_ladder.gpu import l2_bytes
    from gemm_ladder.library.operand import operand_view

    name, m, n, k = case
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=zlib.crc32(name.encode()))
    ref = reference(x, w)
    torch_out = F.linear(x, w)
    torch_err = float((torch_out.double() - ref).norm() / ref.norm())
    bound, cap = error_bound(torch_err, "bf16"), absolute_cap(x, w, float(ref.abs().max()), "bf16")
    a, b = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    fns, rows, traced = {"cuBLAS": lambda *_: F.linear(x, w)}, {}, {}
    slots, tile0, tiles, width = timeline_slots()
    for label, (kernel, split) in builds_for(case, specs).items():
        tl = timeline_of(kernel)
        for tag, kern in (("", kernel), (" timeline", tl)):
            c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            launch = kern.bind(a, b, c, split=split)
            launch()
            err = float((c.double() - ref).norm() / ref.norm())
            ok = err <= bound and float((c.double() - ref).abs().max()) <= cap
            rows[label + tag] = {"rel_err": err, "ok": ok, "name": kern.name, "split": split}
            if ok:
                fns[label + tag] = (lambda launch=launch: lambda *_: launch())()
                if tag:
                    traced[label] = (kern, split, launch)
    times = time_fns(fns, x, w, budget_s=budget, rounds=4)
    for key, t in times.items():
        rows.setdefault(key, {})["us"] = t.median_ms * 1e3
    cublas_us = rows["cuBLAS"]["us"]
    for key, r in rows.items():
        if "us" in r:
            r["vs_cublas"] = cublas_us / r["us"]
    buf = torch.empty(2 * l2_bytes(x.device), dtype=torch.uint8, device="cuda")
    for label, (kern, split, launch) in traced.items():
        loaded = kern.loaded("bf16", x.device)
        tail, whole, segments, hand_ins = schedule_counts(kern, m, n, k, split, loaded.max_active_clusters(x.device))
        ctas = len(whole)
        assert ctas <= TIMELINE_CTAS
        readings = []
        k_tiles = ceil_div(k, kern.tile[2])
        for rep in range(repeats):
            for arr in ("gl_timeline_ns", "gl_timeline_clk"):
                zero_global(loaded, arr)
            ev = event_timed(launch, buf, "write")
            nsr = read_global(loaded, "gl_timeline_ns", (TIMELINE_CTAS, width), torch.int64)[:ctas].tolist()
            clkr = read_global(loaded, "gl_timeline_clk", (TIMELINE_CTAS, width), torch.int64)[:ctas].tolist()
            readings.append(analyse(nsr, slots=slots, tile0=tile0, tiles=tiles, whole=whole, segments=segments,
                                    hand_ins=hand_ins, event_us=ev, pingpong=kern.pingpong, clk=clkr,
                                    k_tiles=k_tiles))
        rows[label]["trace"] = {"grid": ctas, "units": tail.units, "tail_units": tail.tail_units,
                                "max_contributors": tail.max_contributors, "readings": readings}
    return {"case": name, "M": m, "N": n, "K": k, "cublas_rel_err": torch_err, "builds": rows}


def markdown(results: list[dict]) -> str:
    lines = ["| case | build | us | vs cuBLAS | stamps' cost | span | outside | setup | ramp | loop | boundary/tile "
             "| turn wait | unstamped | tail loop | hand-in | reduce | tail store | tail other | drain | exit gap (max) "
             "| data wait / iteration | data wait share | producer lead |",
             "|" + "---|" * 23]

    def med(d: dict) -> str:
        return f"{d['median']:.2f}" if d else "-"

    for res in results:
        for label, r in res["builds"].items():
            if label == "cuBLAS" or label.endswith(" timeline") or "trace" not in r:
                continue
            t = r["trace"]["readings"][0]
            tl = res["builds"].get(label + " timeline", {})
            cost = f"{tl['us'] / r['us']:.3f}" if "us" in tl and "us" in r else "-"
            lines.append(f"| {res['case']} | {label} | {r.get('us', float('nan')):.1f} | {r.get('vs_cublas', float('nan')):.3f} "
                         f"| {cost} | {t['span_us']:.1f} | {t['outside_us']:.1f} | {med(t['setup_us'])} | {med(t['ramp_us'])} "
                         f"| {med(t['loop_us'])} | {med(t['boundary_per_tile_us'])} | {med(t['turn_wait_us'])} "
                         f"| {med(t['unstamped_tiles_us'])} | {med(t['tail_loop_us'])} | {med(t['hand_in_us'])} "
                         f"| {med(t['reduce_us'])} | {med(t['tail_store_us'])} | {med(t['tail_other_us'])} "
                         f"| {med(t['drain_us'])} | {t['exit_gap_us'].get('max', 0):.1f} "
                         f"| {med(t.get('full_wait_per_iteration_us'))} | {med(t.get('full_wait_share'))} "
                         f"| {med(t.get('producer_lead_us'))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=None, help="';'-separated M,N,K (default: CASES)")
    p.add_argument("--builds", default=None, help=f"';'-separated builds (default: {'; '.join(BUILDS)})")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=float, default=0.03)
    p.add_argument("-o", "--output", type=Path, default=None, help="output folder (default $OUT/gemm_timeline)")
    p.add_argument("--prebuild", action="store_true", help="compile every build into the kernel cache and exit (no GPU)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        print(f"gemm_timeline.py: --repeats {args.repeats}: at least 1", file=sys.stderr)
        return 2
    specs = [parse_build(b.strip()) for b in (args.builds.split(";") if args.builds else BUILDS)]
    if any(s is None for s in specs):
        print(f"gemm_timeline.py: --builds {args.builds!r}: each 'route' or '[c1] [bm64|bm256] [pp] [reg] [lag2] bnN SPLIT'", file=sys.stderr)
        return 2
    cases = CASES
    if args.cases:
        try:
            cases = tuple((f"{m}x{n}x{k}", m, n, k) for m, n, k in
                          (tuple(int(v) for v in c.split(",")) for c in args.cases.split(";")))
        except ValueError:
            print(f"gemm_timeline.py: --cases {args.cases!r}: ';'-separated M,N,K", file=sys.stderr)
            return 2
    if args.prebuild:
        return prebuild(cases, specs)
    from suite import require_gpu, save

    require_gpu(__file__)
    import os

    out_dir = args.output or Path(os.environ.get("OUT", "/tmp")) / "gemm_timeline"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = [run_case(c, specs, args.repeats, args.budget) for c in cases]
    table = markdown(results)
    print(table)
    (out_dir / "gemm_timeline.md").write_text(table)
    save({"cases": results}, "gemm_timeline", out_dir / "gemm_timeline.json")
    wrong = [f"{r['case']} {label}" for r in results for label, b in r["builds"].items() if b.get("ok") is False]
    if wrong:
        print("WRONG: " + ", ".join(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
