"""Checks a bench script makes of its command line before any GPU work, and how a target is judged.

A bench run can take an hour on a lent GPU; a bad argument found after it (an output path that is a
folder, a shape ``axb``, a budget of ``nan``) loses the run, and one found after ``require_gpu`` is
reported as "needs a CUDA GPU", the wrong reason. So each script validates its arguments right after
parsing them, with these helpers: bad input gets one line on stderr, ``bench/NAME.py: ...``, and exit
status 2 (the same status and form as bench/suite.py's ``require_gpu``).

Imported by the scripts beside it (they run as ``python bench/NAME.py``, so this directory is on
``sys.path``); no torch needed, so a CPU-only script (route_regret.py) can use it too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NoReturn

from gemm_ladder.design.problem import parse_triple
from gemm_ladder.results import check_writable

BENCH = Path(__file__).resolve().parent


def script_name(script: str | Path) -> str:
    """``bench/NAME.py`` for a script's ``__file__`` (how suite.require_gpu names it too)."""
    path = Path(script).resolve()
    try:
        return path.relative_to(BENCH.parent).as_posix()
    except ValueError:
        return path.name


def refuse(script: str | Path, message: str) -> NoReturn:
    """One line ``bench/NAME.py: message`` on stderr, then exit status 2 (bad input, nothing run)."""
    import sys

    print(f"{script_name(script)}: {message}", file=sys.stderr)
    raise SystemExit(2)


def output_problem(path: str | Path | None) -> str | None:
    """None when a result file can be written at ``path`` (None: the default name, always writable
    enough to try), else a one-line reason. gemm_ladder.results.check_writable, plus a refusal of an
    existing file that is not a regular one (a device such as /dev/full takes the open and fails the
    write, after the run)."""
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir() and not path.is_file():
        return f"cannot write {path}: not a regular file"
    return check_writable(path)


def check_output(script: str | Path, path: str | Path | None, flag: str = "-o") -> None:
    """Refuse (:func:`refuse`) an output path that cannot be written, before the run it would lose."""
    problem = output_problem(path)
    if problem:
        refuse(script, f"{flag} {path}: {problem}")


def not_positive(flag: str, value: float | None) -> str | None:
    """None when ``value`` is a finite number > 0 or None (the option not given), else the one-line reason:
    a budget, deadline or count of nan, inf, 0 or less would run with time_fns's minimum or never end."""
    if value is not None and not (math.isfinite(value) and value > 0):
        return f"{flag} {value}: give a finite number > 0"
    return None


def positive(script: str | Path, flag: str, value: float | None) -> float | None:
    """``value`` when :func:`not_positive` finds nothing wrong with it, else refuse."""
    if problem := not_positive(flag, value):
        refuse(script, problem)
    return value


def items_of(flag: str, text: str) -> list[str]:
    """The non-empty, stripped items of a comma list; ValueError for one with none (``,`` would run nothing)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"{flag} {text!r}: name at least one")
    return items


def comma_list(script: str | Path, flag: str, text: str) -> list[str]:
    """:func:`items_of`, refusing (:func:`refuse`) an empty list."""
    try:
        return items_of(flag, text)
    except ValueError as exc:
        refuse(script, str(exc))


def shapes_of(flag: str, text: str) -> list[tuple[int, int, int]]:
    """'MxNxK,...' -> [(M, N, K), ...], each extent an integer >= 1; ValueError naming the bad entry.
    Each entry is read by the library's parse_triple, so ``--shapes`` here and ``gemm-ladder --shape``
    take the same spelling."""
    out = []
    for item in items_of(flag, text):
        try:
            shape = parse_triple(item, flag)
        except ValueError:
            raise ValueError(f"{flag}: {item!r} is not MxNxK") from None
        if min(shape) < 1:
            raise ValueError(f"{flag}: {item!r} has an extent < 1")
        out.append(shape)
    return out


def parse_shapes(script: str | Path, flag: str, text: str) -> list[tuple[int, int, int]]:
    """:func:`shapes_of`, refusing (:func:`refuse`) a bad entry or an empty list."""
    try:
        return shapes_of(flag, text)
    except ValueError as exc:
        refuse(script, str(exc))


def judged(ratio: float | None, target: float, correct: bool | None) -> dict:
    """A target's verdict: ``{"met": bool | None, "not_run": reason | None}``. ``met`` is None (not run,
    with its reason) where nothing was measured or the result was wrong: a wrong kernel's speed must never
    count toward a target met (its wrong result fails the run on its own)."""
    if ratio is None:
        return {"met": None, "not_run": "not measured"}
    if not correct:
        return {"met": None, "not_run": "not judged: the result is wrong"}
    return {"met": bool(ratio >= target), "not_run": None}
