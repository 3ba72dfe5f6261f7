"""The stage-ring protocol a designer plan describes (``gemm-ladder design --format json``), and the
plan's own arithmetic.

The auditor reads exactly what :meth:`gemm_ladder.design.plan.Plan.to_json` writes, one spelling
(schema ``gemm-ladder/design/1``; a swiglu plan, ``gemm-ladder/swiglu-plan/1``, through its ``gemm``
part), as JSON data: it imports nothing from the designer.

* ``problem``: ``k``, ``tile`` ([BM, BN, BK]), ``stages``, ``cluster``, ``consumers``, ``persistent``,
  ``producer_warpgroup``, ``c_ring``, ``c_aliases_stages``, ``arch`` (and ``m``, ``n`` for the name);
  ``schedule`` (optional: "cooperative", the default, or "pingpong": RingConfig.pingpong);
* ``ring``: ``pipe_depth``, ``full_init_count``, ``empty_init_count``, ``initial_phase``,
  ``first_full_wait_parity``, ``first_empty_wait_parity``, ``release_mode`` (``previous``: stage k is
  released after the wgmma of k + 1 is issued; ``current``: right after its own; ``two_back``: after the
  wgmma of k + 2, a measuring build's), ``ledger`` (the
  phase ledger) and ``order`` (each role's steps in order; optional, the right order when absent);
* ``tensor_maps.a`` / ``.b``: ``data_type``, ``box_dim``, ``box_bytes``;
* ``load_protocol``: ``expect_tx_bytes``, ``a_box_bytes``, ``b_box_bytes``, ``a_boxes_per_stage``
  (optional, 1), ``b_boxes_per_stage``, ``multicast_mask``, ``full_arrival_count``,
  ``empty_arrival_count``;
* ``consumers.release_threads`` (the empty barriers' arrivers, one per consumer warpgroup);
* ``smem``: ``stages``, ``a_stage_bytes``, ``b_stage_bytes``, ``c_bytes``, ``c_panels``,
  ``total_bytes``, ``max_per_block``; ``kernel_defines`` (what the kernel is compiled with);
* ``schedule.k_tiles`` and ``schedule.stream_k``.

:func:`audit_plan` is the whole check: :func:`check_plan` (the arithmetic: bytes, arrival counts,
phases, shared memory; each failure a violation whose trace is the sum that fails) and the model
check of :func:`protocol_from_plan` (the interleavings), unrolled deep enough that every stage of
the ring is used three times, i.e. reused twice (:func:`plan_bounds`).
"""

from __future__ import annotations

import math

from gemm_ladder.audit.protocol import PROTOCOL_FORMAT, Protocol
from gemm_ladder.audit.result import AuditResult, Violation
from gemm_ladder.audit.ring import CONSUMER_STEPS, PRODUCER_STEPS, STORE_STEPS, RingConfig, build_ring_protocol

__all__ = ["PLAN_SCHEMA", "SWIGLU_SCHEMA", "USES_PER_STAGE", "PlanBoundsError", "PlanFormatError", "audit_plan",
           "check_plan", "is_plan", "min_iterations", "plan_bounds", "protocol_from_json", "protocol_from_plan"]

#: The ``schema`` of a designer plan's JSON (``Plan.to_json``), and of the swiglu kernel's plan.
PLAN_SCHEMA = "gemm-ladder/design/1"
SWIGLU_SCHEMA = "gemm-ladder/swiglu-plan/1"

#: Uses of every stage an audit unrolls at least: three, so each stage is reused twice and its
#: barriers' parity comes back to its first value (phases 0, 1, 2: try_wait.parity cannot tell 0
#: from 2, the aliasing a wrong phase shows as).
USES_PER_STAGE = 3

#: Dynamic shared memory per block, in bytes, by architecture (CUDA C Programming Guide, "Compute
#: Capabilities", technical specifications: 227 KB per block on compute capability 9.0 and 10.0).
SMEM_PER_BLOCK = {"sm_90a": 232448, "sm_100a": 232448}

#: Bytes per element of a tensor map's data type (CUDA Driver API, CUtensorMapDataType).
ELEMENT_BYTES = {"CU_TENSOR_MAP_DATA_TYPE_UINT8": 1, "CU_TENSOR_MAP_DATA_TYPE_UINT16": 2,
                 "CU_TENSOR_MAP_DATA_TYPE_FLOAT16": 2, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16": 2,
                 "CU_TENSOR_MAP_DATA_TYPE_FLOAT32": 4, "CU_TENSOR_MAP_DATA_TYPE_UINT32": 4,
                 "CU_TENSOR_MAP_DATA_TYPE_INT32": 4, "CU_TENSOR_MAP_DATA_TYPE_FLOAT64": 8}

_RELEASE_LAG = {"previous": 1, "current": 0, "two_back": 2}
#: The plan's step names (ring.order) -> RingConfig's.
_STEPS = {"producer": dict(zip(("producer_acquire", "producer_commit"), PRODUCER_STEPS)),
          "consumer": dict(zip(("consumer_wait", "mma", "consumer_release"), CONSUMER_STEPS)),
          "store": dict(zip(("store_drain", "write_staging", "store_commit"), STORE_STEPS))}
_BARRIER_BYTES = 8  # one mbarrier


class PlanFormatError(ValueError):
    """A JSON document the auditor cannot read as a plan or a protocol; the message says what is wrong
    (every missing or mistyped key of a plan at once)."""


class PlanBoundsError(ValueError):
    """Bounds too small for the audit to speak for the plan's ring (fewer K iterations than reuse every
    stage twice); the message gives the least that does."""


def min_iterations(stages: int) -> int:
    """The K iterations per CTA (tiles x K iterations per tile) in which every stage of a ring of
    ``stages`` is used :data:`USES_PER_STAGE` times (reused twice): 3 x stages."""
    return USES_PER_STAGE * stages


def plan_bounds(stages: int, k_tiles: int, persistent: bool, k_iters: int | None = None,
                tiles: int | None = None, min_tiles: int = 2) -> tuple[int, int]:
    """(K iterations per tile, tiles per CTA) an audit of a plan unrolls; at least
    :func:`min_iterations` K iterations per CTA.

    ``k_iters`` / ``tiles`` (``--k-iters`` / ``--tiles``) are taken as given; left out: a plan that is
    not persistent runs one tile of 3 x stages K iterations (the plan's ``k_tiles`` capped there, or
    raised there: the kernel's ring does not depend on K); a persistent plan runs tiles of its own
    K (``k_tiles``, capped at the minimum over ``min_tiles``) and as many tiles (at least ``min_tiles``,
    2: the phase is carried from tile to tile; a ping-pong plan's 2 x consumers: each consumer carries
    it over two of its own tiles) as the minimum needs. A plan that is not persistent always has 1 tile.

    Raises:
        PlanBoundsError: ``k_iters`` x tiles below the minimum (naming the least ``k_iters`` that is
            enough), or ``k_iters`` / ``tiles`` below 1.
    """
    need = min_iterations(stages)
    for name, v in (("k_iters", k_iters), ("tiles", tiles)):
        if v is not None and v < 1:
            raise PlanBoundsError(f"{name} must be >= 1, got {v}")
    if not persistent:
        k, t = (need if k_iters is None else k_iters), 1
    else:
        k = min(k_tiles, math.ceil(need / min_tiles)) if k_iters is None else k_iters
        t = max(min_tiles, math.ceil(need / k)) if tiles is None else tiles
    if k * t < need:
        least = math.ceil(need / t)
        per = "" if t == 1 else f" per tile over {t} tiles"
        raise PlanBoundsError(f"--k-iters {k}{per} explores {k * t} K iterations; a {stages}-stage ring needs "
                              f"{need} (every stage used {USES_PER_STAGE} times: reused twice) for the audit to "
                              f"cover stage reuse: give --k-iters {least} or more" +
                              ("" if not persistent or tiles is None else ", or more --tiles"))
    return k, t


def protocol_from_json(data: object, *, k_iters: int | None = None, tiles: int | None = None) -> Protocol:
    """A designer plan (``schema`` ``gemm-ladder/design/1`` or a swiglu plan) or a protocol JSON (``roles``,
    ``barriers``, ``buffers``; ``format`` ``gemm-ladder-protocol/1`` when written by :meth:`Protocol.dumps`).

    Raises:
        PlanFormatError: ``data`` is neither (a JSON array, a number, another schema, ...), or a plan
            the auditor cannot read (see :func:`protocol_from_plan`).
        PlanBoundsError: bounds too small for a plan (:func:`plan_bounds`).
        ProtocolError: a protocol JSON that is malformed.
    """
    if is_plan(data):
        return protocol_from_plan(data, k_iters=k_iters, tiles=tiles)
    if isinstance(data, dict) and ("roles" in data or data.get("format") == PROTOCOL_FORMAT):
        return Protocol.from_json(data)
    raise PlanFormatError(_neither(data))


def is_plan(data: object) -> bool:
    """Whether ``data`` is a designer plan document (a design/1 or a swiglu plan), by its schema."""
    return isinstance(data, dict) and data.get("schema") in (PLAN_SCHEMA, SWIGLU_SCHEMA)


def _neither(data: object) -> str:
    what = f"a JSON object with schema {data.get('schema')!r}" if isinstance(data, dict) and "schema" in data else \
        f"a JSON {_json_type(data)}" if not isinstance(data, dict) else "a JSON object with neither"
    return (f"{what}: the auditor reads a designer plan (schema {PLAN_SCHEMA!r}, from `gemm-ladder design "
            f"--format json`) or a protocol (roles, barriers, buffers)")


def _gemm_part(plan: object) -> dict:
    """The design/1 plan of a plan document: itself, or a swiglu plan's ``gemm`` with the swiglu
    kernel's epilogue (``problem.c_panels`` panels per tile, all stored at the tile's end)."""
    if isinstance(plan, dict) and plan.get("schema") == SWIGLU_SCHEMA:
        gemm, panels = plan.get("gemm"), (plan.get("problem") or {}).get("c_panels")
        if not isinstance(gemm, dict) or gemm.get("schema") != PLAN_SCHEMA or not _is_int(panels) or panels < 1:
            raise PlanFormatError(f"a swiglu plan needs gemm (a {PLAN_SCHEMA!r} plan) and problem.c_panels (an "
                                  "integer >= 1)")
        gemm = {**gemm, "smem": {**(gemm.get("smem") or {}), "c_panels": panels}}
        return gemm
    if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA:
        got = plan.get("schema") if isinstance(plan, dict) else _json_type(plan)
        raise PlanFormatError(f"not a designer plan (schema {got!r}); expected schema {PLAN_SCHEMA!r} "
                              "from `gemm-ladder design --format json`")
    return plan


class _Plan:
    """The fields of a design/1 plan the auditor reads, typed (every problem listed at once)."""

    def __init__(self, plan: dict):
        r = _Reader(plan)
        self.m, self.n, self.k = r.integer("problem.m", 1), r.integer("problem.n", 1), r.integer("problem.k", 1)
        self.arch = r.text("problem.arch")
        self.tile = r.integers("problem.tile", 3)
        self.cluster, self.consumers = r.integer("problem.cluster", 1), r.integer("problem.consumers", 1)
        self.persistent, self.producer = r.flag("problem.persistent"), r.flag("problem.producer_warpgroup")
        self.c_ring, self.aliased = r.integer("problem.c_ring", 0), r.flag("problem.c_aliases_stages")
        self.stages = r.integer("ring.pipe_depth", 1)
        self.full_count, self.empty_count = r.integer("ring.full_init_count", 1), r.integer("ring.empty_init_count", 1)
        self.full_parity = r.integer("ring.first_full_wait_parity", 0)
        self.empty_parity = r.integer("ring.first_empty_wait_parity", 0)
        self.release_mode = r.choice("ring.release_mode", tuple(_RELEASE_LAG))
        self.panels = r.integer("smem.c_panels", 0)  # 0: C stored from registers (no staging)
        self.k_tiles = r.integer("schedule.k_tiles", 1)
        self.tail = r.optional_object("schedule.stream_k")
        self.expect = r.integer("load_protocol.expect_tx_bytes", 1)
        self.a_box = r.integer("load_protocol.a_box_bytes", 1)
        self.b_box = r.integer("load_protocol.b_box_bytes", 1)
        self.b_boxes = r.integer("load_protocol.b_boxes_per_stage", 1)
        self.order = r.optional_object("ring.order", default=None)
        r.done()
        schedule = (plan.get("problem") or {}).get("schedule", "cooperative")
        if schedule not in ("cooperative", "pingpong"):
            raise PlanFormatError(f"problem.schedule = {schedule!r}: 'cooperative' or 'pingpong'")
        self.pingpong = schedule == "pingpong"
        self.plan = plan
        self.a_boxes = plan["load_protocol"].get("a_boxes_per_stage", 1)

    @property
    def multicast(self) -> bool:
        return self.cluster > 1

    def b_load(self) -> int:
        """Bytes each CTA's B load completes on each destination CTA's full barrier."""
        parts = self.cluster if self.multicast else 1
        return self.b_boxes * self.b_box // parts

    def orders(self) -> dict[str, tuple[str, ...]]:
        """RingConfig's ``*_order`` fields from ``ring.order`` (absent: the right order)."""
        out = {}
        if self.order is None:
            return out
        problems = []
        for role, names in _STEPS.items():
            steps = self.order.get(role, list(names))
            if not isinstance(steps, list) or not all(isinstance(x, str) and x in names for x in steps) \
                    or len(set(steps)) != len(steps):
                problems.append(f"ring.order.{role} = {steps!r} (want distinct steps of {', '.join(names)})")
                continue
            out[f"{role}_order"] = tuple(names[x] for x in steps)
        if problems:
            raise PlanFormatError("the plan lacks what the auditor needs: " + "; ".join(problems))
        return out


def protocol_from_plan(plan: dict, *, k_iters: int | None = None, tiles: int | None = None) -> Protocol:
    """The protocol a designer plan (``Plan.to_json()``) describes, unrolled for :func:`plan_bounds`.

    The loads are the plan's: each stage's A boxes (``a_boxes_per_stage`` x ``a_box_bytes``) and each
    CTA's B boxes (``b_boxes_per_stage`` x ``b_box_bytes``, split over the cluster and multicast),
    completing their bytes on the full barriers while the producer expects ``expect_tx_bytes``;
    the barriers' init counts and first wait parities are the plan's ring's, and each role's steps
    come in the plan's ``ring.order``. The epilogue is the plan's: the whole tile
    staged at once (``c_ring`` 0; with several consumer warpgroups each one's rows are a buffer it
    writes, stores and drains, the single store issuer and named barrier of the kernel acting for
    all), or per consumer warpgroup a ring of ``c_ring`` panel buffers storing ``smem.c_panels``
    panels per tile, the first ``min(c_ring, panels)`` at the tile's end and the rest during the next
    tile's first K iterations (level 9's schedule). The plan's arithmetic is :func:`check_plan`'s.

    Raises:
        PlanFormatError: not a plan of schema ``gemm-ladder/design/1``; every missing or mistyped key
            (listed together); a plan for another MMA than sm_90a's wgmma (the ring the auditor
            models); a ring no :class:`RingConfig` can hold.
        PlanBoundsError: ``k_iters`` x ``tiles`` below :func:`min_iterations`.
    """
    f = _Plan(_gemm_part(plan))
    if f.arch != "sm_90a":
        raise PlanFormatError(f"a plan for {f.arch}: the auditor models the sm_90a ring the ladder's kernels run "
                              "(wgmma consumers that each release a stage); tcgen05.commit releases are not modelled")
    bm, bn, bk = f.tile
    k, t = plan_bounds(f.stages, f.k_tiles, f.persistent, k_iters, tiles,
                       min_tiles=2 * f.consumers if f.pingpong else 2)
    from_registers = f.panels == 0
    f.panels = max(f.panels, 1)
    early = min(f.c_ring, f.panels)
    try:
        config = RingConfig(
            stages=f.stages, k_iters=k, tiles=t, release_lag=_RELEASE_LAG[f.release_mode], consumers=f.consumers,
            pingpong=f.pingpong, cluster=f.cluster, warp_specialized=f.producer, full_count=f.full_count,
            empty_count=f.empty_count,
            full_initial_phase=f.full_parity, empty_initial_phase=f.empty_parity,
            staging_buffers=max(f.c_ring, 1), panels_per_tile=f.panels if f.c_ring else 1,
            # ping-pong: every panel at its own tile's end (sm90_gemm.cu), the other consumer's loop hiding it
            deferred_panels=f.panels - early if f.c_ring and not f.pingpong else 0, bm=bm, bn=bn, bk=bk,
            a_load_bytes=f.a_boxes * f.a_box if _is_int(f.a_boxes) and f.a_boxes > 0 else f.a_box,
            b_load_bytes=max(f.b_load(), 1), expect_tx_bytes=f.expect, **f.orders())
    except ValueError as exc:
        if isinstance(exc, PlanFormatError):
            raise
        raise PlanFormatError(f"the auditor cannot model this plan's ring: {exc}") from None
    p = build_ring_protocol(config, name=f"plan-{f.m}x{f.n}x{f.k}-S{f.stages}-K{k}-T{t}",
                            bounds={"plan_k_iters": f.k_tiles, "persistent": f.persistent})
    need = min_iterations(f.stages)
    p.notes.append(f"{k * t} K iterations per CTA ({t} tile(s) x {k}): each of the {f.stages} stages used "
                   f"{k * t // f.stages} times or more (the audit needs {need}: every stage reused twice)")
    if k < f.k_tiles:
        p.notes.append(f"K iterations per tile bounded to {k} of the plan's {f.k_tiles}: the ring repeats every "
                       f"2 x {f.stages} iterations, and {k * t} cover each stage's reuse twice")
    elif k > f.k_tiles:
        p.notes.append(f"{k} K iterations per tile, more than the plan's {f.k_tiles}: the kernel's ring does not "
                       "depend on K (its kernel_defines), so the audit covers the reuse a longer K brings")
    if from_registers:
        p.notes.append("C is stored from registers (smem.c_panels 0): no output staging in shared memory; the "
                       "model's one private staging buffer per consumer stands for that store and proves nothing "
                       "about it")
    if f.order is None:
        p.notes.append("the plan has no ring.order (an older plan): each role's steps taken in the right order")
    if f.aliased:
        p.notes.append("C staging overlays the drained operand stages (c_aliases_stages): the model keeps them "
                       "apart; the kernel's wgmma.wait_group 0 and CTA barrier before the first write are assumed")
    if f.tail and f.tail.get("tail_units"):
        p.notes.append(f"stream-K tail ({f.tail['tail_units']} units split by K): each piece runs this ring with fewer "
                       "K iterations (audit K = 1 .. the plan's to cover them); the fp32 partials handed between "
                       "clusters through global memory are outside this model")
    return p


def audit_plan(plan: dict, *, k_iters: int | None = None, tiles: int | None = None, **audit_kw) -> AuditResult:
    """The whole audit of a plan: :func:`check_plan`'s arithmetic, then the model check of
    :func:`protocol_from_plan` (``audit_kw`` go to :func:`gemm_ladder.audit.audit`). The arithmetic's
    violations come first in the result; ``ok`` only when both are clean and the search complete.

    Raises what :func:`protocol_from_plan` raises.
    """
    from gemm_ladder.audit.search import audit

    protocol = protocol_from_plan(plan, k_iters=k_iters, tiles=tiles)
    findings = check_plan(plan)
    result = audit(protocol, **audit_kw)
    result.violations[:0] = findings
    result.ok = result.ok and not findings
    result.notes = list(protocol.notes)
    return result


def check_plan(plan: dict) -> list[Violation]:
    """The plan's arithmetic, each failure a :class:`Violation` whose trace is the sum that fails:

    * ``byte_count``: ``expect_tx_bytes`` against the bytes the tensor maps deliver to each CTA's full
      barrier per stage (A: ``a_boxes_per_stage`` boxes; B: ``b_boxes_per_stage`` boxes, the slices
      of every CTA of the cluster when multicast; each box its ``box_dim`` product x the element size
      of its ``data_type``), the kernel's ``GL_EXPECT_TX_BYTES``, and the stages those bytes fill
      (BM x BK and BN x BK elements);
    * ``arrival_count``: the full barriers' count against the one producer arrival (the issuer's
      ``arrive.expect_tx``), the empty barriers' against the arrivers the plan names (one per
      ``consumers.release_threads``, times the cluster's CTAs when B is multicast: each consumer
      releases the stage in every CTA whose slice it read), ``GL_EMPTY_ARRIVALS`` and the load
      protocol's counts;
    * ``phase_ledger``: every barrier starts in phase 0 (``ring.initial_phase``); the first waits
      (full parity 0: wait for phase 0; empty parity 1: pass at once on a fresh barrier) and each
      ledger row (stage = i mod S, round = i div S, parities = the first ones flipped each round);
    * ``smem_capacity``: the ring's stages (``pipe_depth``, ``smem.stages``, ``GL_STAGES``) of A and B
      bytes, with the output staging and the barriers, against the architecture's shared memory per
      block, and the plan's own total.

    Raises PlanFormatError for a plan it cannot read (what :func:`protocol_from_plan` raises).
    """
    doc = _gemm_part(plan)
    f = _Plan(doc)
    out: list[Violation] = []
    defines = doc.get("kernel_defines") or {}
    lp, ring, smem = doc["load_protocol"], doc["ring"], doc.get("smem") or {}
    bm, bn, bk = f.tile

    # -- bytes --------------------------------------------------------------------------------------
    maps = doc.get("tensor_maps") or {}
    lines, e_of = [], {}
    for name, boxes, declared in (("a", f.a_boxes, f.a_box), ("b", f.b_boxes, f.b_box)):
        spec = maps.get(name) if isinstance(maps, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("box_dim"), list) \
                or spec.get("data_type") not in ELEMENT_BYTES:
            out.append(Violation("byte_count", f"tensor_maps.{name} has no box_dim and known data_type: the bytes "
                                 "its loads deliver cannot be checked against expect_tx_bytes",
                                 [f"tensor_maps.{name} = {spec!r}"[:200]]))
            return out
        e = e_of[name] = ELEMENT_BYTES[spec["data_type"]]
        box = math.prod(spec["box_dim"]) * e
        dims = " x ".join(str(d) for d in spec["box_dim"])
        lines.append(f"tensor_maps.{name}: box {dims} elements x {e} B ({spec['data_type'].rsplit('_', 1)[-1]}) = "
                     f"{box} B; {boxes} box(es) per stage = {box * boxes} B")
        if box != declared or spec.get("box_bytes", box) != box:
            out.append(Violation("byte_count", f"tensor_maps.{name}'s box is {box} B but the plan says "
                                 f"load_protocol.{name}_box_bytes = {declared}"
                                 f" (tensor_maps.{name}.box_bytes = {spec.get('box_bytes')})", lines[-1:]))
    a_bytes, b_bytes = f.a_boxes * f.a_box, f.b_boxes * f.b_box
    delivered = a_bytes + b_bytes
    mc = (f"; B: {f.b_boxes} boxes, the {f.cluster} CTAs' slices, each multicast to every CTA of the cluster "
          f"(multicast_mask {lp.get('multicast_mask')})" if f.multicast else "")
    lines.append(f"delivered to each CTA's full[s] per stage: A {a_bytes} + B {b_bytes} = {delivered} B{mc}")
    for where, value in (("load_protocol.expect_tx_bytes", f.expect),
                         ("kernel_defines.GL_EXPECT_TX_BYTES", defines.get("GL_EXPECT_TX_BYTES", f.expect))):
        if value != delivered:
            what = (f"{delivered - value} B short: the phase completes while {delivered - value} B are still "
                    "landing, and the consumer reads a stage that is not all there" if value < delivered else
                    f"{value - delivered} B too many: the tx-count never reaches zero, the phase never completes "
                    "and the consumer waits forever")
            out.append(Violation("byte_count", f"{where} = {value} B, but the loads of a stage deliver {delivered} B "
                                 f"to each CTA's full barrier: {what}", lines + [f"{where} = {value} B != {delivered} B"]))
    for name, got, rows in (("A", a_bytes, bm), ("B", b_bytes, bn)):
        want = rows * bk * e_of[name.lower()]
        if got != want:
            out.append(Violation("byte_count", f"the {name} loads of a stage deliver {got} B, but a {bm}x{bn}x{bk} "
                                 f"tile's {name} stage holds {rows} x {bk} elements = {want} B",
                                 lines + [f"{name}: {got} B != {rows} x {bk} x {e_of[name.lower()]} = {want} B"]))
    if f.multicast and (f.b_boxes % f.cluster or lp.get("multicast_mask") != (1 << f.cluster) - 1):
        out.append(Violation("byte_count", f"B is multicast over a cluster of {f.cluster}, but b_boxes_per_stage = "
                             f"{f.b_boxes} and multicast_mask = {lp.get('multicast_mask')}: each CTA must send "
                             f"its slice to all {f.cluster} CTAs (mask {(1 << f.cluster) - 1})", lines))

    # -- arrival counts -------------------------------------------------------------------------------
    releasers = (doc.get("consumers") or {}).get("release_threads")
    n_rel = len(releasers) if isinstance(releasers, list) else f.consumers
    peers = f.cluster if f.multicast else 1
    readers = 1 if f.pingpong else n_rel  # ping-pong: the one consumer whose tile the stage holds
    want_empty = readers * peers
    who = (f"1 release thread (ping-pong: the consumer of the stage's tile, one of {releasers})"
           if f.pingpong else f"{n_rel} consumer warpgroup release thread(s) {releasers}")
    arith = [f"arrivers on empty[s]: {who} x {peers} CTA(s) whose stage each releases = {want_empty}",
             "arrivers on full[s]: 1 (the issuer's arrive.expect_tx; the TMA bytes complete the rest)"]
    if n_rel != f.consumers:
        out.append(Violation("arrival_count", f"consumers.release_threads names {n_rel} arrivers but the plan has "
                             f"{f.consumers} consumer warpgroup(s), each releasing every stage it read", arith[:1]))
    for where, value, want in (("ring.empty_init_count", f.empty_count, want_empty),
                               ("load_protocol.empty_arrival_count", lp.get("empty_arrival_count"), want_empty),
                               ("kernel_defines.GL_EMPTY_ARRIVALS", defines.get("GL_EMPTY_ARRIVALS", want_empty),
                                want_empty),
                               ("ring.full_init_count", f.full_count, 1),
                               ("load_protocol.full_arrival_count", lp.get("full_arrival_count"), 1)):
        if value != want:
            which = "empty" if "empty" in where.lower() else "full"
            effect = ("a phase needs arrivals that never come: the waiter blocks forever" if _is_int(value) and value > want
                      else "a phase completes before every arriver has released: a stage is refilled under a reader"
                      if which == "empty" else "the phase completes on the arrival alone, before the bytes")
            out.append(Violation("arrival_count", f"{where} = {value}, but {want} arrive per phase: {effect}",
                                 arith + [f"{where} = {value} != {want}"]))

    # -- phases ---------------------------------------------------------------------------------------
    init = ring.get("initial_phase", 0)
    first = [f"every mbarrier starts in phase 0 (mbarrier.init); try_wait.parity p passes once the phase of "
             f"parity p has completed, so parity 1 passes at once on a fresh barrier",
             f"ring.first_full_wait_parity = {f.full_parity} (the consumer's first wait must block until the first "
             f"load lands: 0); ring.first_empty_wait_parity = {f.empty_parity} (the producer's first wait must pass "
             f"on an empty ring: 1)"]
    if init != 0:
        out.append(Violation("phase_ledger", f"ring.initial_phase = {init}: mbarrier.init always starts phase 0",
                             first[:1]))
    if (f.full_parity, f.empty_parity) != (0, 1):
        out.append(Violation("phase_ledger", "the ring's first wait parities are not (full 0, empty 1)", first))
    ledger = ring.get("ledger") or []
    for row in ledger if isinstance(ledger, list) else []:
        if not isinstance(row, dict) or not _is_int(row.get("iteration")):
            out.append(Violation("phase_ledger", f"ring.ledger row {row!r} has no iteration"))
            break
        i = row["iteration"]
        r = i // f.stages
        want = {"stage": i % f.stages, "round": r, "full_wait_parity": (r + 0) % 2,
                "empty_wait_parity": (r + 1) % 2, "empty_passes_immediately": r == 0}
        bad = {k: (row.get(k), v) for k, v in want.items() if k in row and row[k] != v}
        if bad:
            out.append(Violation("phase_ledger", f"ring.ledger at iteration {i}: " + ", ".join(
                f"{k} = {got!r}, not {v!r}" for k, (got, v) in bad.items()),
                [f"iteration {i} of a {f.stages}-stage ring: stage {i} mod {f.stages} = {i % f.stages}, round "
                 f"{i} div {f.stages} = {r}",
                 f"full wait parity = round mod 2 = {r % 2} (phase {r} of full[{i % f.stages}]); empty wait parity = "
                 f"(round + 1) mod 2 = {(r + 1) % 2} (round 0 passes at once)"]))
            break

    # -- shared memory --------------------------------------------------------------------------------
    limit = SMEM_PER_BLOCK.get(f.arch)
    stage_fields = {"ring.pipe_depth": f.stages, "problem.stages": (doc.get("problem") or {}).get("stages", f.stages),
                    "smem.stages": smem.get("stages", f.stages),
                    "kernel_defines.GL_STAGES": defines.get("GL_STAGES", f.stages)}
    if len(set(stage_fields.values())) > 1:
        out.append(Violation("smem_capacity", "the plan's stage counts disagree: " + ", ".join(
            f"{k} = {v}" for k, v in stage_fields.items()), [f"{k} = {v}" for k, v in stage_fields.items()]))
    a_stage, b_stage = smem.get("a_stage_bytes", a_bytes), smem.get("b_stage_bytes", b_bytes)
    c_bytes = 0 if f.aliased else smem.get("c_bytes", 0)
    if _is_int(a_stage) and _is_int(b_stage) and _is_int(c_bytes) and limit:
        ring_bytes = f.stages * (a_stage + b_stage)
        bars = 2 * f.stages * _BARRIER_BYTES
        least = ring_bytes + c_bytes + bars
        total = smem.get("total_bytes", least)
        arith = [f"{f.stages} stages x (A {a_stage} + B {b_stage} B) = {ring_bytes} B",
                 f"+ output staging {c_bytes} B" + (" (overlays the stages)" if f.aliased else "") +
                 f" + {2 * f.stages} mbarriers x {_BARRIER_BYTES} B = {least} B at least",
                 f"{f.arch}: at most {limit} B of dynamic shared memory per block (CUDA C Programming Guide, "
                 "compute capability 9.0)"]
        if least > limit:
            fit = (limit - c_bytes) // (a_stage + b_stage + 2 * _BARRIER_BYTES)
            out.append(Violation("smem_capacity", f"a ring of {f.stages} stages needs {least} B of shared memory, more "
                                 f"than the {limit} B a block may have on {f.arch}: at most {fit} stage(s) fit",
                                 arith + [f"{least} B > {limit} B"]))
        elif not _is_int(total) or total > limit or total < least:
            out.append(Violation("smem_capacity", f"smem.total_bytes = {total} B, but the ring needs {least} B at "
                                 f"least and a block may have {limit} B", arith + [f"smem.total_bytes = {total} B"]))
        elif smem.get("max_per_block", limit) != limit:
            out.append(Violation("smem_capacity", f"smem.max_per_block = {smem.get('max_per_block')} B, but {f.arch} "
                                 f"allows {limit} B per block", arith[2:]))
    return out


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

    def optional_object(self, path: str, default=_MISSING):
        if default is not _MISSING and self._get_quiet(path) is _MISSING:
            return default
        return self._check(path, "an object or null", lambda v: v is None or isinstance(v, dict))

    def _get_quiet(self, path: str):
        cur = self.plan
        for key in path.split("."):
            if not isinstance(cur, dict) or key not in cur:
                return _MISSING
            cur = cur[key]
        return cur

    def done(self) -> None:
        if self.problems:
            raise PlanFormatError("the plan lacks what the auditor needs: " + "; ".join(self.problems))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
