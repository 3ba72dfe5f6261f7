"""Stage-ring protocols of ladder levels 4..9, built by one parametric builder, and from a designer plan.

:func:`build_ring_protocol` unrolls the programs of one cluster for a bounded number of K iterations
and tiles per CTA. Each keyword that a kernel author can get wrong (arrival counts, initial phases,
whether the phase is carried across tiles, whether staging is drained before reuse, whether a
consumer arrives on the peer CTA's empty barrier) is a parameter, so a fault is seeded by changing one
argument and the audit shows what goes wrong.

The shape of a level (``protocol_for_level``):

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

import math

from gemm_ladder.design.protocol import Barrier, Buffer, Op, Protocol, Role

__all__ = ["build_ring_protocol", "protocol_for_level", "protocol_from_plan", "LEVELS", "PlanFormatError",
           "L9_STAGING_BUFFERS", "L9_PANELS_PER_TILE"]

LEVELS = (4, 5, 6, 7, 8, 9)

#: Level 9's epilogue: R staging buffers per consumer warpgroup, P column panels (bulk groups) per tile.
L9_STAGING_BUFFERS = 2
L9_PANELS_PER_TILE = 4

#: bf16 operand tiles of the ladder's default shape: BM=128, BN=128 (256 at level 9), BK=64.
_ELEM = 2


class PlanFormatError(ValueError):
    """A plan JSON lacks what the auditor needs; the message lists the missing keys."""


def build_ring_protocol(*, name: str = "ring", stages: int, k_iters: int, tiles: int = 1, consumers: int = 1,
                        cluster: int = 1, warp_specialized: bool = False, multicast: bool | None = None,
                        full_count: int = 1, empty_count: int | None = None,
                        full_initial_phase: int = 0, empty_initial_phase: int = 1,
                        release_weight: int = 1, consumer_threads: int = 128,
                        carry_phase: bool = True, full_wait: bool = True, empty_wait: bool = True,
                        remote_release: bool = True, drain_staging_before_reuse: bool = True,
                        final_store_wait: bool = True, staging_buffers: int = 1, panels_per_tile: int = 1,
                        deferred_panels: int = 0, staging_wait_pending: int | None = None,
                        shared_staging: bool = False, release_lag: int = 0,
                        bm: int = 128, bn: int = 128, bk: int = 64,
                        elem_bytes: int = _ELEM, bounds: dict | None = None) -> Protocol:
    """Unroll a stage-ring protocol for ``tiles`` tiles of ``k_iters`` K iterations per CTA.

    Args:
        stages: ring depth S (>= 1).
        k_iters, tiles: the bound: loads per tile and tiles per CTA (phases carried across tiles).
        consumers: consumer warpgroups per CTA (cooperative: all read every stage).
        cluster: CTAs per cluster; with ``multicast`` (default: cluster > 1) B is split in ``cluster``
            parts, each loaded by one CTA and multicast to all.
        warp_specialized: separate producer thread; otherwise one warpgroup whose thread 0 also issues
            (then ``consumers`` must be 1).
        full_count, empty_count: barrier init counts (empty default: consumers x cluster x
            release_weight with multicast, else consumers x release_weight).
        full_initial_phase, empty_initial_phase: parity of the first wait (0 and 1 in a right design).
        release_weight: arrivals per consumer release (1: one elected thread; consumer_threads: every
            thread arrives, the ``__syncthreads`` form of level 4).
        staging_buffers: R, the output staging ring of each consumer warpgroup (its own buffers
            ``D{i}.0 .. D{i}.R-1``, or ``D`` / ``D{i}`` when R = 1), each (bm / consumers) rows x
            (bn / panels_per_tile) columns.
        panels_per_tile: P, the column panels a consumer stores a tile as, one TMA store and one bulk
            group (``commit_group``) each; panel p of tile t is the consumer's running panel
            q = t * P + p and goes through staging buffer q % R.
        deferred_panels: D, the last panels of each tile that wait in registers and are stored in the
            next tile's first D K iterations, one each right after that iteration's wgmma is issued
            (before its release); those its K iterations do not reach go after its main loop, and
            the CTA's last tile stores them at once (level 9: D = P - R). 0: all at the tile's end.
        staging_wait_pending: the ``wait_group.read`` count before a staging buffer is written again
            (default R - 1: at most R - 1 newer groups may still read, so the group that last read
            buffer q % R, panel q - R, has finished). The wait is issued before every panel but the
            role's first (there no group is in flight and the kernel's wait is a no-op).

        release_lag: 0, a consumer releases stage k right after reading it (level 4: its
            ``__syncthreads``, ``wgmma.wait_group 0``); 1, as levels 5-9 do: ``wgmma.wait_group 1``
            after issuing the wgmma of k + 1 proves the one of k done, so stage k is released then,
            and a tile's last stage after its ``wait_group 0``. The issuing thread of levels 5-6
            refills each stage right after releasing it.

    Each consumer stores panel q (in order of q) as: ``wait_group.read pending`` (q > 0), write
    staging q % R, TMA store + ``commit_group`` (the store issuer is thread 0 of the warpgroup; the
    named barriers that order its wait, the 128 threads' ``st.shared`` and its store are inside one
    role, see the auditor's limits); panels 0..P-D-1 of a tile after its main loop, panels P-D..P-1
    as ``deferred_panels`` says; after the last tile ``wait_group.read 0``.

    Fault switches (True/right by default): ``carry_phase`` (False: stage and phase counters restart at
    each tile), ``full_wait`` / ``empty_wait`` (False: drop those waits), ``remote_release`` (False: a
    consumer arrives only on its own CTA's empty barrier), ``drain_staging_before_reuse`` (False: no
    wait_group before writing staging again), ``final_store_wait``, ``staging_wait_pending`` (R: one
    group too many left reading), ``shared_staging`` (True: the consumers of a CTA share one staging
    ring, ``D.0 .. D.R-1``, each with its own store issuer and bulk groups and no synchronisation
    between them).
    """
    if min(stages, k_iters, tiles, consumers, cluster, staging_buffers, panels_per_tile) < 1:
        raise ValueError("stages, k_iters, tiles, consumers, cluster, staging_buffers and panels_per_tile "
                         "must all be >= 1")
    if not 0 <= deferred_panels <= panels_per_tile:
        raise ValueError(f"deferred_panels must be 0..panels_per_tile ({panels_per_tile}), not {deferred_panels}")
    if release_lag not in (0, 1):
        raise ValueError(f"release_lag is 0 (release after the read) or 1 (after the next wgmma), not {release_lag}")
    if staging_wait_pending is None:
        staging_wait_pending = staging_buffers - 1
    if not warp_specialized and consumers != 1:
        raise ValueError("without warp specialization the issuing thread sits in the one consumer warpgroup: "
                         "consumers must be 1")
    if multicast is None:
        multicast = cluster > 1
    release_ctas = cluster if (multicast and remote_release) else 1
    if empty_count is None:
        empty_count = consumers * release_weight * (cluster if multicast else 1)
    a_bytes, b_bytes = bm * bk * elem_bytes, bn * bk * elem_bytes
    b_parts = cluster if multicast else 1
    b_names = tuple(f"B{j}" for j in range(b_parts)) if multicast else ("B",)
    total = tiles * k_iters

    barriers = [Barrier("full", full_count, full_initial_phase, stages),
                Barrier("empty", empty_count, empty_initial_phase, stages)]
    buffers = [Buffer("A", stages, a_bytes)] + [Buffer(n, stages, b_bytes // b_parts) for n in b_names]
    # staging[i][b]: buffer b of consumer i's ring (the same names for every consumer when shared).
    rings = 1 if (shared_staging or consumers == 1) else consumers
    prefixes = ["D"] if rings == 1 else [f"D{i}" for i in range(rings)]
    ring_names = [[n] if staging_buffers == 1 else [f"{n}.{b}" for b in range(staging_buffers)] for n in prefixes]
    staging = [ring_names[i % rings] for i in range(consumers)]
    panel_bytes = (bm // consumers) * (bn // panels_per_tile) * elem_bytes
    buffers += [Buffer(n, 1, panel_bytes, kind="staging") for ring in ring_names for n in ring]

    # The ring schedule: the counter a kernel keeps (maybe reset per tile: the fault) gives stage and
    # parity; the true number of earlier uses of that stage gives the phase the wait must see.
    sched = []
    uses = [0] * stages
    for g in range(total):
        i = g if carry_phase else g % k_iters
        s, r = i % stages, i // stages
        sched.append((s, r, uses[s]))
        uses[s] += 1

    def produce(c: int, g: int) -> list[Op]:
        s, r, true_r = sched[g]
        ops = []
        if empty_wait:
            ops.append(Op("wait", "empty", s, parity=(r + empty_initial_phase) % 2, phase=true_r - 1,
                          note=f"producer_acquire k#{g}"))
        ops.append(Op("expect_tx", "full", s, bytes=a_bytes + b_bytes))
        ops.append(Op("issue_load", "full", s, buffers=("A",), bytes=a_bytes, tag=g))
        if multicast:
            ops.append(Op("issue_load", "full", s, buffers=(b_names[c],), bytes=b_bytes // b_parts, tag=g,
                          dests=tuple(range(cluster))))
        else:
            ops.append(Op("issue_load", "full", s, buffers=("B",), bytes=b_bytes, tag=g))
        return ops

    def release(c: int, g: int) -> list[Op]:
        s = sched[g][0]
        return [Op("arrive", "empty", s, cta=None if (c + j) % cluster == c else (c + j) % cluster,
                   count=release_weight, note=f"consumer_release k#{g}") for j in range(release_ctas)]

    def consume(c: int, g: int) -> list[Op]:
        """Wait for stage k#g and read it; with release_lag 0 also release it, with 1 release k#g-1
        (not across a tile start: a tile's last stage is released at its end)."""
        s, r, true_r = sched[g]
        ops = []
        if full_wait:
            ops.append(Op("wait", "full", s, parity=(r + full_initial_phase) % 2, phase=true_r,
                          note=f"consumer_wait k#{g}"))
        ops.append(Op("consume", stage=s, buffers=("A",) + b_names, tag=g))
        if release_lag == 0:
            ops += release(c, g)
        elif g % k_iters > 0:
            ops += release(c, g - 1)
        return ops

    early = panels_per_tile - deferred_panels  # panels stored at the end of their own tile

    def panel(i: int, t: int, p: int) -> list[Op]:
        """Consumer i stores panel p of tile t: wait_group.read, write staging q % R, store + commit."""
        q = t * panels_per_tile + p
        buf = staging[i][q % staging_buffers]
        tag_panel = None if panels_per_tile == 1 else p
        ops = []
        if q > 0 and drain_staging_before_reuse:
            whole = panels_per_tile == 1 and staging_buffers == 1
            why = ("drain the previous tile's store before reuse" if whole
                   else f"issuer, before reuse of {buf}; then named barrier")
            ops.append(Op("store_wait", pending=staging_wait_pending, note=why))
        ops.append(Op("write_staging", buffers=(buf,), tag=t, panel=tag_panel,
                      note="" if tag_panel is None else "st.shared; fence.proxy.async; named barrier"))
        ops.append(Op("store_commit", buffers=(buf,), tag=t, panel=tag_panel))
        return ops

    def iteration(c: int, i: int, g: int) -> list[Op]:
        """K iteration g of consumer i: its wait, wgmma and release, with a deferred panel of the
        previous tile stored right after the wgmma is issued when the schedule puts one there."""
        ops = consume(c, g)
        t, kt = divmod(g, k_iters)
        if t > 0 and kt < deferred_panels:
            at = next(j for j, op in enumerate(ops) if op.op == "consume") + 1
            ops[at:at] = panel(i, t - 1, early + kt)
        return ops

    def tile_end(i: int, t: int) -> list[Op]:
        """After tile t's main loop: the previous tile's deferred panels its K iterations did not
        take, this tile's early panels; after the last tile its deferred panels and the final drain."""
        ops = []
        if t > 0:
            for p in range(early + k_iters, panels_per_tile):
                ops += panel(i, t - 1, p)
        for p in range(early):
            ops += panel(i, t, p)
        if t == tiles - 1:
            for p in range(early, panels_per_tile):
                ops += panel(i, t, p)
            if final_store_wait:
                ops.append(Op("store_wait", pending=0, note="drain before exit"))
        return ops

    roles: list[Role] = []
    for c in range(cluster):
        if warp_specialized:
            prog = [op for g in range(total) for op in produce(c, g)]
            roles.append(Role(f"cta{c}.producer", "producer", c, 1, prog))
            for i in range(consumers):
                prog = []
                for g in range(total):
                    prog += iteration(c, i, g)
                    if g % k_iters == k_iters - 1:
                        if release_lag:
                            prog += release(c, g)  # after wgmma.wait_group 0
                        prog += tile_end(i, g // k_iters)
                cname = f"cta{c}.consumer" if consumers == 1 else f"cta{c}.consumer{i}"
                roles.append(Role(cname, "consumer", c, consumer_threads, prog))
        else:
            prog = []
            for g in range(min(stages, total)):
                prog += produce(c, g)
            for g in range(total):
                prog += iteration(c, 0, g)
                freed = g - release_lag if (release_lag == 0 or g % k_iters > 0) else None
                if freed is not None and freed + stages < total:
                    prog += produce(c, freed + stages)  # refill the stage just released
                if g % k_iters == k_iters - 1:
                    if release_lag:
                        prog += release(c, g)  # after wgmma.wait_group 0
                        if g + stages < total:
                            prog += produce(c, g + stages)
                    prog += tile_end(0, g // k_iters)
            roles.append(Role(f"cta{c}.wg", "issuer_consumer", c, consumer_threads, prog))

    b = {"stages": stages, "k_iters": k_iters, "tiles_per_cta": tiles, "consumers": consumers,
         "cluster": cluster, "warp_specialized": warp_specialized, "multicast": multicast}
    if staging_buffers > 1 or panels_per_tile > 1:
        b.update(staging_buffers=staging_buffers, panels_per_tile=panels_per_tile, deferred_panels=deferred_panels)
    if bounds:
        b.update(bounds)
    return Protocol(name=name, ctas=cluster, roles=roles, barriers=barriers, buffers=buffers, bounds=b)


def protocol_for_level(n: int, k_iters: int = 3, tiles: int = 2, *, stages: int | None = None,
                       cluster: int | None = None, consumers: int | None = None, **overrides) -> Protocol:
    """The protocol of ladder level ``n`` (4..9) unrolled for ``k_iters`` K iterations and ``tiles``.

    ``stages`` defaults to 1 at level 4 (its only value) and 2 elsewhere (small, so a default audit is
    quick; level 9's kernel runs 4); ``cluster`` to 2 at level 8 and 1 at level 9 (2 is its clustered
    variant); ``consumers`` to 2 at level 9, whose epilogue is the shipped panel-wise one
    (``staging_buffers`` = 2, ``panels_per_tile`` = 4, ``deferred_panels`` = 2). ``overrides`` go to
    :func:`build_ring_protocol` (fault switches, counts, phases, the epilogue's shape).
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
    p = build_ring_protocol(name=name, k_iters=k_iters, bounds={"level": n}, **kw)
    p.notes.extend(notes)
    return p


# ----------------------------------------------------------------------------------------------------
# designer plans


def _get(d: dict, *paths, default=None):
    """First value found along any of the dotted ``paths`` (None-safe); ``default`` if none."""
    for path in paths:
        cur = d
        ok = True
        for key in path.split("."):
            if isinstance(cur, dict) and key in cur:
                cur = cur[key]
            else:
                ok = False
                break
        if ok and cur is not None:
            return cur
    return default


def _as_int(v, what: str) -> int:
    if isinstance(v, dict):
        for key in ("size", "count", "warpgroups", "ctas", "value"):
            if key in v:
                return int(v[key])
        raise PlanFormatError(f"cannot read {what} from {v!r}")
    if isinstance(v, (list, tuple)):
        return int(math.prod(int(x) for x in v))
    return int(v)


def protocol_from_plan(plan: dict, *, max_k_iters: int = 4, max_tiles: int = 2) -> Protocol:
    """The protocol a designer plan (``Plan.to_json()``) describes, unrolled within small bounds.

    Reads, tolerantly (several spellings are accepted): the ring depth (``ring.stages`` /
    ``ring.pipe_depth``), the full and empty barriers' arrival counts and first wait parities
    (``ring.full_barriers.{arrival_count,initial_phase}`` or ``ring.full_init_count`` /
    ``ring.first_full_wait_parity``, likewise for empty), ``consumers`` (a number or
    ``{"warpgroups": n, "producer_warpgroup": bool}``), ``cluster`` (a number, ``{"size": n}`` or a
    shape), ``tile`` and ``problem`` (``{"m","n","k"}``): K iterations = ceil(k / bk) capped at
    ``max_k_iters``, tiles per CTA capped at ``max_tiles`` (when the plan says it is persistent).
    A plan that already holds a protocol (``"roles"`` or ``"protocol"`` key) is read as one.

    Raises:
        PlanFormatError: listing every missing key.
    """
    if "roles" in plan:
        return Protocol.from_json(plan)
    if isinstance(plan.get("protocol"), dict):
        return Protocol.from_json(plan["protocol"])
    missing = []
    stages = _get(plan, "ring.stages", "ring.pipe_depth", "stages", "pipe_depth")
    if stages is None:
        missing.append("ring.stages (or ring.pipe_depth)")
    full_count = _get(plan, "ring.full_barriers.arrival_count", "ring.full_init_count",
                      "load_protocol.full_arrival_count")
    if full_count is None:
        missing.append("ring.full_barriers.arrival_count")
    empty_count = _get(plan, "ring.empty_barriers.arrival_count", "ring.empty_init_count",
                       "load_protocol.empty_arrival_count")
    if empty_count is None:
        missing.append("ring.empty_barriers.arrival_count")
    full_phase = _get(plan, "ring.full_barriers.initial_phase", "ring.first_full_wait_parity", default=0)
    empty_phase = _get(plan, "ring.empty_barriers.initial_phase", "ring.first_empty_wait_parity")
    if empty_phase is None:
        missing.append("ring.empty_barriers.initial_phase (the producer's first empty-wait parity)")
    consumers_v = _get(plan, "consumers")
    if consumers_v is None:
        missing.append("consumers")
    k = _get(plan, "problem.k", "problem.K", "k")
    if k is None:
        missing.append("problem.k")
    bk = _get(plan, "tile.bk", "tile.BK", "tile.2")
    if bk is None and isinstance(plan.get("tile"), (list, tuple)) and len(plan["tile"]) == 3:
        bk = plan["tile"][2]
    if bk is None:
        missing.append("tile.bk")
    if missing:
        raise PlanFormatError("the plan lacks what the auditor needs: " + "; ".join(missing))

    cluster = _as_int(_get(plan, "cluster", default=1), "cluster")
    consumers = _as_int(consumers_v, "consumers")
    ws = _get(plan, "consumers.producer_warpgroup", "warp_specialized", "ring.warp_specialized")
    if ws is None:
        ws = consumers > 1 or cluster > 1
    tile = plan.get("tile") or {}
    bm = int(_get(tile, "bm", "BM", default=128)) if isinstance(tile, dict) else int(tile[0])
    bn = int(_get(tile, "bn", "BN", default=128)) if isinstance(tile, dict) else int(tile[1])
    k_iters_full = max(1, math.ceil(int(k) / int(bk)))
    k_iters = min(k_iters_full, max_k_iters)
    persistent = bool(_get(plan, "persistent", "schedule.persistent", default=False))
    tiles = max_tiles if persistent else 1
    p = build_ring_protocol(
        name=str(_get(plan, "name", default="plan")), stages=int(stages), k_iters=k_iters, tiles=tiles,
        consumers=consumers, cluster=cluster, warp_specialized=bool(ws), full_count=int(full_count),
        empty_count=int(empty_count), full_initial_phase=int(full_phase), empty_initial_phase=int(empty_phase),
        release_weight=int(_get(plan, "ring.release_weight", default=1)),
        bm=bm, bn=bn, bk=int(bk),
        bounds={"plan_k_iters": k_iters_full, "persistent": persistent})
    if k_iters < k_iters_full:
        p.notes.append(f"K iterations bounded to {k_iters} of the plan's {k_iters_full}")
    return p
