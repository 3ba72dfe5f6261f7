"""The general kernel's timeline build (sm90_gemm.cu's GL_TIMELINE: library_gemm(..., timeline=True)) and
bench/experiments/gemm_timeline.py's CPU parts, without a GPU.

Builds: the timeline build of several configurations compiles with no spill or stack (the resource
gate) and reads %globaltimer; the shipped build of the same configuration does not (its stamps compile
to nothing), and the two are distinct builds (keys, names) whose configs map back to their kernels.
The script: its build grammar, the slot enum it reads from the source, the schedule counts it checks
the stamps against, and its analysis on synthetic stamps (every CTA's parts add up to its entry-to-exit
time; a count that disagrees with the schedule is caught).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import needs_nvcc

from gemm_ladder.library.gemm import kernel_for, library_gemm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "experiments"))
import gemm_timeline as bench  # noqa: E402

CONFIGS = [dict(bn=256), dict(bn=64, bm=64, cluster=1), dict(bn=128, c_from_registers=True, cluster=1),
           dict(bn=256, bm=64, pingpong=True, cluster=1), dict(bn=128, pingpong=True, cluster=1),
           dict(bn=192, bm=256, c_from_registers=True, cluster=1)]


def test_the_timeline_build_is_its_own_configuration():
    for cfg in CONFIGS:
        shipped, tl = library_gemm("k", "k", **cfg), library_gemm("k", "k", timeline=True, **cfg)
        assert tl is not shipped and tl.name == shipped.name + "_tl"
        assert ("GL_TIMELINE", 1) in tl.config("bf16").extra and ("GL_TIMELINE", 1) not in shipped.config("bf16").extra
        assert tl.config("bf16") != shipped.config("bf16")  # the config is the build's key
        assert kernel_for(tl.config("bf16")) is tl and kernel_for(shipped.config("bf16")) is shipped
        assert tl.defines("bf16") == shipped.defines("bf16")  # the same plan, ring and launch


@needs_nvcc
@pytest.mark.parametrize("cfg", CONFIGS)
def test_timeline_builds_pass_the_resource_gate_and_shipped_ones_carry_no_stamp(cfg, use_cache):
    from gemm_ladder.gates.resources import check_level_resources

    report, sass = check_level_resources(library_gemm("k", "k", timeline=True, **cfg), "bf16")
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert "GLOBALTIMER" in sass
    shipped_report, shipped_sass = check_level_resources(library_gemm("k", "k", **cfg), "bf16")
    assert shipped_report.passed and "GLOBALTIMER" not in shipped_sass


def test_the_build_grammar():
    assert bench.parse_build("route") == {"route": True}
    assert bench.parse_build("c1 bm64 bn64 none") == {"cluster": 1, "bm": 64, "bn": 64, "split": "none"}
    assert bench.parse_build("bn128 all") == {"cluster": 2, "bm": 128, "bn": 128, "split": "all"}
    assert bench.parse_build("c1 bm64 lag2 bn64 none") == {"cluster": 1, "bm": 64, "bn": 64, "split": "none",
                                                           "release_lag": 2}
    assert bench.parse_build("c1 bm256 reg bn192 none") == {"cluster": 1, "bm": 256, "c_from_registers": True,
                                                            "bn": 192, "split": "none"}
    assert bench.parse_build("c1 pp bn128 none") == {"cluster": 1, "bm": 128, "pingpong": True, "bn": 128,
                                                     "split": "none"}
    assert bench.build_of(bench.parse_build("c1 bm256 reg bn192 none")).name == "sm90_gemm_kk_bn192_creg_c1_bm256"
    assert bench.build_of(bench.parse_build("c1 pp bn128 none")).name == "sm90_gemm_kk_bn128_c1_pp"
    assert bench.build_of(bench.parse_build("c1 bm256 bn192 none")).name == "sm90_gemm_kk_bn192_c1_bm256"  # TMA store
    for bad in ("", "bn128", "c3 bn64 none", "bm64 none", "bn128 sometimes", "route bn64 none", "lag3 bn64 none",
                "bn77 none", "bn96 none", "c1 bm256 bn256 none", "bm512 bn128 none", "c1 bm256 lag2 bn128 none"):
        assert bench.parse_build(bad) is None, bad


def test_the_slots_are_read_from_the_kernel_source():
    slots, tile0, tiles, width = bench.timeline_slots()
    assert slots["Entry"] == 0 and tile0 == len(slots) and tile0 + 2 * tiles <= width
    assert {"Setup", "WholeTiles", "WholeEnd", "Segments", "HandIns", "TailLoopSum", "HandInSum", "ReduceSum",
            "TailStoreSum", "TailEnd", "StoresRead", "Exit", "TurnWaitSum", "Mark"} <= set(slots)


@pytest.mark.parametrize("split", ["none", "tail", "all", "wave"])
def test_schedule_counts_cover_every_unit_and_k_iteration(split):
    kern = library_gemm("k", "k", 128, cluster=1)
    tail, whole, segments, hand_ins = bench.schedule_counts(kern, 1576, 1024, 4096, split, resident=132)
    whole_end = tail.first_unit if tail.tail_units else tail.units
    assert len(whole) == tail.clusters and sum(whole) == whole_end
    assert sum(segments) == sum(len(tail.segments(c)) for c in range(tail.clusters)) if tail.tail_units else sum(segments) == 0
    assert all(h <= s for h, s in zip(hand_ins, segments))
    if split == "all":
        assert sum(whole) == 0 and min(segments) >= 1 and sum(hand_ins) > 0


def test_schedule_counts_give_consumer_0_every_other_tile_under_ping_pong():
    kern = library_gemm("k", "k", 256, bm=64, pingpong=True, cluster=1)
    tail, whole, segments, hand_ins = bench.schedule_counts(kern, 2048, 2048, 256, "none", resident=132)
    per_cta = [len(range(c, tail.units, tail.clusters)) for c in range(tail.clusters)]
    assert whole == [(t + 1) // 2 for t in per_cta] and sum(segments) == sum(hand_ins) == 0


def _stamps(slots, tile0, width, *, tiles, segments=(), t0=1000, unstamped_us=0):
    """One CTA's row of stamps (ns): entry t0, setup +2 us, each stamped tile 10 us of loop then 1 us of
    boundary, ``unstamped_us`` of tiles past them to kWholeEnd, then each segment of ``segments`` ((loop,
    hand-in, reduce, store) us, None where not done) after 0.5 us of its own setup, the drain 1 us, exit 1 us."""
    r = [0] * width
    t = t0
    r[slots["Entry"]] = t
    t += 2000
    r[slots["Setup"]] = t
    for j in range(tiles):
        t += 10_000
        r[tile0 + 2 * j] = t
        t += 1000
        r[tile0 + 2 * j + 1] = t
    t += unstamped_us * 1000
    r[slots["WholeEnd"]] = t
    for loop, hand_in, reduce, store in segments:
        t += 500
        r[slots["Segments"]] += 1
        for name, us in (("TailLoopSum", loop), ("HandInSum", hand_in), ("ReduceSum", reduce), ("TailStoreSum", store)):
            if us is not None:
                r[slots[name]] += us * 1000
                t += us * 1000
        r[slots["HandIns"]] += hand_in is not None
        r[slots["Reductions"]] += reduce is not None
    r[slots["TailEnd"]] = t
    t += 1000
    r[slots["StoresRead"]] = t
    r[slots["Exit0"]] = r[slots["Exit1"]] = t
    t += 1000
    r[slots["Exit"]] = t
    return r


def _counts(slots, ns):
    return ([r[slots["Segments"]] for r in ns], [r[slots["HandIns"]] for r in ns])


def test_analyse_splits_each_cta_into_parts_that_add_up():
    slots, tile0, tiles, width = bench.timeline_slots()
    ns = [_stamps(slots, tile0, width, tiles=3, segments=[(5, 1, 2, 1)]),
          _stamps(slots, tile0, width, tiles=3, segments=[(5, 1, None, None)], t0=1500),
          _stamps(slots, tile0, width, tiles=2),
          # two segments: the first split, handed in, reduced and stored; the second whole (its own store)
          _stamps(slots, tile0, width, tiles=0, segments=[(4, 1, 2, 1), (6, None, None, 1)])]
    for r in ns:
        r[slots["WholeTiles"]] = sum(1 for j in range(tiles) if r[tile0 + 2 * j])
    segments, hand_ins = _counts(slots, ns)
    out = bench.analyse(ns, slots=slots, tile0=tile0, tiles=tiles, whole=[3, 3, 2, 0], segments=segments,
                        hand_ins=hand_ins, event_us=50.0)
    assert out["loop_us"]["median"] == pytest.approx(10.0) and out["ramp_us"]["median"] == pytest.approx(0.0)
    assert out["boundary_per_tile_us"]["median"] == pytest.approx(1.0)
    assert out["reduce_us"] == {"median": 2.0, "min": 2.0, "max": 2.0, "n": 2}  # both reducing CTAs, the earlier segment too
    assert out["hand_in_us"]["median"] == pytest.approx(1.0) and out["tail_loop_us"]["max"] == pytest.approx(10.0)
    assert out["tail_other_us"]["max"] == pytest.approx(1.0)  # CTA 3: two segments' 0.5 us of setup
    crit = out["critical"]
    # CTA 0, the last to exit: setup 2, three tiles of 10 + 1, segment 0.5 + 5 + 1 + 2 + 1, drain 1, exit 1
    assert crit["cta"] == 0 and out["span_us"] == pytest.approx(46.5)
    assert (crit["reduce_us"], crit["tail_store_us"], crit["unstamped_tiles_us"]) == (2.0, 1.0, 0.0)
    assert sum(crit[p + "_us"] for p in bench.PHASES) + crit["entry_offset_us"] == pytest.approx(out["span_us"])
    assert out["outside_us"] == pytest.approx(3.5)
    with pytest.raises(AssertionError, match="scheduled"):
        bench.analyse(ns, slots=slots, tile0=tile0, tiles=tiles, whole=[3, 3, 3, 0], segments=segments,
                      hand_ins=hand_ins, event_us=None)


def test_analyse_gives_tiles_past_the_stamped_ones_their_own_part():
    slots, tile0, tiles, width = bench.timeline_slots()
    row = _stamps(slots, tile0, width, tiles=tiles, segments=[(5, None, None, 1)], unstamped_us=55)
    row[slots["WholeTiles"]] = tiles + 5  # five more tiles than were stamped, then a tail segment
    out = bench.analyse([row], slots=slots, tile0=tile0, tiles=tiles, whole=[tiles + 5], segments=[1], hand_ins=[0],
                        event_us=None)
    crit = out["critical"]
    assert crit["unstamped_tiles_us"] == pytest.approx(55.0) and crit["tail_loop_us"] == pytest.approx(5.0)
    assert crit["drain_us"] == pytest.approx(1.0) and out["unstamped_tiles_us"]["median"] == pytest.approx(55.0)
    assert sum(crit[p + "_us"] for p in bench.PHASES) == pytest.approx(out["span_us"])


def test_analyse_of_a_ping_pong_launch_reports_the_turn_waits_and_no_ramp():
    slots, tile0, tiles, width = bench.timeline_slots()
    row = _stamps(slots, tile0, width, tiles=3)
    row[slots["WholeTiles"]] = 3
    row[slots["TurnWaitSum"]] = 12_000
    out = bench.analyse([row], slots=slots, tile0=tile0, tiles=tiles, whole=[3], segments=[0], hand_ins=[0],
                        event_us=None, pingpong=True)
    assert out["ramp_us"] == {} and out["turn_wait_us"]["median"] == pytest.approx(12.0)
    assert out["loop_less_turn_wait_us"]["median"] == pytest.approx(6.0)  # three 10 us loops less 12 us of waits



def test_analyse_reports_the_waits_for_data_and_the_producers_lead():
    """kFullWaitClk's cycles read at the CTA's own clock (clock64 over %globaltimer from entry to exit), per K
    iteration and as a share of the stamped loops; kProducerWhole against consumer 0's last loop end."""
    slots, tile0, tiles, width = bench.timeline_slots()
    row = _stamps(slots, tile0, width, tiles=3)
    row[slots["WholeTiles"]] = 3
    row[slots["FullWaitClk"]] = 12_000  # cycles: 6 us at 2 GHz
    row[slots["ProducerWhole"]] = row[tile0 + 2 * 2] - 4000  # the last loads 4 us before the last loop's end
    clk = [0] * width
    clk[slots["Exit"]] = 2 * (row[slots["Exit"]] - row[slots["Entry"]])  # 2 cycles a ns
    bare = bench.analyse([row], slots=slots, tile0=tile0, tiles=tiles, whole=[3], segments=[0], hand_ins=[0],
                         event_us=None)
    assert bare["full_wait_us"] == {} and bare["full_wait_per_iteration_us"] == {}  # no clock: no reading
    out = bench.analyse([row], slots=slots, tile0=tile0, tiles=tiles, whole=[3], segments=[0], hand_ins=[0],
                        event_us=None, clk=[clk], k_tiles=10)
    assert out["full_wait_us"]["median"] == pytest.approx(6.0)
    assert out["full_wait_per_iteration_us"]["median"] == pytest.approx(0.2)  # 6 us over 3 tiles of 10
    assert out["full_wait_share"]["median"] == pytest.approx(0.2)  # of three 10 us loops
    assert out["producer_lead_us"]["median"] == pytest.approx(4.0)
    assert bench.analyse([row], slots=slots, tile0=tile0, tiles=tiles, whole=[3], segments=[0], hand_ins=[0],
                         event_us=None, clk=[[0] * width], k_tiles=10)["full_wait_us"] == {}  # no clock row: no reading
    row[slots["FullWaitClk"]] = 0  # BN 256: not stamped
    assert bench.analyse([row], slots=slots, tile0=tile0, tiles=tiles, whole=[3], segments=[0], hand_ins=[0],
                         event_us=None, clk=[clk], k_tiles=10)["full_wait_share"] == {}


@needs_nvcc
def test_prebuild_compiles_the_builds_and_their_timeline_builds(use_cache, capsys):
    specs = [bench.parse_build("route"), bench.parse_build("c1 bn128 all")]
    assert bench.prebuild([("bert 512", 512, 1024, 4096)], specs) == 0
    assert "builds ready" in capsys.readouterr().out
    labels = {label.split(" (")[0] for label in bench.builds_for(("bert 512", 512, 1024, 4096), specs)}
    assert any(label.startswith("route") for label in labels) and "sm90_gemm_kk_bn128_c1 all" in labels
