"""A level's acceptance criteria, as the gates apply them: correctness, performance, resources.

Nothing here restates a threshold. Every number is read when asked, from the gates' own constants
(:mod:`gemm_ladder.gates.correctness`, :mod:`gemm_ladder.gates.performance`, :mod:`gemm_ladder.gates.climb`,
:mod:`gemm_ladder.gpu`) and from the level registry's ``Domain`` and ``PerfExpectation``; the resource
rules are found by probing the resource gate itself (:func:`gemm_ladder.gates.resources.judge_resources`)
with one violation at a time, so a rule the gate does not apply to this level is not listed and the
wording of each failure is the gate's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

SCHEMA = "gemm-ladder/criteria/1"


@dataclass(frozen=True)
class Criterion:
    """One checklist item: what must hold, the numbers it uses, and where they are read."""

    text: str
    source: str
    values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "source": self.source, "values": self.values}


@dataclass(frozen=True)
class Section:
    """The criteria of one gate (or of the protocol audit), and which shapes it runs on."""

    gate: str
    applies: str
    items: tuple[Criterion, ...]

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "applies": self.applies, "items": [c.to_json() for c in self.items]}


@dataclass(frozen=True)
class Criteria:
    """Everything level ``level`` must pass, for ``dtype``."""

    level: int
    name: str
    idea: str
    dtype: str
    sections: tuple[Section, ...]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "level": self.level, "name": self.name, "idea": self.idea, "dtype": self.dtype,
                "sections": [s.to_json() for s in self.sections]}


def _edge_split(domain: Any, dtype: str) -> tuple[list[tuple[int, int, int]], list[tuple[tuple[int, int, int], str]]]:
    from gemm_ladder.contract import OutsideDomainError
    from gemm_ladder.shapes import SHAPE_SETS

    inside, outside = [], []
    for shape in SHAPE_SETS["edge"]:
        try:
            domain.check(*shape, dtype)
            inside.append(shape)
        except OutsideDomainError as exc:
            outside.append((shape, str(exc)))
    return inside, outside


def _rule(message: str) -> str:
    """The broken rule of an OutsideDomainError message: '(K <= 64)' or 'K = 1 is not a multiple of 8'."""
    m = re.search(r"domain \(([^()]*)\)", message)
    return m.group(1) if m else message.split(":")[0]


def _fmt_shape(s: tuple[int, int, int]) -> str:
    return "x".join(map(str, s))


def correctness_section(level: Any, dtype: str) -> Section:
    from gemm_ladder.gates import correctness as C

    u = C.UNIT_ROUNDOFF[dtype]
    inside, outside = _edge_split(level.domain, dtype)
    refused = ", ".join(f"{_fmt_shape(s)} ({_rule(why)})" for s, why in outside) or "none"
    src = "gemm_ladder.gates.correctness"
    items = (
        Criterion("fresh random normal operands for every check (a new seed each time, recorded in the row)",
                  f"{src}.check_correctness"),
        Criterion(f"relative Frobenius error against the float64 reference <= {C.CUBLAS_ERROR_FACTOR:g} x cuBLAS's own "
                  f"error on the same operands + {u:.3g} (the {dtype} unit roundoff)",
                  f"{src}.error_bound: CUBLAS_ERROR_FACTOR, UNIT_ROUNDOFF[{dtype!r}]",
                  {"cublas_error_factor": C.CUBLAS_ERROR_FACTOR, "unit_roundoff": u}),
        Criterion(f"largest element error max|c - ref| <= the absolute cap: twice the {dtype} rounding of the largest "
                  f"reference element + {C.ACCUMULATION_FACTOR:g} x sqrt(K) x {C.FP32_UNIT_ROUNDOFF:.3g} x max row norm "
                  "of a x max row norm of b (a few wrong elements hide in the Frobenius norm, not under the cap)",
                  f"{src}.absolute_cap: ACCUMULATION_FACTOR, FP32_UNIT_ROUNDOFF",
                  {"accumulation_factor": C.ACCUMULATION_FACTOR, "fp32_unit_roundoff": C.FP32_UNIT_ROUNDOFF}),
        Criterion("every output element written: the gate fills c with NaN, launches into it (check + launch), "
                  "and counts NaN where the reference is finite", f"{src}._call_exact"),
        Criterion(f"non-finite inputs: {C.PLANTED_PER_OPERAND} NaN/+Inf/-Inf planted in each of a and b; c is NaN "
                  "exactly where the reference is NaN and Inf of the same sign exactly where it is Inf",
                  f"{src}.check_nonfinite: PLANTED_PER_OPERAND", {"planted_per_operand": C.PLANTED_PER_OPERAND}),
        Criterion(f"domain: computes every shape in {level.domain.describe()} (dtypes {', '.join(level.domain.dtypes)}"
                  + (f", bases {level.domain.base_alignment}-byte aligned" if level.domain.base_alignment > 1 else "")
                  + ") and raises OutsideDomainError before any launch "
                  f"for every other; computing outside it, or refusing inside it, fails. Of the edge set's "
                  f"{len(inside) + len(outside)} shapes: {len(inside)} computed, {len(outside)} refused ({refused})",
                  "the level registry's Domain (levels/__init__.py); gemm_ladder.shapes.SHAPE_SETS['edge']",
                  {"domain": level.domain.describe(), "computed": [list(s) for s in inside],
                   "refused": [list(s) for s, _ in outside]}),
    )
    return Section("correctness", "every shape climbed (edge set first), both dtypes; cuBLAS checked alongside", items)


def timed_shapes_in_domain(domain: Any, dtype: str) -> list[tuple[int, int, int]]:
    """The shapes of the climb's timed sets (climb.TIMED_SETS) that ``domain`` computes and the performance
    gate judges (2MNK >= gpu.MIN_TIMED_FLOPS)."""
    from gemm_ladder.contract import OutsideDomainError
    from gemm_ladder.gates import climb
    from gemm_ladder.gates.performance import is_timed_shape
    from gemm_ladder.shapes import SHAPE_SETS

    out = []
    for name in climb.TIMED_SETS:
        for shape in SHAPE_SETS.get(name, []):
            try:
                domain.check(*shape, dtype)
            except OutsideDomainError:
                continue
            if is_timed_shape(*shape):
                out.append(shape)
    return out


def performance_section(level: Any, dtype: str) -> Section:
    from gemm_ladder import gpu
    from gemm_ladder.gates import climb

    perf = level.perf
    src = "the level registry's PerfExpectation (levels/__init__.py)"
    tol = (f"less the tolerance max({perf.noise:.0%} (PerfExpectation.noise), the measured p10-p90 half-spread of "
           "either timing)")
    timed = timed_shapes_in_domain(level.domain, dtype)
    items = [
        Criterion(f"judged only on shapes with 2MNK >= {gpu.MIN_TIMED_FLOPS:.0e} FLOP in the sets "
                  f"{', '.join(climb.TIMED_SETS)}; smaller shapes are timed and reported, never judged (launch-bound)"
                  + ("" if timed else f"; none of the named timed sets' shapes is in this level's domain "
                     f"({level.domain.describe()}): the gate never times it unless given such a shape"),
                  "gemm_ladder.gpu.MIN_TIMED_FLOPS; gemm_ladder.gates.climb.TIMED_SETS",
                  {"min_timed_flops": gpu.MIN_TIMED_FLOPS, "timed_sets": list(climb.TIMED_SETS),
                   "timed_shapes_in_domain": [list(s) for s in timed]}),
        Criterion(f"timing: cuBLAS and every level interleaved on the same operands in {climb.TIMING_ROUNDS} rounds, "
                  "L2 flushed before each call, GPU kept busy while the host enqueues, median of the repeats",
                  "gemm_ladder.gates.performance.time_fns; gemm_ladder.gates.climb.TIMING_ROUNDS",
                  {"rounds": climb.TIMING_ROUNDS}),
    ]
    if perf.min_vs_cublas:
        items.append(Criterion(f">= {perf.min_vs_cublas:.2f}x cuBLAS (cuBLAS's time over this level's) {tol}", src,
                               {"min_vs_cublas": perf.min_vs_cublas, "noise": perf.noise}))
    else:
        items.append(Criterion("no floor against cuBLAS (min_vs_cublas = 0): its ratio is reported, not judged", src,
                               {"min_vs_cublas": perf.min_vs_cublas}))
    below = f"level {level.number - 1}" if level.number > 1 else None
    if below is None:
        items.append(Criterion("the first level: nothing below it to beat", src,
                               {"min_vs_previous": perf.min_vs_previous}))
    elif perf.min_vs_previous:
        items.append(Criterion(f">= {perf.min_vs_previous:.2f}x {below} (its time over this level's, same run) {tol}",
                               src, {"min_vs_previous": perf.min_vs_previous, "noise": perf.noise}))
    else:
        items.append(Criterion(f"makes no claim to beat {below} (min_vs_previous is None): the ratio is reported, not "
                               "judged (the registry's docstring gives the measured reasons where a level is slower)",
                               src, {"min_vs_previous": perf.min_vs_previous}))
    items.append(Criterion(f"roofline fraction reported, not judged: TFLOP/s over min(the dense peak, "
                           f"{gpu.PEAK_TFLOPS[dtype]:g} TFLOP/s for {dtype}, arithmetic intensity x the DRAM bandwidth "
                           "measured at the start of the run)", "gemm_ladder.gpu.PEAK_TFLOPS; "
                           "gemm_ladder.gates.performance.roofline_tflops", {"peak_tflops": gpu.PEAK_TFLOPS[dtype]}))
    return Section("performance", "needs a GPU; shapes of the timed sets inside the level's domain", tuple(items))


def _probes(level_number: int) -> list[tuple[str, dict[str, Any]]]:
    """One violation per resource rule, as judge_resources arguments over a clean baseline."""
    from gemm_ladder.gpu import MAX_SMEM_PER_BLOCK_OPTIN

    return [
        ("no register spills (ptxas -v: 0 bytes spill stores and loads)", {"ptxas": {"spill_stores": 4}}),
        ("no stack frame (local memory has DRAM latency in the inner loop)", {"ptxas": {"stack_bytes": 8}}),
        ("no LDL/STL in the SASS (local memory, however it got there)", {"census": {"LDL": 1}}),
        ("HGMMA in the SASS: the MMA is wgmma", {"census": {"HGMMA": 0}}),
        ("UTMALDG in the SASS: operands load through TMA", {"census": {"UTMALDG": 0}}),
        (f"static + dynamic shared memory <= {MAX_SMEM_PER_BLOCK_OPTIN} bytes per block",
         {"dynamic_smem": MAX_SMEM_PER_BLOCK_OPTIN + 1}),
        ("the occupancy calculator gives at least 1 CTA per SM (needs a GPU)", {"occupancy": 0}),
    ]


def resources_section(level: Any, dtype: str) -> Section:
    from gemm_ladder.gates.resources import PtxasResources, SassCensus, judge_resources

    items = []
    for text, probe in _probes(level.number):
        ptxas = replace(PtxasResources("probe", registers=128), **probe.get("ptxas", {}))
        counts = {"HGMMA": 1, "UTMALDG": 1} | probe.get("census", {})
        census = SassCensus("probe", counts, sum(counts.values()))
        report = judge_resources(ptxas, census, level=level.number, dtype=dtype, threads=128,
                                 dynamic_smem=probe.get("dynamic_smem", 0), occupancy=probe.get("occupancy"))
        if not report.passed:
            items.append(Criterion(text, "gemm_ladder.gates.resources.judge_resources",
                                   {"gate_message": report.messages[0]}))
    try:
        geo = level.geometry(dtype)
        items.append(Criterion(f"this level launches {geo.threads} threads per CTA, {geo.dynamic_smem} bytes of dynamic "
                               f"shared memory, cluster {geo.cluster} (its static shared memory is in ptxas's report: "
                               f"gemm-ladder compile --level {level.number})", "Level.geometry (the designer's plan)",
                               {"threads": geo.threads, "dynamic_smem": geo.dynamic_smem, "cluster": geo.cluster}))
    except Exception as exc:  # noqa: BLE001 - the geometry is a report here, not a rule
        items.append(Criterion(f"launch geometry not available: {exc}", "Level.geometry"))
    return Section("resources", "no GPU needed (occupancy aside): nvcc's build and cuobjdump's SASS", tuple(items))


def protocol_section(level: Any) -> Section | None:
    from gemm_ladder.audit import LEVELS as AUDITED

    if level.number not in AUDITED:
        return None
    return Section("protocol", "no GPU needed; a check of its own, not run by climb", (Criterion(
        f"gemm-ladder audit --level {level.number}: the stage-ring protocol model-checked free of deadlock, early "
        "reuse and phase errors for its bounds", "gemm_ladder.audit"),))


def level_criteria(number: int, dtype: str = "bf16") -> Criteria:
    """The acceptance criteria of ladder level ``number`` for ``dtype`` ('bf16' or 'fp16').

    Raises KeyError naming the levels that exist, ValueError for a dtype outside the contract.
    """
    from gemm_ladder.contract import DTYPES
    from gemm_ladder.levels import get_level

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: use one of {sorted(DTYPES)}")
    level = get_level(number)
    sections = [correctness_section(level, dtype), performance_section(level, dtype), resources_section(level, dtype)]
    if (p := protocol_section(level)) is not None:
        sections.append(p)
    return Criteria(level.number, level.name, level.idea, dtype, tuple(sections))


__all__ = ["Criteria", "Criterion", "Section", "level_criteria", "timed_shapes_in_domain"]
