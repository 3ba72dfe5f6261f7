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
  refuse one stage at compile time (GL_RELEASES_PREVIOUS_STAGE() in tma_tile.cuh) and so does
  :func:`protocol_for_level`.
* **L6 persistent**: L5's ring carried across the tiles of a CTA (the iteration counter, hence stage
  and phase, continues), an epilogue per tile; before writing staging again the previous tile's store
  is drained (wait_group 0).
* **L7 warp-specialized**: a producer role (one thread) and a consumer warpgroup; the producer's first
  empty waits use parity 1; the consumer's elected thread releases and drains staging before reuse.
* **L8 2-CTA cluster**: two CTAs, each with producer and consumer; A per CTA, B split in halves: each
  CTA's producer loads its half and multicasts it into both CTAs (bytes complete on both full
  barriers); empty count 2: each consumer arrives on its own and on the peer CTA's empty[s].
* **L9 multi-consumer (cooperative)**: two consumer warpgroups read every stage of one 128x256 tile;
  empty count = consumers x cluster (the kernel ships a cluster of 2 with B multicast as in L8, and 4
  stages, which ``gemm-ladder audit --level 9`` audits; :func:`protocol_for_level`'s own defaults, for
  quick fault searches, are cluster 1 and 2 stages). Epilogue as the kernel ships it: each consumer
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

from dataclasses import dataclass

from gemm_ladder.audit.protocol import Protocol
from gemm_ladder.audit.ring import RingConfig, build_ring_protocol

__all__ = ["LEVELS", "L9_PANELS_PER_TILE", "L9_STAGING_BUFFERS", "LevelRefused", "protocol_for_level"]

LEVELS = (4, 5, 6, 7, 8, 9)

#: Level 9's epilogue: R staging buffers per consumer warpgroup, P column panels (bulk groups) per tile.
L9_STAGING_BUFFERS = 2
L9_PANELS_PER_TILE = 4


class LevelRefused(ValueError):
    """Level n's kernel is not built with this configuration; the message names the rule and where the
    kernel states it."""


@dataclass(frozen=True)
class _Kernel:
    """What level n's kernel fixes, as the auditor models it (its static_asserts quoted in ``why``)."""

    persistent: bool
    warp_specialized: bool
    min_stages: int = 2
    max_stages: int | None = None
    clusters: tuple[int, ...] | None = (1,)  # None: any that splits B into equal multicast slices
    c_ring: bool = False  # level 9's per-consumer panel ring (static_assert GL_C_RING >= 1)


_KERNELS = {
    4: _Kernel(persistent=False, warp_specialized=False, min_stages=1, max_stages=1),
    5: _Kernel(persistent=False, warp_specialized=False),
    6: _Kernel(persistent=True, warp_specialized=False),
    7: _Kernel(persistent=True, warp_specialized=True),
    8: _Kernel(persistent=True, warp_specialized=True, clusters=(2,)),
    9: _Kernel(persistent=True, warp_specialized=True, clusters=None, c_ring=True),
}

_TWO_STAGES = ("its kernel releases stage k only after issuing the wgmma of k + 1 (wgmma.wait_group 1), which "
               "needs a second stage, and refuses one at compile time (GL_RELEASES_PREVIOUS_STAGE() in "
               "kernels/include/gemm_ladder/tma_tile.cuh)")


def protocol_for_level(n: int, k_iters: int = 3, tiles: int = 2, *, stages: int | None = None,
                       cluster: int | None = None, consumers: int | None = None, c_ring: int | None = None,
                       persistent: bool | None = None, producer_warpgroup: bool | None = None,
                       tile: tuple[int, int, int] | None = None, **overrides) -> Protocol:
    """The protocol of ladder level ``n`` (4..9) unrolled for ``k_iters`` K iterations and ``tiles``.

    The configuration is what the level's kernel is built with: ``gemm-ladder audit --level N`` passes
    the registry's (``gemm_ladder.levels.LEVELS[N]``: stages, cluster, consumers, c_ring, persistent,
    producer_warpgroup, tile). Left out here, they default to small values so that a fault search is
    quick: ``stages`` 1 at level 4 (its only value) and 2 elsewhere (level 9's kernel runs 4);
    ``cluster`` 2 at level 8 and 1 at level 9 (its kernel runs 2); ``consumers`` 2 at level 9 (BM / 64),
    1 elsewhere; ``c_ring`` :data:`L9_STAGING_BUFFERS` at level 9, whose epilogue is the shipped
    panel-wise one (``panels_per_tile`` = BN x 2 / 128 = 4, ``deferred_panels`` = P - R = 2); the
    tile 128 x 256 x 64 at level 9, 128 x 128 x 64 elsewhere. ``overrides`` go to
    :class:`~gemm_ladder.audit.ring.RingConfig` (fault switches, counts, phases, the epilogue's shape).

    Raises:
        LevelRefused: a configuration the level's kernel refuses, naming the rule: level 4 has one
            stage, levels 5-9 need two or more (``release_lag=0`` in ``overrides`` audits the
            release-after-read variant with one stage, which no level ships); one CTA per cluster
            below level 8, two at level 8, at level 9 a cluster that splits B into equal multicast
            slices; one consumer warpgroup below level 9, BM / 64 at level 9; the persistence, warp
            specialization and output staging (c_ring) of the level.
        ValueError: ``n`` is not 4..9, or a configuration :class:`RingConfig` refuses.
    """
    if n not in LEVELS:
        raise ValueError(f"levels with a stage-ring protocol are {LEVELS[0]}..{LEVELS[-1]}, not {n}")
    kern = _KERNELS[n]
    bm, bn, bk = tile or ((128, 256, 64) if n == 9 else (128, 128, 64))
    stages = (1 if n == 4 else 2) if stages is None else stages
    cluster = (2 if n == 8 else 1) if cluster is None else cluster
    consumers = (bm // 64 if n == 9 else 1) if consumers is None else consumers
    c_ring = (L9_STAGING_BUFFERS if kern.c_ring else 0) if c_ring is None else c_ring
    variant = overrides.get("release_lag") == 0 and n >= 5  # the release-after-read form, not the kernel's
    if n == 4 and stages != 1:
        raise LevelRefused(f"level 4 has a single stage (PIPE_DEPTH 1), not {stages}: its one warpgroup frees it "
                           "with __syncthreads before the next load; level 5 adds the ring")
    if n >= 5 and stages < 2 and not variant:
        raise LevelRefused(f"level {n} needs 2 or more stages, not {stages}: {_TWO_STAGES}")
    if kern.clusters is not None and cluster not in kern.clusters:
        raise LevelRefused(f"level {n} runs a cluster of {kern.clusters[0]} CTA(s), not {cluster}"
                           + (": static_assert GL_CLUSTER == 2 in levels/level8_cluster_multicast.cu" if n == 8 else
                              "; level 8 adds the 2-CTA cluster"))
    want_consumers = bm // 64 if n == 9 else 1
    if consumers != want_consumers:
        raise LevelRefused(f"level {n} has {want_consumers} consumer warpgroup(s), not {consumers}: "
                           + ("static_assert BM == 64 * GL_CONSUMERS in levels/level9_multi_consumer.cu" if n == 9 else
                              "static_assert GL_CONSUMERS == 1 in its kernel" if n in (7, 8) else
                              "one warpgroup both issues the loads and consumes them"))
    panels = bn * 2 // 128  # 128-byte column panels of 2-byte elements
    if kern.c_ring and (c_ring < 1 or panels % c_ring):
        raise LevelRefused(f"level 9 stores through a ring of panel buffers per consumer warpgroup whose size divides "
                           f"its {panels} panels, not c_ring = {c_ring}: static_assert GL_C_RING >= 1 && "
                           "GL_C_PANELS % GL_C_RING == 0 in levels/level9_multi_consumer.cu")
    if not kern.c_ring and c_ring:
        raise LevelRefused(f"level {n} stages the whole output tile at once (c_ring 0), not a ring of {c_ring}; "
                           "level 9 adds the panel ring")
    for what, given, fixed, says in (("persistent", persistent, kern.persistent, ("is persistent", "is not persistent")),
                                     ("producer_warpgroup", producer_warpgroup, kern.warp_specialized,
                                      ("has a producer warpgroup", "has no producer warpgroup"))):
        if given is not None and given != fixed:
            raise LevelRefused(f"level {n}'s kernel {says[0] if fixed else says[1]} ({what}={fixed}), "
                               f"not {what}={given}")
    kw = dict(stages=stages, tiles=tiles if kern.persistent else 1, cluster=cluster, consumers=consumers,
              warp_specialized=kern.warp_specialized, bm=bm, bn=bn, bk=bk)
    if n == 4:
        kw.update(release_weight=128)  # every thread arrives: the __syncthreads that protects the one stage
    else:
        kw.update(release_lag=1)  # as the kernels do: release stage k after issuing the wgmma of k + 1
    if kern.c_ring:
        kw.update(staging_buffers=c_ring, panels_per_tile=panels, deferred_panels=panels - min(c_ring, panels))
    kw.update(overrides)
    name = f"level{n}" + "".join(f"-{k}{v}" for k, v in (("S", kw["stages"]), ("K", k_iters),
                                                          ("T", kw["tiles"])))
    notes = []
    if not kern.persistent and tiles != 1:
        notes.append(f"level {n} is not persistent: one tile per CTA, tiles={tiles} recorded as 1")
    if variant:
        notes.append(f"release_lag=0: stage k released right after its read, a variant of level {n} that no kernel "
                     "ships")
    if overrides.get("release_lag") == 2:
        notes.append(f"release_lag=2: stage k released after the wgmma of k + 2, the library kernel's measuring build "
                     f"(library_gemm(..., release_lag=2), cluster_ring.cuh's GL_RELEASE_LAG); level {n} ships lag 1")
    try:
        config = RingConfig(k_iters=k_iters, **kw)
    except ValueError as exc:
        raise LevelRefused(f"level {n}: {exc}") from None
    p = build_ring_protocol(config, name=name, bounds={"level": n})
    p.notes.extend(notes)
    return p
