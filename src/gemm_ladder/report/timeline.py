"""Each TMA level's pipeline timeline: the designer replans the level and draws one CTA's work.

What the designer needs is the level's ``pipeline`` entry in the result (``levels[i].pipeline``,
written by :meth:`gemm_ladder.gates.climb.Target.describe`: tile, stages, cluster, consumers,
persistent, producer_warpgroup, c_aliases_stages, c_ring, stream_k). Levels without one (the
thread-copy levels, a user's callable) have no stage ring to draw. The problem planned is one of the
level's own shapes (see :func:`problems_for`); the picture is
:func:`gemm_ladder.design.render.timeline_png`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemm_ladder.design import PlanRefused, plan_gemm
from gemm_ladder.design.render import timeline_png
from gemm_ladder.report import model
from gemm_ladder.report.charts import Picture

#: The ``pipeline`` keys passed on to plan_gemm when recorded (tile and stages are required).
FLAGS = ("persistent", "producer_warpgroup", "c_aliases_stages", "stream_k")


#: Said once under the timelines of a result whose persistent levels do not record ``stream_k``.
NO_STREAM_K = ("this result does not record which levels split a stream-K tail (results before schema 2): "
               "no tail is drawn")


def pipeline_params(level: dict[str, Any]) -> dict[str, Any] | None:
    """plan_gemm keyword arguments of a level's ``pipeline`` entry; None when it has none (or no tile
    and stage count)."""
    p = level.get("pipeline")
    if not isinstance(p, dict):
        return None
    tile, stages = p.get("tile"), p.get("stages")
    if not (isinstance(tile, list) and len(tile) == 3 and all(isinstance(t, int) for t in tile)) or not isinstance(stages, int):
        return None
    params: dict[str, Any] = {"tile": tuple(tile), "stages": stages}
    for key in ("cluster", "consumers", "c_ring"):
        if isinstance(p.get(key), int):
            params[key] = p[key]
    for key in FLAGS:
        if isinstance(p.get(key), bool):
            params[key] = p[key]
    return params


def problems_for(level_number: Any, result: dict[str, Any]) -> list[tuple[int, int, int, str]]:
    """(M, N, K, dtype) candidates to plan for, best first: the level's timed shapes (else its checked
    ones), shortest K first, the largest M·N breaking ties (the K loop is elided, so K matters little;
    the tiles per CTA and the tail come from M and N)."""
    rows = [r for r in result.get("rows") or [] if isinstance(r, dict) and r.get("kind") != "cublas"
            and r.get("level") == level_number and r.get("status") == "pass"
            and all(isinstance(r.get(d), int) and r.get(d) > 0 for d in ("m", "n", "k"))]
    timed = [r for r in rows if model.get(r, "performance", "tflops") is not None] or rows
    out: list[tuple[int, int, int, str]] = []
    for r in sorted(timed, key=lambda r: (r["k"], -r["m"] * r["n"])):
        problem = (r["m"], r["n"], r["k"], str(r.get("dtype") or "bf16"))
        if problem not in out:
            out.append(problem)
    return out


def timelines(result: dict[str, Any], workdir: Path) -> tuple[list[Picture], str]:
    """(pictures, note): one timeline per level with a ``pipeline`` entry (a Picture with ``png`` None
    and a note where the designer refuses every shape of the level or no shape passed), and a note
    for the whole section (:data:`NO_STREAM_K`) or "". ``workdir``: where the renderer writes its PNGs."""
    pictures, note = [], ""
    for lv in (lv for lv in result.get("levels") or [] if isinstance(lv, dict)):
        params = pipeline_params(lv)
        if params is None:
            continue
        if params.get("persistent") and "stream_k" not in params:
            note = NO_STREAM_K
        number = lv.get("number")
        label = f"L{number} {lv.get('name') or ''}".strip() if number is not None else str(lv.get("name") or "user")
        slug = f"timeline-L{number}" if number is not None else "timeline-user"
        problems = problems_for(number, result)
        if not problems:
            pictures.append(Picture(slug, label, None, "no shape of this level passed in the result"))
            continue
        pictures.append(_level_picture(slug, label, params, problems, workdir))
    return pictures, note


def _level_picture(slug: str, label: str, params: dict[str, Any], problems: list[tuple[int, int, int, str]],
                   workdir: Path) -> Picture:
    """Plan the first shape the designer accepts (one with a stream-K tail first, for a level that
    splits one) and draw it; else say why not (the first refusal)."""
    plans, refusal = [], ""
    for m, n, k, dtype in problems:
        try:
            plans.append(plan_gemm(m, n, k, dtype, **params))
        except (PlanRefused, ValueError) as exc:
            refusal = refusal or f"the designer refuses it: {model.one_line(exc)}"
    if not plans:
        return Picture(slug, label, None, refusal)
    plan = next((p for p in plans if (p.schedule.stream_k or {}).get("tail_units")), plans[0])
    path = timeline_png(plan, workdir / f"{slug}.png")
    return Picture(slug, f"{label}: {plan.m}×{plan.n}×{plan.k} {plan.dtype}", path.read_bytes())


__all__ = ["NO_STREAM_K", "pipeline_params", "problems_for", "timelines"]
