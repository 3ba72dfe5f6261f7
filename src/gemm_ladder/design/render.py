"""Markdown tables and a PNG Gantt-like picture (matplotlib, Agg backend) of a :class:`Plan`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from gemm_ladder.design.timeline import TimelineConfig, elide, elide_rows, elided_iterations, pipeline_picture

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


#: Width of one character of a bar's label at 6.5 pt (inches), to leave out labels that do not fit.
LABEL_IN_PER_CHAR = 0.045

#: Colours of the bars that are not a stage's load or MMA.
STEP_COLOURS = {"epilogue": "0.55", "store": "0.75", "pack": "0.85", "panel": "#9ecae1", "partial": "#fdae6b",
                "fixup": "#e6550d"}


def timeline_png(plan: Plan, path: str | Path) -> Path:
    """Draw what one CTA of ``plan`` does over time into ``path`` (PNG) and return the path.

    The picture is :func:`gemm_ladder.design.timeline.pipeline_picture` of the plan, elided
    (:func:`~gemm_ladder.design.timeline.elide`) so that its size does not grow with K: a lane per
    role (producer, each consumer warpgroup, the TMA stores, the cluster peer), a bar per load, MMA and
    epilogue step coloured by stage, numbered marks for what the plan adds (tile boundaries with the
    ring position carried, multicast, the cluster-wide release, the stream-K piece), grey bands for
    the elided stretches, and the legend's lines below.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    pic = elide(pipeline_picture(TimelineConfig.from_plan(plan)))
    lanes = pic.lanes
    y_of = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    end = max([pic.end, *(b for _, b, _ in pic.gaps)])
    width = min(16.0, max(8.0, 6.0 + 0.14 * end))
    # the legend's lines, wrapped to the figure (7 pt: about LABEL_IN_PER_CHAR * 1.1 inch per character)
    chars = int((width - 0.3) / (LABEL_IN_PER_CHAR * 1.1))
    lines = [part for line in (*pic.notes, *(f"({i}) {m.text}" for i, m in enumerate(pic.marks, 1)))
             for part in textwrap.wrap(line, chars, subsequent_indent="    ")]
    height = 1.0 + 0.42 * len(lanes) + 0.17 * len(lines)
    fig, ax = plt.subplots(figsize=(width, height))
    cmap = plt.get_cmap("tab10")
    axes_in = width - 2.4  # the lane labels take about this much of the figure's width
    for st in pic.steps:
        y = y_of[st.lane]
        colour = cmap(st.stage % 10) if st.stage is not None else STEP_COLOURS.get(st.kind, "0.6")
        h, yc = (0.28, y - 0.2) if st.thin else (0.6, y)
        ax.barh(yc, st.end - st.start, left=st.start, height=h, color=colour, edgecolor="black", linewidth=0.4)
        if not st.thin and (st.end - st.start) / (end * 1.01) * axes_in >= LABEL_IN_PER_CHAR * (len(st.label) + 1):
            ax.text((st.start + st.end) / 2, yc, st.label, ha="center", va="center", fontsize=6.5)
    for a, b, text in pic.gaps:
        ax.axvspan(a, b, color="0.92", zorder=0)
        ax.text((a + b) / 2, (len(lanes) - 1) / 2, f"… {text} …", ha="center", va="center", fontsize=6,
                rotation=90)
    for i, m in enumerate(pic.marks, 1):
        if m.to_lane is None:
            ax.axvline(m.time, color="0.25", linestyle="--", linewidth=0.8)
            ax.text(m.time, len(lanes) - 0.38, f"({i})", ha="center", va="bottom", fontsize=7,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "0.4", "lw": 0.5})
        else:
            ax.annotate("", xy=(m.to_time, y_of[m.to_lane]), xytext=(m.time, y_of[m.lane]),
                        arrowprops={"arrowstyle": "->", "color": "crimson", "lw": 1.0})
            ax.text(m.time, y_of[m.lane] + 0.32, f"({i})", ha="center", va="bottom", fontsize=7, color="crimson")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)), fontsize=8)
    ax.set_ylim(-0.6, len(lanes) + 0.1)
    ax.set_xlim(0, end * 1.01)
    ax.set_xticks([])
    ax.set_xlabel("time (idealised; grey bands: stretches left out)", fontsize=8)
    bm, bn, bk = plan.tile
    ax.set_title(f"{plan.m}x{plan.n}x{plan.k} {plan.dtype}, tile {bm}x{bn}x{bk}, {plan.stages} stage"
                 f"{'s' * (plan.stages != 1)}, cluster {plan.cluster}, {plan.consumers.warpgroups} consumer warpgroup"
                 f"{'s' * (plan.consumers.warpgroups != 1)}{', persistent' if plan.persistent else ''}"
                 f"{', stream-K tail' if plan.schedule.stream_k and plan.schedule.stream_k.get('tail_units') else ''}",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.17 * len(lines) / height, 1, 1))
    for i, line in enumerate(lines):
        fig.text(0.01, (0.17 * (len(lines) - i) - 0.05) / height, line, fontsize=7, ha="left", va="center")
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path
