"""The ladder's own measured climb: finding a results JSON and reading its timings.

A results JSON is what ``gemm-ladder climb --json`` or ``gate --json`` writes (docs/results-schema.md),
read by :func:`gemm_ladder.results.load_result` (re-exported here with its ``ResultError``). The advisor
takes the expected gain of each step from one, never from constants: by default the newest
``bench/results/*climb*<dtype>*.json`` that holds timed rows, newest by its own ``meta.date``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemm_ladder.gates.performance import Timing, is_timed_shape
from gemm_ladder.results import ResultError, load_result  # the one reader of result JSONs (schemas 1 and 2)

__all__ = ["ResultError", "TimedRow", "describe_source", "find_climb_results", "gpu_name", "load_result",
           "results_dirs", "timed_rows"]


def results_dirs() -> list[Path]:
    """Where committed results live: ``bench/results`` under the current directory and under the checkout
    this package was imported from (src/gemm_ladder -> ../../bench/results), the first that exist."""
    here = Path(__file__).resolve().parents[3] / "bench" / "results"
    out = []
    for d in (Path.cwd() / "bench" / "results", here):
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


@dataclass(frozen=True)
class TimedRow:
    """One timed, passing row of a result: who, which shape, its timing and its ratios."""

    kind: str  # "level", "user" or "cublas"
    level: int | None
    name: str
    dtype: str
    shape_set: str
    shape: tuple[int, int, int]
    timing: Timing
    vs_cublas: float | None
    roofline_fraction: float | None


def timed_rows(result: dict[str, Any], dtype: str | None = None) -> list[TimedRow]:
    """Rows that passed and were timed on a shape the performance gate judges (2MNK >= MIN_TIMED_FLOPS).

    Launch-bound shapes are left out as the performance gate leaves them out: their ratios compare
    host overheads, not kernels.
    """
    out = []
    for r in result.get("rows") or []:
        perf = r.get("performance")
        if not isinstance(perf, dict) or r.get("status") != "pass" or (dtype is not None and r.get("dtype") != dtype):
            continue
        try:
            shape = (int(r["m"]), int(r["n"]), int(r["k"]))
            timing = Timing(float(perf["median_ms"]), float(perf["p10_ms"]), float(perf["p90_ms"]),
                            int(perf.get("repeats") or 0))
        except (KeyError, TypeError, ValueError):
            continue  # a missing or mistyped value: the row is not a timing
        if not is_timed_shape(*shape) or timing.median_ms <= 0:
            continue
        out.append(TimedRow(str(r.get("kind")), r.get("level"), str(r.get("name") or ""), str(r.get("dtype")),
                            str(r.get("shape_set") or ""), shape, timing, perf.get("vs_cublas"),
                            perf.get("roofline_fraction")))
    return out


def _date(result: dict[str, Any]) -> str:
    return str((result.get("meta") or {}).get("date") or "")


def find_climb_results(dtype: str = "bf16", dirs: list[Path] | None = None) -> Path | None:
    """The newest ``*climb*<dtype>*.json`` under ``dirs`` (default :func:`results_dirs`) with timed rows
    of the ladder's levels; newest by ``meta.date``, then by name. None if there is none."""
    best: tuple[str, str, Path] | None = None
    for d in dirs if dirs is not None else results_dirs():
        for path in sorted(Path(d).glob(f"*climb*{dtype}*.json")):
            try:
                result = load_result(path)
            except ResultError:
                continue
            if not any(r.kind == "level" for r in timed_rows(result, dtype)):
                continue
            key = (_date(result), path.name, path)
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else None


def describe_source(path: str | Path, result: dict[str, Any]) -> str:
    """'bench/results/X.json (commit abc, NVIDIA H200, 2026-11-30T02:53:59Z)': the file and its run."""
    meta = result.get("meta") or {}
    gpu = (meta.get("gpu") or {}).get("name") or "no GPU recorded"
    parts = [p for p in (f"commit {meta['git_commit']}" if meta.get("git_commit") else None, gpu, meta.get("date")) if p]
    path = Path(path)
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = path
    return f"{shown} ({', '.join(parts)})"


def gpu_name(result: dict[str, Any]) -> str | None:
    return ((result.get("meta") or {}).get("gpu") or {}).get("name")
