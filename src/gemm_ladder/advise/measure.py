"""Measured facts: the gates run now on this GPU, or a results JSON's rows for a level or a user kernel.

Both go through the same reading: :func:`gemm_ladder.advise.stopping.judge_climb` over a result dict
(docs/results-schema.md) gives each level's ratio to cuBLAS, to the level below and its roofline
fraction; a user's rows (``kind`` "user") are compared with cuBLAS and with the reference level
timed beside them.
"""

from __future__ import annotations

from typing import Any

from gemm_ladder.advise.climb_data import timed_rows
from gemm_ladder.advise.evidence import Evidence
from gemm_ladder.advise.stopping import compare, geomean, judge_climb


def correctness_counts(result: dict[str, Any], *, kind: str, level: int | None, dtype: str) -> dict[str, int]:
    """{status: count} over the rows of one target (a level number, or kind 'user')."""
    out: dict[str, int] = {}
    for r in result.get("rows") or []:
        if r.get("kind") == kind and r.get("level") == level and r.get("dtype") == dtype:
            status = str(r.get("status"))
            out[status] = out.get(status, 0) + 1
    return out


def add_level_result_facts(ev: Evidence, result: dict[str, Any], level: int, source: str, *, label: str = "measured",
                           prefix: str = "climb", who: str | None = None) -> None:
    """The figures of ladder level ``level`` in ``result``: vs cuBLAS, vs the level below, roofline, verdict.

    Facts added (``prefix`` "climb" for a results file, "measured" for gates run now): ``.correctness``
    (rows by status), ``.vs_cublas`` ({"gain", "noise"}: geometric mean of cuBLAS's time over the level's,
    and the noise it is judged against), ``.roofline`` (fraction), ``.stopping`` (the stopping rule's verdict).

    ``who`` names the kernel in the sentences (default "level N"); ``label`` is "measured" for the level
    itself and "assumed" when the figures stand in for a user's kernel at the same rung.
    """
    who = who or f"level {level}"
    verdict = next((v.verdict(level) for v in judge_climb(result) if v.dtype == ev.dtype), None)
    counts = correctness_counts(result, kind="level", level=level, dtype=ev.dtype)
    if counts:
        ev.add(f"{prefix}.correctness", counts, f"{who}: rows by status {counts} ({ev.dtype})", label, source)
    if verdict is None or verdict.vs_cublas is None or not verdict.vs_cublas.measured:
        ev.add(f"{prefix}.vs_cublas", None, f"{who}: no timed row in {ev.dtype} (nothing to compare with cuBLAS)",
               label, source)
        return
    ev.add(f"{prefix}.vs_cublas", {"gain": verdict.vs_cublas.gain, "noise": verdict.vs_cublas.noise}, f"{who} against cuBLAS (the practical roofline, same run): "
           f"{verdict.vs_cublas.figures()}", label, source)
    if verdict.roofline_fraction is not None:
        ev.add(f"{prefix}.roofline", verdict.roofline_fraction, f"{who}: {verdict.roofline_fraction:.0%} of the roofline "
               "(geomean of min(peak, intensity x measured DRAM bandwidth))", label, source)
    ev.add(f"{prefix}.stopping", verdict.verdict, f"stopping rule on {who}: {verdict.reason}", label,
           source + "; gemm_ladder.advise.stopping")


def add_user_result_facts(ev: Evidence, result: dict[str, Any], source: str, *, reference: int | None = None,
                          label: str = "measured") -> None:
    """The figures of the user's rows (kind 'user') in ``result``: correctness, vs cuBLAS, roofline fraction,
    and vs the ladder's level ``reference`` when it was timed beside them."""
    rows = timed_rows(result, ev.dtype)
    mine = [r for r in rows if r.kind == "user"]
    counts = correctness_counts(result, kind="user", level=None, dtype=ev.dtype)
    if counts:
        ev.add("measured.correctness", counts, f"your kernel: rows by status {counts} ({ev.dtype})", label, source)
    if not mine:
        ev.add("measured.vs_cublas", None, f"your kernel: no timed row in {ev.dtype}", label, source)
        return
    vs = compare(mine, [r for r in rows if r.kind == "cublas"], None, None)
    ev.add("measured.vs_cublas", {"gain": vs.gain, "noise": vs.noise}, f"your kernel against cuBLAS (same run): {vs.figures()}, {vs.noise_statement()}",
           label, source)
    fractions = [r.roofline_fraction for r in mine if r.roofline_fraction]
    if fractions:
        fraction = geomean(fractions)
        ev.add("measured.roofline", fraction, f"your kernel: {fraction:.0%} of the roofline (geomean of min(peak, "
               "intensity x measured DRAM bandwidth))", label, source)
    if reference is not None:
        ref = compare(mine, [r for r in rows if r.kind == "level" and r.level == reference], None, reference)
        if ref.measured:
            ev.add("measured.vs_reference", ref.gain, f"your kernel against the ladder's level {reference} (same run): "
                   f"{ref.figures()}", label, source)


def run_gates_now(targets: list[Any], dtype: str, shapes: list[tuple[str, tuple[int, int, int]]],
                  arch: str = "sm_90a") -> dict[str, Any]:
    """Run every gate on ``targets`` on this GPU (tables to stderr, so a JSON answer stays clean)."""
    from rich.console import Console

    from gemm_ladder.gates.climb import command_line, run_gates

    return run_gates(targets, [dtype], shapes, arch=arch, command=command_line(), console=Console(stderr=True, width=160))


def add_grid_fact(ev: Evidence, level: Any, shape: tuple[int, int, int]) -> None:
    """The grid the level's launcher really starts on this GPU (occupancy API) against the tile count."""
    import torch

    from gemm_ladder.design.problem import ceil_div

    if not callable(getattr(level, "grid", None)):
        return
    m, n, _ = shape
    try:
        grid = level.grid(m, n, ev.dtype, torch.device("cuda"))
    except Exception as exc:  # noqa: BLE001 - the grid is a report here; its absence is said
        ev.add("launch.grid", None, f"grid not read: {str(exc).splitlines()[0]}", "not run", type(level).__name__)
        return
    bm, bn, _ = level.tile
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    ctas = grid[0] * grid[1] * grid[2]
    ev.add("launch.grid", list(grid), f"at {m}x{n}: grid {grid} = {ctas} CTAs for {tiles} output tiles"
           + (" (persistent: fewer CTAs than tiles)" if ctas < tiles else ""), "measured",
           f"{type(level).__name__}.grid on this GPU (cuOccupancyMaxActiveClusters)")
