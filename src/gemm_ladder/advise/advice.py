"""The answer, in the method's required outputs (:mod:`gemm_ladder.advise`): conclusion, evidence or assumptions, contract, minimal
validation, risks and fallback.

:func:`advise_kernel` answers for one kernel (its evidence placed on the ladder): the next rung with the
designer's plan for it, or the stop. :func:`advise_climb` answers for a results JSON: the stopping rule over
every level it climbed. The expected gain of a step is the ladder's own measured gain on the climb's GPU
(:mod:`gemm_ladder.gates.stopping` over a results JSON), never a constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gemm_ladder.advise.contract import Contract, step_contract
from gemm_ladder.advise.evidence import Evidence, Fact
from gemm_ladder.advise.ladder_position import Position, place
from gemm_ladder.gates.stopping import ClimbVerdict, LevelVerdict

SCHEMA = "gemm-ladder/advice/1"


@dataclass
class Advice:
    """Everything the answer says, as data (render with :mod:`gemm_ladder.advise.render`)."""

    subject: str
    kind: str
    dtype: str
    arch: str
    shape: tuple[int, int, int]
    action: str  # "climb", "stop", "unplaced"
    next_level: int | None
    headline: str
    conclusion: str
    position: Position | None
    evidence: list[Fact]
    contract: Contract
    experiment: dict[str, Any]
    checks: list[str]
    risks: list[str]
    expected: dict[str, Any] | None = None
    stopping: ClimbVerdict | None = None
    results_source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "target": {"subject": self.subject, "kind": self.kind, "dtype": self.dtype, "arch": self.arch,
                       "shape": list(self.shape)},
            "conclusion": {"action": self.action, "next_level": self.next_level, "headline": self.headline,
                           "text": self.conclusion},
            "position": self.position.to_json() if self.position else None,
            "evidence": [f.to_json() for f in self.evidence],
            "expected": self.expected,
            "results_source": self.results_source,
            "contract": self.contract.to_json(),
            "validation": {"experiment": self.experiment, "checks": self.checks},
            "risks": self.risks,
            "stopping": self.stopping.to_json() if self.stopping else None,
        }


# --- helpers over the climb ---------------------------------------------------------------------


def _library_offer() -> str:
    import gemm_ladder.library as library

    first = " ".join((library.__doc__ or "").split()).split(". ")[0]
    return first.rstrip(".")


def _untimed_reason(nxt: int, dtype: str) -> str:
    """Why the step to ``nxt`` has no measured gain: which of the two levels is never timed, and why."""
    from gemm_ladder.advise.criteria import timed_shapes_in_domain
    from gemm_ladder.levels import LEVELS

    for number in (nxt - 1, nxt):
        if number >= 1 and not timed_shapes_in_domain(LEVELS[number].domain, dtype):
            return (f"level {number}'s domain ({LEVELS[number].domain.describe()}) holds none of the timed sets' "
                    "shapes, so it is never timed")
    return f"level {nxt - 1} or {nxt} has no timed row there"


def recovering_level(climb: ClimbVerdict, after: int) -> LevelVerdict | None:
    """The first level above ``after`` that the climb keeps (it beats the level kept before the loss)."""
    return next((v for v in climb.levels if v.level > after and v.keeps), None)


def climb_facts(climb_source: str | None, gpu: str | None) -> list[Fact]:
    if climb_source is None:
        return [Fact("climb.source", None, "no climb results with timed rows were found: the gains of the steps are "
                     "not known here (run `gemm-ladder climb --json bench/results/...json` on the GPU, or give --results)",
                     "not run", "gemm_ladder.gates.climb_data.find_climb_results")]
    return [Fact("climb.source", climb_source, f"the gains of the ladder's steps are read from {climb_source}", "measured",
                 climb_source),
            Fact("climb.gpu", gpu, f"the climb ran on {gpu or 'an unrecorded GPU'}; its figures are taken to hold on "
                 "your GPU and shapes", "assumed", climb_source)]


def _own_vs_cublas(ev: Evidence) -> Fact | None:
    """The kernel's own measured ratio to cuBLAS (gates run now first, then its rows in a results file)."""
    for key in ("measured.vs_cublas", "climb.vs_cublas"):
        f = ev.get(key)
        if f is not None and isinstance(f.value, dict) and f.label == "measured":
            return f
    return None


# --- advise one kernel --------------------------------------------------------------------------


@dataclass
class _Step:
    """What one branch of the answer decides (stop, unplaced, climb)."""

    action: str
    number: int | None  # the level whose contract is shown (the next one, or the one kept)
    headline: str
    text: str
    contract: Contract
    experiment: dict[str, Any]
    risks: list[str]
    expected: dict[str, Any] | None = None


def advise_kernel(ev: Evidence, *, climb_result: dict[str, Any] | None = None, climb_source: str | None = None,
                  shape: tuple[int, int, int] = (4096, 4096, 4096)) -> Advice:
    """Place the kernel of ``ev`` and recommend its next step (or the stop), with the plan for that step.

    ``climb_result`` is the ladder's climb (a results dict, docs/results-schema.md) the expected gains come
    from, ``climb_source`` its description (:func:`gemm_ladder.gates.climb_data.describe_source`); without
    them the gains are reported as not known. ``shape`` is the problem the next step's plan is drawn for.
    The stop comes at the top of the ladder, or when the kernel's own measured ratio to cuBLAS (gates run
    now, or its rows in a results file) is within the noise of 1: the stopping rule's practical roofline.
    """
    from gemm_ladder.audit import LEVELS as AUDITED
    from gemm_ladder.gates.climb_data import gpu_name
    from gemm_ladder.gates.stopping import judge_climb

    climb = next((v for v in judge_climb(climb_result) if v.dtype == ev.dtype), None) if climb_result else None
    gpu = gpu_name(climb_result) if climb_result else None
    pos = place(ev)
    facts = list(ev.facts.values()) + climb_facts(climb_source, gpu)
    own = _own_vs_cublas(ev)
    src = climb_source or "no climb results"
    if pos.next_level is None or (own is not None and own.value["gain"] >= 1 - own.value["noise"]):
        step = _stop(ev, pos, climb, own, shape, src)
    elif pos.rungs[pos.next_level - 1].present is None:
        step = _unplaced(ev, pos, own, shape)
    else:
        step = _climb(ev, pos, climb, climb_result, own, shape, src, bool(climb_source))
        if ev.kind != "level" and pos.level >= 1:
            facts.append(Fact("assumption.same_as_ladder", pos.level, f"your kernel at rung {pos.level} is taken to "
                              f"perform like the ladder's level {pos.level}, so the ladder's step {pos.level} -> "
                              f"{pos.next_level} is the gain to expect", "assumed", src))
    number, checks, risks = step.number, [], step.risks
    if number:
        checks += [f"acceptance criteria: `gemm-ladder criteria --level {number} --dtype {ev.dtype}` (correctness, "
                   "performance, resources, as the gates apply them)",
                   f"correctness: `gemm-ladder climb --levels {number} --shapes edge --dtype {ev.dtype}` (or "
                   "`gemm-ladder gate FILE.py:FUNC --shapes edge` for your own kernel)"]
    if number in AUDITED:
        checks.append(f"protocol: `gemm-ladder audit --level {number}` (the stage ring model-checked)")
    if step.contract.plan is not None:
        checks.append("the designer's own checks and risks for this plan are in its Minimal validation and Risks and "
                      "fallback above (contract)")
    if step.contract.kind == "refused":
        risks.append(f"the designer refuses level {number} at {'x'.join(map(str, shape))}: {step.contract.data['refused']}")
    if gpu is not None and climb_source is not None:
        risks.append(f"the expected figures were measured on {gpu} ({src}); on another GPU or clock, re-run the climb "
                     "there before trusting them")
    return Advice(ev.subject, ev.kind, ev.dtype, ev.arch, tuple(shape), step.action,
                  number if step.action != "stop" else None, step.headline, step.text.strip(), pos, facts,
                  step.contract, step.experiment, checks, risks, step.expected, climb, climb_source)


def _stop(ev: Evidence, pos: Position, climb: ClimbVerdict | None, own: Fact | None, shape, src: str) -> _Step:
    from gemm_ladder.levels import LEVELS

    top = climb.verdict(pos.level) if climb and pos.level else None
    risks = []
    if pos.next_level is None:
        headline = f"Stop: level {pos.level} is the top of the ladder"
        text = f"The kernel stands at level {pos.level} ({LEVELS[pos.level].name}): no rung is left to climb. "
    elif pos.level == 0:
        headline = "Stop: it already runs at cuBLAS's speed"
        text = (f"The kernel is not on the ladder ({pos.rungs[0].because}) and it measured {own.statement} "
                f"({own.source}). The ladder is for what cuBLAS does not give (a fused epilogue, a layout, a dtype): "
                "where it already meets the need, keep it. Level 1's contract follows, for when it does not. ")
    else:
        headline = f"Stop at level {pos.level}: it already runs at the practical roofline"
        text = (f"The kernel stands at level {pos.level}, and by the stopping rule a kernel at the practical roofline "
                f"stays as it is rather than climb to level {pos.next_level}: {own.statement} ({own.source}). ")
    if top is not None and top.vs_cublas and top.vs_cublas.measured:
        text += (f"In the ladder's climb level {pos.level} ran {top.vs_cublas.figures()} against cuBLAS, the practical "
                 f"roofline ({src}): " + ("at it, within the noise." if top.at_practical_roofline else
                                         "short of it; what is left is outside the ladder's rungs (the level "
                                         "registry's docstring gives the measured reasons)."))
    if pos.next_level is None:
        text += f" What comes after the ladder is coverage, not speed: {_library_offer()} (gemm_ladder.library)."
    kept = pos.level or 1
    contract = step_contract(kept, shape, ev.dtype, ev.arch)
    if pos.level:
        contract.title = contract.title.replace("The designer's plan for", "The plan of the kernel kept:", 1)
        risks.append(f"level {pos.level}'s domain is {LEVELS[pos.level].domain.describe()}: shapes outside it are "
                     "refused before launch; for them the library (or cuBLAS) is the fallback, never a silent one")
    return _Step("stop", kept, headline, text, contract, _stop_experiment(pos.level, top, own, ev.dtype, src), risks)


def _unplaced(ev: Evidence, pos: Position, own: Fact | None, shape) -> _Step:
    nxt = pos.next_level
    rung = pos.rungs[nxt - 1]
    text = (f"The evidence places the kernel at level {pos.level} but cannot decide rung {nxt} ({rung.name}): "
            f"{rung.because}. Give the kernel itself (FILE.py:FUNC with build(), its .cu, or --cubin) to place it; if "
            f"it is at level {pos.level}, the next step is level {nxt}, whose contract follows.")
    if own is not None:
        text += f" It measured: {own.statement} ({own.source})."
    experiment = {"what": "place the kernel from its SASS", "command": "gemm-ladder advise KERNEL.cubin --kernel-name NAME",
                  "expected": None, "falsified_if": None}
    return _Step("unplaced", nxt, f"Cannot tell whether rung {nxt} is present: placed at level {pos.level} at most",
                 text, step_contract(nxt, shape, ev.dtype, ev.arch), experiment, [])


def _climb(ev: Evidence, pos: Position, climb: ClimbVerdict | None, climb_result: dict[str, Any] | None,
           own: Fact | None, shape, src: str, have_climb: bool) -> _Step:
    from gemm_ladder.levels import LEVELS

    nxt = pos.next_level
    level = LEVELS[nxt]
    v = climb.verdict(nxt) if climb else None
    risks: list[str] = []
    text = (f"The kernel is not on the ladder yet: {pos.rungs[0].because}. Start from level 1's contract, the first "
            "rung, gated for correctness before any speed. " if pos.level == 0 else "")
    if own is not None:  # its source is named once: below, when it is the climb's own file
        text += f"It measured: {own.statement}" + ("" if own.source == src else f" ({own.source})") + ". "
    mine = climb.verdict(pos.level) if climb and ev.kind == "level" else None
    if mine is not None and mine.verdict == "not earned":
        text += (f"By the stopping rule level {pos.level} itself did not earn its complexity ({mine.below.figures()} "
                 f"against level {mine.below.lower}): climb on, or go back to level {mine.kept_before}. ")
    text += f"Level {nxt} adds one idea: {level.idea}. "
    rec = recovering_level(climb, nxt) if v is not None and v.verdict == "not earned" else None
    if v is not None and v.verdict == "not earned":
        text += (f"Take it as the base of the next rung, not for speed: in the ladder's own climb level {nxt} alone ran "
                 f"{v.below.figures()} against level {v.below.lower} ({src}): it did not earn its complexity. ")
        if rec is not None and rec.vs_kept is not None:
            text += (f"Level {rec.level} on top of it ran {rec.vs_kept.figures()} against level {rec.kept_before}. "
                     f"Build level {nxt} and gate its correctness, then go on to level {rec.level}; ship level "
                     f"{rec.kept_before} until level {rec.level} beats it.")
            risks.append(f"level {nxt} alone is slower ({v.below.figures()} against level {v.below.lower} in {src}): "
                         f"fallback: keep level {rec.kept_before} for production until level {rec.level} beats it")
        else:
            risks.append(f"level {nxt} alone is slower ({v.below.figures()}): fallback: keep level {v.below.lower}")
    elif v is not None and v.below is not None and v.below.measured:
        text += (f"In the ladder's own climb it earned its complexity: {v.below.figures()} against level "
                 f"{v.below.lower} ({src}); expect about {v.below.gain:.2f}x.")
        if v.below.counts["tie"]:
            risks.append(f"the gain is not on every shape: {v.below.counts['tie']} of {len(v.below.shapes)} timed "
                         f"shapes were within the noise in {src}: measure your own shapes")
    else:
        text += (f"Its gain is not measured in {src}: {_untimed_reason(nxt, ev.dtype)}" if have_climb else
                 "No climb results: its gain is not known here")
        text += (f"; level {nxt} itself ran {v.vs_cublas.figures()} against cuBLAS there." if v is not None and
                 v.vs_cublas is not None and v.vs_cublas.measured else ".")
    if pos.skipped_over:
        text += (" The kernel also shows " + ", ".join(f"rung {r.level} ({r.name})" for r in pos.skipped_over)
                 + f": take rung {nxt} first, one idea at a time, so an error has one place to come from.")
    if pos.level >= 1 and level.domain != LEVELS[pos.level].domain:
        risks.append(f"level {nxt} computes {level.domain.describe()} where level {pos.level} computes "
                     f"{LEVELS[pos.level].domain.describe()}: shapes outside are refused before launch; fallback: keep "
                     f"level {pos.level}'s path for them")
    if pos.level == 0:
        risks.append(f"level {nxt} computes only {level.domain.describe()}: it proves the layout contract, not speed; "
                     "keep the current path for every other shape until a level covers it (level 3 covers any M and N)")
    experiment = _climb_experiment(pos.level, nxt, v, rec, ev, src, edge_error_ratio(climb_result, nxt, ev.dtype))
    return _Step("climb", nxt, f"Next step: level {nxt} ({level.name})", text,
                 step_contract(nxt, shape, ev.dtype, ev.arch), experiment, risks, _expected(v, nxt, src))


def _expected(v: LevelVerdict | None, nxt: int, src: str) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"level": nxt, "source": src, "verdict": v.verdict, "reason": v.reason,
            "vs_below": v.below.to_json() if v.below else None,
            "vs_cublas": v.vs_cublas.gain if v.vs_cublas else None}


def edge_error_ratio(result: dict[str, Any] | None, level: int, dtype: str) -> tuple[float, int] | None:
    """The largest relative error over cuBLAS's of ``level`` on the edge rows of ``result``, and the row count."""
    ratios = [r["correctness"]["rel_err"] / r["correctness"]["cublas_rel_err"] for r in (result or {}).get("rows") or []
              if r.get("kind") == "level" and r.get("level") == level and r.get("dtype") == dtype
              and r.get("shape_set") == "edge" and r.get("status") == "pass" and r.get("correctness")
              and r["correctness"].get("rel_err") is not None and r["correctness"].get("cublas_rel_err")]
    return (max(ratios), len(ratios)) if ratios else None


def _climb_experiment(pos: int, nxt: int, v: LevelVerdict | None, rec: LevelVerdict | None, ev: Evidence, src: str,
                      edge: tuple[float, int] | None) -> dict[str, Any]:
    if rec is not None and rec.vs_kept is not None and rec.vs_kept.measured:
        # A step that does not pay alone is judged by the rung that builds on it.
        k, kept = rec.vs_kept, rec.kept_before
        return {
            "what": (f"time level {kept}, level {nxt} and level {rec.level} interleaved in one run: level {nxt} is a base, "
                     f"the step pays when level {rec.level} beats level {kept}"),
            "command": f"gemm-ladder climb --levels {kept},{nxt},{rec.level} --shapes square,llm --dtype {ev.dtype}",
            "expected": {f"L{nxt}/L{kept}": v.below.gain, f"L{rec.level}/L{kept}": k.gain,
                         "range": [min(s.ratio for s in k.shapes), max(s.ratio for s in k.shapes)], "noise": k.noise,
                         "source": src},
            "falsified_if": (f"level {rec.level} does not beat level {kept} by more than {k.noise:.1%} (geometric mean of "
                             f"level {kept}'s time over level {rec.level}'s): the detour through level {nxt} did not pay; "
                             f"keep level {kept}"),
        }
    if v is not None and v.below is not None and v.below.measured:
        below = v.below
        return {
            "what": f"time level {nxt} against level {pos or below.lower} on the timed shapes, interleaved in one run",
            "command": f"gemm-ladder climb --levels {below.lower},{nxt} --shapes square,llm --dtype {ev.dtype}",
            "expected": {"ratio": below.gain, "range": [min(s.ratio for s in below.shapes), max(s.ratio for s in below.shapes)],
                         "noise": below.noise, "source": src},
            "falsified_if": (f"the geometric-mean ratio level {below.lower} time / level {nxt} time is at most "
                             f"1 + {below.noise:.1%}: the step brought no stable gain; keep level {below.lower}")
            if v.verdict == "earned" else
            (f"level {nxt} alone comes out faster than level {below.lower} beyond {below.noise:.1%}: then your level "
             f"{below.lower} is weaker than the ladder's (the climb measured {below.gain:.2f}x)"),
        }
    from gemm_ladder.gates.correctness import CUBLAS_ERROR_FACTOR

    vs = v.vs_cublas if v is not None else None
    expected: dict[str, Any] = {"source": src}
    if edge is not None:
        expected["edge_error_vs_cublas"] = {"max": edge[0], "rows": edge[1]}
    if vs is not None and vs.measured:
        expected["vs_cublas"] = vs.gain
    return {
        "what": (f"gate level {nxt} on the edge set: its error against cuBLAS's on every shape of its domain, and "
                 "the rung's instruction in its SASS"),
        "command": f"gemm-ladder climb --levels {nxt} --shapes edge,square --dtype {ev.dtype}",
        "expected": expected,
        "falsified_if": (f"any edge shape inside the domain fails (error above {CUBLAS_ERROR_FACTOR:g}x cuBLAS's + the "
                         "unit roundoff; the ladder's level measured "
                         + (f"at most {edge[0]:.2f}x over {edge[1]} edge rows" if edge else "no edge rows here")
                         + f"), or `gemm-ladder advise` does not place the new kernel at level {nxt}"),
    }


def _stop_experiment(level: int, top: LevelVerdict | None, own: Fact | None, dtype: str, src: str) -> dict[str, Any]:
    vs = top.vs_cublas if top is not None else None
    if vs is None and own is not None:  # the kernel's own measurement, when the ladder has no figure for its rung
        return {"what": "check that it stays at cuBLAS's speed on your own shapes",
                "command": "gemm-ladder gate FILE.py:FUNC --shapes square,llm",
                "expected": {"vs_cublas": own.value["gain"], "noise": own.value["noise"], "source": own.source},
                "falsified_if": f"its geometric-mean ratio to cuBLAS falls below 1 - {own.value['noise']:.1%}: then "
                                "climb from level 1"}
    return {
        "what": f"check that level {level} stays at cuBLAS's speed on your own shapes",
        "command": f"gemm-ladder climb --levels {level} --shapes llm --dtype {dtype}",
        "expected": ({"vs_cublas": vs.gain, "range": [min(s.ratio for s in vs.shapes), max(s.ratio for s in vs.shapes)],
                      "noise": vs.noise, "source": src} if vs is not None and vs.measured else None),
        "falsified_if": (f"the geometric-mean ratio to cuBLAS falls below 1 - {vs.noise:.1%} on your shapes: the stop "
                         "does not hold there; profile before adding a rung" if vs is not None and vs.measured else
                         "no figure to compare with: measure it"),
    }
