"""The answer's decisions on synthetic evidence (no compiler): the stop at the practical roofline, the
stop of a torch function that is already cuBLAS, a rung that cannot be decided, rungs taken out of order."""

from __future__ import annotations

from pathlib import Path

from gemm_ladder.advise.advice import advise_kernel
from gemm_ladder.advise.climb_data import describe_source, load_result
from gemm_ladder.advise.evidence import Evidence
from gemm_ladder.advise.render import SECTIONS, advice_markdown

ROOT = Path(__file__).resolve().parent.parent
CLIMB = ROOT / "bench/results/2026-11-30_climb_bf16_edge_square_llm_d3b6198.json"


def _climb():
    result = load_result(CLIMB)
    return {"climb_result": result, "climb_source": describe_source(CLIMB, result)}


def _kernel(level_like: int, **over) -> Evidence:
    """SASS facts of a kernel with the ladder's rungs 1..level_like (and none above)."""
    ev = Evidence("user kernel", "cubin")
    facts = {"sass.available": True, "sass.hgmma": 8, "sass.hmma": 0, "sass.mma_in_loop": level_like >= 2,
             "sass.reads_ctaid": level_like >= 3, "sass.utmaldg": 4 if level_like >= 4 else 0,
             "sass.mbarrier_inits": 6 if level_like >= 5 else 1, "sass.tile_loop": level_like >= 6,
             "sass.setmaxnreg": (1, 1) if level_like >= 7 else (0, 0),
             "sass.multicast_loads": 4 if level_like >= 8 else 0, "elf.max_threads": 384 if level_like >= 9 else 128}
    facts.update(over)
    for key, value in facts.items():
        ev.add(key, value, f"{key} = {value}", "measured", "literal")
    return ev


def test_a_kernel_at_the_practical_roofline_stops_there():
    ev = _kernel(7)
    ev.add("measured.vs_cublas", {"gain": 0.99, "noise": 0.03}, "your kernel: 0.99x cuBLAS", "measured", "gates now")
    a = advise_kernel(ev, **_climb())
    assert a.action == "stop" and a.next_level is None and "practical roofline" in a.headline
    assert a.contract.kind == "tma_plan" and a.contract.plan.stages == 4  # the plan of the level kept (7)
    assert "climb --levels 7" in a.experiment["command"]
    # just below the noise: climb on
    ev.add("measured.vs_cublas", {"gain": 0.96, "noise": 0.03}, "your kernel: 0.96x cuBLAS", "measured", "gates now")
    assert advise_kernel(ev, **_climb()).action == "climb"


def test_a_torch_function_already_at_cublas_speed_keeps_it():
    ev = Evidence("f.py:linear", "callable")
    ev.add("sass.available", False, "no SASS", "measured", "f.py")
    ev.add("callable.own_kernel", False, "computes with torch (F.linear)", "inferred", "source")
    ev.add("measured.vs_cublas", {"gain": 1.0, "noise": 0.03}, "1.00x cuBLAS", "measured", "gates now")
    a = advise_kernel(ev, **_climb())
    assert a.action == "stop" and "cuBLAS's speed" in a.headline and "keep it" in a.conclusion
    assert a.contract.kind == "thread_copy" and "level 1" in a.contract.title
    assert a.experiment["expected"]["vs_cublas"] == 1.0


def test_a_rung_that_cannot_be_decided():
    ev = Evidence("gemm in result.json", "results")
    ev.add("sass.hgmma", 8, "8 HGMMA in the census", "measured", "result.json")
    a = advise_kernel(ev, **_climb())
    assert a.action == "unplaced" and a.next_level == 2 and "cannot decide rung 2" in a.conclusion
    assert [s for s in SECTIONS if f"\n## {s}\n" in advice_markdown(a)] == list(SECTIONS)


def test_rungs_out_of_order_recommend_the_lowest_missing_one():
    a = advise_kernel(_kernel(7, **{"sass.utmaldg": 0}), **_climb())  # warp-specialized, persistent, but no TMA
    assert a.position.level == 3 and a.next_level == 4
    assert "one idea at a time" in a.conclusion and "rung 7 (warp_specialized)" in a.conclusion
    assert any(f.key == "assumption.same_as_ladder" and f.label == "assumed" for f in a.evidence)


def test_without_climb_results_the_gain_is_said_unknown():
    a = advise_kernel(_kernel(4))
    assert a.action == "climb" and a.next_level == 5 and "No climb results" in a.conclusion
    assert any(f.key == "climb.source" and f.label == "not run" for f in a.evidence)


def test_a_shape_the_designer_refuses_is_said_so():
    a = advise_kernel(_kernel(3), shape=(4097, 4095, 4093), **_climb())  # K, N not multiples of 8: no TMA
    assert a.next_level == 4 and a.contract.kind == "refused"
    assert any("the designer refuses level 4" in r for r in a.risks)
