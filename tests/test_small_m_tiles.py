"""The small-M kernel's M-tile rule (dispatch/small_m_tiles.py) without a GPU: the rule and its lookup
read from a table (a made-up one that picks two tiles, the shipped one as its provenance documents),
the tune's fit on synthetic timings (bench/library_small_m.py --tune), the table's validation, routes
on meta tensors with the real kernels, explain's text, and precompile covering every bucket the rule
can choose."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.dispatch.heuristic import TABLE_PATH, CostModel, load_table
from gemm_ladder.dispatch.route import ASSUMED_DEVICE
from gemm_ladder.dispatch.small_m_tiles import (
    KEY,
    NO_ENTRY,
    ONE_TILE,
    TilesRule,
    decide,
    fit,
    load_rule,
    one_tile_bn,
    two_tile_bn,
)
from gemm_ladder.library.small_m import BUCKETS

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import library_small_m  # noqa: E402


def meta(*shape):
    return torch.empty(*shape, dtype=torch.bfloat16, device="meta")


def made_up(tiles_at: dict[tuple[int, int, int], int], shapes=None) -> TilesRule:
    """A rule whose decisions at (M, N, K) give ``tiles`` (times chosen so that the rule agrees)."""
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [10.0], "two_tile_us": [5.0 if t == 2 else 10.0]}
            for (m, n, k), t in tiles_at.items()]
    rule = fit(rows, "made up for a test")
    if shapes is not None:
        rule = TilesRule(rule.provenance, tuple(shapes), rule.decisions, rule.tie)
    return rule


@pytest.fixture(autouse=True)
def fresh_routes():
    dispatch.clear_cache()
    yield
    dispatch.clear_cache()


# --- buckets and the rule ------------------------------------------------------------------------


def test_one_and_two_tile_buckets():
    for m in range(1, 257):
        one, two = one_tile_bn(m), two_tile_bn(m)
        assert one in BUCKETS and two in BUCKETS and one >= m and two >= -(-m // 2)
        if m <= 8:
            assert one == two == 8
        else:  # two tiles exactly, of a strictly smaller bucket
            assert two < one and -(-m // two) == 2, m
    assert [two_tile_bn(m) for m in (16, 32, 64, 96, 128, 129, 192, 193, 256)] == [8, 16, 32, 64, 64, 128, 128,
                                                                                   128, 128]
    for bad in (0, 257, -1):
        with pytest.raises(ValueError, match="1 <= M <= 256"):
            one_tile_bn(bad)


def test_decide_keeps_one_tile_within_the_tie():
    assert decide(20.4, 19.9) == 2  # 2.5% faster
    assert decide(100.0, 98.0) == 1 and decide(100.0, 97.9) == 2  # exactly 2% is a tie
    assert decide(18.4, 18.8) == 1 and decide(124.1, 230.7) == 1
    assert decide(100.0, 95.0, tie=0.1) == 1


def test_a_made_up_table_picks_two_tiles_where_it_says_so():
    rule = made_up({(128, 4096, 4096): 2, (96, 4096, 4096): 1, (256, 4096, 4096): 2, (16, 28672, 8192): 1,
                    (128, 28672, 8192): 1})
    c = rule.choose(128, 4096, 4096)
    assert (c.bn, c.tiles) == (64, 2) and "M = 128, 4096 x 4096" in c.why and "faster by more than 2%" in c.why
    assert (rule.choose(120, 4096, 4096).bn, rule.choose(120, 4096, 4096).tiles) == (64, 2)  # nearest timed M: 128
    assert rule.choose(100, 4096, 4096).tiles == 1  # nearest timed M: 96, where one tile won
    assert (rule.choose(112, 4096, 4096).bn, rule.choose(112, 4096, 4096).tiles) == (64, 2)  # tie of M: the larger
    assert (rule.choose(200, 5000, 3000).bn, rule.choose(200, 5000, 3000).tiles) == (128, 2)  # nearest N x K
    assert rule.choose(128, 30000, 8192).tiles == 1  # nearest N x K is 28672 x 8192, where one tile won
    # 28672 x 8192 is the nearest shape and M = 256 was not timed there: one tile, not 4096 x 4096's answer.
    c = rule.choose(256, 28672, 8192)
    assert (c.bn, c.tiles) == (256, 1) and "not measured" in c.why and "28672 x 8192" in c.why
    assert rule.choose(192, 4096, 4096).tiles == 1  # no decision in BN 192's range
    assert rule.choose(5, 4096, 4096).tiles == 1 and "smallest bucket" in rule.choose(5, 4096, 4096).why
    assert rule.buckets() == set(BUCKETS)
    assert ONE_TILE.choose(256, 4096, 4096).tiles == 1 and ONE_TILE.provenance == NO_ENTRY


def test_the_shipped_entry_is_the_tune_it_cites():
    """The shipped entry is what bench/library_small_m.py --tune wrote: its provenance names a results JSON
    in the repository whose 'entry' is the table's, and the rule follows from the times stored there."""
    rule = load_rule()
    assert rule.provenance.startswith("tuned on ")
    cited = re.search(r"bench/results/\S+\.json", rule.provenance).group(0)
    assert (ROOT / cited).exists(), cited
    tuned = json.loads((ROOT / cited).read_text())["tune"]["entry"]
    assert TilesRule.from_json(tuned).decisions == rule.decisions
    shapes = {(d.n, d.k) for d in rule.decisions}
    assert shapes == {(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (1024, 1024), (4096, 1024)}
    for d in rule.decisions:  # each decision is the 2% rule applied to its own medians
        assert d.tiles == (2 if d.two_tile_us < (1 - rule.tie) * d.one_tile_us else 1), d


def test_the_table_is_validated():
    good = made_up({(128, 4096, 4096): 2}).to_json()
    assert TilesRule.from_json(good).choose(128, 4096, 4096).tiles == 2
    bad = json.loads(json.dumps(good))
    bad["decisions"][0]["tiles"] = 1
    with pytest.raises(ValueError, match="rule gives 2 from its times"):
        TilesRule.from_json(bad)
    bad = json.loads(json.dumps(good))
    bad["shapes"] = [[8192, 8192]]
    with pytest.raises(ValueError, match="not one of the shapes"):
        TilesRule.from_json(bad)
    bad = json.loads(json.dumps(good))
    bad["decisions"][0]["m"] = 8
    with pytest.raises(ValueError, match="M = 8"):
        TilesRule.from_json(bad)
    bad = json.loads(json.dumps(good))
    bad["decisions"][0]["two_tile_us"] = float("nan")
    with pytest.raises(ValueError, match="positive"):
        TilesRule.from_json(bad)
    with pytest.raises(ValueError, match="small_m: KeyError"):
        TilesRule.from_json({"shapes": []})


def test_a_table_without_the_entry_means_one_tile(tmp_path):
    p = tmp_path / "table.json"
    p.write_text(json.dumps(load_table().to_json()))
    assert load_rule(p) is ONE_TILE


# --- the tune's fit -------------------------------------------------------------------------------


def test_fit_on_synthetic_timings():
    rows = [
        {"m": 128, "n": 4096, "k": 4096, "one_tile_us": [23.4, 23.6, 23.3], "two_tile_us": [20.3, 20.5, 40.0]},
        {"m": 64, "n": 4096, "k": 4096, "one_tile_us": [20.0, 20.0, 20.0], "two_tile_us": [19.7, 19.7, 19.7]},
        {"m": 16, "n": 28672, "k": 8192, "one_tile_us": [124.0, 125.0], "two_tile_us": [230.0, 231.0]},
    ]
    rule = fit(rows, "tuned on a test")
    assert rule.shapes == ((4096, 4096), (28672, 8192))
    assert [(d.m, d.tiles) for d in rule.decisions] == [(128, 2), (64, 1), (16, 1)]  # medians; 64: a 1.5% tie
    assert rule.decisions[0].two_tile_us == 20.5  # the median of three passes, not their mean
    with pytest.raises(ValueError, match="timed twice"):
        fit(rows + rows[:1], "x")
    with pytest.raises(ValueError, match="M <= 8"):
        fit([{**rows[0], "m": 8}], "x")
    with pytest.raises(ValueError, match="no timed pass"):
        fit([{**rows[0], "two_tile_us": []}], "x")


def test_the_tunes_table_keeps_the_cost_model_and_loads():
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [10.0, 10.2],
             "two_tile_us": [8.0, 8.1] if m >= 64 else [11.0, 11.0]}
            for n, k in library_small_m.NK for m in library_small_m.TUNE_M]
    table = json.loads(TABLE_PATH.read_text())
    out = library_small_m.tuned_table(rows, "tuned on a test GPU", table)
    assert {key: v for key, v in out.items() if key != KEY} == {key: v for key, v in table.items() if key != KEY}
    CostModel.from_json(out)  # the cost model still parses
    rule = TilesRule.from_json(json.loads(json.dumps(out))[KEY])
    assert rule.provenance == "tuned on a test GPU" and len(rule.decisions) == len(rows)
    assert rule.shapes == tuple(library_small_m.NK)
    assert rule.choose(128, 28672, 8192).tiles == 2 and rule.choose(32, 4096, 14336).tiles == 1
    assert set(library_small_m.TUNE_M) >= {16, 32, 64, 96, 128, 192, 256}


def test_the_tune_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the CLI would run the tune")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "library_small_m.py"), "--tune"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


# --- routes and explain ---------------------------------------------------------------------------


def test_routes_on_meta_tensors_follow_the_table():
    rule = made_up({(128, 4096, 4096): 2, (256, 4096, 4096): 2, (64, 4096, 4096): 2})
    w = meta(4096, 4096).T  # F.linear's weight: B K-major
    for m, bn in ((96, 64), (128, 64), (200, 128), (256, 128), (64, 32)):
        r = dispatch.decide(meta(m, 4096), w, meta(m, 4096), given=False, device=ASSUMED_DEVICE, tiles=rule)
        assert r.kind == "small_m" and r.kernel.bn == bn and r.tiles.tiles == 2 and r.tiles.bn == bn, (m, r.tiles)
        assert r.a_path.repack is None and r.b_path.repack is None
        one = dispatch.decide(meta(m, 4096), w, meta(m, 4096), given=False, device=ASSUMED_DEVICE, tiles=ONE_TILE)
        assert one.kernel.bn == one_tile_bn(m) and one.tiles.tiles == 1
    # An MN-major A at M = 64: BN 32 would read it only from a copy, so one tile of BN 64 in place.
    r = dispatch.decide(meta(4096, 64).T, w, meta(64, 4096), given=False, device=ASSUMED_DEVICE, tiles=rule)
    assert r.kernel.bn == 64 and r.tiles.tiles == 1 and r.a_path.repack is None
    assert r.tiles.why.startswith("one tile: two tiles of BN 32 would copy more")
    # A small N takes the transposed orientation: the rule sees the kernel's M (N) and N (M).
    r = dispatch.decide(meta(4096, 4096), meta(4096, 128), meta(4096, 128), given=False, device=ASSUMED_DEVICE,
                        tiles=rule)
    assert r.kind == "small_m" and r.c_path.transposed and r.kernel.bn == 64 and r.tiles.tiles == 2


def test_explain_shows_the_bucket_the_tiles_and_why(monkeypatch):
    rule = made_up({(128, 4096, 4096): 2})
    monkeypatch.setattr(dispatch, "_tiles", rule)
    e = gemm_ladder.explain(meta(128, 4096), meta(4096, 4096).T)
    t = e.to_dict()["heuristic"]["m_tiles"]
    assert (t["bn"], t["m_tiles"], t["kernel_m"], t["provenance"]) == (64, 2, 128, "made up for a test")
    assert e.tile == [128, 64, 64]
    text = str(e)
    assert "M tiles:  2 of BN 64 for the kernel's M = 128: timed at M = 128, 4096 x 4096" in text
    assert "one tile (BN 128) 10.0 us, two tiles (BN 64) 5.0 us; two tiles faster by more than 2%" in text
    assert "M-tile table: made up for a test" in text
    monkeypatch.setattr(dispatch, "_tiles", ONE_TILE)
    text = str(gemm_ladder.explain(meta(128, 4096), meta(4096, 4096).T))
    assert "M tiles:  1 of BN 128" in text and "not measured" in text and NO_ENTRY in text


def test_explain_with_the_shipped_table():
    rule = load_rule()
    d = next(d for d in rule.decisions if (d.m, d.n, d.k) == (256, 4096, 4096))
    text = str(gemm_ladder.explain(meta(256, 4096), meta(4096, 4096).T))
    assert d.tiles == 2, "the tuned table takes M = 256 at 4096 x 4096 in two tiles (its stored times)"
    if d.kernel == "general":  # a retune measured the general kernel faster there: explain says so
        assert "small M:  the small_m table measured the general kernel faster at M = 256, 4096 x 4096" in text
        assert f"{d.general_us:.1f} us" in text and f"{d.two_tile_us:.1f} us" in text and "tuned on " in text
        return
    assert "M tiles:  2 of BN 128 for the kernel's M = 256" in text
    assert f"{d.one_tile_us:.1f} us" in text and f"{d.two_tile_us:.1f} us" in text and "tuned on " in text


def test_precompile_builds_every_bucket_the_rule_can_choose():
    from gemm_ladder.dispatch.precompile import library_builds

    labels = {b.label for b in library_builds(("bf16",), ("small_m", "fp32_out"))}
    for bn in load_rule().buckets() | made_up({(128, 4096, 4096): 2, (16, 4096, 4096): 2}).buckets():
        for am in ("k", "mn"):
            assert f"small-M BN {bn} A {am} B k bf16" in labels
            assert f"small-M BN {bn} A {am} B k fp32 out bf16" in labels


def test_clear_cache_forgets_the_calls_routes_too():
    """A regenerated table reaches calls already made: the API's call cache keeps routes, so it is cleared."""
    from gemm_ladder.dispatch.calls import CALLS

    CALLS.put_fast(("a made-up key",), object())
    assert CALLS.fast
    dispatch.clear_cache()
    assert not CALLS.fast and len(CALLS) == 0


def test_the_tune_writes_the_table_and_its_json(monkeypatch, tmp_path):
    """tune() end to end with the GPU part (tune_rows) replaced by synthetic timings: the package's table
    (here a copy) gets the entry, $OUT gets the table and the results JSON the provenance names."""
    import argparse

    from gemm_ladder.dispatch import heuristic

    table = tmp_path / "table.json"
    table.write_text(TABLE_PATH.read_text())
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(heuristic, "TABLE_PATH", table)
    monkeypatch.setenv("OUT", str(out))
    rows = [{"m": m, "n": 4096, "k": 4096, "one_tile_us": [10.0, 10.0], "two_tile_us": [9.0, 9.0]} for m in (96, 256)]
    monkeypatch.setattr(library_small_m, "tune_rows", lambda *a: rows)
    args = argparse.Namespace(dtype="bf16", passes=2, budget=0.1, flush="write", output=None)
    assert library_small_m.tune(args) == 0
    written = json.loads(table.read_text())
    assert json.loads((out / "table.json").read_text()) == written
    rule = TilesRule.from_json(written[KEY])
    assert rule.provenance.startswith("tuned on ") and "bench/library_small_m.py --tune, 2 passes" in rule.provenance
    results = list(out.glob("*_library_small_m_tune_bf16_*.json"))
    assert len(results) == 1 and f"bench/results/{results[0].name}" in rule.provenance
    assert json.loads(results[0].read_text())["tune"]["rows"] == rows
    assert rule.choose(200, 4096, 4096).tiles == 2 and load_table(table).provenance == load_table().provenance
