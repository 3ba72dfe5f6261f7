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
  waits full[k%S] parity (k/S)%2, computes, releases empty[k%S], and the same thread waits empty[s]
  parity ((k/S)%2)^1 before issuing load k+S into it. One tile per CTA.
* **L6 persistent**: L5's ring carried across the tiles of a CTA (the iteration counter, hence stage
  and phase, continues), an epilogue per tile; before writing staging again the previous tile's store
  is drained (wait_group 0).
* **L7 warp-specialized**: a producer role (one thread) and a consumer warpgroup; the producer's first
  empty waits use parity 1; the consumer's elected thread releases and drains staging before reuse.
* **L8 2-CTA cluster**: two CTAs, each with producer and consumer; A per CTA, B split in halves: each
  CTA's producer loads its half and multicasts it into both CTAs (bytes complete on both full
  barriers); empty count 2: each consumer arrives on its own and on the peer CTA's empty[s].
* **L9 multi-consumer (cooperative)**: two consumer warpgroups read every stage of one tile; empty
  count = consumers x cluster (cluster 1 by default, 2 as a variant); each warpgroup stages and
  stores its half of the output.

Levels 4 and 5 are not persistent: a CTA computes one tile with freshly initialised barriers, so their
``tiles`` argument is recorded as 1.
"""

from __future__ import annotations

import math

from gemm_ladder.design.protocol import Barrier, Buffer, Op, Protocol, Role

__all__ = ["build_ring_protocol", "protocol_for_level", "protocol_from_plan", "LEVELS", "PlanFormatError"]

LEVELS = (4, 5, 6, 7, 8, 9)

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
                        final_store_wait: bool = True, bm: int = 128, bn: int = 128, bk: int = 64,
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

    Fault switches (True/right by default): ``carry_phase`` (False: stage and phase counters restart at
    each tile), ``full_wait`` / ``empty_wait`` (False: drop those waits), ``remote_release`` (False: a
    consumer arrives only on its own CTA's empty barrier), ``drain_staging_before_reuse`` (False: no
    wait_group before writing staging again), ``final_store_wait``.
    """
    if stages < 1 or k_iters < 1 or tiles < 1 or consumers < 1 or cluster < 1:
        raise ValueError("stages, k_iters, tiles, consumers and cluster must all be >= 1")
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
    staging = ["D"] if consumers == 1 else [f"D{i}" for i in range(consumers)]
    buffers += [Buffer(n, 1, bm * bn * elem_bytes // consumers, kind="staging") for n in staging]

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

    def consume(c: int, g: int) -> list[Op]:
        s, r, true_r = sched[g]
        ops = []
        if full_wait:
            ops.append(Op("wait", "full", s, parity=(r + full_initial_phase) % 2, phase=true_r,
                          note=f"consumer_wait k#{g}"))
        ops.append(Op("consume", stage=s, buffers=("A",) + b_names, tag=g))
        for j in range(release_ctas):
            target = (c + j) % cluster
            ops.append(Op("arrive", "empty", s, cta=None if target == c else target, count=release_weight,
                          note="consumer_release"))
        return ops

    def epilogue(i: int, t: int) -> list[Op]:
        ops = []
        if t > 0 and drain_staging_before_reuse:
            ops.append(Op("store_wait", pending=0, note="drain the previous tile's store before reuse"))
        ops.append(Op("write_staging", buffers=(staging[i],), tag=t))
        ops.append(Op("store_commit", buffers=(staging[i],), tag=t))
        if t == tiles - 1 and final_store_wait:
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
                    prog += consume(c, g)
                    if g % k_iters == k_iters - 1:
                        prog += epilogue(i, g // k_iters)
                cname = f"cta{c}.consumer" if consumers == 1 else f"cta{c}.consumer{i}"
                roles.append(Role(cname, "consumer", c, consumer_threads, prog))
        else:
            prog = []
            for g in range(min(stages, total)):
                prog += produce(c, g)
            for g in range(total):
                prog += consume(c, g)
                if g + stages < total:
                    prog += produce(c, g + stages)
                if g % k_iters == k_iters - 1:
                    prog += epilogue(0, g // k_iters)
            roles.append(Role(f"cta{c}.wg", "issuer_consumer", c, consumer_threads, prog))

    b = {"stages": stages, "k_iters": k_iters, "tiles_per_cta": tiles, "consumers": consumers,
         "cluster": cluster, "warp_specialized": warp_specialized, "multicast": multicast}
    if bounds:
        b.update(bounds)
    return Protocol(name=name, ctas=cluster, roles=roles, barriers=barriers, buffers=buffers, bounds=b)


def protocol_for_level(n: int, k_iters: int = 3, tiles: int = 2, *, stages: int | None = None,
                       cluster: int | None = None, consumers: int | None = None, **overrides) -> Protocol:
    """The protocol of ladder level ``n`` (4..9) unrolled for ``k_iters`` K iterations and ``tiles``.

    ``stages`` defaults to 1 at level 4 (its only value) and 2 elsewhere (small, so a default audit is quick); ``cluster`` to 2 at level 8
    and 1 at level 9 (2 is its clustered variant); ``consumers`` to 2 at level 9. ``overrides`` go to
    :func:`build_ring_protocol` (fault switches, counts, phases).
    """
    if n not in LEVELS:
        raise ValueError(f"levels with a stage-ring protocol are {LEVELS[0]}..{LEVELS[-1]}, not {n}")
    if n == 4:
        if stages not in (None, 1):
            raise ValueError("level 4 has a single stage (PIPE_DEPTH 1)")
        kw = dict(stages=1, tiles=1, release_weight=128, warp_specialized=False)
    else:
        kw = dict(stages=2 if stages is None else stages)
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
                      consumers=2 if consumers is None else consumers, bn=256)
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
