"""The stage-ring protocols of ladder levels 4..9, as :func:`build_ring_protocol` unrolls them.

The shape of a level (:func:`protocol_for_level`):

* **L4 TMA**: one stage, one CTA, one warpgroup of 128 threads; thread 0 issues (its program is the
  warpgroup's, combined): issue load k -> wait full -> wgmma -> all 128 threads arrive on ``empty``
  (count 128: the ``__syncthreads`` that protects the single stage) -> wait empty -> issue load k+1.
  Epilogue: write staging, store, commit_group, wait_group 0.
* **L5 pipeline**: S stages, ``full`` (count 1 + tx) and ``empty`` (count 1: one elected thread arrives
  once the warpgroup's wgmma on that stage retired). Prologue issues min(S, K) loads; steady state
  waits full[k%S] parity (k/S)%2 and issues the wgmma of k; ``wgmma.wait_group 1`` then proves the
  one of k-1 done, so it releases empty[(k-1)%S] (``release_lag`` = 1, as in levels 6-9; a tile's
  last stage after ``wait_group 0``), and the same thread waits that empty barrier, parity
  (((k-1)/S)%2)^1, before issuing load k-1+S into it. One tile per CTA. Releasing one iteration late
  needs S >= 2 (with one stage it deadlocks, which the audit shows), so the kernels of levels 5-9
  static_assert it; a one-stage audit of these levels models the release right after the read.
* **L6 persistent**: L5's ring carried across the tiles of a CTA (the iteration counter, hence stage
  and phase, continues), an epilogue per tile; before writing staging again the previous tile's store
  is drained (wait_group 0).
* **L7 warp-specialized**: a producer role (one thread) and a consumer warpgroup; the producer's first
  empty waits use parity 1; the consumer's elected thread releases and drains staging before reuse.
* **L8 2-CTA cluster**: two CTAs, each with producer and consumer; A per CTA, B split in halves: each
  CTA's producer loads its half and multicasts it into both CTAs (bytes complete on both full
  barriers); empty count 2: each consumer arrives on its own and on the peer CTA's empty[s].
* **L9 multi-consumer (cooperative)**: two consumer warpgroups read every stage of one 128x256 tile;
  empty count = consumers x cluster (cluster 1 by default, 2 with B multicast as in L8; the kernel's
  ring is 4 stages, the audit defaults to 2). Epilogue as the kernel ships it: each consumer
  warpgroup i stores its 64 x 256 fragment as P = 4 column panels (64 columns, 128 B) through its
  own staging ring of R = 2 panel buffers ``D{i}.0``, ``D{i}.1`` (64 x 128 B each) with its own store
  issuer (thread 0; named barrier 2+i, 128 threads, orders it with its warpgroup): for running panel
  q = tile * P + p, ``wait_group.read 1`` (R - 1; so the group of panel q - 2, the last to read
  buffer q % 2, has finished), write buffer q % 2, TMA store + ``commit_group`` (one bulk group per
  panel); ``wait_group.read 0`` before exit. No staging is shared between the consumers. The epilogue
  overlaps the next tile's main loop (``deferred_panels`` = P - R = 2): panels 0, 1 go out after the
  tile's main loop, panels 2, 3 in K iterations 0, 1 of the next tile right after their wgmma is
  issued (after its main loop if K = 1; at once after the CTA's last tile). The audit unrolls the
  shipped P = 4 (the epilogue is private to its warpgroup, so the search takes it with the step
  before it and P costs almost no states). That bound suffices: the buffer rotation has period
  R = 2, which divides P, so panel p of every tile uses buffer p % 2 and every tile repeats the
  first's pattern; within one tile each buffer is already reused with R - 1 = 1 newer group in
  flight (the hazard the wait guards), and tiles >= 2 add the reuses across the tile boundary,
  with the next tile's loads and wgmma in between.
  Level 9's stream-K tail (stream_k.cuh) runs the same ring over pieces [kb, ke) of units: a piece is
  a tile with fewer K iterations (the K = 1 and short-K audits cover the shortest), and a piece that
  finishes a tile stores its P panels at once (``deferred_panels`` 0 for that tile, the pattern of a
  CTA's last tile). What the tail adds beyond the ring, the fp32 partials handed between clusters
  through global memory (stores, fence, atomic arrival counter, the last arriver's reads), is not a
  shared-memory protocol and is outside this model; tests/test_stream_k.py (every iteration once,
  contributors numbered as they arrive, the header's arithmetic compiled for the host; on a GPU,
  bitwise-repeatable outputs) and compute-sanitizer check it.

Levels 4 and 5 are not persistent: a CTA computes one tile with freshly initialised barriers, so their
``tiles`` argument is recorded as 1.
"""

from __future__ import annotations

from gemm_ladder.audit.protocol import Protocol
from gemm_ladder.audit.ring import RingConfig, build_ring_protocol

__all__ = ["LEVELS", "L9_PANELS_PER_TILE", "L9_STAGING_BUFFERS", "protocol_for_level"]

LEVELS = (4, 5, 6, 7, 8, 9)

#: Level 9's epilogue: R staging buffers per consumer warpgroup, P column panels (bulk groups) per tile.
L9_STAGING_BUFFERS = 2
L9_PANELS_PER_TILE = 4


def protocol_for_level(n: int, k_iters: int = 3, tiles: int = 2, *, stages: int | None = None,
                       cluster: int | None = None, consumers: int | None = None, **overrides) -> Protocol:
    """The protocol of ladder level ``n`` (4..9) unrolled for ``k_iters`` K iterations and ``tiles``.

    ``stages`` defaults to 1 at level 4 (its only value) and 2 elsewhere (small, so a default audit is
    quick; level 9's kernel runs 4); ``cluster`` to 2 at level 8 and 1 at level 9 (2 is its clustered
    variant); ``consumers`` to 2 at level 9, whose epilogue is the shipped panel-wise one
    (``staging_buffers`` = 2, ``panels_per_tile`` = 4, ``deferred_panels`` = 2). ``overrides`` go to
    :class:`~gemm_ladder.audit.ring.RingConfig` (fault switches, counts, phases, the epilogue's shape).
    """
    if n not in LEVELS:
        raise ValueError(f"levels with a stage-ring protocol are {LEVELS[0]}..{LEVELS[-1]}, not {n}")
    if n == 4:
        if stages not in (None, 1):
            raise ValueError("level 4 has a single stage (PIPE_DEPTH 1)")
        kw = dict(stages=1, tiles=1, release_weight=128, warp_specialized=False)
    else:
        kw = dict(stages=2 if stages is None else stages)
        # As the kernels do: release stage k after issuing the wgmma of k + 1 (wgmma.wait_group 1).
        # With one stage that would deadlock (audit release_lag=1, stages=1 to see it), so the kernels
        # of levels 5-9 refuse STAGES < 2 at compile time; a one-stage audit here models the
        # release-after-read form (the designer's release_mode "current"), to keep fault searches small.
        kw["release_lag"] = 1 if kw["stages"] >= 2 else 0
        if n == 5:
            kw.update(tiles=1, warp_specialized=False)
        elif n == 6:
            kw.update(tiles=tiles, warp_specialized=False)
        elif n == 7:
            kw.update(tiles=tiles, warp_specialized=True)
        elif n == 8:
            kw.update(tiles=tiles, warp_specialized=True, cluster=2 if cluster is None else cluster)
        else:
            kw.update(tiles=tiles, warp_specialized=True, cluster=1 if cluster is None else cluster,
                      consumers=2 if consumers is None else consumers, bn=256,
                      staging_buffers=L9_STAGING_BUFFERS, panels_per_tile=L9_PANELS_PER_TILE,
                      deferred_panels=L9_PANELS_PER_TILE - L9_STAGING_BUFFERS)
    if n != 9 and consumers not in (None, 1) and n >= 7:
        kw["consumers"] = consumers
    if n < 8 and cluster not in (None, 1):
        raise ValueError(f"level {n} runs one CTA per cluster")
    kw.update(overrides)
    name = f"level{n}" + "".join(f"-{k}{v}" for k, v in (("S", kw["stages"]), ("K", k_iters),
                                                          ("T", kw["tiles"])))
    notes = []
    if n in (4, 5) and tiles != 1:
        notes.append(f"level {n} is not persistent: one tile per CTA, tiles={tiles} recorded as 1")
    p = build_ring_protocol(RingConfig(k_iters=k_iters, **kw), name=name, bounds={"level": n})
    p.notes.extend(notes)
    return p
