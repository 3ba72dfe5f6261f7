"""The timeline model behind the report's and the designer's pictures (design/timeline.py): each
level's picture shows what that level adds, and the simulated schedule keeps the ring's rules.

Levels 5-9 drew near-identical pictures, and a level-9 plan (cluster 2, two consumers, stream-K tail)
the same one as a plain 4-stage plan: one tile's load and MMA lanes.
"""

from __future__ import annotations

import pytest

from gemm_ladder.design import plan_gemm
from gemm_ladder.design.timeline import TimelineConfig, elide, pipeline_picture
from gemm_ladder.levels import LEVELS

SHAPE = (8192, 8192, 8192, "bf16")  # level 9 splits a stream-K tail here (1024 units on 66 clusters)


def picture(plan):
    return pipeline_picture(TimelineConfig.from_plan(plan))


@pytest.fixture(scope="module")
def pictures():
    return {n: picture(LEVELS[n].plan(*SHAPE)) for n in range(4, 10)}


def signature(pic) -> tuple:
    kinds = tuple(sorted({(s.kind, s.thin) for s in pic.steps}))
    marks = tuple(sorted(m.text.split(":")[0].split(" ")[0] for m in pic.marks))
    stages = len({s.stage for s in pic.steps if s.stage is not None})  # colours: 1 for level 4, 3 for level 5
    return pic.lanes, kinds, marks, len(pic.segments), stages


def test_levels_4_to_9_draw_six_different_pictures(pictures):
    sigs = {n: signature(p) for n, p in pictures.items()}
    assert len(set(sigs.values())) == 6, sigs


def test_each_level_shows_what_it_adds(pictures):
    l4, l5, l6, l7, l8, l9 = (pictures[n] for n in range(4, 10))
    loads = lambda p: [s for s in p.steps if s.kind == "load"]  # noqa: E731
    mmas = lambda p, lane: [s for s in p.steps if s.kind == "mma" and s.lane == lane]  # noqa: E731
    # 4: one stage, each load waits for the MMA before it
    m4 = mmas(l4, l4.lanes[1])
    assert all(ld.start >= m.end for ld, m in zip(loads(l4)[1:], m4))
    # 5: the loads run ahead of the MMA (overlap)
    m5 = mmas(l5, l5.lanes[1])
    assert any(ld.start < m.end and m.start < ld.end for ld in loads(l5) for m in m5)
    # 6: a tile boundary, the ring position carried into the next tile, its loads during this tile's epilogue
    boundary = next(m for m in l6.marks if m.text.startswith("tile 1"))
    assert boundary.text == "tile 1: ring position 128, stage 0, parity 0 (carried)"
    epilogue = next(s for s in l6.steps if s.kind == "epilogue" and s.segment == 0)
    assert any(s.kind == "load" and s.segment == 1 and s.start < epilogue.end for s in l6.steps)
    assert l6.lanes[0] == "thread 0: TMA loads"
    # 7: a producer warpgroup of its own
    assert l7.lanes[:2] == ("producer warpgroup: TMA loads", "consumer warpgroup: MMA, epilogue")
    # 8: the peer CTA, the multicast and a refill that waits for the peer's (later) release
    assert l8.lanes[-1] == "CTA 1: its consumer"
    assert [m.to_lane for m in l8.marks if m.to_lane] == [l8.lanes[-1], l8.lanes[0]]
    # 9: two consumer lanes, panels stored during the next tile (thin bars), the stream-K piece and its partial
    assert l9.lanes[1:3] == ("consumer 1: rows 0-63", "consumer 2: rows 64-127")
    assert any(s.kind == "panel" and s.thin and s.segment == 1 for s in l9.steps)
    assert any(m.text.startswith("stream-K: unit") for m in l9.marks)
    assert {"partial", "fixup"} & {s.kind for s in l9.steps}


def test_level9_plan_is_not_a_plain_four_stage_picture():
    plain = picture(plan_gemm(*SHAPE, stages=4))
    l9 = picture(plan_gemm(*SHAPE, tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True,
                           c_ring=2, stream_k=True))
    assert plain.lanes == ("thread 0: TMA loads", "warpgroup 0: MMA, epilogue", "TMA stores (async)")
    assert len(l9.lanes) == 5 and signature(l9) != signature(plain)
    assert len(plain.segments) == 1 and len(l9.segments) == 4  # tiles 0-2 simulated, then the tail piece


@pytest.mark.parametrize("level", [4, 5, 6, 8, 9])
def test_the_simulated_schedule_keeps_the_ring_rules(pictures, level):
    """Every MMA starts after its K tile's load landed; every load into a stage starts after every
    consumer of every CTA released that stage's previous K tile (the MMA after it was issued, or,
    for a tile's last K tile or with one stage, its MMA finished)."""
    pic = pictures[level]
    previous = level >= 5
    order = [(seg.index, i) for seg in pic.segments for i in range(len(seg.positions))]
    load = {(s.segment, s.iteration): s for s in pic.steps if s.kind == "load"}
    consumer_lanes = [lane for lane in pic.lanes[1:] if not lane.startswith("TMA")]
    stages = LEVELS[level].stages
    for lane in consumer_lanes:
        mma = {(s.segment, s.iteration): s for s in pic.steps if s.kind == "mma" and s.lane == lane}
        for j, key in enumerate(order):
            assert mma[key].start >= load[key].end - 1e-9
            if j >= stages:
                freed = order[j - stages]
                seg_len = len(pic.segments[freed[0]].positions)
                last = freed[1] == seg_len - 1
                release = mma[order[j - stages + 1]].start if previous and not last else mma[freed].end
                assert load[key].start >= release - 1e-9, (lane, key)


def test_ring_position_and_stage_carry_across_tiles():
    pic = pipeline_picture(TimelineConfig(k_tiles=5, stages=2, whole_tiles=2, persistent=True))
    assert [m.text for m in pic.marks] == ["tile 1: ring position 5, stage 1, parity 0 (carried)"]
    first_of_tile1 = next(s for s in pic.steps if s.kind == "load" and s.segment == 1 and s.iteration == 0)
    assert first_of_tile1.stage == 1  # not 0: the ring is not reset at the boundary


def test_elided_picture_does_not_grow_with_k():
    widths = {k: elide(picture(LEVELS[9].plan(4096, 4096 * 2, k, "bf16"))).end for k in (8192, 65536)}
    assert widths[8192] == pytest.approx(widths[65536]) and widths[8192] < 100
    gaps = elide(picture(LEVELS[6].plan(*SHAPE))).gaps
    assert [text for _, _, text in gaps] == ["k 3..124 of tile 0", "k 3..124 of tile 1", "tiles 2..15"]


def test_designer_png_of_level9_is_bounded(tmp_path):
    from gemm_ladder.design.render import timeline_png

    data = timeline_png(LEVELS[9].plan(*SHAPE), tmp_path / "l9.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") < 2000
