"""The stage-ring protocol a designer plan describes (``gemm-ladder design --format json``).

The auditor reads exactly what :meth:`gemm_ladder.design.plan.Plan.to_json` writes, one spelling
(schema ``gemm-ladder/design/1``), as JSON data: it imports nothing from the designer.

* ``problem``: ``k``, ``tile`` ([BM, BN, BK]), ``cluster``, ``consumers``, ``persistent``,
  ``producer_warpgroup``, ``c_ring``, ``c_aliases_stages``, ``arch`` (and ``m``, ``n`` for the name);
* ``ring``: ``pipe_depth``, ``full_init_count``, ``empty_init_count``, ``first_full_wait_parity``,
  ``first_empty_wait_parity``, ``release_mode`` (``previous``: stage k is released after the wgmma of
  k + 1 is issued; ``current``: right after its own);
* ``smem.c_panels`` (the column panels of a tile, stored one bulk group each with ``c_ring``);
* ``load_protocol.a_box_bytes`` (BM x BK x the element size: the bytes of each load);
* ``schedule.k_tiles`` and ``schedule.stream_k``.
"""

from __future__ import annotations

from gemm_ladder.audit.protocol import PROTOCOL_FORMAT, Protocol
from gemm_ladder.audit.ring import RingConfig, build_ring_protocol

__all__ = ["PLAN_SCHEMA", "PlanFormatError", "protocol_from_json", "protocol_from_plan"]

#: The ``schema`` of a designer plan's JSON (``Plan.to_json``).
PLAN_SCHEMA = "gemm-ladder/design/1"

_RELEASE_LAG = {"previous": 1, "current": 0}


class PlanFormatError(ValueError):
    """A JSON document the auditor cannot read as a plan or a protocol; the message says what is wrong
    (every missing or mistyped key of a plan at once)."""


def protocol_from_json(data: object, *, max_k_iters: int = 4, max_tiles: int = 2) -> Protocol:
    """A designer plan (``schema`` ``gemm-ladder/design/1``) or a protocol JSON (``roles``, ``barriers``,
    ``buffers``; ``format`` ``gemm-ladder-protocol/1`` when written by :meth:`Protocol.dumps`).

    Raises:
        PlanFormatError: ``data`` is neither (a JSON array, a number, another schema, ...), or a plan
            the auditor cannot read (see :func:`protocol_from_plan`).
        ProtocolError: a protocol JSON that is malformed.
    """
    if isinstance(data, dict) and data.get("schema") == PLAN_SCHEMA:
        return protocol_from_plan(data, max_k_iters=max_k_iters, max_tiles=max_tiles)
    if isinstance(data, dict) and ("roles" in data or data.get("format") == PROTOCOL_FORMAT):
        return Protocol.from_json(data)
    what = f"a JSON object with schema {data.get('schema')!r}" if isinstance(data, dict) and "schema" in data else \
        f"a JSON {_json_type(data)}" if not isinstance(data, dict) else "a JSON object with neither"
    raise PlanFormatError(f"{what}: the auditor reads a designer plan (schema {PLAN_SCHEMA!r}, from "
                          f"`gemm-ladder design --format json`) or a protocol (roles, barriers, buffers)")


def protocol_from_plan(plan: dict, *, max_k_iters: int = 4, max_tiles: int = 2) -> Protocol:
    """The protocol a designer plan (``Plan.to_json()``) describes, unrolled within small bounds.

    K iterations: the plan's ``schedule.k_tiles`` capped at ``max_k_iters``; tiles per CTA:
    ``max_tiles`` when the plan is persistent, else 1. The epilogue is the plan's: the whole tile
    staged at once (``c_ring`` 0; with several consumer warpgroups each one's rows are a buffer it
    writes, stores and drains, the single store issuer and named barrier of the kernel acting for
    all), or per consumer warpgroup a ring of ``c_ring`` panel buffers storing ``smem.c_panels``
    panels per tile, the first ``min(c_ring, panels)`` at the tile's end and the rest during the next
    tile's first K iterations (level 9's schedule).

    Raises:
        PlanFormatError: not a plan of schema ``gemm-ladder/design/1``; every missing or mistyped key
            (listed together); byte counts that disagree with the tile; a plan for another MMA than
            sm_90a's wgmma (the ring the auditor models); a ring no :class:`RingConfig` can hold.
    """
    if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA:
        got = plan.get("schema") if isinstance(plan, dict) else _json_type(plan)
        raise PlanFormatError(f"not a designer plan (schema {got!r}); expected schema {PLAN_SCHEMA!r} "
                              "from `gemm-ladder design --format json`")
    r = _Reader(plan)
    m, n, k = r.integer("problem.m", 1), r.integer("problem.n", 1), r.integer("problem.k", 1)
    arch = r.text("problem.arch")
    tile = r.integers("problem.tile", 3)
    cluster, consumers = r.integer("problem.cluster", 1), r.integer("problem.consumers", 1)
    persistent, producer = r.flag("problem.persistent"), r.flag("problem.producer_warpgroup")
    c_ring, aliased = r.integer("problem.c_ring", 0), r.flag("problem.c_aliases_stages")
    stages = r.integer("ring.pipe_depth", 1)
    full_count, empty_count = r.integer("ring.full_init_count", 1), r.integer("ring.empty_init_count", 1)
    full_parity = r.integer("ring.first_full_wait_parity", 0)
    empty_parity = r.integer("ring.first_empty_wait_parity", 0)
    release_mode = r.choice("ring.release_mode", tuple(_RELEASE_LAG))
    panels = r.integer("smem.c_panels", 1)
    a_box = r.integer("load_protocol.a_box_bytes", 1)
    k_tiles = r.integer("schedule.k_tiles", 1)
    tail = r.optional_object("schedule.stream_k")
    r.done()
    if arch != "sm_90a":
        raise PlanFormatError(f"a plan for {arch}: the auditor models the sm_90a ring the ladder's kernels run "
                              "(wgmma consumers that each release a stage); tcgen05.commit releases are not modelled")
    bm, bn, bk = tile
    if a_box % (bm * bk):
        raise PlanFormatError(f"load_protocol.a_box_bytes = {a_box} is not BM x BK = {bm} x {bk} elements of a whole "
                              "number of bytes")
    k_iters, tiles = min(k_tiles, max_k_iters), max_tiles if persistent else 1
    early = min(c_ring, panels)
    try:
        config = RingConfig(
            stages=stages, k_iters=k_iters, tiles=tiles, release_lag=_RELEASE_LAG[release_mode], consumers=consumers,
            cluster=cluster, warp_specialized=producer, full_count=full_count, empty_count=empty_count,
            full_initial_phase=full_parity, empty_initial_phase=empty_parity,
            staging_buffers=max(c_ring, 1), panels_per_tile=panels if c_ring else 1,
            deferred_panels=panels - early if c_ring else 0, bm=bm, bn=bn, bk=bk, elem_bytes=a_box // (bm * bk))
    except ValueError as exc:
        raise PlanFormatError(f"the auditor cannot model this plan's ring: {exc}") from None
    p = build_ring_protocol(config, name=f"plan-{m}x{n}x{k}-S{stages}-K{k_iters}-T{tiles}",
                            bounds={"plan_k_iters": k_tiles, "persistent": persistent})
    if k_iters < k_tiles:
        p.notes.append(f"K iterations bounded to {k_iters} of the plan's {k_tiles}")
    if aliased:
        p.notes.append("C staging overlays the drained operand stages (c_aliases_stages): the model keeps them "
                       "apart; the kernel's wgmma.wait_group 0 and CTA barrier before the first write are assumed")
    if tail and tail.get("tail_units"):
        p.notes.append(f"stream-K tail ({tail['tail_units']} units split by K): each piece runs this ring with fewer "
                       "K iterations (audit K = 1 .. the plan's to cover them); the fp32 partials handed between "
                       "clusters through global memory are outside this model")
    return p


def _json_type(v: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(v), "number")


_MISSING = object()


class _Reader:
    """Reads dotted keys of a plan with their types, collecting every problem before raising once."""

    def __init__(self, plan: dict):
        self.plan = plan
        self.problems: list[str] = []

    def _get(self, path: str, want: str):
        cur = self.plan
        for key in path.split("."):
            if not isinstance(cur, dict) or key not in cur:
                self.problems.append(f"{path} (missing; {want})")
                return _MISSING
            cur = cur[key]
        return cur

    def _check(self, path: str, want: str, ok) -> object:
        v = self._get(path, want)
        if v is _MISSING:
            return None
        if not ok(v):
            self.problems.append(f"{path} = {v!r} (want {want})")
            return None
        return v

    def integer(self, path: str, minimum: int):
        return self._check(path, f"an integer >= {minimum}", lambda v: _is_int(v) and v >= minimum)

    def integers(self, path: str, count: int):
        return self._check(path, f"{count} integers >= 1",
                           lambda v: isinstance(v, list) and len(v) == count and all(_is_int(x) and x >= 1 for x in v))

    def flag(self, path: str):
        return self._check(path, "true or false", lambda v: isinstance(v, bool))

    def text(self, path: str):
        return self._check(path, "a string", lambda v: isinstance(v, str))

    def choice(self, path: str, options: tuple[str, ...]):
        return self._check(path, " or ".join(repr(o) for o in options), lambda v: v in options)

    def optional_object(self, path: str):
        return self._check(path, "an object or null", lambda v: v is None or isinstance(v, dict))

    def done(self) -> None:
        if self.problems:
            raise PlanFormatError("the plan lacks what the auditor needs: " + "; ".join(self.problems))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
