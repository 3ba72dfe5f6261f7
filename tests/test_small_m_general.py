"""The small_m table choosing the general kernel for M <= 256 where it measured it faster
(dispatch/small_m_tiles.py's ``decide_kernel``, dispatch/route.py's ``choose``), without a GPU: the rule
on made-up times (general only beyond the tie), the shipped table read as before (no general times: the
small-M kernel), the lookup for untimed shapes, the tune's rows to the table, and routes and explain on
meta tensors with a table that says "general" at one shape and "one tile" at another; and the general
kernel's 64-row build with one CTA per cluster (GENERAL_BM64): taken only past the tie (against the
small-M kernel or the route, whichever the rule had chosen), the BN recorded and returned by the lookup,
the route launching that build at that BN (and the small-M kernel where it has no route), explain's
words, and the tune timing the build dispatch runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.dispatch.heuristic import TABLE_PATH
from gemm_ladder.dispatch.route import ASSUMED_DEVICE
from gemm_ladder.dispatch.heuristic import CLUSTER1_SPLITS
from gemm_ladder.dispatch.small_m_tiles import (
    GENERAL,
    GENERAL_BM64,
    KEY,
    SMALL_M,
    TilesRule,
    decide_general,
    decide_kernel,
    fit,
    load_rule,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import library_small_m  # noqa: E402


def meta(*shape):
    return torch.empty(*shape, dtype=torch.bfloat16, device="meta")


def rule_with(general_at: dict[tuple[int, int, int], float], one=10.0, two=12.0) -> TilesRule:
    """Decisions at each (M, N, K) with one tile at ``one`` us, two at ``two`` and the general kernel at
    the given time (None: not timed)."""
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [one], "two_tile_us": [two],
             **({"general_us": [g], "general_route": "general BN 256, split none"} if g is not None else {})}
            for (m, n, k), g in general_at.items()]
    return fit(rows, "made up for a test")


@pytest.fixture(autouse=True)
def fresh_routes():
    dispatch.clear_cache()
    yield
    dispatch.clear_cache()


def test_decide_kernel_takes_general_only_beyond_the_tie():
    assert decide_kernel(100.0, 97.9) == GENERAL  # 2.1% faster
    assert decide_kernel(100.0, 98.0) == SMALL_M  # exactly 2%: a tie keeps the small-M kernel
    assert decide_kernel(100.0, 99.0) == SMALL_M and decide_kernel(100.0, 150.0) == SMALL_M
    assert decide_kernel(100.0, None) == SMALL_M  # not timed
    assert decide_kernel(100.0, 95.0, tie=0.1) == SMALL_M


def test_fit_compares_with_the_chosen_tile_count():
    rows = [  # two tiles win at M = 128 (20 < 23 * 0.98), so the general kernel is held to 20, not 23
        {"m": 128, "n": 4096, "k": 4096, "one_tile_us": [23.0], "two_tile_us": [20.0], "general_us": [19.7, 19.8, 30]},
        {"m": 256, "n": 4096, "k": 4096, "one_tile_us": [30.0], "two_tile_us": [31.0], "general_us": [25.0, 25.0],
         "general_route": "general BN 256, split all"},
        {"m": 64, "n": 4096, "k": 4096, "one_tile_us": [20.0], "two_tile_us": [21.0]},  # general not timed
    ]
    rule = fit(rows, "t")
    d128, d256, d64 = rule.decisions
    assert (d128.tiles, d128.general_us, d128.kernel) == (2, 19.8, SMALL_M)  # 19.8 > 20 * 0.98: a tie
    assert (d256.tiles, d256.kernel, d256.general_route) == (1, GENERAL, "general BN 256, split all")
    assert (d64.general_us, d64.kernel) == (None, SMALL_M)
    again = TilesRule.from_json(json.loads(json.dumps(rule.to_json())))
    assert again.decisions == rule.decisions
    assert "general_us" not in rule.to_json()["decisions"][2]  # an untimed general stays out of the JSON


def test_a_table_without_general_times_reads_as_before():
    """An entry written before the general kernel was timed (the shipped one at 5d577de; after a retune, the
    shipped one with its general fields removed): every decision keeps the small-M kernel, no choice names
    the general kernel, the tile counts are the entry's, and the JSON round trip is unchanged."""
    shipped = json.loads(TABLE_PATH.read_text())[KEY]
    general_keys = ("general_us", "general_route", "kernel", "general_bm64_us", "general_bm64_bn", "general_bm64_route")
    old = {**shipped, "decisions": [{key: v for key, v in d.items() if key not in general_keys}
                                    for d in shipped["decisions"]]}
    rule = TilesRule.from_json(old)
    assert rule.decisions and all(d.general_us is None and d.kernel == SMALL_M for d in rule.decisions)
    assert [d.tiles for d in rule.decisions] == [d["tiles"] for d in shipped["decisions"]]
    for d in rule.decisions:
        assert rule.choose(d.m, d.n, d.k).general_why is None
    assert rule.to_json()["decisions"] == old["decisions"]
    routes = dispatch.decide(meta(256, 8192), meta(28672, 8192).T, meta(256, 28672), given=False,
                             device=ASSUMED_DEVICE, tiles=rule)
    assert routes.kind == "small_m"
    if not any("general_us" in d for d in shipped["decisions"]):  # the shipped table is still the old one
        assert load_rule().decisions == rule.decisions


def test_the_table_is_validated():
    good = rule_with({(256, 4096, 4096): 5.0}).to_json()
    assert good["decisions"][0]["kernel"] == GENERAL
    bad = json.loads(json.dumps(good))
    bad["decisions"][0]["kernel"] = SMALL_M
    with pytest.raises(ValueError, match="says kernel 'small_m', but the rule gives 'general'"):
        TilesRule.from_json(bad)
    bad["decisions"][0].update(kernel=GENERAL, general_us=-1.0)
    with pytest.raises(ValueError, match="must be positive"):
        TilesRule.from_json(bad)
    bad = json.loads(json.dumps(good))
    del bad["decisions"][0]["general_us"]  # a "general" decision without its time
    with pytest.raises(ValueError, match="rule gives 'small_m'"):
        TilesRule.from_json(bad)


def test_lookup_for_untimed_shapes():
    rule = rule_with({(256, 28672, 8192): 9.0, (128, 28672, 8192): 11.0, (256, 4096, 4096): 11.0})
    c = rule.choose(256, 28672, 8192)
    assert c.general_why and "M = 256, 28672 x 8192" in c.general_why and "9.0 us" in c.general_why
    assert "10.0 us" in c.general_why and "general BN 256, split none" in c.general_why
    assert rule.choose(240, 30000, 8192).general_why  # nearest timed N x K and M in BN 256's range
    assert rule.choose(200, 28672, 8192).general_why  # M = 200 is in BN 256's range (193..256): M = 256's answer
    assert rule.choose(192, 28672, 8192).general_why is None  # BN 192's range: not measured, the small-M kernel
    assert rule.choose(128, 28672, 8192).general_why is None  # the general kernel is slower there
    assert rule.choose(256, 4096, 4096).general_why is None  # and at 4096 x 4096
    assert rule.choose(8, 28672, 8192).general_why is None  # M <= 8: one bucket, never timed


def test_routes_follow_a_table_saying_general_at_one_shape_and_one_tile_at_another():
    rule = rule_with({(256, 28672, 8192): 9.0, (128, 4096, 4096): 11.0})
    w = meta(28672, 8192).T
    r = dispatch.decide(meta(256, 8192), w, meta(256, 28672), given=False, device=ASSUMED_DEVICE, tiles=rule)
    assert r.kind == "general" and r.bn is not None and r.small_m_table is not None
    assert r.a_path.repack is None and r.b_path.repack is None and dict(r.options).get("split") is not None
    r = dispatch.decide(meta(128, 4096), meta(4096, 4096).T, meta(128, 4096), given=False, device=ASSUMED_DEVICE,
                        tiles=rule)
    assert r.kind == "small_m" and r.tiles.tiles == 1 and r.kernel.bn == 128 and r.small_m_table is None
    # The transposed orientation: a small N puts N on the kernel's M, and the table is read there.
    r = dispatch.decide(meta(28672, 8192), meta(8192, 256), meta(28672, 256), given=False, device=ASSUMED_DEVICE,
                        tiles=rule)
    assert r.kind == "general" and r.small_m_table is not None


def test_general_is_not_taken_where_it_would_copy_more():
    """Where the general kernel's routes need a copy the small-M route does not, the table's answer (timed
    with both in place) is set aside and the small-M kernel runs; with the copy gone, the general kernel."""
    from dataclasses import replace

    from gemm_ladder.dispatch.route import choose, find_routes

    rule = rule_with({(256, 28672, 8192): 9.0})
    routes, _ = find_routes(meta(256, 8192), meta(28672, 8192).T, meta(256, 28672), given=False,
                            device=ASSUMED_DEVICE, tiles_rule=rule)
    assert choose(routes, dispatch.cost_model()).kind == "general"
    copied = [r if r.kind == "small_m"
              else replace(r, b_path=replace(r.b_path, repack="made up", workspace=(28672, 8192))) for r in routes]
    assert all(r.repack_cost > 0 for r in copied if r.kind == "general")
    r = choose(copied, dispatch.cost_model())
    assert r.kind == "small_m" and r.small_m_table is None and r.tiles.general_why  # the table said general


def test_explain_says_why_the_general_kernel_runs(monkeypatch):
    rule = rule_with({(256, 28672, 8192): 9.0})
    monkeypatch.setattr(dispatch, "_tiles", rule)
    e = gemm_ladder.explain(meta(256, 8192), meta(28672, 8192).T)
    assert e.kind == "general"
    h = e.to_dict()["heuristic"]
    assert h["small_m_table"]["provenance"] == "made up for a test" and h["candidates"]
    text = str(e)
    assert "small M:  the small_m table measured the general kernel faster at M = 256, 28672 x 8192" in text
    assert "9.0 us (general BN 256, split none) against 10.0 us (the small-M kernel, one tile)" in text
    assert "choice:   the small-M kernel's table measured the general kernel faster here" in text


def test_the_tunes_rows_with_general_times_make_the_table():
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [10.0, 10.2], "two_tile_us": [11.0, 11.0],
             "general_us": [9.0, 9.1] if (n, k) == (28672, 8192) and m == 256 else [10.5, 10.5],
             "general_route": "general BN 256, split none", "cublas_us": [9.5, 9.5]}
            for n, k in library_small_m.NK for m in library_small_m.TUNE_M]
    table = json.loads(TABLE_PATH.read_text())
    out = json.loads(json.dumps(library_small_m.tuned_table(rows, "tuned on a test GPU", table)))
    rule = TilesRule.from_json(out[KEY])
    assert [(d.m, d.n, d.k) for d in rule.decisions if d.kernel == GENERAL] == [(256, 28672, 8192)]
    assert all(d.general_us is not None for d in rule.decisions)
    assert rule.choose(256, 28672, 8192).general_why and not rule.choose(256, 4096, 4096).general_why
    assert "general kernel when its median is more than 2%" in out[KEY]["rule"]


def test_the_tune_times_the_route_dispatch_takes_without_the_small_m_kernel():
    """general_route (bench/library_small_m.py) on meta tensors: the general kernel, in place, with the cost
    model's (BN, split) — the same route ``choose`` returns when the table says "general"."""
    x, w, c = meta(256, 8192), meta(28672, 8192), meta(256, 28672)
    route, fn = library_small_m.general_route(x, w, c)
    assert route.kind == "general" and route.repack_cost == 0 and callable(fn)
    rule = rule_with({(256, 28672, 8192): 9.0})
    chosen = dispatch.decide(x, w.T, c, given=True, device=ASSUMED_DEVICE, tiles=rule)
    assert (chosen.bn, dict(chosen.options)["split"]) == (route.bn, dict(route.options)["split"])
    assert library_small_m.describe_general(route) == f"general BN {route.bn}, split {dict(route.options)['split']}"


# --- the 64-row build with one CTA per cluster ------------------------------------------------------


def bm64_rule(at: dict[tuple[int, int, int], tuple[float | None, float, int]], one=10.0, two=12.0) -> TilesRule:
    """Decisions at each (M, N, K) with one tile at ``one`` us, two at ``two``, and (route us or None, 64-row
    build us, its BN)."""
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [one], "two_tile_us": [two],
             **({"general_us": [g], "general_route": "general BM 64 BN 64, 1 CTA per cluster, split none"}
                if g is not None else {}),
             "general_bm64_us": [b], "general_bm64_bn": bn, "general_bm64_route": f"general BM 64 BN {bn}, 1 CTA per "
                                                                                  "cluster, split none"}
            for (m, n, k), (g, b, bn) in at.items()]
    return fit(rows, "made up: the 64-row build")


def test_decide_general_takes_the_64_row_build_only_past_the_tie():
    assert decide_general(100.0, None, 97.9) == GENERAL_BM64
    assert decide_general(100.0, None, 98.0) == SMALL_M  # exactly 2%: a tie keeps the small-M kernel
    assert decide_general(100.0, 97.0, 95.1) == GENERAL  # held to the route's 97.0 once the route is chosen
    assert decide_general(100.0, 97.0, 95.0) == GENERAL_BM64
    assert decide_general(100.0, 99.0, 97.5) == GENERAL_BM64  # the route not chosen: held to the small-M kernel's
    assert decide_general(100.0, 99.0, 98.5) == SMALL_M and decide_general(100.0, 150.0, 120.0) == SMALL_M
    assert decide_general(100.0, 95.0, 90.0, tie=0.1) == SMALL_M
    for small, general in ((100.0, 97.9), (100.0, 98.0), (100.0, None), (20.0, 19.5)):
        assert decide_general(small, general, None) == decide_kernel(small, general)  # no 64-row time: as before


def test_fit_records_which_general_configuration_won():
    rule = bm64_rule({(128, 4096, 1024): (9.9, 8.0, 128), (197, 3072, 1024): (9.0, 8.9, 128),
                      (64, 768, 768): (None, 9.8, 64)})
    d128, d197, d64 = rule.decisions
    assert (d128.kernel, d128.general_bm64_bn, d128.general_bm64_us) == (GENERAL_BM64, 128, 8.0)
    assert d197.kernel == GENERAL  # 8.9 is within 2% of the route's 9.0: the route
    assert d64.kernel == SMALL_M  # 9.8 against 10.0: a tie
    j = rule.to_json()["decisions"][0]
    assert (j["kernel"], j["general_bm64_bn"], j["general_bm64_us"]) == (GENERAL_BM64, 128, 8.0)
    assert "general_bm64_us" not in rule_with({(256, 4096, 4096): 5.0}).to_json()["decisions"][0]
    again = TilesRule.from_json(json.loads(json.dumps(rule.to_json())))
    assert again.decisions == rule.decisions
    bad = json.loads(json.dumps(rule.to_json()))
    bad["decisions"][0]["kernel"] = GENERAL
    with pytest.raises(ValueError, match="says kernel 'general', but the rule gives 'general_bm64'"):
        TilesRule.from_json(bad)
    bad["decisions"][0].update(kernel=GENERAL_BM64, general_bm64_bn=96)
    with pytest.raises(ValueError, match="general_bm64_bn = 96"):
        TilesRule.from_json(bad)
    bad = json.loads(json.dumps(rule.to_json()))
    del bad["decisions"][0]["general_bm64_us"]  # the 64-row answer without its time (the route 9.9: a tie)
    with pytest.raises(ValueError, match="says kernel 'general_bm64', but the rule gives 'small_m'"):
        TilesRule.from_json(bad)


def test_the_lookup_returns_the_64_row_build():
    rule = bm64_rule({(128, 4096, 1024): (9.9, 8.0, 128), (128, 4096, 4096): (9.0, 8.0, 64),
                      (197, 3072, 1024): (9.0, 8.9, 128)})
    c = rule.choose(128, 4096, 1024)
    assert c.general_bm64_bn == 128 and (c.bn, c.tiles) == (128, 1)
    assert ("the small_m table measured the general kernel's 64-row build with one CTA per cluster at BN 128 faster "
            "at M = 128, 4096 x 1024") in c.general_why
    assert ("8.0 us (general BM 64 BN 128, 1 CTA per cluster, split none) against 10.0 us (the small-M kernel, one "
            "tile) and 9.9 us (the route, general BM 64 BN 64, 1 CTA per cluster, split none); faster than the "
            "small-M kernel by more than 2%") in c.general_why
    assert "faster than the route by more than 2%" in rule.choose(128, 4096, 4096).general_why
    assert rule.choose(120, 4096, 1024).general_bm64_bn == 128  # the nearest timed M, the N x K timed
    # Away from the timed N x K the 64-row build is not borrowed: the small-M and route times decide.
    c = rule.choose(120, 4000, 1100)
    assert c.general_bm64_bn is None and c.general_why is None and "taken only at the N x K they were timed at" in c.why
    c = rule.choose(197, 3072, 1024)  # the route's answer: no 64-row BN
    assert c.general_why and c.general_bm64_bn is None and "the general kernel faster" in c.general_why


def test_the_route_runs_the_64_row_build_at_the_tables_bn(monkeypatch):
    """Where the table says GENERAL_BM64, the route launches the general kernel's 64-row build with one CTA
    per cluster at the table's BN (128 here, where the cost model alone ranks BN 64 for that build),
    its split one the cost model ranks for it; where it says GENERAL, the route is the cost model's."""
    from gemm_ladder.dispatch.route import choose_general_build, find_routes

    x, w, c = meta(128, 1024), meta(4096, 1024).T, meta(128, 4096)
    rule = bm64_rule({(128, 4096, 1024): (9.9, 8.0, 128)})
    r = dispatch.decide(x, w, c, given=False, device=ASSUMED_DEVICE, tiles=rule)
    assert r.kind == "general" and (r.config.tile[0], r.config.cluster, r.bn) == (64, 1, 128)
    assert dict(r.options)["split"] in CLUSTER1_SPLITS and r.small_m_table.general_bm64_bn == 128
    assert r.a_path.repack is None and r.b_path.repack is None and not r.c_path.transposed
    assert {(cand.work.bn, cand.work.bm, cand.work.cluster) for cand in r.candidates} == {(128, 64, 1)}
    routes, _ = find_routes(x, w, c, given=False, device=ASSUMED_DEVICE)
    own = choose_general_build(routes, dispatch.cost_model(), bm=64, cluster=1)
    assert own.bn != 128  # so the BN above is the table's, not the cost model's
    general = dispatch.decide(x, w, c, given=False, device=ASSUMED_DEVICE,
                              tiles=rule_with({(128, 4096, 1024): 5.0}))
    assert general.kind == "general" and general.small_m_table.general_bm64_bn is None
    assert (general.config, dict(general.options)["split"]) != (r.config, dict(r.options)["split"])
    # An MN-major x: the 64-row build is not routed for it, so the small-M kernel runs (in place).
    r = dispatch.decide(meta(1024, 128).T, w, c, given=False, device=ASSUMED_DEVICE, tiles=rule)
    assert r.kind == "small_m" and r.a_path.repack is None and r.small_m_table is None
    assert r.tiles.general_bm64_bn == 128  # the table's answer, kept on the route for explain


def test_explain_says_which_general_configuration_runs_and_why(monkeypatch):
    monkeypatch.setattr(dispatch, "_tiles", bm64_rule({(128, 4096, 1024): (9.9, 8.0, 128)}))
    e = gemm_ladder.explain(meta(128, 1024), meta(4096, 1024).T)
    assert e.kind == "general" and e.tile == [64, 128, 64] and e.cluster == 1
    h = e.to_dict()["heuristic"]
    assert h["small_m_table"]["general_bm64_bn"] == 128
    assert h["small_m_table"]["provenance"] == "made up: the 64-row build"
    text = str(e)
    assert ("choice:   the small-M kernel's table measured the general kernel's 64-row build with one CTA per cluster "
            "at BN 128 faster here; then the fastest split of that build by the cost model") in text
    assert ("small M:  the small_m table measured the general kernel's 64-row build with one CTA per cluster at "
            "BN 128") in text
    assert "8.0 us (general BM 64 BN 128, 1 CTA per cluster, split none) against 10.0 us" in text
    assert "BM 64 BN 128 split none, 1 CTA" in text


def test_the_tune_times_the_64_row_build_dispatch_runs():
    """general_bm64_route (bench/library_small_m.py) on meta tensors: the 64-row one-CTA build in place at the
    cost model's (BN, split) for it — the route dispatch takes when the table says GENERAL_BM64 at that BN."""
    x, w, c = meta(197, 1024), meta(3072, 1024), meta(197, 3072)
    route, fn = library_small_m.general_bm64_route(x, w, c)
    assert (route.config.tile[0], route.config.cluster) == (64, 1) and route.repack_cost == 0 and callable(fn)
    assert library_small_m.describe_general(route).startswith(f"general BM 64 BN {route.bn}, 1 CTA per cluster, split ")
    rule = bm64_rule({(197, 3072, 1024): (None, 5.0, route.bn)})
    chosen = dispatch.decide(x, w.T, c, given=True, device=ASSUMED_DEVICE, tiles=rule)
    assert library_small_m.same_launch(chosen, route)
    other = dispatch.decide(x, w.T, c, given=True, device=ASSUMED_DEVICE,
                            tiles=bm64_rule({(197, 3072, 1024): (None, 5.0, 256 if route.bn != 256 else 64)}))
    assert other.kind == "general" and not library_small_m.same_launch(other, route)  # another BN: another launch


def test_the_tunes_rows_with_64_row_times_make_the_table():
    rows = [{"m": 128, "n": 4096, "k": 1024, "one_tile_us": [10.0, 10.2], "two_tile_us": [11.0, 11.0],
             "four_tile_us": [10.5, 10.5], "general_us": [9.9, 9.9], "general_route": "general BM 64 BN 64, split none",
             "general_bm64_us": [9.0, 9.1], "general_bm64_bn": 64, "general_bm64_route": "general BM 64 BN 64, 1 CTA "
             "per cluster, split none", "cublas_us": [8.5, 8.5]},
            {"m": 197, "n": 4096, "k": 1024, "one_tile_us": [15.0], "two_tile_us": [14.0], "four_tile_us": [11.0],
             "general_us": [11.5], "general_route": "general BM 64 BN 128, split none"}]  # no 64-row time
    table = json.loads(TABLE_PATH.read_text())
    out = json.loads(json.dumps(library_small_m.tuned_table(rows, "tuned on a test GPU", table)))
    rule = TilesRule.from_json(out[KEY])
    assert [(d.kernel, d.tiles) for d in rule.decisions] == [(GENERAL_BM64, 1), (SMALL_M, 4)]
    assert rule.choose(128, 4096, 1024).general_bm64_bn == 64 and rule.choose(197, 4096, 1024).tiles == 4
    assert "64-row build with one CTA per cluster when its median is more than 2%" in out[KEY]["rule"]


def test_swiglus_small_m_path_keeps_the_small_m_kernel(monkeypatch):
    """swiglu's small-M path decides both products with the table's tile counts but never its general
    answers (timed for plain GEMMs: dispatch.tiles_rule_small_m_only), while a plain GEMM of the same
    shape takes the general kernel the table names."""
    from gemm_ladder.dispatch import swiglu_small_m

    rule = bm64_rule({(64, 4096, 1024): (9.9, 8.0, 128)})
    monkeypatch.setattr(dispatch, "_tiles", rule)
    assert dispatch.decide(meta(64, 1024), meta(4096, 1024).T, meta(64, 4096), given=True).kind == "general"
    only = dispatch.tiles_rule_small_m_only()
    assert only is dispatch.tiles_rule_small_m_only()  # read once: the route cache keys on it
    assert all(d.kernel == SMALL_M and d.general_us is None and d.general_bm64_us is None for d in only.decisions)
    assert [d.tiles for d in only.decisions] == [d.tiles for d in rule.decisions]
    x, wg, wu = meta(64, 1024), meta(4096, 1024), meta(4096, 1024)
    up = torch.empty(64, 4096, dtype=torch.float32, device="meta")
    r_up, r_gate = swiglu_small_m.pair_routes(x, wg, wu, up, meta(64, 4096))
    assert r_up.kind == r_gate.kind == "small_m"
