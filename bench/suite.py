"""Where a maintained bench script's result goes, and the ``meta`` it carries (bench/README.md).

One output convention: a JSON object ``{"meta": run_meta(...), ...the script's own keys}`` written by
``write_json`` to a file named ``DATE_NAME_COMMIT.json``: the run's UTC date, the script's name (plus
its variant, e.g. ``pipe_depth_sweep_L5``), and the source tree's short commit (``-dirty`` when git
saw uncommitted changes; ``nocommit`` when neither git nor GEMM_LADDER_GIT_COMMIT knows it). By
default the file goes to ``$OUT`` when that is set (a lent GPU machine's output folder, copied back
by whoever ran the script; commit it under bench/results/ unchanged) and to bench/results/ otherwise;
``-o PATH`` names the file itself.

Imported by the scripts beside it (they run as ``python bench/NAME.py``, so this directory is on
``sys.path``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch

# Every maintained bench script gets run_meta and write_json through this module only.
from gemm_ladder.results import run_meta, write_json

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def require_gpu(script: str) -> None:
    """Exit with status 2 and one line on stderr, before any work, when torch sees no CUDA GPU.

    ``script``: the caller's ``__file__`` (named in the line as ``bench/...``). Every bench script
    that launches a kernel calls this right after parsing its arguments (so ``--help`` still works
    without a GPU); one-off experiments without arguments call it before their imports."""
    if torch.cuda.is_available():
        return
    print(f"{_script_name(script)}: needs a CUDA GPU (sm_90a); nothing run", file=sys.stderr)
    raise SystemExit(2)


def require_transformers(script: str) -> None:
    """Exit with status 2 and one line on stderr, before any work, without transformers >= 5 (its experts
    interface, ``transformers.integrations.moe.ExpertsInterface``, which the MoE benches run through).
    ``script``: the caller's ``__file__``."""
    try:
        from transformers.integrations.moe import ExpertsInterface  # noqa: F401
    except ImportError as exc:
        print(f"{_script_name(script)}: needs transformers >= 5 (its ExpertsInterface): {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _script_name(script: str) -> str:
    """``script`` (a ``__file__``) as ``bench/...`` for the one-line refusals."""
    path = Path(script).resolve()
    try:
        return path.relative_to(BENCH.parent).as_posix()
    except ValueError:
        return path.name


def with_setting(module, name: str, value, fn):
    """``fn`` run with ``module.<name>`` (a library default read at each call, e.g. fp8.SPLIT_DEFAULT or
    grouped.STORE_DEFAULT) set to ``value`` during the call only: how a bench times the library's choice
    and its alternative interleaved in one run."""
    def run(*args):
        before = getattr(module, name)
        setattr(module, name, value)
        try:
            return fn(*args)
        finally:
            setattr(module, name, before)
    return run


def rel_frobenius_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """The relative Frobenius error of ``got`` against ``ref`` (float64): ||got - ref|| / ||ref||."""
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def cost_table_provenance() -> str:
    """The provenance of the cost table the package routes this process's CUDA device with (its own where the
    package has one: gemm_ladder.dispatch.cost_model), for a result to record."""
    from gemm_ladder import dispatch

    return dispatch.cost_model(dispatch.device_facts(torch.device("cuda"))).provenance


class ResultCheck:
    """Results checked one at a time against float64, for scripts that run kernels under a tool (the
    sanitizer drivers): ``check(tag, got, ref)`` prints the relative Frobenius error of ``got`` against
    ``ref`` (float64) with ok or WRONG and returns whether it is within ``tol`` and finite; ``wrong``
    counts those that were not."""

    def __init__(self, tol: float = 2e-2, width: int = 24):
        self.tol, self.width, self.wrong = tol, width, 0

    def __call__(self, tag: str, got: torch.Tensor, ref: torch.Tensor) -> bool:
        err = rel_frobenius_err(got, ref)
        ok = err <= self.tol and bool(torch.isfinite(got).all())
        self.wrong += not ok
        print(f"{tag:{self.width}s} rel err {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
        return ok


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """``-o/--output PATH``: the result file; default DATE_NAME_COMMIT.json in $OUT or bench/results/."""
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="result JSON (default: DATE_NAME_COMMIT.json in $OUT if set, else bench/results/)")


def result_name(name: str, meta: dict[str, Any]) -> str:
    """``DATE_NAME_COMMIT.json`` for a run described by ``meta`` (run_meta's object).

    Raises ValueError when ``name`` is empty or holds anything but letters, digits, '_', '-' and '.'
    (it becomes part of a file name).
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name or ""):
        raise ValueError(f"result name {name!r}: use letters, digits, '_', '-' and '.' only")
    date = str(meta.get("date") or "")[:10] or "nodate"
    commit = re.match(r"[0-9a-fA-F]{7,40}", str(meta.get("git_commit") or ""))
    tag = commit.group(0)[:7] if commit else "nocommit"
    if meta.get("git_dirty"):
        tag += "-dirty"
    return f"{date}_{name}_{tag}.json"


def prebuild(kernels, dtype: str = "bf16") -> int:
    """Compile ``kernels`` (library kernel objects with a ``name`` and ``build(dtype)``) into the kernel
    cache, in parallel, no GPU needed (dispatch/precompile.py run_builds): what a script's --prebuild does
    before a device session. Prints the summary; returns 0 when every build is ready, else 1."""
    from gemm_ladder.dispatch.precompile import Build, run_builds

    outcomes = run_builds([Build(f"{k.name} {dtype}", lambda k=k: k.build(dtype)) for k in dict.fromkeys(kernels)],
                          load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def meta() -> dict[str, Any]:
    """run_meta of this command line (GPU, clocks, date, commit), for a script that needs it before saving."""
    return run_meta(" ".join(["python", *sys.argv]))


def save(result: dict[str, Any], name: str, output: Path | None = None) -> Path:
    """Write ``{"meta": run_meta(<this command line>), **result}``; returns the path and prints it.

    ``output``: the file to write (the script's ``-o``); None for ``result_name(name, meta)`` in $OUT
    when that is set, else in bench/results/.
    """
    described = meta()
    if output is None:
        output = Path(os.environ.get("OUT") or RESULTS) / result_name(name, described)
    path = write_json({"meta": described, **result}, output)
    print(f"wrote {path}")
    return path
