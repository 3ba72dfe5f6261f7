"""Run every gate over levels (or a user's callable) x dtypes x shapes; build the result JSON.

Order, per dtype: the resource gate for each target (no GPU needed), then per shape the
correctness gate of each target and of cuBLAS, then (for shapes of at least gpu.MIN_TIMED_FLOPS outside the
edge set) cuBLAS and every correct target timed on the same tensors in the same run, each level's
``vs_previous`` against the target before it in this run. Without a GPU only the resource gate runs.
The JSON follows docs/results-schema.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gemm_ladder.contract import Domain, cublas
from gemm_ladder.gates.correctness import CorrectnessResult, check_correctness, random_operands
from gemm_ladder.gates.performance import (
    PerformanceResult,
    Timing,
    is_timed_shape,
    judge_performance,
    measure_dram_bandwidth,
    time_fns,
)
from gemm_ladder.gates.resources import ResourceReport, check_cubin_resources, check_level_resources
from gemm_ladder.gates.tables import make_console, print_resources, print_rows
from gemm_ladder.gpu import PEAK_TFLOPS, gpu_facts, nvidia_smi_clocks
from gemm_ladder.shapes import Shape

SCHEMA = "gemm-ladder/result/1"

#: Shape sets whose large shapes are timed; 'edge' shapes exist to find wrong answers, not speed.
TIMED_SETS = ("square", "llm", "unaligned", "custom")
#: cuBLAS and every level on a shape are timed interleaved, in this many rounds (gates.performance.time_fns).
TIMING_ROUNDS = 4


def parse_level_range(spec: str, available: list[int] | None = None) -> list[int]:
    """'1-3,5' -> [1, 2, 3, 5] (sorted, unique); 'all' -> ``available``.

    Raises ValueError on malformed text, a reversed range, or a level not in ``available``.
    """
    if spec.strip() == "all":
        if available is None:
            raise ValueError("'all' needs the list of available levels")
        return sorted(available)
    out: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"bad level range {part!r}: use N, N-M or a comma list such as 1-3,5")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"bad level range {part!r}: {lo} > {hi}")
        out.update(range(lo, hi + 1))
    if not out:
        raise ValueError(f"no levels in {spec!r}")
    if available is not None and (missing := sorted(out - set(available))):
        raise ValueError(f"no level {missing}: the ladder has levels {sorted(available)}")
    return sorted(out)


@dataclass
class Target:
    """Something the gates judge: a ladder level, or a user's ``fn(a, b) -> c``.

    ``level`` is the Level object when there is one (resources through its ``build``);
    ``builder`` is any object with ``build(dtype, arch)`` returning a CompiledKernel-like value
    (``cubin``, ``ptxas_log``, ``kernel_name``) and optionally ``geometry(dtype)``; ``cubin`` is a
    bare cubin of a user kernel (``kernel_name`` then names its entry point).
    """

    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    number: int | None
    name: str
    idea: str = ""
    source: str = ""
    domain: Domain | None = None
    perf: Any = None
    level: Any = None
    builder: Any = None
    cubin: Path | None = None
    kernel_name: str | None = None

    @classmethod
    def from_level(cls, level: Any) -> "Target":
        return cls(fn=level, number=level.number, name=level.name, idea=level.idea, source=level.source,
                   domain=level.domain, perf=level.perf, level=level)

    @property
    def title(self) -> str:
        return f"L{self.number} {self.name}" if self.number is not None else self.name

    def describe(self) -> dict[str, Any]:
        out = {"number": self.number, "name": self.name, "idea": self.idea, "source": self.source,
               "domain": self.domain.describe() if self.domain else None}
        if hasattr(self.level, "tile"):  # a TMA level: what the report's timeline needs to replan it
            lvl = self.level
            out["pipeline"] = {"tile": list(lvl.tile), "stages": lvl.stages, "cluster": lvl.cluster,
                               "consumers": lvl.consumers, "persistent": lvl.persistent,
                               "producer_warpgroup": lvl.producer_warpgroup,
                               "c_aliases_stages": lvl.c_aliases_stages, "c_ring": lvl.c_ring}
        return out

    def has_resources(self) -> bool:
        return self.level is not None or self.builder is not None or self.cubin is not None

    def resources(self, dtype: str, arch: str) -> tuple[ResourceReport, str]:
        """Run the resource gate for ``dtype``; returns (report, SASS text)."""
        if self.level is not None:
            return check_level_resources(self.level, dtype, arch)
        from gemm_ladder.runtime.compiler import disassemble

        if self.builder is not None:
            built = self.builder.build(dtype, arch)
            cubin, log, name = Path(built.cubin), built.ptxas_log, built.kernel_name
        else:
            cubin, log, name = Path(self.cubin), None, self.kernel_name
            if name is None:
                raise ValueError("--cubin needs the kernel's entry point name (--kernel-name)")
        geo = self.builder.geometry(dtype) if hasattr(self.builder, "geometry") else None
        sass = disassemble(cubin)
        report = check_cubin_resources(
            cubin, log, name, level=None, dtype=dtype, threads=geo.threads if geo else None,
            dynamic_smem=geo.dynamic_smem if geo else 0, cluster=geo.cluster if geo else None, sass=sass,
        )
        return report, sass


# --- meta -------------------------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _nvcc_version() -> str | None:
    try:
        from gemm_ladder.runtime.compiler import nvcc_path, nvcc_version

        m = re.search(r"V(\d+\.\d+\.\d+)", nvcc_version(nvcc_path()))
        return m.group(1) if m else None
    except Exception:  # noqa: BLE001 - a version string is a report, not a requirement
        return None


def run_meta(command: str) -> dict[str, Any]:
    """The ``meta`` object: date (UTC), git commit and dirtiness, command, host, GPU, versions.

    Where the source tree is a copy (a lent GPU machine), the commit comes from the environment
    variable GEMM_LADDER_GIT_COMMIT, set by whoever copied the tree; it takes precedence over git, and
    ``git_dirty`` is then null (unknown).
    """
    # The variable wins: a copied tree may carry a stale .git of its own (the lent H200's did, and read
    # an older commit than the one copied).
    commit = os.environ.get("GEMM_LADDER_GIT_COMMIT")
    status = None if commit else _git("status", "--porcelain")
    commit = commit or _git("rev-parse", "HEAD")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": commit,
        "git_dirty": bool(status) if status is not None else None,
        "command": command,
        "host": socket.gethostname(),
        "gpu": gpu_facts(),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "nvcc": _nvcc_version(),
                     "python": platform.python_version()},
    }


def _clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats become null (JSON has no NaN/Infinity)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(result: dict[str, Any], path: str | Path) -> Path:
    """Write ``result`` to ``path`` (parents created), non-finite numbers as null."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(result), indent=1) + "\n")
    return path


# --- the run ----------------------------------------------------------------------------------


def _row(kind: str, target: Target | None, dtype: str, shape_set: str, shape: Shape,
         corr: CorrectnessResult | None, perf: PerformanceResult | None = None) -> dict[str, Any]:
    m, n, k = shape
    status = corr.status if corr is not None else "skipped"
    # A passing row's correctness message only restates its numbers; failures and refusals explain.
    messages = [corr.message] if corr is not None and corr.message and corr.status != "pass" else []
    if perf is not None:
        messages += perf.messages
        if not perf.passed and status == "pass":
            status = "fail"
    return {
        "kind": kind, "level": target.number if target else None, "name": target.name if target else "cuBLAS",
        "dtype": dtype, "shape_set": shape_set, "m": m, "n": n, "k": k, "status": status,
        "message": "; ".join(messages),
        "correctness": corr.to_json() if corr is not None else None,
        "performance": perf.to_json() if perf is not None else None,
    }


def _cublas_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return cublas(a, b)


def run_gates(
    targets: list[Target],
    dtypes: list[str],
    shapes: list[tuple[str, Shape]],
    *,
    arch: str = "sm_90a",
    device: str = "cuda",
    command: str = "",
    console: Console | None = None,
    time_budget_s: float = 0.5,
) -> dict[str, Any]:
    """Run the gates and return the result JSON (a dict, docs/results-schema.md); prints tables.

    Without a GPU (``device`` 'cuda' and torch sees none) only the resource gate runs, after a
    "no GPU: compile-only" line. ``device`` 'cpu' runs correctness on CPU (torch's CPU matmul as
    the baseline), which is how the tests drive a user callable without a GPU.
    """
    console = console or make_console()
    dev = torch.device(device)
    on_device = dev.type != "cuda" or torch.cuda.is_available()
    meta = run_meta(command)
    result: dict[str, Any] = {
        "schema": SCHEMA, "meta": meta,
        "ceilings": {"peak_tflops": dict(PEAK_TFLOPS), "dram_gbs": None},
        "levels": [t.describe() for t in targets], "resources": [], "rows": [],
        "summary": {"passed": True, "failures": []},
    }
    failures: list[str] = result["summary"]["failures"]

    if not on_device:
        console.print("[bold yellow]no GPU: compile-only[/] (resource gate; correctness and performance need an sm_90a GPU)")
    for target in targets:
        if not target.has_resources():
            continue
        for dtype in dtypes:
            try:
                report, _ = target.resources(dtype, arch)
            except Exception as exc:  # noqa: BLE001 - a compile error is this target's failure, not ours
                msg = f"{type(exc).__name__}: {exc}".strip()
                result["resources"].append({"level": target.number, "dtype": dtype, "passed": False,
                                            "messages": [msg], "error": True})
                failures.append(f"{target.title} {dtype} build: {msg.splitlines()[0]}")
                continue
            result["resources"].append(report.to_json())
            if not report.passed:
                failures.append(f"{target.title} {dtype} resources: {'; '.join(report.messages)}")
    if result["resources"]:
        print_resources(result["resources"], targets, console)

    if on_device:
        if dev.type == "cuda":
            result["ceilings"]["dram_gbs"] = measure_dram_bandwidth(dev)
        _run_shapes(result, targets, dtypes, shapes, dev, console, time_budget_s)
        if dev.type == "cuda" and meta["gpu"] is not None:
            meta["gpu"]["clocks_mhz_end"] = nvidia_smi_clocks()
        print_rows(result["rows"], console)

    result["summary"]["passed"] = not failures
    if failures:
        console.print(f"[bold red]{len(failures)} gate failure(s):[/]")
        for f in failures:
            console.print(f"  [red]x[/] {f}")
    else:
        console.print("[bold green]all gates passed[/]")
    return result


def _run_shapes(result: dict[str, Any], targets: list[Target], dtypes: list[str],
                shapes: list[tuple[str, Shape]], dev: torch.device, console: Console, budget: float) -> None:
    rows, failures = result["rows"], result["summary"]["failures"]
    dram = result["ceilings"]["dram_gbs"]
    total = len(dtypes) * len(shapes)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("gates", total=total)
        for dtype in dtypes:
            for shape_set, shape in shapes:
                m, n, k = shape
                progress.update(task, description=f"{dtype} {m}x{n}x{k}")
                seed = None  # each check draws a fresh seed, recorded in its row
                corr = {t.title: check_correctness(t.fn, m, n, k, dtype, device=dev, seed=seed, domain=t.domain)
                        for t in targets}
                base_corr = check_correctness(_cublas_fn, m, n, k, dtype, device=dev)
                timings = _time_shape(targets, corr, shape_set, shape, dtype, dev, budget)
                base_t = timings.get("cuBLAS")
                base_perf = judge_performance(base_t, m, n, k, dtype, dram_gbs=dram) if base_t else None
                rows.append(_row("cublas", None, dtype, shape_set, shape, base_corr, base_perf))
                previous: Timing | None = None
                for t in targets:
                    mine = timings.get(t.title)
                    perf = None
                    if mine is not None:
                        perf = judge_performance(mine, m, n, k, dtype, perf=t.perf, cublas=base_t,
                                                 previous=previous, dram_gbs=dram)
                        previous = mine
                    row = _row("level" if t.number is not None else "user", t, dtype, shape_set, shape, corr[t.title], perf)
                    rows.append(row)
                    if row["status"] in ("fail", "error"):
                        failures.append(f"{t.title} {dtype} {m}x{n}x{k}: {row['message']}")
                progress.advance(task)


def _time_shape(targets: list[Target], corr: dict[str, CorrectnessResult], shape_set: str, shape: Shape,
                dtype: str, dev: torch.device, budget: float) -> dict[str, Timing]:
    """Time cuBLAS and every target that passed correctness on one shared pair of operands."""
    m, n, k = shape
    if shape_set not in TIMED_SETS or not is_timed_shape(m, n, k):
        return {}
    a, b = random_operands(m, n, k, dtype, dev, seed=0)
    fns = {"cuBLAS": _cublas_fn}
    fns.update({t.title: t.fn for t in targets if corr[t.title].status == "pass"})
    return time_fns(fns, a, b, budget_s=budget, rounds=TIMING_ROUNDS)


def exit_status(result: dict[str, Any]) -> int:
    """1 if any gate failed (including a failed build), else 0."""
    return 0 if result["summary"]["passed"] else 1


def command_line() -> str:
    """The command as typed, for ``meta.command``."""
    return " ".join(["gemm-ladder", *sys.argv[1:]])
