"""The stopping rule: on the committed H200 climbs (levels 6 and 8 did not beat the level below) and on
synthetic results that isolate each part of the rule (noise floor, measured spread, stability, shapes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemm_ladder.advise.climb_data import find_climb_results, load_result, timed_rows
from gemm_ladder.advise.stopping import judge_climb
from gemm_ladder.levels import LEVELS

ROOT = Path(__file__).resolve().parent.parent
CLIMB = {d: ROOT / f"bench/results/2026-11-30_climb_{d}_edge_square_llm_d3b6198.json" for d in ("bf16", "fp16")}


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_committed_climb_levels_6_and_8_did_not_earn_their_complexity(dtype):
    (v,) = judge_climb(load_result(CLIMB[dtype]))
    assert v.dtype == dtype
    six, eight = v.verdict(6), v.verdict(8)
    assert six.verdict == "not earned" and not six.keeps
    assert eight.verdict == "not earned" and not eight.keeps
    # the measured reason: the figures against the level below, and the stop it implies
    assert six.below.lower == 5 and six.below.gain < 1 - six.below.noise
    assert f"{six.below.gain:.2f}x" in six.reason and "slower than level 5" in six.reason
    assert "stop at level 5" in six.reason
    assert eight.below.lower == 7 and f"{eight.below.gain:.2f}x" in eight.reason and "stop at level 7" in eight.reason
    for n in (4, 5, 7, 9):
        assert v.verdict(n).verdict == "earned" and v.verdict(n).keeps, v.verdict(n).reason
    # level 7 is compared with level 5 (kept before 6's loss), level 9 with level 7 (kept before 8's)
    assert v.verdict(7).kept_before == 5 and v.verdict(7).vs_kept.earned
    assert v.verdict(9).kept_before == 7 and v.verdict(9).vs_kept.earned
    assert [x.level for x in v.not_earned] == [6, 8] and v.kept == 9 and v.roofline_level == 9
    assert v.verdict(1).verdict == "first" and v.verdict(2).verdict == v.verdict(3).verdict == "not measured"
    assert "level 6 did not earn" in v.summary() and "level 8 did not earn" in v.summary()


def test_committed_climb_figures_match_the_rows():
    """The gain is the level below's median time over this level's, per timed shape, in the same run."""
    result = load_result(CLIMB["bf16"])
    (v,) = judge_climb(result)
    rows = {(r.level, r.shape_set, r.shape): r.timing.median_ms for r in timed_rows(result, "bf16") if r.kind == "level"}
    g = next(s for s in v.verdict(6).below.shapes if s.shape == (8192, 8192, 8192))
    assert g.ratio == pytest.approx(rows[(5, "square", (8192,) * 3)] / rows[(6, "square", (8192,) * 3)])
    # 4096^3 is timed in both 'square' and 'llm' and counts once; 1024^3, 2048^3, 4096x1024x4096 are launch-bound
    assert len(v.verdict(6).below.shapes) == 7
    assert (1024, 1024, 1024) not in {s.shape for s in v.verdict(6).below.shapes}


def _row(level, m, n, k, median, spread=0.0, shape_set="square", status="pass", kind="level", dtype="bf16"):
    return {"kind": kind, "level": level, "name": f"L{level}" if level else "cuBLAS", "dtype": dtype,
            "shape_set": shape_set, "m": m, "n": n, "k": k, "status": status, "correctness": None,
            "performance": {"median_ms": median, "p10_ms": median * (1 - spread), "p90_ms": median * (1 + spread),
                            "repeats": 50, "vs_cublas": None, "roofline_fraction": 0.5}}


def _result(rows, levels=(4, 5)):
    return {"schema": "gemm-ladder/result/1", "meta": {"date": "2026-12-01T00:00:00Z", "gpu": {"name": "test GPU"}},
            "levels": [{"number": n, "name": LEVELS[n].name} for n in levels], "resources": [], "rows": rows}


SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096)]


def _climb(gains, spread=0.0, spreads=None):
    rows = []
    for i, (shape, gain) in enumerate(zip(SHAPES, gains)):
        s = spreads[i] if spreads else spread
        rows += [_row(None, *shape, 1.0, kind="cublas"), _row(4, *shape, 2.0, s), _row(5, *shape, 2.0 / gain, s)]
    return judge_climb(_result(rows))[0].verdict(5)


def test_a_gain_beyond_the_noise_floor_is_earned():
    v = _climb([1.10, 1.08, 1.12])
    assert v.verdict == "earned" and v.below.noise == LEVELS[5].perf.noise
    assert all(s.bound_by == "floor" for s in v.below.shapes)


def test_a_gain_inside_the_noise_floor_is_no_stable_gain():
    v = _climb([1.02, 1.01, 1.02])
    assert v.verdict == "not earned" and "no stable gain over level 4" in v.reason


def test_the_measured_spread_widens_the_noise():
    v = _climb([1.06, 1.06, 1.06], spread=0.08)  # 6% gain, 8% p10-p90 half-spread: within the run's own noise
    assert v.verdict == "not earned" and v.below.noise == pytest.approx(0.08)
    assert all(s.bound_by == "spread" for s in v.below.shapes) and "measured spread bound it on 3 of 3" in v.reason
    assert _climb([1.06, 1.06, 1.06], spread=0.01).verdict == "earned"


def test_a_loss_on_one_shape_makes_the_gain_unstable():
    v = _climb([1.30, 1.30, 0.90])  # the geomean gains 15%, but one shape is 10% slower
    assert v.below.gain > 1 + v.below.noise and v.below.counts["loss"] == 1
    assert v.verdict == "not earned"


def test_failed_launch_bound_and_other_dtype_rows_do_not_count():
    rows = [_row(None, 4096, 4096, 4096, 1.0, kind="cublas"), _row(4, 4096, 4096, 4096, 2.0),
            _row(5, 4096, 4096, 4096, 1.0, status="fail"),  # failed: its speed does not count
            _row(4, 1024, 1024, 1024, 2.0), _row(5, 1024, 1024, 1024, 1.0),  # launch-bound: not judged
            _row(4, 8192, 8192, 8192, 2.0, dtype="fp16"), _row(5, 8192, 8192, 8192, 1.0, dtype="fp16")]
    verdicts = {v.dtype: v for v in judge_climb(_result(rows))}
    assert verdicts["bf16"].verdict(5).verdict == "not measured"
    assert verdicts["fp16"].verdict(5).verdict == "earned" and len(verdicts["fp16"].verdict(5).below.shapes) == 1


def test_to_json_carries_the_verdict_and_reason():
    out = judge_climb(load_result(CLIMB["bf16"]))[0].to_json()
    json.dumps(out)  # serialisable as it is
    six = next(x for x in out["levels"] if x["level"] == 6)
    assert six["verdict"] == "not earned" and six["stop_before"] and "level 5" in six["reason"]
    assert out["not_earned"] == [6, 8] and out["kept"] == 9


def test_find_climb_results_takes_the_newest_with_timed_level_rows(tmp_path):
    shape = (4096, 4096, 4096)
    timed = _result([_row(None, *shape, 1.0, kind="cublas"), _row(4, *shape, 2.0), _row(5, *shape, 1.5)])
    (tmp_path / "a_climb_bf16_old.json").write_text(json.dumps(timed | {"meta": {"date": "2026-11-01T00:00:00Z"}}))
    (tmp_path / "b_climb_bf16_new.json").write_text(json.dumps(timed | {"meta": {"date": "2026-11-02T00:00:00Z"}}))
    untimed = _result([]) | {"meta": {"date": "2026-12-31T00:00:00Z"}}
    (tmp_path / "c_climb_bf16_compile_only.json").write_text(json.dumps(untimed))
    (tmp_path / "d_climb_bf16_broken.json").write_text("{not json")
    (tmp_path / "e_climb_fp16.json").write_text(json.dumps(timed | {"meta": {"date": "2026-12-31T00:00:00Z"}}))
    assert find_climb_results("bf16", [tmp_path]).name == "b_climb_bf16_new.json"
    assert find_climb_results("fp16", [tmp_path]) is None  # its rows are bf16
    assert find_climb_results("bf16", [tmp_path / "nowhere"]) is None


def test_schema_2_results_and_rows_with_missing_values_are_read(tmp_path):
    """The gates' schema-2 files read as schema 1 do; a row without a value is left out, not a crash."""
    shape = (4096, 4096, 4096)
    rows = [_row(None, *shape, 1.0, kind="cublas"), _row(4, *shape, 2.0), _row(5, *shape, 1.6),
            {"kind": "level", "level": 5, "dtype": "bf16", "status": "pass", "performance": {"median_ms": 1.0}},
            {"kind": "level", "level": 5, "status": "pass"}]
    path = tmp_path / "x_climb_bf16.json"
    path.write_text(json.dumps(_result(rows) | {"schema": "gemm-ladder/result/2"}))
    (v,) = judge_climb(load_result(path))
    assert v.verdict(5).verdict == "earned" and v.verdict(5).below.gain == pytest.approx(1.25)


def test_the_readme_example_quotes_the_rules_own_figures():
    section = (ROOT / "README.md").read_text().split("## Where does my kernel stand?")[1]
    (v,) = judge_climb(load_result(CLIMB["bf16"]))
    for figure in (v.verdict(6).below.gain, v.verdict(8).below.gain, v.verdict(7).vs_kept.gain,
                   v.verdict(9).vs_kept.gain, v.verdict(9).vs_cublas.gain):
        assert f"{figure:.2f}x" in section
