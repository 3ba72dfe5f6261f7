"""``gemm-ladder climb`` with no arguments (issue 26): on a GPU it times the ladder (edge shapes checked,
square and three llm shapes timed, so the performance gate and the stopping rule have something to
judge); without one it checks the edge set as before. The selection is tested here with a fake
"has a GPU" switch and a stand-in for the gates (no GPU, nothing compiled)."""

from __future__ import annotations

import pytest

from gemm_ladder import cli, gpu
from gemm_ladder.gates import climb as climb_gates
from gemm_ladder.gpu import MIN_TIMED_FLOPS
from gemm_ladder.shapes import CLIMB_LLM, SHAPE_SETS, default_climb_shapes


@pytest.fixture
def ran(monkeypatch):
    """The shapes the climb command hands to the gates, with the gates stood in for."""
    seen = []

    def fake_run_gates(targets, dtypes, shapes, **kwargs):
        seen.append(shapes)
        return {"summary": {"verdict": "passed", "failures": []}, "gates": {}}  # climb prints its verdict line

    monkeypatch.setattr(climb_gates, "run_gates", fake_run_gates)
    return seen


@pytest.mark.parametrize("has_gpu", [True, False])
def test_climb_without_arguments_picks_its_shapes_by_the_gpu(monkeypatch, ran, has_gpu):
    monkeypatch.setattr(gpu, "gpu_available", lambda: has_gpu)
    assert cli.main(["climb"]) == 0
    shapes = ran[-1]
    assert shapes == default_climb_shapes(has_gpu)
    timed = [s for name, s in shapes if name != "edge" and 2 * s[0] * s[1] * s[2] >= MIN_TIMED_FLOPS]
    checked = [s for name, s in shapes if name == "edge"]
    assert checked == SHAPE_SETS["edge"]
    if has_gpu:  # square's 4096^3 and 8192^3 and the llm shapes are timed; the stopping rule gets them
        assert {(4096, 4096, 4096), (8192, 8192, 8192), *CLIMB_LLM} <= set(timed) and len(timed) == 5
        assert all(s in SHAPE_SETS["llm"] for s in CLIMB_LLM)
    else:
        assert timed == [] and len(shapes) == len(SHAPE_SETS["edge"])


def test_given_shapes_are_taken_as_given(monkeypatch, ran):
    monkeypatch.setattr(gpu, "gpu_available", lambda: True)
    assert cli.main(["climb", "--shapes", "edge"]) == 0
    assert ran[-1] == [("edge", s) for s in SHAPE_SETS["edge"]]


def test_the_default_timed_work_is_about_two_minutes_of_an_h200():
    """Budget: every timed shape costs each level and cuBLAS about one 0.5 s measurement (4 rounds);
    the work stays a few percent of a minute of GPU time at the ladder's slowest timed level (L3,
    about 100 TFLOP/s), so the compile and the L2 flushes dominate, as in the committed climbs."""
    timed = [s for name, s in default_climb_shapes(True) if name != "edge" and 2 * s[0] * s[1] * s[2] >= MIN_TIMED_FLOPS]
    flops = sum(2 * m * n * k for m, n, k in timed)
    assert len(timed) * 8 * 0.5 <= 30  # seconds of timed calls: 7 timed levels and cuBLAS per shape
    assert flops / 100e12 < 0.1  # one L3 call per shape at 100 TFLOP/s: well under the budget
