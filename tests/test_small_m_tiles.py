"""The small-M kernel's M-tile rule (dispatch/small_m_tiles.py) without a GPU: the rule and its lookup
read from a table (a made-up one that picks two tiles, the shipped one as its provenance documents),
three and four tiles (their buckets, the rule past the tie, the lookup, routes and explain), old
entries (one and two tiles only) choosing as the two-tile rule did, the tune's fit on synthetic timings
(bench/library_small_m.py --tune), its plan and estimate, a tune split into parts and merged, the
table's validation, routes on meta tensors with the real kernels, explain's text, and precompile
covering every bucket the rule can choose."""

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
    decide_tiles,
    fit,
    load_rule,
    one_tile_bn,
    tile_bn,
    tile_counts,
    two_tile_bn,
)
from gemm_ladder.library.small_m import BUCKETS, bucket

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
    before = {(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (1024, 1024), (4096, 1024)}
    assert shapes in (before, set(library_small_m.TUNE_NK))  # the db221bc + 6db1013 entry, or a retune of TUNE_NK
    for d in rule.decisions:  # each decision is the 2% rule applied to its own medians, count by count
        chosen = 1
        for t in sorted(d.tile_us)[1:]:
            chosen = t if d.tile_us[t] < (1 - rule.tie) * d.tile_us[chosen] else chosen
        assert d.tiles == chosen, d


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
    assert d.tiles > 1, "the tuned table takes M = 256 at 4096 x 4096 in more than one tile (its stored times)"
    if d.kernel == "general":  # a retune measured the general kernel faster there: explain says so
        assert "small M:  the small_m table measured the general kernel faster at M = 256, 4096 x 4096" in text
        assert f"{d.general_us:.1f} us" in text and f"{d.small_m_us:.1f} us" in text and "tuned on " in text
        return
    if d.kernel == "general_bm64":  # its 64-row build with one CTA per cluster
        assert (f"small M:  the small_m table measured the general kernel's 64-row build with one CTA per cluster "
                f"at BN {d.general_bm64_bn} faster at M = 256, 4096 x 4096") in text
        assert f"{d.general_bm64_us:.1f} us" in text and f"{d.small_m_us:.1f} us" in text and "tuned on " in text
        return
    assert f"M tiles:  {d.tiles} of BN {tile_bn(256, d.tiles)} for the kernel's M = 256" in text
    assert all(f"{us:.1f} us" in text for us in d.tile_us.values()) and "tuned on " in text


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

def _table_copy_and_out(monkeypatch, tmp_path):
    """A copy of the package's table made the one the tune writes (heuristic.TABLE_PATH), and an $OUT
    folder: (the copy's path, the folder)."""
    from gemm_ladder.dispatch import heuristic

    table = tmp_path / "table.json"
    table.write_text(TABLE_PATH.read_text())
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(heuristic, "TABLE_PATH", table)
    monkeypatch.setenv("OUT", str(out))
    return table, out



def test_the_tune_writes_the_table_and_its_json(monkeypatch, tmp_path):
    """tune() end to end with the GPU part (tune_rows) replaced by synthetic timings: the package's table
    (here a copy) gets the entry, $OUT gets the table and the results JSON the provenance names."""
    import argparse

    table, out = _table_copy_and_out(monkeypatch, tmp_path)
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


# --- three and four tiles -------------------------------------------------------------------------


def test_three_and_four_tile_buckets():
    """A count is timed only where its bucket is its own: ceil(M / t) rows' smallest bucket, which takes
    M in exactly t tiles, and differs from every smaller count's."""
    assert tile_counts(197) == (1, 2, 4) and tile_bn(197, 4) == 64  # three tiles of BN 128 are two tiles'
    assert tile_counts(96) == (1, 2, 3) and tile_bn(96, 3) == 32  # four tiles of BN 32 are three tiles'
    assert tile_counts(192) == (1, 2, 3) and tile_bn(192, 3) == 64
    assert tile_counts(128) == (1, 2, 4) and tile_bn(128, 4) == 32
    assert tile_counts(16) == (1, 2) and tile_counts(8) == (1,) and tile_counts(1) == (1,)
    for m in range(9, 257):
        counts = tile_counts(m)
        assert counts[:2] == (1, 2), m
        bns = [tile_bn(m, t) for t in counts]
        assert len(set(bns)) == len(bns) and all(-(-m // bn) == t for t, bn in zip(counts, bns)), m
        for t in set((1, 2, 3, 4)) - set(counts):  # a count left out has a smaller count's bucket
            assert tile_bn(m, t) in bns, (m, t)
    with pytest.raises(ValueError, match="decides among"):
        tile_bn(128, 5)


def test_decide_tiles_takes_more_tiles_only_past_the_tie():
    assert decide_tiles({1: 100.0, 2: 99.0, 4: 98.0}) == 1  # four tiles exactly 2% faster than one: a tie
    assert decide_tiles({1: 100.0, 2: 99.0, 4: 97.9}) == 4
    assert decide_tiles({1: 100.0, 2: 97.0, 4: 95.1}) == 2  # four held to two tiles' 97.0, not one tile's
    assert decide_tiles({1: 100.0, 2: 97.0, 4: 95.0}) == 4
    assert decide_tiles({1: 100.0, 2: 150.0, 3: 90.0}) == 3  # a slow two-tile count does not block three
    assert decide_tiles({1: 100.0, 2: 97.0, 3: 99.0}) == 2
    assert decide_tiles({1: 100.0, 2: 90.0, 4: 86.0}, tie=0.15) == 1
    assert decide_tiles({1: 100.0, 4: 84.0}, tie=0.15) == 4
    for one, two in ((20.4, 19.9), (100.0, 98.0), (100.0, 97.9), (18.4, 18.8), (124.1, 230.7)):
        assert decide_tiles({1: one, 2: two}) == decide(one, two)  # two counts: the earlier rule


def four_tile_rule() -> TilesRule:
    """Made up: four tiles win at M = 197 on 1024 x 4096 and three at M = 96; two at M = 128 (four tiles
    within the tie of two); one at M = 197 on 4096 x 4096 (two and four slower)."""
    rows = [
        {"m": 197, "n": 1024, "k": 4096, "one_tile_us": [24.3], "two_tile_us": [18.1], "four_tile_us": [14.8]},
        {"m": 96, "n": 1024, "k": 4096, "one_tile_us": [20.0], "two_tile_us": [19.8], "three_tile_us": [15.0]},
        {"m": 128, "n": 1024, "k": 4096, "one_tile_us": [20.0], "two_tile_us": [15.0], "four_tile_us": [14.8]},
        {"m": 197, "n": 4096, "k": 4096, "one_tile_us": [30.0], "two_tile_us": [31.0], "four_tile_us": [40.0]},
    ]
    return fit(rows, "made up: three and four tiles")


def test_fit_and_json_with_three_and_four_tiles():
    rule = four_tile_rule()
    assert [(d.m, d.n, d.tiles) for d in rule.decisions] == [(197, 1024, 4), (96, 1024, 3), (128, 1024, 2),
                                                             (197, 4096, 1)]
    d197 = rule.decisions[0].to_json()
    assert (d197["four_tile_bn"], d197["four_tile_us"], d197["tiles"]) == (64, 14.8, 4) and "three_tile_us" not in d197
    assert rule.decisions[1].to_json()["three_tile_bn"] == 32
    again = TilesRule.from_json(json.loads(json.dumps(rule.to_json())))
    assert again.decisions == rule.decisions
    with pytest.raises(ValueError, match="smaller counts'"):  # M = 197: three tiles of BN 128 are two tiles'
        fit([{"m": 197, "n": 1024, "k": 4096, "one_tile_us": [9.0], "two_tile_us": [9.0], "three_tile_us": [5.0]}], "x")
    bad = json.loads(json.dumps(rule.to_json()))
    bad["decisions"][0]["three_tile_us"] = 5.0
    with pytest.raises(ValueError, match="is a smaller count's"):
        TilesRule.from_json(bad)
    bad = json.loads(json.dumps(rule.to_json()))
    bad["decisions"][0]["tiles"] = 2
    with pytest.raises(ValueError, match="rule gives 4 from its times"):
        TilesRule.from_json(bad)


def test_the_lookup_with_three_and_four_tiles():
    rule = four_tile_rule()
    c = rule.choose(197, 1024, 4096)
    assert (c.bn, c.tiles) == (64, 4)
    assert ("one tile (BN 256) 24.3 us, two tiles (BN 128) 18.1 us, four tiles (BN 64) 14.8 us; two tiles faster "
            "by more than 2%, then four tiles faster than two by more than 2%") in c.why
    # Away from the timed N x K, four tiles are not borrowed: the one- and two-tile times decide (a measured
    # regression: small_m_tiles.MIN_TILES_EVIDENCE).
    c = rule.choose(200, 1100, 4096)
    assert (c.bn, c.tiles) == (128, 2) and "taken only at the N x K they were timed at" in c.why
    assert "taken only at" not in rule.choose(200, 1024, 4096).why
    c = rule.choose(128, 1024, 4096)
    assert (c.bn, c.tiles) == (64, 2) and "two tiles faster by more than 2%; four tiles not faster than two" in c.why
    # M = 100 takes M = 96's answer in the bucket it was timed in (BN 32), in ceil(100 / 32) = 4 tiles: the
    # bucket of ceil(100 / 3) rows would be BN 64, two tiles' bucket, which lost at M = 96.
    c = rule.choose(100, 1024, 4096)
    assert (c.bn, c.tiles) == (32, 4) and "three tiles (BN 32) 15.0 us; three tiles faster by more than 2%" in c.why
    c = rule.choose(197, 4096, 4096)
    assert (c.bn, c.tiles) == (256, 1) and "two or four tiles not faster by more than 2%" in c.why
    assert rule.buckets() == set(BUCKETS)


def test_routes_and_explain_with_four_tiles(monkeypatch):
    rule = four_tile_rule()
    w = meta(1024, 4096).T
    r = dispatch.decide(meta(197, 4096), w, meta(197, 1024), given=False, device=ASSUMED_DEVICE, tiles=rule)
    assert r.kind == "small_m" and r.kernel.bn == 64 and r.tiles.tiles == 4 and r.a_path.repack is None
    # An MN-major x at M = 104 (M = 96's answer: BN 32, here four tiles) would be read only from a copy
    # there: one tile of BN 128 in place.
    r = dispatch.decide(meta(4096, 104).T, w, meta(104, 1024), given=False, device=ASSUMED_DEVICE, tiles=rule)
    assert r.kernel.bn == 128 and r.tiles.tiles == 1 and r.a_path.repack is None
    assert r.tiles.why.startswith("one tile: four tiles of BN 32 would copy more")
    monkeypatch.setattr(dispatch, "_tiles", rule)
    e = gemm_ladder.explain(meta(197, 4096), w)
    assert e.tile == [128, 64, 64] and e.to_dict()["heuristic"]["m_tiles"]["m_tiles"] == 4
    assert "M tiles:  4 of BN 64 for the kernel's M = 197: timed at M = 197, 1024 x 4096" in str(e)


# --- old entries: one and two tiles ---------------------------------------------------------------


def two_tile_choice(rule: TilesRule, m: int, n: int, k: int) -> tuple[int, int, bool, str]:
    """The lookup as it was before three and four tiles (dispatch/small_m_tiles.py as of 70c6607), written out here
    independently: (bucket, tiles, the general kernel, why)."""
    import math

    one, two = bucket(m), bucket(-(-m // 2))
    if one == two:
        return one, 1, False, f"M = {m} <= {one}: one tile of the smallest bucket"
    shape = min(rule.shapes, key=lambda s: math.log(s[0] / n) ** 2 + math.log(s[1] / k) ** 2)
    same = [d for d in rule.decisions if (d.n, d.k) == shape and bucket(d.m) == one]
    if not same:
        return one, 1, False, (f"not measured for M in BN {one}'s range at {shape[0]} x {shape[1]}, the nearest "
                               "timed N x K: one tile (the default)")
    d = min(same, key=lambda d: (abs(d.m - m), -d.m))
    faster = "two tiles faster by more than" if d.tiles == 2 else "two tiles not faster by more than"
    why = (f"timed at M = {d.m}, {d.n} x {d.k} (the nearest timed N x K): one tile (BN {one}) "
           f"{d.one_tile_us:.1f} us, two tiles (BN {two}) {d.two_tile_us:.1f} us; {faster} {rule.tie:.0%}")
    small = d.two_tile_us if d.tiles == 2 else d.one_tile_us
    general = d.general_us is not None and d.general_us < small * (1 - rule.tie)
    return (two, -(-m // two), general, why) if d.tiles == 2 else (one, 1, general, why)


def shipped_two_tile_entry() -> dict:
    """The shipped entry with only what an entry tuned before three and four tiles and the 64-row build
    holds (one and two tiles, the route; after a retune, its other fields removed and each decision's
    tile count and kernel re-derived by the two-tile rule)."""
    shipped = json.loads(TABLE_PATH.read_text())[KEY]
    tie = shipped.get("tie", 0.02)
    keep = ("m", "n", "k", "one_tile_bn", "two_tile_bn", "one_tile_us", "two_tile_us", "general_us", "general_route")
    decisions = []
    for d in shipped["decisions"]:
        e = {key: d[key] for key in keep if key in d}
        e["tiles"] = 2 if e["two_tile_us"] < e["one_tile_us"] * (1 - tie) else 1
        if "general_us" in e:
            small = e["two_tile_us"] if e["tiles"] == 2 else e["one_tile_us"]
            e["kernel"] = "general" if e["general_us"] < small * (1 - tie) else "small_m"
        decisions.append(e)
    return {**shipped, "decisions": decisions}


def test_old_entries_choose_as_the_two_tile_rule_did():
    """Every decision of the shipped entry (as an entry of one and two tiles), and M, N, K around them,
    choose the bucket, tile count, kernel and words the two-tile rule gave; the entry reads back unchanged."""
    old = shipped_two_tile_entry()
    rule = TilesRule.from_json(old)
    assert rule.decisions and rule.to_json()["decisions"] == old["decisions"]
    if not any(key in d for d in json.loads(TABLE_PATH.read_text())[KEY]["decisions"]
               for key in ("three_tile_us", "four_tile_us", "general_bm64_us")):
        assert load_rule().decisions == rule.decisions  # the shipped entry is still a two-tile one
    queries = {(d.m + dm, d.n, d.k) for d in rule.decisions for dm in (-9, 0, 7) if 1 <= d.m + dm <= 256}
    queries |= {(m, n, k) for m in (1, 5, 8, 9, 33, 100, 150, 197, 200, 250) for n, k in ((5000, 3000), (768, 768),
                                                                                          (1024, 4096), (30000, 8192))}
    for m, n, k in sorted(queries):
        c = rule.choose(m, n, k)
        assert (c.bn, c.tiles, bool(c.general_why), c.why) == two_tile_choice(rule, m, n, k), (m, n, k)
        assert c.general_bm64_bn is None
    for d in rule.decisions:  # every decision's own choice: its tile count, in its bucket
        c = rule.choose(d.m, d.n, d.k)
        assert (c.bn, c.tiles) == ((two_tile_bn(d.m), 2) if d.tiles == 2 else (one_tile_bn(d.m), 1)), d


# --- the tune's plan, parts and merge -------------------------------------------------------------


def test_the_tunes_plan_times_each_count_and_the_64_row_build():
    """tune_plan on meta tensors: per (M, N, K) every tile count with a bucket of its own, the route, the
    64-row one-CTA build where it is another launch, and cuBLAS; estimate counts them."""
    plan = library_small_m.tune_plan("bf16", ((1024, 4096), (4096, 1024)), (128, 197))
    assert [(p["m"], p["n"], p["k"]) for p in plan] == [(128, 1024, 4096), (197, 1024, 4096), (128, 4096, 1024),
                                                        (197, 4096, 1024)]
    for p in plan:
        counts = tile_counts(p["m"])
        assert p["buckets"] == {t: tile_bn(p["m"], t) for t in counts}
        names = [library_small_m.TILE_NAMES[t] for t in counts] + ["general"]
        if p["bm64"] is not None:
            assert p["bm64"].startswith("general BM 64 BN ") and "1 CTA per cluster" in p["bm64"]
            assert p["bm64"] != p["general"]
            names.append(library_small_m.BM64_NAME)
        assert p["callables"] == names + ["cuBLAS"]
    callables, seconds = library_small_m.estimate(plan, 3)
    assert callables == sum(len(p["callables"]) for p in plan) >= 4 * 5
    assert seconds == pytest.approx(callables * 3 * library_small_m.SECONDS_PER_CALLABLE_PASS)
    assert set(library_small_m.TUNE_NK) >= {(4096, 1024), (1024, 4096), (3072, 1024), (1024, 1024), (768, 3072),
                                            (3072, 768)}
    assert 197 in library_small_m.TUNE_M


def test_the_dry_run_needs_no_gpu():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "library_small_m.py"), "--tune", "--dry-run", "--nk",
                        "1024x1024", "--m", "128,197"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "plan M=197 1024x1024: tiles 1 (BN 256), 2 (BN 128), 4 (BN 64)" in r.stdout
    assert re.search(r"tune: 2 \(M, N, K\), \d+ timed callables \(cuBLAS included\) x 3 passes", r.stdout)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "library_small_m.py"), "--tune", "--dry-run", "--m", "8"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "each M in 9..256" in r.stderr
    # Without --tune the options are refused before anything runs (not the GPU benchmark run instead).
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "library_small_m.py"), "--dry-run"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "go with --tune" in r.stderr


def test_a_tune_in_parts_is_merged(monkeypatch, tmp_path):
    """Two parts (tune() with --nk subsets, the GPU part replaced by synthetic timings) write only their
    JSONs; --merge fits their rows together into the table, with a merged JSON its provenance cites; an
    (M, N, K) in two parts is refused."""
    import argparse

    table, out = _table_copy_and_out(monkeypatch, tmp_path)

    def rows_for(nk):
        return [{"m": m, "n": n, "k": k, "dtype": "bf16", "one_tile_us": [10.0, 10.0], "two_tile_us": [11.0, 11.0],
                 "four_tile_us": [8.0, 8.0] if (n, k) == (1024, 4096) else [12.0, 12.0]}
                for n, k in nk for m in (128, 197)]

    parts = []
    for nk in (((1024, 4096),), ((4096, 1024), (1024, 1024))):
        monkeypatch.setattr(library_small_m, "tune_rows", lambda *a, nk=nk: rows_for(nk))
        args = argparse.Namespace(dtype="bf16", passes=2, budget=0.1, flush="write", output=None, nk=nk, m=(128, 197))
        before = set(out.iterdir())
        assert library_small_m.tune(args) == 0
        assert table.read_text() == TABLE_PATH.read_text() and not (out / "table.json").exists()  # not written
        (new,) = set(out.iterdir()) - before
        assert "_library_small_m_tune_bf16_part_" in new.name and json.loads(new.read_text())["tune"]["part"]
        parts.append(new)
    merged = argparse.Namespace(dtype="bf16", merge=[str(p) for p in parts], output=None)
    assert library_small_m.merge(merged) == 0
    rule = TilesRule.from_json(json.loads(table.read_text())[KEY])
    assert rule.shapes == ((1024, 4096), (4096, 1024), (1024, 1024)) and len(rule.decisions) == 6
    assert rule.choose(197, 1024, 4096).tiles == 4 and rule.choose(197, 4096, 1024).tiles == 1
    cited = re.search(r"bench/results/(\S+\.json)", rule.provenance).group(1)
    assert "_library_small_m_tune_bf16_merged_" in cited and "2 passes, L2 flushed by writes" in rule.provenance
    assert all(f"bench/results/{p.name}" in rule.provenance for p in parts)
    assert json.loads((out / cited).read_text())["tune"]["entry"] == json.loads(table.read_text())[KEY]
    assert json.loads((out / "table.json").read_text()) == json.loads(table.read_text())
    with pytest.raises(ValueError, match="timed twice"):
        library_small_m.merge(argparse.Namespace(dtype="bf16", merge=[str(parts[0])] * 2, output=None))
