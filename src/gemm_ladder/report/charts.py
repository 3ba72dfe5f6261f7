"""The report's pictures: TFLOP/s bars and the roofline (the timelines are the designer's).

Every picture is a PNG in memory (matplotlib's Agg backend: no display, no GPU), so the HTML page
can embed it as a data: URI and the Markdown twin can write it beside itself.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: a headless CI machine has no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from gemm_ladder.report import model  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DPI = 110


@dataclass
class Picture:
    """A titled PNG (``png`` None when it could not be drawn: then ``note`` says why)."""

    slug: str  # file-name stem, unique within one report
    title: str
    png: bytes | None
    note: str = ""


def to_png(fig: Figure) -> bytes:
    """Render a matplotlib figure to PNG bytes and free it."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def _dtypes(rows: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        d = r.get("dtype")
        if d is not None and d not in seen:
            seen.append(d)
    return seen


def _tflops(row: dict[str, Any]) -> float | None:
    value = model.get(row, "performance", "tflops")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _series_label(row: dict[str, Any]) -> str:
    return model.row_title(row)


def level_colors(result: dict[str, Any]) -> dict[str, Any]:
    """One colour per level series for the whole report, so L4 is the same colour in every chart."""
    names: list[str] = []
    for r in sorted((r for r in result.get("rows") or [] if r.get("kind") != "cublas"), key=model.level_sort_key):
        if _series_label(r) not in names:
            names.append(_series_label(r))
    cmap = plt.get_cmap("viridis")
    colors = {name: cmap(0.1 + 0.8 * i / max(1, len(names) - 1)) for i, name in enumerate(names)}
    colors["cuBLAS"] = "black"
    return colors


MARKERS = "ovs^Dph<>P"


def level_markers(result: dict[str, Any]) -> dict[str, str]:
    """One roofline marker per level series, stable across dtypes like the colours."""
    return {name: MARKERS[i % len(MARKERS)] for i, name in enumerate(n for n in level_colors(result) if n != "cuBLAS")}


#: Size of the bar chart and the roofline (inches): side by side they fit one 1400-pixel-wide screen.
FIGURE_SIZE = (6.4, 3.9)


def bar_figure(result: dict[str, Any], dtype: str) -> Figure | None:
    """The grouped bar chart of ``dtype``: a group per timed shape, a bar per level, cuBLAS beside
    them; None when nothing of ``dtype`` was timed. The legend sits above the axes (the tick labels
    name the shapes below), so no label can cover another.

    Only shapes with at least one timing appear (edge shapes are checked, not timed). A bar of a
    failed row is hatched, because a fast wrong kernel must not read as a win.
    """
    rows = model.ordered_rows(result)
    palette = level_colors(result)
    timed = [r for r in rows if r.get("dtype") == dtype and _tflops(r) is not None]
    if not timed:
        return None
    shapes: list[tuple[Any, Any, Any]] = []
    labels: dict[tuple[Any, Any, Any], str] = {}
    for r in timed:
        key = model.shape_key(r)
        if key not in shapes:
            shapes.append(key)
            labels[key] = model.shape_label(r)
    series: list[tuple[tuple[int, float, str], str]] = []
    for r in sorted(timed, key=model.level_sort_key):
        entry = (model.level_sort_key(r), _series_label(r))
        if entry not in series:
            series.append(entry)
    names = [name for _, name in series]
    is_cublas = {_series_label(r): r.get("kind") == "cublas" for r in timed}
    # first value per (series, shape): a shape listed by two sets was timed twice, show one
    value: dict[tuple[str, Any], dict[str, Any]] = {}
    for r in timed:
        value.setdefault((_series_label(r), model.shape_key(r)), r)

    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=FIGURE_SIZE)
    handles = []
    for i, name in enumerate(names):
        xs, ys, hatches = [], [], []
        for j, key in enumerate(shapes):
            r = value.get((name, key))
            if r is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(_tflops(r))
            hatches.append("xx" if model.is_failed(r) else "")
        cublas = is_cublas[name]
        color = "black" if cublas else palette.get(name, "grey")
        bars = ax.bar(xs, ys, width=width, color=color, edgecolor="white" if cublas else "black", linewidth=0.4)
        # legend proxies, so a series whose first bar failed is not drawn hatched in the legend
        handles.append(Patch(facecolor=color, edgecolor="black", linewidth=0.4, label=name))
        for bar, hatch in zip(bars, hatches):
            if hatch:
                bar.set_hatch(hatch)
                bar.set_edgecolor("red")
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.set_xticks(range(len(shapes)))
    rotate = len(shapes) > 3
    ax.set_xticklabels([labels[k] for k in shapes], rotation=25 if rotate else 0, ha="right" if rotate else "center",
                       fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylabel("TFLOP/s", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if any(model.is_failed(r) for r in timed):
        handles.append(Patch(facecolor="white", edgecolor="red", hatch="xx", label="failed a gate"))
    ax.legend(handles=handles, fontsize=7, ncol=min(4, len(handles)), loc="lower left", bbox_to_anchor=(0, 1.01),
              frameon=False, handlelength=1.2, columnspacing=1.0, borderaxespad=0)
    fig.suptitle(f"TFLOP/s per level beside cuBLAS ({dtype}), per timed shape M×N×K", fontsize=9)
    fig.tight_layout()
    return fig


def bar_charts(result: dict[str, Any]) -> list[Picture]:
    """:func:`bar_figure` of each dtype as a PNG."""
    pictures = []
    for dtype in _dtypes(model.ordered_rows(result)):
        fig = bar_figure(result, dtype)
        if fig is None:
            continue
        timed = [r for r in model.ordered_rows(result) if r.get("dtype") == dtype and _tflops(r) is not None]
        note = "Hatched red bars: rows that failed a gate." if any(model.is_failed(r) for r in timed) else ""
        pictures.append(Picture(f"bars-{dtype}", f"TFLOP/s, {dtype}", to_png(fig), note))
    return pictures


def roofline_figure(result: dict[str, Any], dtype: str) -> tuple[Figure | None, list[str]]:
    """(figure, notes) of the roofline of ``dtype``: log-log TFLOP/s against FLOP/byte with both
    ceilings as lines, the legend to the right of the axes; figure None when no row of ``dtype`` has
    both a speed and an intensity.

    The compute ceiling is ``ceilings.peak_tflops[dtype]``; the bandwidth ceiling is
    ``ceilings.dram_gbs × intensity``. A ceiling the file does not give is left out and said so.
    """
    rows = model.ordered_rows(result)
    peaks = model.get(result, "ceilings", "peak_tflops") or {}
    dram = model.get(result, "ceilings", "dram_gbs")
    dram_gbs = float(dram) if isinstance(dram, (int, float)) and not isinstance(dram, bool) and dram > 0 else None
    points = [(r, model.intensity(r), _tflops(r)) for r in rows if r.get("dtype") == dtype]
    points = [(r, x, y) for r, x, y in points if x is not None and x > 0 and y is not None]
    if not points:
        return None, []
    peak = peaks.get(dtype) if isinstance(peaks, dict) else None
    peak = float(peak) if isinstance(peak, (int, float)) and not isinstance(peak, bool) and peak > 0 else None

    xs = [x for _, x, _ in points]
    ys = [y for _, _, y in points]
    x_lo, x_hi = min(xs) / 3, max(xs) * 3
    if peak and dram_gbs:
        ridge = peak * 1e3 / dram_gbs  # FLOP/byte where the two ceilings meet
        x_lo, x_hi = min(x_lo, ridge / 3), max(x_hi, ridge * 3)
    fig, ax = plt.subplots(figsize=FIGURE_SIZE)
    ax.set_xscale("log")
    ax.set_yscale("log")
    grid = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    notes = []
    if dram_gbs:
        bw = [dram_gbs * x / 1e3 for x in grid]  # GB/s × FLOP/byte = GFLOP/s; /1e3 → TFLOP/s
        if peak:
            bw = [min(b, peak) for b in bw]
        ax.plot(grid, bw, color="tab:blue", lw=1.5, label=f"DRAM {dram_gbs:,.0f} GB/s × intensity")
    else:
        notes.append("no bandwidth ceiling: the run measured no DRAM bandwidth")
    if peak:
        ax.axhline(peak, color="tab:red", lw=1.5, label=f"peak {peak:,.1f} TFLOP/s")
    else:
        notes.append(f"no compute ceiling: the result gives no peak for {dtype}")

    level_names = []
    for r, _, _ in sorted(points, key=lambda p: model.level_sort_key(p[0])):
        name = _series_label(r)
        if r.get("kind") != "cublas" and name not in level_names:
            level_names.append(name)
    colors = level_colors(result)
    marker_of = level_markers(result)
    for r, x, y in points:
        name = _series_label(r)
        if r.get("kind") == "cublas":
            ax.scatter([x], [y], marker="*", s=120, color="black", edgecolor="white", zorder=4)
        else:
            failed = model.is_failed(r)
            ax.scatter([x], [y], marker=marker_of[name], s=36, zorder=3,
                       color="none" if failed else colors[name], edgecolor="red" if failed else "black",
                       linewidth=1.5 if failed else 0.5)
    # legend proxies: one per series in its normal style, whatever its first point's status
    handles, _ = ax.get_legend_handles_labels()
    for name in level_names:
        handles.append(Line2D([], [], ls="none", marker=marker_of[name], markersize=6,
                              markerfacecolor=colors[name], markeredgecolor="black", label=name))
    if any(r.get("kind") == "cublas" for r, _, _ in points):
        handles.append(Line2D([], [], ls="none", marker="*", markersize=10, color="black", label="cuBLAS"))
    if any(model.is_failed(r) for r, _, _ in points):
        handles.append(Line2D([], [], ls="none", marker="o", markersize=6, markerfacecolor="none",
                              markeredgecolor="red", markeredgewidth=1.5, label="failed a gate"))
        notes.append("hollow red markers: rows that failed a gate")
    top = max(ys + ([peak] if peak else []))
    ax.set_ylim(min(ys) / 3, top * 2)
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)", fontsize=8)
    ax.set_ylabel("TFLOP/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(which="both", alpha=0.25)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(f"Roofline ({dtype})", fontsize=9)
    fig.tight_layout()
    return fig, notes


def roofline_charts(result: dict[str, Any]) -> list[Picture]:
    """:func:`roofline_figure` of each dtype as a PNG, its notes as the caption."""
    pictures = []
    for dtype in _dtypes(model.ordered_rows(result)):
        fig, notes = roofline_figure(result, dtype)
        if fig is not None:
            pictures.append(Picture(f"roofline-{dtype}", f"Roofline, {dtype}", to_png(fig), "; ".join(notes)))
    return pictures
