"""The stage-ring protocol a designer plan describes (``gemm-ladder design --format json``)."""

from __future__ import annotations

import math

from gemm_ladder.audit.protocol import Protocol
from gemm_ladder.audit.ring import RingConfig, build_ring_protocol

__all__ = ["PlanFormatError", "protocol_from_plan"]


class PlanFormatError(ValueError):
    """A plan JSON lacks what the auditor needs; the message lists the missing keys."""


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
    config = RingConfig(
        stages=int(stages), k_iters=k_iters, tiles=tiles,
        consumers=consumers, cluster=cluster, warp_specialized=bool(ws), full_count=int(full_count),
        empty_count=int(empty_count), full_initial_phase=int(full_phase), empty_initial_phase=int(empty_phase),
        release_weight=int(_get(plan, "ring.release_weight", default=1)),
        bm=bm, bn=bn, bk=int(bk))
    p = build_ring_protocol(config, name=str(_get(plan, "name", default="plan")),
                            bounds={"plan_k_iters": k_iters_full, "persistent": persistent})
    if k_iters < k_iters_full:
        p.notes.append(f"K iterations bounded to {k_iters} of the plan's {k_iters_full}")
    return p
