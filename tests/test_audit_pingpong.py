"""The ping-pong schedule's stage ring (RingConfig.pingpong: consumers take the tiles in turn, each a whole
tile in its own accumulators, one consumer storing while another computes), proven by the auditor at the
depth it proves the cooperative rings (every stage reused at least twice), and each way to get it wrong
rejected with a trace: no ordering of the consumers' main loops (a wait passes on an older phase of its
parity), a ring counter that does not step over the other consumer's tiles, the cooperative kernel's
empty count, a staging ring shared by the consumers. CPU only: the model, not a kernel.
"""

from __future__ import annotations

import pytest

from gemm_ladder.audit import audit
from gemm_ladder.audit.ring import RingConfig, build_ring_protocol


def pingpong(**kw) -> RingConfig:
    base = dict(stages=4, k_iters=3, tiles=4, consumers=2, pingpong=True, warp_specialized=True, release_lag=1)
    return RingConfig(**{**base, **kw})


def uses_per_stage(cfg: RingConfig) -> int:
    return sum(cfg.tile_lengths) // cfg.stages


@pytest.mark.parametrize("kw", [
    {},
    {"tile_k_iters": (2, 5, 1, 4)},  # tiles of different lengths (a stream-K CTA's segments)
    {"k_iters": 1, "tiles": 12},  # a tile shorter than the ring
    {"stages": 2, "k_iters": 4, "tiles": 3},
    {"panels_per_tile": 2, "deferred_panels": 1},  # the last panel stored during the next own tile
    {"staging_buffers": 2, "panels_per_tile": 2},
    {"consumers": 3, "tiles": 5},
    {"release_lag": 0},
    {"cluster": 2, "stages": 2, "k_iters": 2, "tiles": 3},  # B multicast, releases on both CTAs
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "base")
def test_the_pingpong_ring_is_proven(kw):
    cfg = pingpong(**kw)
    assert uses_per_stage(cfg) >= 3  # every stage reused at least twice (docs/auditor.md, "Depth")
    result = audit(build_ring_protocol(cfg))
    assert result.ok and result.complete, result.render()
    assert result.bounds["pingpong"] is True


@pytest.mark.parametrize("kw", [
    {"stages": 3},
    {"stages": 3, "tile_k_iters": (2, 5, 1, 4)},
    {"k_iters": 1, "tiles": 12},  # every tile one K iteration: its one stage released at its end
    {"stages": 3, "k_iters": 1, "tiles": 9},
    {"stages": 3, "panels_per_tile": 2, "deferred_panels": 1},
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_the_pingpong_ring_is_proven_at_release_lag_2(kw):
    """The library kernel's measuring build with two wgmma groups in flight (library_gemm(...,
    pingpong=True, release_lag=2)): each consumer releases k#g-2 after its consume of g, its tile's last
    two after the tile (its turn passed before that iteration's release, as pass_turn in after_issue);
    with two stages a consumer holds both while it waits for a third: deadlock (cluster_ring.cuh's
    static_assert STAGES > GL_RELEASE_LAG)."""
    cfg = pingpong(release_lag=2, **kw)
    assert uses_per_stage(cfg) >= 3
    result = audit(build_ring_protocol(cfg))
    assert result.ok and result.complete, result.render()
    assert "deadlock" in {v.kind for v in audit(build_ring_protocol(pingpong(release_lag=2, stages=2))).violations}


@pytest.mark.parametrize("fault,kinds", [
    ({"ordered": False}, {"phase_error"}),
    ({"skip_others": False}, {"stale_read"}),
    ({"empty_count": 2}, {"deadlock"}),  # the cooperative count: both consumers' releases
    ({"shared_staging": True}, {"staging_overwrite"}),
])
def test_each_pingpong_fault_is_rejected_with_a_trace(fault, kinds):
    result = audit(build_ring_protocol(pingpong(**fault)))
    assert not result.ok, result.render()
    found = {v.kind: v for v in result.violations}
    assert kinds <= set(found), (sorted(found), result.render())
    assert all(found[k].trace for k in kinds)


def test_pingpong_consumers_read_only_their_own_tiles():
    """Each stage is read by the consumer whose tile it holds; the empty barriers count one consumer's
    release (per CTA of a multicast cluster); each consumer stores whole tiles into its own staging."""
    cfg = pingpong()
    assert cfg.empty_arrivals == 1 and pingpong(cluster=2).empty_arrivals == 2
    assert RingConfig(stages=4, k_iters=3, tiles=4, consumers=2, warp_specialized=True).empty_arrivals == 2
    p = build_ring_protocol(cfg)
    reads = {r.name: sorted({op.tag // cfg.k_iters for op in r.program if op.op == "consume"}) for r in p.roles}
    assert reads == {"cta0.producer": [], "cta0.consumer0": [0, 2], "cta0.consumer1": [1, 3]}
    stores = {r.name: [op.tag for op in r.program if op.op == "store_commit"] for r in p.roles}
    assert stores["cta0.consumer0"] == [0, 2] and stores["cta0.consumer1"] == [1, 3]
    staging = {b.name: b.bytes for b in p.buffers if b.kind == "staging"}
    assert staging == {"D0": 128 * 128 * 2, "D1": 128 * 128 * 2}


def test_pingpong_needs_a_producer_and_two_consumers():
    with pytest.raises(ValueError, match="ping-pong"):
        pingpong(consumers=1)
    with pytest.raises(ValueError, match="ping-pong"):
        RingConfig(stages=4, k_iters=3, consumers=1, pingpong=True)
