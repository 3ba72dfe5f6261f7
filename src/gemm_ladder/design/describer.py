"""The designer's prose: every sentence of a plan, written from its numbers when someone reads them.

:func:`gemm_ladder.design.plan.plan_gemm` computes numbers only (the launch path of levels 4+ plans
each new shape); :func:`describe` turns a :class:`~gemm_ladder.design.plan.Plan` into a
:class:`PlanText` (who issues what, the load and store protocols step by step, the schedule, the
timeline rows, the assumptions, risks and validation), and :func:`plan_document` is the plan as
``gemm-ladder design --format json`` prints it: :meth:`Plan.to_json` with that prose in place.
The Markdown and the picture are :mod:`gemm_ladder.design.render`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemm_ladder.design.plan import GROUP_M, Plan, unit_coords
from gemm_ladder.design.problem import arch_info, dtype_info
from gemm_ladder.design.stream_k import StreamKTail
from gemm_ladder.design.timeline import TimelineRow, build_timeline, elided_iterations

#: What the store side never uses: through shared memory (TMA stores), or from registers (c_from_registers).
STORE_NEVER = "never a byte count or an mbarrier on the store side: stores complete through bulk async-groups"
STORE_NEVER_FROM_REGISTERS = ("never a shared-memory buffer, byte count or mbarrier on the store side: ordinary stores "
                              "from registers")


@dataclass(frozen=True)
class PlanText:
    """The prose of one plan (see :func:`describe`)."""

    conclusion: str
    issuer: str
    consumers: str
    empty_arrivers: str
    load_steps: tuple[str, ...]
    store_steps: tuple[str, ...]
    store_never: str
    schedule_notes: tuple[str, ...]
    timeline: tuple[TimelineRow, ...]
    assumptions: tuple[str, ...]
    risks: tuple[str, ...]
    validation: tuple[str, ...]


def describe(plan: Plan, *, elide_timeline: bool = False) -> PlanText:
    """Every sentence of ``plan``, from its numbers (nothing here changes a number). ``elide_timeline``:
    the timeline without the middle K iterations (:func:`~gemm_ladder.design.timeline.build_timeline`'s
    ``elide``)."""
    ar = arch_info(plan.arch)
    bm, bn, bk = plan.tile
    load, smem, sc = plan.load_protocol, plan.smem, plan.schedule
    timeline = build_timeline(k_tiles=sc.k_tiles, stages=plan.stages, expect_tx=load.expect_tx_bytes,
                              c_panels=smem.c_panels, k_steps=bk // 16, cluster=plan.cluster,
                              persistent=plan.persistent, mma=ar.mma, c_from_registers=smem.c_from_registers,
                              elide=elide_timeline)
    return PlanText(
        conclusion=conclusion(plan), issuer=_issuer(plan), consumers=_consumers(plan, ar.mma),
        empty_arrivers=_empty_arrivers(plan, ar.mma), load_steps=_load_steps(plan, ar.mma),
        store_steps=_store_steps(plan),
        store_never=STORE_NEVER_FROM_REGISTERS if smem.c_from_registers else STORE_NEVER,
        schedule_notes=_schedule_notes(plan, ar),
        timeline=timeline, assumptions=_assumptions(ar), risks=_risks(plan), validation=_validation(plan.stages),
    )


def plan_document(plan: Plan, *, elide_timeline: bool = False) -> dict:
    """The plan as ``gemm-ladder design --format json`` prints it: :meth:`Plan.to_json` with the prose
    of :func:`describe` in its sections (the keys in the order the designer has always written them).

    ``elide_timeline``: the timeline's middle K iterations (:func:`~gemm_ladder.design.timeline.elided_iterations`)
    replaced by one row ``{"phase": "steady", "elided_iterations": [first, last]}``, so that the
    document's size does not grow with K (``explain`` embeds it: at K = 2^27 the whole timeline is two
    million rows)."""
    text = describe(plan, elide_timeline=elide_timeline)
    data = plan.to_json()
    issuer = dict(data["issuer"])
    store_threads = issuer.pop("store_threads")
    sched = dict(data["schedule"])
    stream_k = sched.pop("stream_k")
    return {
        "schema": data["schema"], "problem": data["problem"], "conclusion": text.conclusion,
        "suitability": data["suitability"], "tensor_maps": data["tensor_maps"], "smem": data["smem"],
        "wgmma_descriptors": data["wgmma_descriptors"], "tmem": data["tmem"],
        "issuer": {**issuer, "description": text.issuer, "store_threads": store_threads},
        "consumers": {**data["consumers"], "description": text.consumers},
        "load_protocol": {**data["load_protocol"], "empty_arrivers": text.empty_arrivers,
                          "steps": list(text.load_steps)},
        "store_protocol": {**data["store_protocol"], "steps": list(text.store_steps), "never": text.store_never},
        "ring": data["ring"],
        "timeline": _timeline_json(text.timeline, plan.schedule.k_tiles if elide_timeline else None),
        "schedule": {**sched, "notes": list(text.schedule_notes), "stream_k": stream_k},
        "kernel_defines": data["kernel_defines"],
        "assumptions": list(text.assumptions), "risks": list(text.risks), "validation": list(text.validation),
    }


def _timeline_json(rows: tuple[TimelineRow, ...], elided_k_tiles: int | None) -> list[dict]:
    """The rows as JSON; ``elided_k_tiles`` (rows built with ``elide``): the K iterations of the whole
    timeline, whose left-out middle is marked by one row where it was."""
    gap = elided_iterations(elided_k_tiles) if elided_k_tiles is not None else None
    out: list[dict] = []
    for r in rows:
        if gap is not None and r.iteration == gap.stop:  # the first row after the left-out iterations
            out.append({"phase": "steady", "elided_iterations": [gap.start, gap.stop - 1]})
        out.append(r.to_json())
    return out


def conclusion(plan: Plan) -> str:
    """The plan in one sentence."""
    bm, bn, bk = plan.tile
    return (f"TMA with {plan.stages}-stage ring ({'producer warpgroup + ' if plan.consumers.producer_warpgroup else ''}"
            f"{plan.consumers.warpgroups} consumer warpgroup(s), {plan.consumers.threads_per_cta} threads), "
            f"tile {bm}x{bn}x{bk}, 128B swizzle, {plan.smem.total_bytes} bytes of dynamic shared memory, "
            f"{plan.smem.ctas_per_sm} CTA(s)/SM, cluster {plan.cluster}"
            + ("" if plan.suitability.worthwhile else "; correct but not worth it here (see suitability)"))


def _issuer(plan: Plan) -> str:
    iss, from_registers = plan.issuer, plan.smem.c_from_registers
    if from_registers:
        stores = "No thread issues a TMA store: every consumer thread stores its own accumulators (st.global)"
    elif plan.smem.c_ring:
        stores = (f"Thread 0 of each consumer warpgroup (threads {', '.join(map(str, iss.store_threads))}) issues that "
                  "warpgroup's own TMA stores (commit_group / wait_group.read)")
    else:
        stores = (f"Thread {iss.store_thread} (thread 0 of consumer warpgroup 0 = warpgroup 1) issues every TMA store "
                  "(commit_group / wait_group.read)")
    if not plan.consumers.producer_warpgroup:
        return ("thread 0 (lane 0 of warpgroup 0, also a consumer) initialises the barriers and issues every TMA load"
                + (" and arrive.expect_tx of the CTA; " + stores[0].lower() + stores[1:] if from_registers else
                   ", arrive.expect_tx and TMA store of the CTA; no other thread issues TMA"))
    return ("thread 0 (lane 0 of warpgroup 0, the producer warpgroup: threads 0-127, setmaxnreg down) initialises "
            "the barriers and issues every TMA load and arrive.expect_tx; the other 127 producer threads idle. "
            + stores)


def _consumers(plan: Plan, mma: str) -> str:
    con = plan.consumers
    bm, bn, _ = plan.tile
    consumers, first_wg, first_thread = con.warpgroups, con.first_warpgroup, con.first_thread
    if mma == "wgmma":
        releasers = ("thread 0 of each consumer warpgroup (thread" + ("s " if consumers > 1 else " ")
                     + ", ".join(map(str, con.release_threads)) + ") arrives on the empty barriers")
    else:
        releasers = f"thread {first_thread} issues tcgen05.mma and its tcgen05.commit arrives on the empty barriers"
    return (f"{consumers} consumer warpgroup(s) = CTA warpgroup(s) {first_wg}..{first_wg + consumers - 1} "
            f"(threads {first_thread}-{con.threads_per_cta - 1}), 128 threads each, wait on full[s] and read stage s "
            f"through {'wgmma descriptors' if mma == 'wgmma' else 'tcgen05.mma (issued by one thread) descriptors'}; "
            + (f"it computes the whole {bm} x {bn} tile; " if consumers == 1 else
               f"ping-pong: consumer c takes the CTA's tiles c, c + {consumers}, ... and computes each whole {bm} x {bn} "
               f"tile in its own accumulators, reading and releasing only that tile's stages; the consumers run their "
               f"main loops in tile order (consumer c waits on order[c] before each tile and arrives on "
               f"order[(c + 1) % {consumers}] after its tile's last full wait), so one stores its tile while the next "
               f"computes; " if _pingpong(plan) else
               f"consumer c computes rows [{bm // consumers}c, {bm // consumers}c + {bm // consumers}) x all {bn} columns; ")
            + releasers
            + (("; setmaxnreg: producer down (40), consumers up (232)" if consumers > 1 else
                "; levels 7 and 8 move registers with setmaxnreg (producer down to 40, consumer up to 232); the "
                "library's one-consumer build (sm90_gemm's 64-row tile) moves none")
               if con.producer_warpgroup else
               "; thread 0 is both the TMA issuer and a consumer"))


def _pingpong(plan: Plan) -> bool:
    """Whether the plan's consumers take tiles in turn (design.plan SCHEDULES: its order barriers)."""
    return plan.smem.order_bar_offset is not None


def _empty_arrivers(plan: Plan, mma: str) -> str:
    consumers, cluster, threads = plan.consumers.warpgroups, plan.cluster, plan.consumers.release_threads
    if mma == "wgmma" and _pingpong(plan):
        return (f"thread 0 of the consumer warpgroup whose tile the stage holds (one of threads "
                f"{', '.join(map(str, threads))}) x CTAs per cluster ({cluster})")
    if mma == "wgmma":
        return (f"thread 0 of each consumer warpgroup ({consumers}: thread{'s' if consumers > 1 else ''} "
                f"{', '.join(map(str, threads))}) x CTAs per cluster ({cluster})")
    return (f"the MMA-issuing thread's tcgen05.commit{'.multicast::cluster' if cluster > 1 else ''} "
            f"x CTAs per cluster ({cluster})")


def _load_steps(plan: Plan, mma: str) -> tuple[str, ...]:
    lp, cluster, consumers = plan.load_protocol, plan.cluster, plan.consumers.warpgroups
    tx, a_box, b_box, mask = lp.expect_tx_bytes, lp.a_box_bytes, lp.b_box_bytes, lp.multicast_mask
    bm, _, bk = plan.tile
    # TMA boxes per tile: 1 for a K-major operand; an MN-major one takes one 128-byte-wide box per 64 rows
    a_boxes, b_boxes = bm * bk * dtype_info(plan.dtype).elem_bytes // a_box, lp.b_boxes_per_stage // cluster
    release_threads = plan.consumers.release_threads
    steps = [
        f"init (thread 0, before any use): mbarrier.init full[s], count 1; mbarrier.init empty[s], count "
        f"{lp.empty_arrival_count}; fence.mbarrier_init.release.cluster (or fence.proxy.async) then "
        f"{'barrier.cluster.arrive/wait' if cluster > 1 else '__syncthreads'} so TMA and peers see initialised barriers",
        "producer_acquire: the load issuer (thread 0) waits empty[s] with parity ((i / S) & 1) ^ 1 (round 0 passes at once)",
        f"producer_commit: mbarrier.arrive.expect_tx full[s], {tx} bytes (A {a_box * a_boxes} + B {b_box * b_boxes * cluster}); "
        f"cp.async.bulk.tensor.2d A box{f' x {a_boxes} (MN-major)' if a_boxes > 1 else ''} -> A stage s; "
        f"B box{f' x {b_boxes} (MN-major)' if b_boxes > 1 else ''}{' slice r, .multicast::cluster mask ' + hex(mask) + ' -> B stage s + r*' + str(b_box * b_boxes) + ' in every CTA' if cluster > 1 else ' -> B stage s'}, "
        "both .mbarrier::complete_tx::bytes on full[s]",
        ("consumer_wait: the threads of the consumer whose tile holds load i wait full[s] with parity (i / S) & 1 "
         "(i counts every load, the other consumers' too: each consumer's counter steps over their tiles)"
         if _pingpong(plan) else "consumer_wait: every consumer thread waits full[s] with parity (i / S) & 1"),
        ("consumer_release: after the MMA that read stage s is complete, thread 0 of that tile's consumer "
         f"warpgroup (one of threads {', '.join(map(str, release_threads))}) "
         + ("arrives on empty[s] of every CTA of the cluster (mapa + mbarrier.arrive.shared::cluster)" if cluster > 1
            else "arrives on empty[s]")) if mma == "wgmma" and _pingpong(plan) else
        ("consumer_release: after the MMA that read stage s is complete, thread 0 of each consumer warpgroup "
         f"(thread{'s' if consumers > 1 else ''} {', '.join(map(str, release_threads))}) "
         + ("arrives on empty[s] of every CTA of the cluster (mapa + mbarrier.arrive.shared::cluster)" if cluster > 1
            else "arrives on empty[s]")) if mma == "wgmma" else
        ("consumer_release: the MMA-issuing thread's tcgen05.commit"
         + (".multicast::cluster arrives on empty[s] of every CTA" if cluster > 1 else " arrives on empty[s]")
         + " when the MMAs that read stage s complete"),
    ]
    if cluster > 1:
        steps.append(f"expect_tx stays {tx}: each CTA receives its own A box and all {cluster} B slices by multicast; "
                     f"empty count {lp.empty_arrival_count}: a stage is refilled by multicast only when every CTA's "
                     "consumers released it")
    steps.append("out-of-bounds box elements (M, N, K tails) are zero-filled and still counted in the transaction bytes")
    return tuple(steps)


def _store_steps(plan: Plan) -> tuple[str, ...]:
    smem, bm, bn = plan.smem, plan.tile[0], plan.tile[1]
    consumers, pw = plan.consumers.warpgroups, plan.consumers.producer_warpgroup
    store_thread, box = plan.issuer.store_thread, plan.store_protocol.panel_box
    if smem.c_from_registers:
        return (
            "after its last wgmma.wait_group 0, each consumer thread converts its fp32 accumulators to the output "
            "dtype and stores them with st.global at the places its fragment holds (PTX ISA, wgmma D fragment), "
            "masked at the M and N edges: no staging, no tensor map, no bulk group; any output pitch",
            "the stores need no wait before the next tile: the registers are free once the values are issued",
        )
    if smem.c_ring:
        R, rows = smem.c_ring, bm if _pingpong(plan) else bm // consumers
        early = min(R, smem.c_panels)
        if _pingpong(plan):  # every panel at its own tile's end: the other consumer's main loop hides the stores
            schedule = (f"schedule: all {smem.c_panels} panels at the end of the consumer's own tile, panel p after "
                        f"the store that last read buffer p % {R} (wait_group.read above), while the other consumer "
                        "runs its main loop; none is deferred")
        else:
            schedule = (f"schedule: panels 0..{early - 1} at the end of the tile (their buffers were last read a tile "
                        f"ago); panels {early}..{smem.c_panels - 1} stay in registers, packed to the output dtype, and go "
                        "out one per K iteration of the next tile, each right after that iteration's wgmma is issued "
                        "(after the CTA's last tile, at once), so the tensor cores are not idle while they drain")
        issuers = ", ".join(str(t) for t in plan.consumers.release_threads)
        return (
            f"each consumer warpgroup w has its own ring of {R} one-panel buffers ({rows} rows x 128 B) and its own store "
            f"issuer, its thread 0 (threads {issuers}); it stores its {rows} x {bn} fragment as {smem.c_panels} panels, "
            f"panel counter q running across tiles, buffer q % {R}",
            f"per panel: the issuer waits cp.async.bulk.wait_group.read {R - 1} (the store that last read this buffer has "
            f"finished reading it), then named barrier 2 + w over the warpgroup's 128 threads",
            "the warpgroup writes the panel's 64 columns, converted to the input dtype, into the buffer (128B swizzle); "
            "fence.proxy.async.shared::cta; named barrier 2 + w again",
            f"the issuer: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (c map, box {box}) at "
            + ("(n0 + 64p, m0) of its own tile" if _pingpong(plan) else f"(n0 + 64p, m0 + {rows}w)")
            + ", then cp.async.bulk.commit_group: one bulk group per panel; out-of-bounds rows/columns are clipped",
            schedule,
            "no consumer waits for another's store, and the producer keeps loading the next tile's stages meanwhile; "
            "each issuer waits cp.async.bulk.wait_group.read 0 before the CTA exits",
        )
    return (
        (("consumers, after wgmma.wait_group 0 and a __syncthreads (the staging overlays the operand stages: every "
          "warp must have finished reading them; the ring has drained, no load is in flight) "
          if smem.c_aliases_stages else
          f"consumers (persistent: after the store issuer's (thread {store_thread}) cp.async.bulk.wait_group.read 0 "
          "for the previous tile and a barrier) ")
         + "write the accumulators, converted to the input dtype, into C staging (128B-swizzled panels)"),
        ("fence.proxy.async.shared::cta by every writing thread, then "
         + (f"named barrier 1 over the {128 * consumers} consumer threads (the producer warpgroup does not take part; "
            f"the store issuer, thread {store_thread}, is one of them)" if pw else
            "__syncthreads (every thread is a consumer; thread 0, the store issuer, among them)")),
        f"store issuer (thread {store_thread}): {smem.c_panels} x cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
        f"(c map, box {box}), coordinates (n0 + 64p, m0); out-of-bounds rows/columns are clipped",
        f"store issuer (thread {store_thread}): cp.async.bulk.commit_group",
        f"store issuer (thread {store_thread}): cp.async.bulk.wait_group.read 0 before C staging is written again "
        "(next tile) or the CTA exits",
    )


def _schedule_notes(plan: Plan, ar) -> tuple[str, ...]:
    sc, smem, cluster = plan.schedule, plan.smem, plan.cluster
    m_tiles, n_tiles = sc.m_tiles, sc.n_tiles
    if not plan.persistent:
        return (f"one CTA per output tile: grid (N tiles, M tiles, 1) = {sc.grid}, no cluster; "
                "CTA (x, y) computes rows y*BM.., columns x*BN..",)
    units_m = -(-m_tiles // cluster)
    units = units_m * n_tiles
    resident = max(1, ar.sm_count * smem.ctas_per_sm // cluster)  # as plan_gemm sizes the grid
    ctas, unit_stride = sc.ctas, sc.ctas // cluster
    walk = ", ".join(f"({um * cluster}, {tn})" for um, tn in
                     (unit_coords(u, units_m, n_tiles) for u in range(0, units, unit_stride)[:4]))
    notes = [
        f"persistent: 1-D grid of min({units} work units, {resident} resident clusters) x {cluster} CTA(s) = {ctas} CTAs, "
        f"cluster dims {sc.cluster_dims}; a work unit is a stack of {cluster} M tile(s) x one N tile "
        f"({units_m} unit row(s) x {n_tiles} N tiles); a CTA takes unit = blockIdx.x / {cluster}, then steps by "
        f"gridDim.x / {cluster} = {unit_stride}; CTA rank r computes M tile unit_m * {cluster} + r; "
        f"the K iteration counter (stage, parity) continues across tiles",
        f"grouped order (tile_scheduler.cuh, {GROUP_M} unit rows per group): unit u -> group u / ({GROUP_M} x {n_tiles}), "
        f"unit_m walks down the group's rows first, then N: the clusters resident at once share rows of A and columns of B in L2",
        f"CTA 0 computes tiles (M tile, N tile) {walk}{', ...' if units > 4 * unit_stride else ''}",
        f"resident clusters: {ar.sm_count} SMs x {smem.ctas_per_sm} CTA(s)/SM / {cluster}, a hypothesis; the launch "
        "asks the occupancy API (cuOccupancyMaxActiveClusters), which also knows a cluster must fit one GPC",
    ]
    if sc.stream_k is not None:
        s = sc.stream_k
        tail = StreamKTail(units=s["units"], clusters=s["clusters"], k_tiles=s["k_tiles"], first_unit=s["whole_units"])
        if tail.tail_units:
            notes.append(
                f"stream-K tail (stream_k.cuh): units [0, {tail.first_unit}) whole, {unit_stride} apart; the last "
                f"{tail.tail_units} units' {tail.total} K iterations split evenly, cluster c taking "
                f"[floor(c x {tail.total} / {unit_stride}), floor((c + 1) x {tail.total} / {unit_stride})) "
                f"(~{tail.total / unit_stride:.1f} each); a tile shared by up to {tail.max_contributors} clusters is "
                f"finished by the last to arrive (fp32 partials in a per-stream workspace of "
                f"{tail.workspace_floats(cluster, plan.consumers.warpgroups, plan.tile[1]) * 4 / 2**20:.1f} MiB, summed "
                "in K order; int32 arrival counters zeroed on the stream before each launch)")
        else:
            notes.append(f"stream-K tail: not split ({units} units on {unit_stride} clusters: no partial wave, or "
                         f"it would leave at most {plan.stream_k_min_idle:.0%} of the clusters idle, or fewer tail K "
                         "iterations than clusters); every unit is computed whole")
    if m_tiles % cluster:
        notes.append(f"{m_tiles} M tiles is not a multiple of the cluster ({cluster}): in the last unit row, ranks "
                     f">= {m_tiles % cluster} compute a tile wholly below M: they still load (zero fill), multicast their B "
                     "slice and release stages; their store writes nothing (the box is clipped)")
    return tuple(notes)


def _assumptions(ar) -> tuple[str, ...]:
    return (
        "from the user: shape, dtype, tile, stages, cluster, consumers, arch",
        "contract: a (M, K) and b (N, K) row-major, c = a @ b.T row-major, fp32 accumulation",
        "hypothesis: base pointers 16-byte aligned (checked again by encode_kwargs(base_ptr)); torch allocations are "
        "256-byte aligned",
        f"hypothesis: {ar.sm_count} SMs ({ar.sm_count_source}) for grid and wave counts",
        "the timeline picture is an idealised model (equal load and MMA durations), not a measurement",
    )


def _risks(plan: Plan) -> tuple[str, ...]:
    smem, suit = plan.smem, plan.suitability
    risks = [
        "stage count: the best PIPE_DEPTH must be measured on real shapes; this plan only proves it fits",
        f"shared memory: {smem.total_bytes} bytes leave {smem.ctas_per_sm} CTA(s) per SM (limited by {smem.ctas_per_sm_limit})",
        "fallback when TMA is refused (strides, alignment): the vectorized thread copy of level 3, or pad K / N to a "
        "multiple of 8",
    ]
    if plan.cluster > 1:
        risks.append("cluster: a CTA must not exit while a peer may multicast into it or arrive on its barriers "
                     "(end with a cluster barrier)")
    if not suit.worthwhile:
        risks.append(f"not worth it at this size: {suit.alternative}")
    return tuple(risks)


def _validation(stages: int) -> tuple[str, ...]:
    return (
        "correctness: asymmetric shapes with tails in M, N and K (e.g. 1000 x 1032 x 520), K tiles = 1, < S, not a "
        "multiple of S",
        "protocol: gemm-ladder audit on this ring (each handoff one producer, one consumer; phases from the ledger)",
        f"falsifiable: with S = {stages} the MMA lane should stay busy once the ring is full; compare the measured time "
        f"of S = 1 vs S = {stages} on a large K (if equal, the loads are not overlapping the MMA)",
    )
