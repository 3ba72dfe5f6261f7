"""The answer for a results JSON: the stopping rule over every level the climb timed, in the method's
required outputs (the stopping table is the contract)."""

from __future__ import annotations

from typing import Any

from gemm_ladder.advise.advice import Advice, climb_facts, recovering_level
from gemm_ladder.advise.contract import Contract
from gemm_ladder.advise.evidence import Fact


def advise_climb(result: dict[str, Any], source: str, dtype: str, *, shape: tuple[int, int, int] = (4096, 4096, 4096),
                 arch: str = "sm_90a") -> Advice:
    """The stopping rule over a results JSON: which levels earned their complexity, where to stop, and why."""
    from gemm_ladder.advise.climb_data import gpu_name
    from gemm_ladder.advise.stopping import judge_climb

    verdicts = {v.dtype: v for v in judge_climb(result)}
    climb = verdicts.get(dtype)
    facts = climb_facts(source, gpu_name(result))
    if climb is None or climb.kept is None:
        headline = "Nothing to judge: no timed level rows"
        text = (f"{source} holds no timed, passing level rows in {dtype} "
                f"({', '.join(sorted(verdicts)) or 'no dtype'} present): the stopping rule needs timings.")
        return Advice(source, "results", dtype, arch, shape, "unplaced", None, headline, text, None, facts,
                      Contract("stopping", "no stopping table"), {"what": "climb with timings",
                      "command": f"gemm-ladder climb --dtype {dtype} --shapes square,llm --json RESULT.json",
                      "expected": None, "falsified_if": None}, [], [], None, climb, source)
    for v in climb.levels:
        facts.append(Fact(f"stopping.level{v.level}", v.verdict, f"level {v.level} ({v.name}): {v.reason}", "measured",
                          source + "; gemm_ladder.advise.stopping"))
    kept = climb.kept
    losers = climb.not_earned
    loss_text = "; ".join(f"level {v.level} ran {v.below.figures()} against level {v.below.lower}" for v in losers)
    if losers:
        headline = (f"Stop where a level did not beat the one below: {', '.join(f'after level {v.below.lower}' for v in losers)}"
                    + (f"; keep level {kept}" if kept else ""))
        text = (f"By the stopping rule, {'these levels' if len(losers) > 1 else 'this level'} did not earn "
                f"{'their' if len(losers) > 1 else 'its'} complexity: {loss_text}. "
                + " ".join(
                    (f"Level {v.level}'s loss is recovered by level {rec.level} ({rec.vs_kept.figures()} against level "
                     f"{rec.kept_before}): keep level {v.level} only as the base of level {rec.level}."
                     if (rec := recovering_level(climb, v.level)) is not None and rec.vs_kept is not None else
                     f"Nothing above level {v.level} in this climb recovers it: stop at level {v.below.lower}.")
                    for v in losers))
    else:
        headline = f"Every timed level earned its complexity; keep level {kept}"
        text = f"Every level with a timed level below it earned its complexity in {dtype}. "
    kv = climb.verdict(kept)
    if kv.at_practical_roofline:
        text += f" Level {kept} is at the practical roofline ({kv.vs_cublas.figures()} against cuBLAS): stop there."
    elif kv.vs_cublas is not None and kv.vs_cublas.measured:
        text += f" Level {kept} ran {kv.vs_cublas.figures()} against cuBLAS."
    rows = [{"level": v.level, "name": v.name, "verdict": v.verdict, "keeps": v.keeps,
             "vs_below": f"{v.below.gain:.2f}x L{v.below.lower}" if v.below and v.below.measured else "-",
             "vs_kept": (f"{v.vs_kept.gain:.2f}x L{v.kept_before}" if v.vs_kept and v.vs_kept.measured
                         and v.kept_before != (v.below.lower if v.below else None) else "-"),
             "noise": f"{v.below.noise:.1%}" if v.below and v.below.measured else "-",
             "vs_cublas": f"{v.vs_cublas.gain:.2f}x" if v.vs_cublas and v.vs_cublas.measured else "-",
             "roofline": f"{v.roofline_fraction:.0%}" if v.roofline_fraction else "-"} for v in climb.levels]
    contract = Contract("stopping", f"The stopping rule over {source}, {dtype}", {"rows": rows})
    experiment = {
        "what": ("re-time the levels that did not earn their complexity against the level below, interleaved"
                 if losers else f"re-time level {kept} against cuBLAS"),
        "command": (f"gemm-ladder climb --levels {','.join(sorted({str(x) for v in losers for x in (v.below.lower, v.level)}))} "
                    f"--shapes square,llm --dtype {dtype}" if losers else
                    f"gemm-ladder climb --levels {kept} --shapes square,llm --dtype {dtype}"),
        "expected": {f"L{v.level}/L{v.below.lower}": v.below.gain for v in losers} or
                    {"vs_cublas": kv.vs_cublas.gain if kv.vs_cublas else None},
        "falsified_if": ("a level above comes out faster than its level below beyond the noise: then it did earn its "
                         "complexity on this GPU and the verdict changes" if losers else
                         "a level comes out no faster than the level below"),
    }
    risks = [f"the verdicts hold for this file's shapes and GPU ({source}); other shapes (small M, unaligned) may "
             "rank the levels differently: climb your own shapes"]
    return Advice(source, "results", dtype, arch, shape, "stop", None, headline, text.strip(), None, facts, contract,
                  experiment, [f"acceptance criteria of the level kept: `gemm-ladder criteria --level {kept}`"], risks,
                  None, climb, source)
