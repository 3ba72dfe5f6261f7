"""Each level's pipeline timeline, drawn by the TMA pipeline designer when it is there.

The report depends on the result JSON alone; the designer is an optional guest. If it cannot be
imported, does not have a timeline renderer, or raises for a level, that level gets a one-line note
and the rest of the report is unaffected.

What the designer needs (tile, stages, cluster, consumers) is read from the level's entry in the
result: ``levels[i].pipeline = {"tile": [BM, BN, BK], "stages": S, "cluster": C, "consumers": W}``
(the same keys directly on the level entry are accepted too). The problem size is the level's
largest timed shape in the result, since that is the one whose speed the page is explaining.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable

from gemm_ladder.report import model
from gemm_ladder.report.charts import PNG_MAGIC, Picture, to_png

#: Names the designer's renderer may give its timeline function, most specific first.
RENDERER_NAMES = ("timeline_png", "render_timeline_png", "render_timeline", "draw_timeline", "plot_timeline", "timeline")


def find_designer() -> tuple[Callable[..., Any] | None, Callable[..., Any] | None, str]:
    """(plan_gemm, timeline renderer, reason) from :mod:`gemm_ladder.design`; reason is "" when both exist."""
    try:
        design = importlib.import_module("gemm_ladder.design")
        plan_gemm = getattr(design, "plan_gemm")
    except Exception as exc:  # noqa: BLE001 — any failure of a guest module is a note, not a crash
        return None, None, f"the pipeline designer is not available ({type(exc).__name__}: {exc})"
    try:
        render = importlib.import_module("gemm_ladder.design.render")
    except Exception as exc:  # noqa: BLE001
        return plan_gemm, None, f"the designer has no timeline renderer ({type(exc).__name__}: {exc})"
    for name in RENDERER_NAMES:
        fn = getattr(render, name, None)
        if callable(fn):
            return plan_gemm, fn, ""
    return plan_gemm, None, "gemm_ladder.design.render has no timeline function"


def pipeline_params(level: dict[str, Any], result: dict[str, Any]) -> dict[str, Any] | None:
    """plan_gemm keyword arguments of a level, from its ``pipeline`` entry; None if the result lacks them."""
    p = level.get("pipeline") if isinstance(level.get("pipeline"), dict) else level
    tile = p.get("tile")
    stages = p.get("stages")
    if not (isinstance(tile, (list, tuple)) and len(tile) == 3) or stages is None:
        return None
    cluster = p.get("cluster")
    if cluster is None:
        # the resource gate records each level's cluster size; use it before assuming 1
        cluster = next((e.get("cluster") for e in result.get("resources") or []
                        if e.get("level") == level.get("number") and e.get("cluster") is not None), 1)
    return {
        "tile": tuple(int(t) for t in tile),
        "stages": int(stages),
        "cluster": int(cluster),
        "consumers": int(p.get("consumers") or 1),
    }


def problem_for(level_number: Any, result: dict[str, Any]) -> tuple[int, int, int, str] | None:
    """(M, N, K, dtype) to plan for: the level's largest timed shape, else its largest checked one."""
    rows = [r for r in result.get("rows") or [] if r.get("kind") != "cublas" and r.get("level") == level_number
            and all(isinstance(r.get(d), int) and r.get(d) > 0 for d in ("m", "n", "k"))]
    if not rows:
        return None
    timed = [r for r in rows if model.get(r, "performance", "tflops") is not None] or rows
    best = max(timed, key=lambda r: r["m"] * r["n"] * r["k"])
    return best["m"], best["n"], best["k"], str(best.get("dtype") or "bf16")


def _as_png(out: Any, tmp: Path) -> bytes | None:
    """Accept what a renderer may reasonably return: PNG bytes, a matplotlib figure, or a file path."""
    if isinstance(out, (bytes, bytearray)):
        return bytes(out)
    if hasattr(out, "savefig"):
        return to_png(out)
    if isinstance(out, (str, os.PathLike)) and Path(out).is_file():
        return Path(out).read_bytes()
    if out is None and tmp.is_file():
        return tmp.read_bytes()
    return None


def _render(renderer: Callable[..., Any], plan: Any, tmp: Path) -> bytes | None:
    """Call the renderer with the plan, trying a path argument only if the plain call gives nothing."""
    png = _as_png(renderer(plan), tmp)
    if png is None:
        png = _as_png(renderer(plan, tmp), tmp)
    return png


def timelines(result: dict[str, Any], workdir: Path) -> tuple[list[Picture], str]:
    """One timeline picture per level (a Picture with ``png`` None and a note where there is none).

    Returns (pictures, note): ``note`` is set when the designer is missing for every level.
    ``workdir`` is a scratch folder for renderers that write files.
    """
    levels = [lv for lv in result.get("levels") or [] if isinstance(lv, dict)]
    if not levels:
        return [], "the result lists no levels"
    plan_gemm, renderer, reason = find_designer()
    if plan_gemm is None or renderer is None:
        return [], reason
    pictures = []
    for lv in levels:
        number = lv.get("number")
        label = f"L{number} {lv.get('name') or ''}".strip() if number is not None else str(lv.get("name") or "user")
        slug = f"timeline-L{number}" if number is not None else "timeline-user"
        params = pipeline_params(lv, result)
        problem = problem_for(number, result)
        if params is None:
            pictures.append(Picture(slug, label, None, "the result does not record this level's tile and stages"))
            continue
        if problem is None:
            pictures.append(Picture(slug, label, None, "no non-empty shape of this level in the result"))
            continue
        m, n, k, dtype = problem
        title = (f"{label}: {m}×{n}×{k} {dtype}, tile {'×'.join(map(str, params['tile']))}, "
                 f"{params['stages']} stages, cluster {params['cluster']}, {params['consumers']} consumer(s)")
        try:
            plan = plan_gemm(m, n, k, dtype, **params)
            png = _render(renderer, plan, workdir / f"{slug}.png")
        except Exception as exc:  # noqa: BLE001 — the designer's refusal is shown, not raised
            pictures.append(Picture(slug, title, None, f"the designer raised {type(exc).__name__}: {model.one_line(exc)}"))
            continue
        if png is None or not png.startswith(PNG_MAGIC):
            pictures.append(Picture(slug, title, None, "the designer's renderer returned no PNG"))
            continue
        pictures.append(Picture(slug, title, png))
    return pictures, ""


__all__ = ["find_designer", "pipeline_params", "problem_for", "timelines"]
