"""Markdown tables and a PNG Gantt-like picture (matplotlib, Agg backend) of a :class:`Plan`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gemm_ladder.design.timeline import elide_rows, elided_iterations, simulate

if TYPE_CHECKING:
    from gemm_ladder.design.plan import Plan

#: The section headings of :func:`plan_markdown`, in order.
SECTIONS = (
    "Conclusion", "Suitability", "Tensor maps", "Shared memory", "MMA descriptors", "Issuer and consumers",
    "Load protocol", "Phase ledger", "Store protocol", "Stage ring", "Timeline", "Schedule", "Kernel defines",
    "Assumptions", "Minimal validation", "Risks and fallback",
)


def _table(header: list[str], rows: list[list]) -> list[str]:
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return out


def plan_markdown(plan: Plan) -> str:
    """The plan as Markdown: :data:`SECTIONS`, in order, with the prose of
    :func:`~gemm_ladder.design.describer.describe`."""
    from gemm_ladder.design.describer import describe

    text = describe(plan)
    bm, bn, bk = plan.tile
    L: list[str] = [
        f"# TMA pipeline plan: {plan.m}x{plan.n}x{plan.k} {plan.dtype}, tile {bm}x{bn}x{bk}, "
        f"{plan.stages} stages, cluster {plan.cluster}, {plan.consumers.warpgroups} consumer(s), {plan.arch}",
        "",
        "## Conclusion", "", text.conclusion, "",
        "## Suitability", "",
        f"TMA fits: **{'yes' if plan.suitability.fits else 'no'}**; worth it: "
        f"**{'yes' if plan.suitability.worthwhile else 'no'}**", "",
    ]
    L += [f"- {r}" for r in plan.suitability.reasons]
    if plan.suitability.alternative:
        L += [f"- alternative: {plan.suitability.alternative}"]
    L += ["", "## Tensor maps", "", "Arguments of `cuTensorMapEncodeTiled` (dimensions innermost first, strides in bytes).", ""]
    maps = plan.tensor_maps
    fields = [("tensorDataType", "data_type"), ("tensorRank", "rank"), ("globalDim", "global_dim"),
              ("globalStrides", "global_strides"), ("boxDim", "box_dim"), ("elementStrides", "element_strides"),
              ("interleave", "interleave"), ("swizzle", "swizzle"), ("l2Promotion", "l2_promotion"),
              ("oobFill", "oob_fill"), ("box bytes", "box_bytes")]
    L += _table(["argument"] + list(maps), [[f] + [getattr(maps[n], a) for n in maps] for f, a in fields])
    L += ["", *(f"- {n}: {m.description}" for n, m in maps.items())]
    s = plan.smem
    L += ["", "## Shared memory", "",
          f"Offsets from a 1024-byte-aligned base; total dynamic shared memory {s.total_bytes} bytes "
          f"(barriers end at {s.barriers_end}, + 1024 alignment slack) of {s.max_per_block} per block; "
          f"{s.ctas_per_sm} CTA(s) per SM (limited by {s.ctas_per_sm_limit}).", ""]
    L += [f"{s.c_staging}.", ""]
    L += _table(["region", "offset", "bytes"], [list(r) for r in s.regions()])
    if plan.tmem:
        t = plan.tmem
        L += ["", f"Tensor memory: accumulator uses {t.columns_used} of {t.columns_available} columns "
                  f"({t.lanes} lanes), tcgen05.alloc {t.columns_allocated} columns."]
    L += ["", "## MMA descriptors", ""]
    d = plan.wgmma_descriptors
    dfields = ["instruction", "major", "swizzle_bytes", "layout_type", "layout_type_bits", "leading_byte_offset",
               "leading_byte_offset_encoded", "stride_byte_offset", "stride_byte_offset_encoded", "base_offset",
               "k_step_bytes", "k_step_encoded", "k_steps_per_tile", "rows"]
    L += _table(["field", "A", "B"], [[f, getattr(d["a"], f), getattr(d["b"], f)] for f in dfields]
                + [["template (start address 0)", f"{d['a'].template:#018x}", f"{d['b'].template:#018x}"]])
    L += ["", f"- {d['a'].statement}", f"- {d['b'].statement}"]
    iss = plan.issuer
    L += ["", "## Issuer and consumers", "",
          f"- load issuer: thread {iss.thread} ({iss.warpgroup}); store issuer{'s' if len(iss.store_threads) > 1 else ''}: thread{'s' if len(iss.store_threads) > 1 else ''} {', '.join(map(str, iss.store_threads or (iss.store_thread,)))} "
          f"({iss.store_warpgroup}); empty-barrier arrivals: thread(s) "
          f"{', '.join(map(str, plan.consumers.release_threads))}",
          f"- issuer: {text.issuer}",
          f"- consumers: {text.consumers}",
          f"- threads per CTA: {plan.consumers.threads_per_cta}"
          + (f"; accumulator registers per consumer thread: {plan.consumers.accumulator_registers}"
             if plan.consumers.accumulator_registers else "")]
    lp = plan.load_protocol
    L += ["", "## Load protocol", "",
          f"full[s]: arrival count {lp.full_arrival_count}, expect_tx {lp.expect_tx_bytes} bytes; "
          f"empty[s]: arrival count {lp.empty_arrival_count} ({text.empty_arrivers}).", ""]
    L += [f"{i}. {step}" for i, step in enumerate(text.load_steps, 1)]
    L += ["", "## Phase ledger", "",
          "Every barrier starts in phase 0. Consumers wait full[s] for parity (i / S) & 1; the producer waits "
          "empty[s] for the opposite parity, so its first wait (parity 1) passes on a fresh barrier.", ""]
    L += _table(["iteration", "stage", "round", "full wait parity", "empty wait parity", "empty passes at once"],
                [[r.iteration, r.stage, r.round, r.full_wait_parity, r.empty_wait_parity,
                  "yes" if r.empty_passes_immediately else "no"] for r in plan.ring.ledger])
    L += ["", "## Store protocol", ""]
    L += [f"{i}. {step}" for i, step in enumerate(text.store_steps, 1)]
    L += ["", f"{text.store_never}."]
    r = plan.ring
    L += ["", "## Stage ring", ""]
    L += _table(["PIPE_DEPTH", "full barriers (init count)", "empty barriers (init count)", "initial phase",
                 "first full wait", "first empty wait", "release", "smem total", "CTAs/SM"],
                [[r.pipe_depth, f"{r.full_barriers} ({r.full_init_count})", f"{r.empty_barriers} ({r.empty_init_count})",
                  r.initial_phase, f"parity {r.first_full_wait_parity}", f"parity {r.first_empty_wait_parity}",
                  r.release_mode, r.smem_total_bytes, r.ctas_per_sm]])
    L += ["", "## Timeline", "",
          f"{plan.schedule.k_tiles} K tile(s) per output tile, {plan.stages} stage(s); release mode "
          f"`{r.release_mode}`.", ""]
    gap = elided_iterations(plan.schedule.k_tiles)
    omitted = (["…", f"… {len(gap)} iterations omitted (k = {gap.start}..{gap.stop - 1}) …", "…", "", "", "", ""]
               if gap is not None else [])
    L += _table(["phase", "iteration", "producer", "consumer", "epilogue", "stage", "parity"],
                [omitted if t is None else
                 [t.phase, "-" if t.iteration is None else t.iteration, t.producer, t.consumer, t.epilogue,
                  "-" if t.stage is None else t.stage, "-" if t.parity is None else t.parity]
                 for t in elide_rows(text.timeline)])
    if gap is not None:
        L += ["", f"Iterations {gap.start}..{gap.stop - 1} repeat the steady-state pattern (stage k % {plan.stages}, "
                  f"parity (k / {plan.stages}) & 1); the JSON plan lists every row."]
    sc = plan.schedule
    L += ["", "## Schedule", "",
          f"- tiles: {sc.m_tiles} x {sc.n_tiles} = {sc.tiles} (tails: M {sc.m_tail}, N {sc.n_tail}, K {sc.k_tail})",
          (f"- grid {sc.grid}, cluster dims {sc.cluster_dims}, {sc.ctas} resident CTAs; each CTA (cluster) walks "
           f"{sc.waves} work units on average, on {sc.sm_count} SMs" if sc.persistent else
           f"- grid {sc.grid} (x: N tiles, y: M tiles), no cluster, {sc.ctas} CTAs, {sc.waves} waves on "
           f"{sc.sm_count} SMs x {plan.smem.ctas_per_sm} CTA(s)/SM")]
    L += [f"- {n}" for n in text.schedule_notes]
    L += ["", "## Kernel defines", "", "```"] + [f"-D{k}={v}" for k, v in plan.kernel_defines().items()] + ["```"]
    L += ["", "## Assumptions", ""] + [f"- {a}" for a in text.assumptions]
    L += ["", "## Minimal validation", ""] + [f"- {v}" for v in text.validation]
    L += ["", "## Risks and fallback", ""] + [f"- {x}" for x in text.risks]
    return "\n".join(L) + "\n"


#: Idealised time units left between the drawn head and tail of an elided timeline.
GAP_WIDTH = 3.0


def timeline_png(plan: Plan, path: str | Path, *, load: float = 1.0, mma: float = 1.0) -> Path:
    """Draw the idealised schedule of one tile (loads, MMA, epilogue, store lanes) into ``path`` (PNG).

    Long K loops are elided: the prologue, the first :data:`~gemm_ladder.design.timeline.HEAD_ITERATIONS`
    iterations, a marker naming the omitted iterations, the last
    :data:`~gemm_ladder.design.timeline.TAIL_ITERATIONS` iterations and the drain; so the picture keeps
    its size, and its drawing time, whatever K is.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    k_tiles = plan.schedule.k_tiles
    bars = simulate(k_tiles=k_tiles, stages=plan.stages, load=load, mma=mma)
    gap = elided_iterations(k_tiles)
    cut = None  # (end of the drawn head, start of the drawn tail) in simulated time
    if gap is not None:
        head_end = max(b.end for b in bars if b.k is not None and b.k < gap.start)
        tail_start = min(b.start for b in bars if b.k is None or b.k >= gap.stop)
        if tail_start > head_end:
            cut = (head_end, tail_start)
            bars = [b for b in bars if b.k is None or b.k not in gap]
        else:  # only for short K with a deep ring: the tail's loads overlap the head, draw everything
            gap = None
    shift = (cut[1] - cut[0] - GAP_WIDTH) if cut else 0.0

    def x(t: float) -> float:
        return t - shift if cut and t >= cut[1] else t

    lanes = ["TMA loads", "MMA", "epilogue", "TMA store"]
    cmap = plt.get_cmap("tab10")
    end = x(max(b.end for b in bars))
    fig, ax = plt.subplots(figsize=(min(4 + 0.5 * end, 28), 3.2))
    for b in bars:
        y = len(lanes) - 1 - lanes.index(b.lane)
        color = cmap(b.stage % 10) if b.stage is not None else "0.6"
        ax.barh(y, b.end - b.start, left=x(b.start), height=0.6, color=color, edgecolor="black", linewidth=0.5)
        ax.text(x(b.start) + (b.end - b.start) / 2, y, b.label, ha="center", va="center", fontsize=7)
    step = max(1, round(end / 15))
    if cut:
        left, right = cut[0], cut[0] + GAP_WIDTH
        ax.axvspan(left, right, color="0.92", zorder=0)
        for v in (left, right):
            ax.axvline(v, color="0.4", linestyle=":", linewidth=0.8)
        ax.text((left + right) / 2, (len(lanes) - 1) / 2,
                f"…\n{len(gap)} iterations\nomitted\n(k {gap.start}..{gap.stop - 1})\n…",
                ha="center", va="center", fontsize=7)
        head_ticks = list(range(0, int(cut[0]) + 1, step))
        tail_ticks = list(range(int(-(-cut[1] // step) * step), int(end + shift) + 1, step))
        ax.set_xticks(head_ticks + [t - shift for t in tail_ticks])
        ax.set_xticklabels([str(t) for t in head_ticks + tail_ticks])
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)))
    ax.set_xlabel("time (idealised units: one load = one MMA = 1)")
    bm, bn, bk = plan.tile
    ax.set_title(f"{plan.m}x{plan.n}x{plan.k} {plan.dtype}, tile {bm}x{bn}x{bk}, {plan.stages} stages "
                 f"({k_tiles} K tiles{f', {len(gap)} omitted' if gap else ''}; colour = stage)", fontsize=9)
    ax.set_xlim(0, end * 1.02)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path
