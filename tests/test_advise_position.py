"""Placing evidence on the ladder without a compiler: synthetic facts for each way a rung is read."""

from __future__ import annotations

from gemm_ladder.advise.evidence import LABELS, Evidence
from gemm_ladder.advise.ladder_position import place

import pytest


def _sass(**over) -> Evidence:
    """A level-9-like kernel's SASS facts; ``over`` replaces some."""
    ev = Evidence("test", "cubin")
    facts = {"sass.available": True, "sass.hgmma": 16, "sass.hmma": 0, "sass.mma_in_loop": True,
             "sass.reads_ctaid": True, "sass.utmaldg": 28, "sass.utmastg": 14, "sass.mbarrier_inits": 8,
             "sass.tile_loop": True, "sass.setmaxnreg": (1, 1), "sass.multicast_loads": 14, "elf.max_threads": 384}
    facts.update(over)
    for key, value in facts.items():
        if value is not None:
            ev.add(key, value, f"{key} = {value}", "measured", "literal")
    return ev


def test_every_rung_present_is_level_9_with_consumers_from_threads():
    pos = place(_sass())
    assert pos.level == 9 and pos.next_level is None
    # no build: the consumers come from 384 threads less one producer warpgroup, an inference
    assert pos.rungs[8].label == "inferred" and "2 consumer warpgroup(s)" in pos.rungs[8].because


@pytest.mark.parametrize("key, value, level", [
    ("sass.mma_in_loop", False, 1), ("sass.reads_ctaid", False, 2), ("sass.utmaldg", 0, 3),
    ("sass.mbarrier_inits", 2, 4), ("sass.tile_loop", False, 5), ("sass.setmaxnreg", (0, 0), 6),
    ("sass.multicast_loads", 0, 7), ("elf.max_threads", 256, 8),
])
def test_a_missing_rung_stops_the_climb_there_and_later_ones_are_skipped_over(key, value, level):
    pos = place(_sass(**{key: value}))
    assert pos.level == level and pos.next_level == level + 1
    assert [r.level for r in pos.skipped_over] == [n for n in range(level + 2, 10)]
    assert "above the missing rung" in pos.statement() or level == 8


def test_hmma_is_not_wgmma():
    pos = place(_sass(**{"sass.hgmma": 0, "sass.hmma": 12}))
    assert pos.level == 0 and pos.rungs[0].present is False and "HMMA" in pos.rungs[0].because
    assert "not on the ladder yet" in pos.statement()


def test_the_build_decides_the_ring_and_the_consumers_when_it_is_there():
    ev = _sass(**{"sass.mbarrier_inits": 2})
    ev.add("build.stages", 4, "4 stage(s) in the ring (GL_STAGES)", "measured", "flags")
    ev.add("build.consumers", 1, "1 consumer warpgroup(s) per CTA (GL_CONSUMERS)", "measured", "flags")
    pos = place(ev)
    assert pos.rungs[4].present and pos.rungs[4].because.startswith("4 stage(s)")
    assert pos.level == 8 and pos.rungs[8].present is False


def test_without_sass_the_rungs_are_unknown_unless_there_is_no_kernel():
    ev = Evidence("f.py:g", "callable")
    ev.add("sass.available", False, "no SASS", "measured", "f.py:g")
    pos = place(ev)
    assert pos.level == 0 and all(r.present is None for r in pos.rungs) and pos.unknown
    ev.add("callable.own_kernel", False, "computes with torch", "inferred", "source")
    pos = place(ev)
    assert all(r.present is False for r in pos.rungs)
    assert pos.rungs[0].because == "computes with torch" and pos.rungs[1].because == "as rung 1"


def test_a_census_summary_places_rung_1_and_leaves_rung_2_unknown():
    ev = Evidence("gemm in result.json", "results")
    ev.add("sass.hgmma", 8, "8 HGMMA in the census", "measured", "result.json")
    ev.add("sass.utmaldg", 4, "4 UTMALDG in the census", "measured", "result.json")
    pos = place(ev)
    assert pos.level == 1 and pos.rungs[1].present is None and pos.rungs[3].present is True


def test_fact_labels_are_checked():
    with pytest.raises(ValueError, match="label"):
        Evidence("x", "cubin").add("k", 1, "s", "guessed", "src")
    assert LABELS == ("measured", "inferred", "assumed", "not run")
