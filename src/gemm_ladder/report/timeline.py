"""Each level's pipeline timeline, drawn by the TMA pipeline designer when it is there.

The report depends on the result JSON alone; the designer is an optional guest. If it cannot be
imported, does not have a timeline renderer, or raises for a level, that level gets a one-line note
and the rest of the report is unaffected.

What the designer needs (tile, stages, cluster, consumers) is read from the level's entry in the
result: ``levels[i].pipeline = {"tile": [BM, BN, BK], "stages": S, "cluster": C, "consumers": W}``
(the same keys directly on the level entry are accepted too; an optional ``persistent`` flag is
passed on as well). The problem size is the level's
timed shape with the shortest K that the designer accepts (see :func:`problems_for`).
"""

from __future__ import annotations

import importlib
import inspect
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
    params = {
        "tile": tuple(int(t) for t in tile),
        "stages": int(stages),
        "cluster": int(cluster),
        "consumers": int(p.get("consumers") or 1),
    }
    for key in ("persistent", "producer_warpgroup", "c_aliases_stages"):  # passed on only when recorded
        if p.get(key) is not None:
            params[key] = bool(p[key])
    if p.get("c_ring"):
        params["c_ring"] = int(p["c_ring"])
    return params


def problems_for(level_number: Any, result: dict[str, Any]) -> list[tuple[int, int, int, str]]:
    """(M, N, K, dtype) candidates to plan for, best first: the level's timed shapes (else its checked
    ones), shortest K first, the largest M·N breaking ties.

    The timeline draws one tile's K loop, so its length grows with K / BK; the shortest timed K shows
    prologue, steady state and drain most legibly (and draws fastest) while still being a shape whose
    speed the page reports. Later candidates serve when the designer refuses the first (a TMA plan
    needs 16-byte row strides, which an unaligned shape does not have).
    """
    rows = [r for r in result.get("rows") or [] if r.get("kind") != "cublas" and r.get("level") == level_number
            and all(isinstance(r.get(d), int) and r.get(d) > 0 for d in ("m", "n", "k"))]
    timed = [r for r in rows if model.get(r, "performance", "tflops") is not None] or rows
    out: list[tuple[int, int, int, str]] = []
    for r in sorted(timed, key=lambda r: (r["k"], -r["m"] * r["n"])):
        problem = (r["m"], r["n"], r["k"], str(r.get("dtype") or "bf16"))
        if problem not in out:
            out.append(problem)
    return out


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


def _wants_path(renderer: Callable[..., Any]) -> bool:
    """True when the renderer takes a second required positional argument (the output path)."""
    try:
        params = list(inspect.signature(renderer).parameters.values())
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(required) >= 2


def _render(renderer: Callable[..., Any], plan: Any, tmp: Path) -> bytes | None:
    """Call the renderer with the plan, and an output path when it asks for one
    (``gemm_ladder.design.render.timeline_png(plan, path)`` writes the PNG and returns the path)."""
    out = renderer(plan, tmp) if _wants_path(renderer) else renderer(plan)
    return _as_png(out, tmp)


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
        problems = problems_for(number, result)
        if params is None:
            pictures.append(Picture(slug, label, None, "the result does not record this level's tile and stages"))
            continue
        if not problems:
            pictures.append(Picture(slug, label, None, "no non-empty shape of this level in the result"))
            continue
        pictures.append(_level_picture(plan_gemm, renderer, slug, label, params, problems, workdir))
    return pictures, ""


def _level_picture(plan_gemm: Callable[..., Any], renderer: Callable[..., Any], slug: str, label: str,
                   params: dict[str, Any], problems: list[tuple[int, int, int, str]], workdir: Path) -> Picture:
    """Plan the first candidate shape the designer accepts and draw it; else say why not (first refusal)."""
    stages, consumers = params["stages"], params["consumers"]
    config = (f"tile {'×'.join(map(str, params['tile']))}, {stages} stage{'s' * (stages != 1)}, "
              f"cluster {params['cluster']}, {consumers} consumer{'s' * (consumers != 1)}")
    first_error = None
    for m, n, k, dtype in problems:
        try:
            plan = plan_gemm(m, n, k, dtype, **params)
        except Exception as exc:  # noqa: BLE001 — the designer's refusal is shown, not raised
            first_error = first_error or f"the designer raised {type(exc).__name__}: {model.one_line(exc)}"
            continue
        title = f"{label}: {m}×{n}×{k} {dtype}, {config}"
        try:
            png = _render(renderer, plan, workdir / f"{slug}.png")
        except Exception as exc:  # noqa: BLE001
            return Picture(slug, title, None, f"the timeline renderer raised {type(exc).__name__}: {model.one_line(exc)}")
        if png is None or not png.startswith(PNG_MAGIC):
            return Picture(slug, title, None, "the designer's renderer returned no PNG")
        return Picture(slug, title, png)
    return Picture(slug, f"{label}: {config}", None, first_error or "no shape to plan")


__all__ = ["find_designer", "pipeline_params", "problems_for", "timelines"]
