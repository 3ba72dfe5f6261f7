"""``advise`` on the ladder's own levels: each placed at its number from its SASS and build alone (no GPU),
and the next step recommended with the designer's plan; level 9: the stop, with its reason.

The nine levels are built once per test session (in parallel, into the session's nvcc cache)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import needs_nvcc

from gemm_ladder.advise.advice import advise_kernel
from gemm_ladder.advise.climb_data import describe_source, load_result
from gemm_ladder.advise.evidence import LABELS
from gemm_ladder.advise.ladder_position import place
from gemm_ladder.advise.render import SECTIONS, advice_markdown
from gemm_ladder.advise.stopping import judge_climb
from gemm_ladder.advise.targets import level_evidence
from gemm_ladder.cli import main
from gemm_ladder.levels import LEVELS

ROOT = Path(__file__).resolve().parent.parent
CLIMB = ROOT / "bench/results/2026-11-30_climb_bf16_edge_square_llm_d3b6198.json"


@pytest.fixture(scope="session")
def ladder_evidence(nvcc_cache):
    """{level: Evidence} of every level in bf16, each built once (nvcc and cuobjdump run in parallel, one level
    per thread: they are subprocesses)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEMM_LADDER_CACHE", str(nvcc_cache))
        with ThreadPoolExecutor(max_workers=min(len(LEVELS), os.cpu_count() or 1)) as pool:
            evidence = list(pool.map(lambda level: level_evidence(level, "bf16"), LEVELS.values()))
    return dict(zip(LEVELS, evidence))


@pytest.fixture(scope="module")
def climb():
    return load_result(CLIMB), describe_source(CLIMB, load_result(CLIMB))


@needs_nvcc
@pytest.mark.parametrize("number", sorted(LEVELS))
def test_each_level_is_placed_at_its_own_number(ladder_evidence, number):
    pos = place(ladder_evidence[number])
    assert pos.level == number, pos.to_json()
    assert all(r.present is True for r in pos.rungs[:number])
    assert all(r.present is False for r in pos.rungs[number:]), "a rung above is not 'unknown' but absent"
    assert not pos.skipped_over


@needs_nvcc
def test_every_fact_is_labelled_with_its_source(ladder_evidence):
    for ev in ladder_evidence.values():
        for f in ev.facts.values():
            assert f.label in LABELS and f.source, f
        assert ev.get("sass.hgmma").label == "measured" and ev.get("sass.mma_in_loop").label == "inferred"
        assert ev.get("launch.persistent") is not None  # the launch: one CTA, one per tile, or persistent
    assert ev.get("launch.persistent").value is True and "persistent" in ev.get("launch.persistent").statement


@needs_nvcc
@pytest.mark.parametrize("number", range(1, 9))
def test_advise_each_level_recommends_the_next_with_its_plan(ladder_evidence, climb, number):
    result, source = climb
    a = advise_kernel(ladder_evidence[number], climb_result=result, climb_source=source)
    nxt = LEVELS[number + 1]
    assert a.action == "climb" and a.next_level == number + 1 and a.headline.startswith(f"Next step: level {number + 1}")
    if hasattr(nxt, "plan"):  # levels 4-9: the designer's plan with the next level's configuration
        assert a.contract.kind == "tma_plan"
        p = a.contract.plan
        assert (p.tile, p.stages, p.cluster, p.consumers.warpgroups, p.persistent) == (
            nxt.tile, nxt.stages, nxt.cluster, nxt.consumers, nxt.persistent)
    else:  # levels 2-3: the thread-copy contract with the wgmma descriptors
        assert a.contract.kind == "thread_copy" and set(a.contract.data["descriptors"]) == {"A", "B"}
    md = advice_markdown(a)
    heads = [md.index(f"\n## {s}\n") for s in SECTIONS]
    assert heads == sorted(heads), "the method's five required outputs, in order"
    assert "## Conclusion" not in md.split("## Contract/table/timeline")[1].split("## Minimal validation")[0] or \
        "#### Conclusion" in md  # the plan's own headings are nested under the contract
    assert a.experiment["command"].startswith("gemm-ladder ") and a.experiment["falsified_if"]
    json.dumps(a.to_json(), default=str)


@needs_nvcc
def test_the_expected_gain_is_the_climbs_own(ladder_evidence, climb):
    result, source = climb
    (v,) = judge_climb(result)
    a = advise_kernel(ladder_evidence[4], climb_result=result, climb_source=source)
    gain = v.verdict(5).below.gain
    assert a.expected["vs_below"]["gain"] == gain and a.experiment["expected"]["ratio"] == gain
    assert f"{gain:.2f}x" in a.conclusion and "2026-11-30_climb_bf16_edge_square_llm_d3b6198.json" in a.conclusion


@needs_nvcc
def test_level_5_goes_to_6_as_the_base_of_7(ladder_evidence, climb):
    result, source = climb
    (v,) = judge_climb(result)
    a = advise_kernel(ladder_evidence[5], climb_result=result, climb_source=source)
    assert a.next_level == 6 and "did not earn its complexity" in a.conclusion
    assert f"{v.verdict(6).below.gain:.2f}x" in a.conclusion and "level 7" in a.conclusion
    assert a.experiment["command"].startswith("gemm-ladder climb --levels 5,6,7")
    assert any("keep level 5" in r for r in a.risks)


@needs_nvcc
def test_level_9_stops_with_the_reason(ladder_evidence, climb):
    result, source = climb
    (v,) = judge_climb(result)
    a = advise_kernel(ladder_evidence[9], climb_result=result, climb_source=source)
    assert a.action == "stop" and a.next_level is None and "top of the ladder" in a.headline
    assert f"{v.verdict(9).vs_cublas.gain:.2f}x" in a.conclusion and "cuBLAS" in a.conclusion
    assert "gemm_ladder.library" in a.conclusion  # what comes after the ladder, read from the library's docstring
    assert a.contract.kind == "tma_plan" and a.contract.plan.consumers.warpgroups == 2


@needs_nvcc
def test_advise_level_command_json(ladder_evidence, use_cache, capsys):
    assert main(["advise", "--level", "3", "--format", "json", "--results", str(CLIMB)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "gemm-ladder/advice/1" and out["position"]["level"] == 3
    assert out["conclusion"]["next_level"] == 4 and out["contract"]["kind"] == "tma_plan"
    assert out["contract"]["plan"]["problem"]["stages"] == LEVELS[4].stages
    assert "d3b6198" in out["results_source"]
    labels = {e["label"] for e in out["evidence"]}
    assert {"measured", "inferred", "assumed"} <= labels


@needs_nvcc
def test_advise_level_command_markdown_without_results(ladder_evidence, use_cache, capsys, tmp_path, monkeypatch):
    """No climb results anywhere: the answer still comes, and says the gains are not known."""
    monkeypatch.setattr("gemm_ladder.advise.climb_data.results_dirs", lambda: [tmp_path])
    assert main(["advise", "--level", "7"]) == 0
    md = capsys.readouterr().out
    assert "Next step: level 8" in md and "no climb results" in md.lower() and "| not run |" in md


@needs_nvcc
def test_gates_run_now_feed_the_answer(ladder_evidence, use_cache, capsys, monkeypatch):
    """The GPU path's wiring, on this machine: the gates' result (here the committed climb) becomes measured facts
    that take precedence over the results file's, and decide the stop at the practical roofline."""
    import gemm_ladder.advise.measure as measure
    import gemm_ladder.gpu as gpu

    seen = {}

    def fake_run(targets, dtype, shapes, arch):
        seen["targets"] = [t.number for t in targets]
        seen["shapes"] = shapes
        return load_result(CLIMB)

    monkeypatch.setattr(gpu, "gpu_available", lambda: True)
    monkeypatch.setattr(measure, "run_gates_now", fake_run)
    monkeypatch.setattr(measure, "add_grid_fact", lambda ev, level, shape: None)
    assert main(["advise", "--level", "9", "--format", "json", "--measure-shapes", "4096x4096x4096"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert seen["targets"] == [8, 9] and ("custom", (4096, 4096, 4096)) in seen["shapes"]
    assert ("edge", (128, 128, 64)) in seen["shapes"]  # correctness on the edge set too
    ev = {e["key"]: e for e in out["evidence"]}
    assert ev["measured.vs_cublas"]["label"] == "measured" and "gates run now on NVIDIA H200" in ev["measured.vs_cublas"]["source"]
    assert out["conclusion"]["action"] == "stop"
    assert main(["advise", "--level", "9", "--no-measure", "--format", "json"]) == 0
    ev = {e["key"]: e for e in json.loads(capsys.readouterr().out)["evidence"]}
    assert ev["measured.gpu"]["label"] == "not run" and "--no-measure" in ev["measured.gpu"]["statement"]


@pytest.mark.gpu
def test_advise_level_measures_on_a_gpu(use_cache, capsys):
    assert main(["advise", "--level", "5", "--format", "json", "--measure-shapes", "4096x4096x4096"]) == 0
    out = json.loads(capsys.readouterr().out)
    measured = {e["key"]: e for e in out["evidence"] if e["key"].startswith("measured.")}
    assert measured["measured.vs_cublas"]["label"] == "measured" and measured["measured.vs_cublas"]["value"]["gain"] > 0
    assert "gates run now" in measured["measured.vs_cublas"]["source"]
    assert measured["measured.vs_cublas"]["value"]["gain"] > 0.3  # level 5 measured 0.64-0.89x cuBLAS on the H200
    grid = next(e for e in out["evidence"] if e["key"] == "launch.grid")
    assert grid["label"] == "measured" and grid["value"] == [32, 32, 1]  # level 5: one CTA per 128x128 tile
