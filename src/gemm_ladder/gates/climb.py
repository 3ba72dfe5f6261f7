"""Run every gate over levels (or a user's callable) x dtypes x shapes; build the result JSON.

Order, per dtype: the resource gate for each target (no GPU needed), then per shape the
correctness gate of each target and of cuBLAS, then (for shapes of at least gpu.MIN_TIMED_FLOPS outside the
edge set) cuBLAS and every correct target timed on the same tensors in the same run, each level's
``vs_previous`` against the target before it in this run.

Without a GPU the ladder's levels get the resource gate only; a user's callable that runs on CPU
tensors gets the correctness gate on CPU (torch's CPU matmul standing in for cuBLAS). What did not
run is counted and said (:mod:`gemm_ladder.gates.verdict`), never passed. The JSON follows
docs/results-schema.md.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gemm_ladder.contract import Domain, cublas
from gemm_ladder.gates.correctness import CALLABLE_FAILURES, CorrectnessResult, check_correctness, random_operands
from gemm_ladder.gates.performance import (
    PerformanceResult,
    Timing,
    is_timed_shape,
    judge_performance,
    measure_dram_bandwidth,
    time_fns,
)
from gemm_ladder.gates.stopping import ClimbVerdict, judge_climb
from gemm_ladder.gates.resources import ResourceReport, check_cubin_resources, check_level_resources
from gemm_ladder.gates.tables import make_console, print_resources, print_rows
from gemm_ladder.gates.verdict import GateTally, new_tallies, print_summary, summarize
from gemm_ladder.gpu import PEAK_TFLOPS, nvidia_smi_clocks
from gemm_ladder.levels.tma import TmaLevel
from gemm_ladder.results import SCHEMA, run_meta
from gemm_ladder.runtime.compiler import CompilerNotFoundError
from gemm_ladder.shapes import Shape

#: Shape sets whose large shapes are timed; 'edge' shapes exist to find wrong answers, not speed.
TIMED_SETS = ("square", "llm", "unaligned", "custom")
#: cuBLAS and every level on a shape are timed interleaved, in this many rounds (gates.performance.time_fns).
TIMING_ROUNDS = 4


def parse_level_range(spec: str, available: list[int] | None = None) -> list[int]:
    """'1-3,5' -> [1, 2, 3, 5] (sorted, unique); 'all' -> ``available``.

    Raises ValueError on malformed text (an empty part such as '1,,2' included), a reversed range, or a
    level not in ``available``.
    """
    if spec.strip() == "all":
        if available is None:
            raise ValueError("'all' needs the list of available levels")
        return sorted(available)
    if not spec.strip():
        raise ValueError(f"no levels in {spec!r}")
    out: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            raise ValueError(f"empty part in {spec!r}: use N, N-M or a comma list such as 1-3,5")
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"bad level range {part!r}: use N, N-M or a comma list such as 1-3,5")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"bad level range {part!r}: {lo} > {hi}")
        out.update(range(lo, hi + 1))
    if available is not None and (missing := sorted(out - set(available))):
        raise ValueError(f"no level {missing}: the ladder has levels {sorted(available)}")
    return sorted(out)


#: The kernels take M, N and K as 32-bit ints (``int M, int N, int K`` in every level's signature).
MAX_DIM = 2**31 - 1


def check_shapes(shapes: list[tuple[str, Shape]], what: str = "shape") -> None:
    """Refuse a shape no run can use, before any build or launch (climb, gate and advise take this rule): a shape
    given as MxNxK (set 'custom') needs 1 <= M, N, K <= MAX_DIM (empty dimensions are the edge set's to check).
    Raises ValueError naming ``what`` (the option it came from) and the rule."""
    for shape_set, (m, n, k) in shapes:
        if shape_set == "custom" and not all(1 <= d <= MAX_DIM for d in (m, n, k)):
            raise ValueError(f"{what} {m}x{n}x{k}: each of M, N and K must be between 1 and {MAX_DIM} (the kernels "
                             "take 32-bit sizes; the 'edge' set checks empty dimensions)")


def check_run_arguments(shapes: list[tuple[str, Shape]], time_budget_s: float) -> None:
    """Refuse what no run can use, before any build or launch; raises ValueError naming the rule.

    The shapes by :func:`check_shapes`; the time budget must be a positive number of seconds.
    """
    check_shapes(shapes)
    if not (math.isfinite(time_budget_s) and time_budget_s > 0):
        raise ValueError(f"--budget {time_budget_s}: the time budget of one measurement must be a positive "
                         "number of seconds")


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
        if isinstance(self.level, TmaLevel):  # what the report's timeline needs to replan it
            lvl = self.level
            out["pipeline"] = {"tile": list(lvl.tile), "stages": lvl.stages, "cluster": lvl.cluster,
                               "consumers": lvl.consumers, "persistent": lvl.persistent,
                               "producer_warpgroup": lvl.producer_warpgroup,
                               "c_aliases_stages": lvl.c_aliases_stages, "c_ring": lvl.c_ring,
                               "stream_k": lvl.stream_k_args}
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
    verdict: bool = True,
) -> dict[str, Any]:
    """Run the gates and return the result JSON (a dict, docs/results-schema.md); prints tables and
    the summary line (:func:`gemm_ladder.gates.verdict.summary_line`); ``verdict`` False leaves the
    failures and the summary line to the caller (verdict.finish: after the JSON is written, so that the
    line states the exit status the command ends with).

    ``device`` 'cuda' without a GPU runs what can run on this machine: the resource gate, and the
    correctness gate on CPU for a callable that runs on CPU tensors (a level, or a callable that
    raises a device error, is "not run: needs a GPU"); performance is not run. ``device`` 'cpu' does
    the same on a machine with a GPU (the tests use it).
    """
    console = console or make_console()
    gpu = torch.cuda.is_available()
    dev = torch.device(device)
    if dev.type == "cuda" and not gpu:
        dev = torch.device("cpu")
    meta = run_meta(command)
    result: dict[str, Any] = {
        "schema": SCHEMA, "meta": meta,
        "ceilings": {"peak_tflops": dict(PEAK_TFLOPS), "dram_gbs": None},
        "levels": [t.describe() for t in targets], "resources": [], "rows": [],
    }
    tallies = new_tallies()
    failures: list[str] = []

    if dev.type != "cuda":
        console.print("[bold yellow]no GPU[/]: the resource gate runs; correctness runs on CPU for a callable that "
                      "runs on CPU tensors; the ladder's levels and timing need an sm_90a GPU")
    _run_resources(result, targets, dtypes, arch, tallies["resources"], failures)
    if result["resources"]:
        print_resources(result["resources"], targets, console)

    if dev.type == "cuda":
        result["ceilings"]["dram_gbs"] = measure_dram_bandwidth(dev)
    _run_shapes(result, targets, dtypes, shapes, dev, console, time_budget_s, tallies, failures)
    if dev.type == "cuda" and meta["gpu"] is not None:
        meta["gpu"]["clocks_mhz_end"] = nvidia_smi_clocks()
    if result["rows"]:
        print_rows(result["rows"], console)

    result["gates"], result["summary"] = summarize(tallies, failures)
    verdicts = judge_climb(result)
    result["stopping"] = [v.to_json() for v in verdicts]
    print_stopping(verdicts, console)
    if verdict:
        print_summary(result, console)
    return result


def print_stopping(verdicts: list[ClimbVerdict], console: Console) -> None:
    """Per dtype with timed level rows, each level's stopping-rule verdict and the climb's conclusion."""
    for v in verdicts:
        if not any(lv.below is not None and lv.below.measured for lv in v.levels):
            continue
        cells = ", ".join(f"L{lv.level} {lv.short()}" for lv in v.levels)
        console.print(f"stopping rule ({v.dtype}): {escape(cells)}")
        console.print(f"  {escape(v.summary())}")


def _run_resources(result: dict[str, Any], targets: list[Target], dtypes: list[str], arch: str,
                   tally: GateTally, failures: list[str]) -> None:
    """The resource gate of every target and dtype, into ``result["resources"]``."""
    for target in targets:
        if not target.has_resources():
            tally.idle_reason = f"nothing to inspect: {target.title} has no build(dtype, arch) and no --cubin was given"
            continue
        for dtype in dtypes:
            try:
                report, _ = target.resources(dtype, arch)
            except CompilerNotFoundError as exc:
                tally.skip(f"{type(exc).__name__}: {exc}".splitlines()[0])
                continue
            except CALLABLE_FAILURES as exc:  # noqa: BLE001 - a compile error (a build() that exits) is the target's
                msg = f"{type(exc).__name__}: {exc}".strip()
                result["resources"].append({"level": target.number, "dtype": dtype, "passed": False,
                                            "messages": [msg], "error": True})
                failures.append(f"{target.title} {dtype} build: {msg.splitlines()[0]}")
                tally.record(False)
                continue
            result["resources"].append(report.to_json())
            tally.record(report.passed)
            if not report.passed:
                failures.append(f"{target.title} {dtype} resources: {'; '.join(report.messages)}")


#: Why a ladder level is not checked on a machine without a GPU.
LEVEL_NEEDS_GPU = "no GPU: the ladder's levels are sm_90a kernels"
#: Why nothing is timed without a GPU.
TIMING_NEEDS_GPU = "no GPU: timing needs a CUDA device, a CPU's wall clock says nothing of a GPU kernel"
#: Largest M x N x K the correctness gate checks on a CPU: its float64 reference and torch's CPU
#: baseline take seconds at 1024^3 (= 2^30) and minutes at 8192^3, which belong on a GPU.
CPU_CHECK_MAX_MNK = 2**30
#: Largest output M x N checked on a CPU: the float64 reference, the baseline and the comparisons hold
#: about 40 bytes per output element (3.2 GB measured at 8192 x 8192 x 16), so 2^24 outputs is ~0.7 GB;
#: M x N x K alone let 32768 x 32768 x 1 through, ~43 GB.
CPU_CHECK_MAX_OUTPUTS = 2**24
#: Largest M x K + N x K (the operands, each also copied to float64) checked on a CPU: 2^25, ~0.4 GB.
CPU_CHECK_MAX_INPUTS = 2**25
#: Why the performance gate has nothing to do when no shape of the run is timed.
NO_TIMED_SHAPE = "no timed shape: edge shapes are checked, not timed; square, llm, unaligned and MxNxK time shapes of 2MNK >= 1e11"


def cpu_check_refusal(m: int, n: int, k: int) -> str | None:
    """Why the correctness of M x N x K is not checked on a CPU (the time or the memory it takes), or None."""
    for rule, value, bound in (("M x N x K > 2^30", m * n * k, CPU_CHECK_MAX_MNK),
                               ("M x N > 2^24 outputs", m * n, CPU_CHECK_MAX_OUTPUTS),
                               ("M x K + N x K > 2^25 inputs", (m + n) * k, CPU_CHECK_MAX_INPUTS)):
        if value > bound:
            return f"too large to check on a CPU ({rule}; a GPU checks it)"
    return None


def allocation_failure(exc: BaseException) -> str | None:
    """The gate's one-line reason when ``exc`` says an allocation failed (the host or the GPU ran out of
    memory: MemoryError, torch's OutOfMemoryError, the CPU allocator's RuntimeError), else None."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    said_so = re.search(r"can't allocate memory|out of memory", text)  # the CPU allocator's RuntimeError
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or said_so:
        return f"out of memory on this machine: {text}"
    return None


def _run_shapes(result: dict[str, Any], targets: list[Target], dtypes: list[str], shapes: list[tuple[str, Shape]],
                dev: torch.device, console: Console, budget: float, tallies: dict[str, GateTally],
                failures: list[str]) -> None:
    rows = result["rows"]
    correctness, performance = tallies["correctness"], tallies["performance"]
    performance.idle_reason = NO_TIMED_SHAPE
    dram = result["ceilings"]["dram_gbs"]
    # a target that cannot run here: its reason; checks of it are counted as not run, not called
    needs_gpu: dict[str, str] = {t.title: LEVEL_NEEDS_GPU for t in targets if t.level is not None and dev.type != "cuda"}
    if targets and len(needs_gpu) == len(targets):  # nothing here could be timed, whatever the shapes
        performance.idle_reason = TIMING_NEEDS_GPU
    total = len(dtypes) * len(shapes)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("gates", total=total)
        for dtype in dtypes:
            for shape_set, shape in shapes:
                m, n, k = shape
                progress.update(task, description=f"{dtype} {m}x{n}x{k}")
                corr: dict[str, CorrectnessResult] = {}
                for t in targets:
                    if t.title in needs_gpu:
                        correctness.skip(needs_gpu[t.title])
                        continue
                    if dev.type == "cpu" and (too_large := cpu_check_refusal(m, n, k)):
                        correctness.skip(too_large)
                        continue
                    try:
                        r = check_correctness(t.fn, m, n, k, dtype, device=dev, seed=None, domain=t.domain)
                    except (MemoryError, RuntimeError) as exc:  # the gate's own operands, reference or baseline
                        if (why := allocation_failure(exc)) is None:
                            raise
                        correctness.skip(why)
                        continue
                    if r.status == "not run":
                        needs_gpu[t.title] = f"{t.title} {r.message}"
                        correctness.skip(needs_gpu[t.title])
                        continue
                    correctness.record(r.passed)
                    corr[t.title] = r
                timed = shape_set in TIMED_SETS and is_timed_shape(m, n, k)
                if timed and dev.type != "cuda":
                    # every target that did not fail or refuse this shape would have been timed on a GPU
                    skipped = [t for t in targets if t.title not in corr or corr[t.title].status == "pass"]
                    if skipped:
                        performance.skip(TIMING_NEEDS_GPU, len(skipped))
                if not corr:
                    progress.advance(task)
                    continue  # nothing ran on this shape: no baseline row either
                try:
                    base_corr = check_correctness(_cublas_fn, m, n, k, dtype, device=dev)
                except (MemoryError, RuntimeError) as exc:
                    if (why := allocation_failure(exc)) is None:
                        raise
                    base_corr = CorrectnessResult("not run", why)
                timings = _time_shape(targets, corr, dtype, shape, dev, budget) if timed and dev.type == "cuda" else {}
                base_t = timings.get("cuBLAS")
                base_perf = judge_performance(base_t, m, n, k, dtype, dram_gbs=dram) if base_t else None
                rows.append(_row("cublas", None, dtype, shape_set, shape, base_corr, base_perf))
                previous: Timing | None = None
                for t in targets:
                    if t.title not in corr:
                        continue
                    mine = timings.get(t.title)
                    perf = None
                    if mine is not None:
                        perf = judge_performance(mine, m, n, k, dtype, perf=t.perf, cublas=base_t,
                                                 previous=previous, dram_gbs=dram)
                        performance.record(perf.passed)
                        previous = mine
                    row = _row("level" if t.number is not None else "user", t, dtype, shape_set, shape, corr[t.title], perf)
                    rows.append(row)
                    if row["status"] in ("fail", "error"):
                        failures.append(f"{t.title} {dtype} {m}x{n}x{k}: {row['message']}")
                progress.advance(task)


def _time_shape(targets: list[Target], corr: dict[str, CorrectnessResult], dtype: str, shape: Shape,
                dev: torch.device, budget: float) -> dict[str, Timing]:
    """Time cuBLAS and every target that passed correctness on one shared pair of operands."""
    m, n, k = shape
    a, b = random_operands(m, n, k, dtype, dev, seed=0)
    fns = {"cuBLAS": _cublas_fn}
    fns.update({t.title: t.fn for t in targets if t.title in corr and corr[t.title].status == "pass"})
    return time_fns(fns, a, b, budget_s=budget, rounds=TIMING_ROUNDS)


def command_line() -> str:
    """The command as typed, for ``meta.command``."""
    return " ".join(["gemm-ladder", *sys.argv[1:]])
