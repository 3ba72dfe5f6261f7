"""``gemm-ladder criteria --level N``: the acceptance criteria read from the gates and the registry, never retyped.

Each test that changes a gate's constant or a level's expectation proves the checklist follows it."""

from __future__ import annotations

import json

import pytest

from gemm_ladder.advise.criteria import level_criteria
from gemm_ladder.advise.render import criteria_markdown
from gemm_ladder.cli import main
from gemm_ladder.levels import LEVELS
from gemm_ladder.levels.base import PerfExpectation


def _texts(c, gate: str) -> list[str]:
    return [i.text for s in c.sections if s.gate == gate for i in s.items]


@pytest.mark.parametrize("number", sorted(LEVELS))
def test_every_level_has_the_three_gates(number):
    c = level_criteria(number)
    gates = [s.gate for s in c.sections]
    assert gates[:3] == ["correctness", "performance", "resources"]
    assert ("protocol" in gates) == (number >= 4)
    resources = " ".join(_texts(c, "resources"))
    assert "HGMMA" in resources and "spills" in resources
    assert ("UTMALDG" in resources) == (number >= 4)  # the resource gate requires TMA loads from level 4 on
    perf = " ".join(_texts(c, "performance"))
    if LEVELS[number].perf.min_vs_previous:
        assert f">= {LEVELS[number].perf.min_vs_previous:.2f}x level {number - 1}" in perf
    elif number > 1:
        assert f"makes no claim to beat level {number - 1}" in perf


def test_levels_6_and_8_make_no_claim_over_the_level_below():
    for n in (6, 8):
        assert any("no claim" in t for t in _texts(level_criteria(n), "performance"))


def test_the_domain_and_the_edge_set_split():
    c = level_criteria(4)
    domain = next(i for s in c.sections for i in s.items if i.text.startswith("domain"))
    assert domain.values["domain"] == LEVELS[4].domain.describe()
    assert [128, 128, 65] in domain.values["refused"] and [128, 128, 64] in domain.values["computed"]
    assert "K = 65 is not a multiple of 8" in domain.text and "16-byte aligned" in domain.text
    assert "never times it" in " ".join(_texts(level_criteria(1), "performance"))
    assert "never times it" not in " ".join(_texts(level_criteria(3), "performance"))


def test_correctness_numbers_follow_the_gates_constants(monkeypatch):
    from gemm_ladder.gates import correctness

    assert "<= 2 x cuBLAS" in criteria_markdown(level_criteria(2))
    monkeypatch.setattr(correctness, "CUBLAS_ERROR_FACTOR", 3.5)
    monkeypatch.setattr(correctness, "PLANTED_PER_OPERAND", 7)
    md = criteria_markdown(level_criteria(2, "fp16"))
    assert "<= 3.5 x cuBLAS" in md and "7 NaN/+Inf/-Inf planted" in md and "0.000488" in md  # fp16: 2^-11


def test_performance_numbers_follow_the_registry(monkeypatch):
    monkeypatch.setitem(LEVELS, 5, LEVELS[5].variant(perf=PerfExpectation(min_vs_cublas=0.77, min_vs_previous=1.25,
                                                                          noise=0.05)))
    perf = " ".join(_texts(level_criteria(5), "performance"))
    assert ">= 0.77x cuBLAS" in perf and ">= 1.25x level 4" in perf and "max(5%" in perf


def test_resource_rules_are_probed_from_the_gate(monkeypatch):
    from gemm_ladder.gates import resources

    monkeypatch.setattr(resources, "FIRST_TMA_LEVEL", 6)
    assert "UTMALDG" not in " ".join(_texts(level_criteria(5), "resources"))
    assert "UTMALDG" in " ".join(_texts(level_criteria(6), "resources"))
    item = next(i for s in level_criteria(6).sections for i in s.items if "UTMALDG" in i.text)
    assert item.values["gate_message"] == "no UTMALDG in SASS: levels >= 6 must load through TMA"


def test_criteria_command(capsys):
    assert main(["criteria", "--level", "7"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# Acceptance criteria of level 7 (warp_specialized), bf16")
    assert "## Correctness" in md and "## Performance" in md and "## Resources" in md and "- [ ] " in md
    assert main(["criteria", "--level", "9", "--dtype", "fp16", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "gemm-ladder/criteria/1" and out["level"] == 9 and out["dtype"] == "fp16"
    assert {s["gate"] for s in out["sections"]} == {"correctness", "performance", "resources", "protocol"}


@pytest.mark.parametrize("argv, message", [
    (["--level", "0"], "--level '0': the ladder has levels"),
    (["--level", "nine"], "--level 'nine'"),
    (["--level", "3", "--dtype", "fp8"], "--dtype 'fp8': bf16 or fp16"),
    (["--level", "3", "--format", "html"], "--format 'html'"),
])
def test_criteria_bad_inputs(argv, message, capsys):
    assert main(["criteria", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
