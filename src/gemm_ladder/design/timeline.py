"""The three-phase timeline of one output tile: prologue, steady state, drain.

* Prologue: the issuer fills the ring: loads for k = 0 .. min(S, K tiles) - 1 (every stage starts empty,
  so its first empty wait, parity 1, passes at once).
* Steady state: per K iteration k, the consumers wait full[k % S], issue the MMA for k and release a
  stage; the freed stage receives the next load. Two release modes:

  - ``previous`` (S >= 2): ``wgmma.wait_group 1`` keeps MMA k in flight and proves MMA k-1 done, so
    the stage of k-1 is released and load k + S - 1 goes into it;
  - ``current`` (S == 1, level 4): ``wgmma.wait_group 0`` then release the stage of k, load k + S.

* Drain: the iterations that issue no load (the K tiles are all requested), the last MMA completes,
  the epilogue writes C staging, the issuer stores it with TMA (commit_group) and waits
  (wait_group.read 0) before the staging is written again or the CTA exits.

Persistent kernels run this once per tile with the K iteration counter carried across tiles (stage and
parity come from the global counter, see :func:`gemm_ladder.design.ring.phase_ledger`).

:func:`simulate` is an idealised model (fixed load, MMA, epilogue and store durations; loads share one
TMA/DRAM lane) to draw the picture; it predicts the shape of the overlap, not a time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimelineRow:
    """One row: a prologue load, a K iteration, or an epilogue step."""

    phase: str  # "prologue" | "steady" | "drain"
    iteration: int | None  # K iteration (None for prologue loads and epilogue steps)
    producer: str
    consumer: str
    epilogue: str
    stage: int | None
    parity: int | None  # parity of the full[stage] phase this row fills (prologue) or waits on (iterations)
    loads: tuple[int, ...] = ()  # K tiles whose loads this row issues

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["loads"] = list(self.loads)
        return out


def release_mode(stages: int) -> str:
    return "previous" if stages >= 2 else "current"


def next_load(k: int, stages: int, mode: str) -> int | None:
    """The K tile whose load iteration k issues (before bounds), or None."""
    if mode == "previous":
        return k + stages - 1 if k >= 1 else None
    return k + stages


def build_timeline(*, k_tiles: int, stages: int, expect_tx: int, c_panels: int, k_steps: int, cluster: int = 1,
                   persistent: bool = False, mma: str = "wgmma", c_from_registers: bool = False,
                   elide: bool = False) -> tuple[TimelineRow, ...]:
    """The rows for one output tile with ``k_tiles`` K iterations and ``stages`` stages.

    ``c_from_registers``: the drain stores the accumulators from registers (no staging, no TMA store).
    ``elide``: leave out the rows of :func:`elided_iterations` (what :func:`elide_rows` would drop), so
    that the rows' number does not grow with K.
    """
    S, KT = stages, k_tiles
    mode = release_mode(S)
    rows: list[TimelineRow] = []
    mc = f", B slice multicast to {cluster} CTAs" if cluster > 1 else ""
    mma_issue = "wgmma" if mma == "wgmma" else "tcgen05.mma"

    def load_text(j: int) -> str:
        s, r = j % S, j // S
        return (f"wait empty[{s}] parity {(r & 1) ^ 1}{' (passes: ring starts empty)' if r == 0 else ''}; "
                f"arrive.expect_tx(full[{s}], {expect_tx}); TMA load A, B k={j} -> stage {s}{mc}")

    for j in range(min(S, KT)):
        rows.append(TimelineRow("prologue", None, load_text(j), "-", "-", j, (j // S) & 1, (j,)))

    # the last iteration that issues a load: steady state runs through it, drain follows
    last_loading = max((k for k in range(KT) if (nl := next_load(k, S, mode)) is not None and nl < KT), default=None)
    gap = elided_iterations(KT) if elide else None
    for k in range(KT):
        if gap is not None and k in gap:
            continue
        s, p = k % S, (k // S) & 1
        consumer = f"wait full[{s}] parity {p}; {mma_issue} k={k} ({k_steps} x k16)"
        if mma == "wgmma":
            if mode == "previous":
                consumer += "; wgmma.wait_group 1"
                if k >= 1:
                    consumer += f"; release stage {(k - 1) % S} (k={k - 1}): arrive empty[{(k - 1) % S}]"
            else:
                consumer += f"; wgmma.wait_group 0; release stage {s} (k={k}): arrive empty[{s}]"
        else:
            consumer += f"; tcgen05.commit -> empty[{s}] (arrives when this MMA has read stage {s})"
        j = next_load(k, S, mode)
        if j is not None and j < KT:
            producer, loads = load_text(j), (j,)
        elif j is None:
            producer, loads = "- (no stage freed yet: MMA 0 still in flight)", ()
        else:
            producer, loads = "no load: all K tiles requested", ()
        phase = "steady" if last_loading is not None and k <= last_loading else "drain"
        epilogue = "-"
        rows.append(TimelineRow(phase, k, producer, consumer, epilogue, s, p, loads))

    last_stage = (KT - 1) % S
    if mma == "wgmma":
        finish = "wgmma.wait_group 0 (last MMA done)"
        if mode == "previous":
            finish += f"; release stage {last_stage} (k={KT - 1}): arrive empty[{last_stage}]"
    else:
        finish = "tcgen05.commit -> accumulator barrier; wait it; tcgen05.ld the accumulator from tensor memory"
    if c_from_registers:
        rows.append(TimelineRow(
            "drain", None, "-", finish,
            "every consumer thread converts its accumulators (fp32 -> output dtype) and stores them with st.global, "
            "masked at the M and N edges; nothing to drain", None, None))
        return tuple(rows)
    staging_wait = ("cp.async.bulk.wait_group.read 0 already done for the previous tile; " if persistent else "")
    rows.append(TimelineRow(
        "drain", None, "-", finish,
        f"{staging_wait}write accumulators (fp32 -> input dtype) into C staging, 128B-swizzled panels; "
        "fence.proxy.async.shared::cta; barrier over the consumer threads", None, None))
    rows.append(TimelineRow(
        "drain", None, f"TMA store C panels 0..{c_panels - 1} ({c_panels} stores); cp.async.bulk.commit_group", "-",
        "store in flight (no byte count: stores complete through the bulk async-group)", None, None))
    end = ("next tile's epilogue" if persistent else
           "the CTA exits" + (" (after barrier.cluster.arrive/wait: no CTA leaves while a peer may still multicast into it "
                              "or arrive on its barriers)" if cluster > 1 else ""))
    rows.append(TimelineRow(
        "drain", None, "cp.async.bulk.wait_group.read 0", "-",
        f"the staging buffer may be written again / {end}", None, None))
    return tuple(rows)


#: Iterations shown at each end when a timeline is elided (table and picture): the first HEAD and the
#: last TAIL K iterations are drawn, the ones between are summarised by one "omitted" marker.
HEAD_ITERATIONS = 6
TAIL_ITERATIONS = 6


def elided_iterations(k_tiles: int, head: int = HEAD_ITERATIONS, tail: int = TAIL_ITERATIONS) -> range | None:
    """The K iterations left out of a drawn timeline (None when all ``k_tiles`` fit in head + tail + 1)."""
    if k_tiles <= head + tail + 1:
        return None
    return range(head, k_tiles - tail)


def elide_rows(rows, head: int = HEAD_ITERATIONS, tail: int = TAIL_ITERATIONS) -> list:
    """``rows`` (TimelineRow) with the iterations of :func:`elided_iterations` replaced by one ``None``
    marker; prologue and epilogue rows are kept."""
    k_tiles = sum(1 for r in rows if r.iteration is not None)
    gap = elided_iterations(k_tiles, head, tail)
    if gap is None:
        return list(rows)
    out: list = []
    for r in rows:
        if r.iteration is not None and r.iteration in gap:
            if r.iteration == gap.start:
                out.append(None)
            continue
        out.append(r)
    return out


@dataclass(frozen=True)
class Bar:
    lane: str
    start: float
    end: float
    label: str
    stage: int | None
    k: int | None = None  # the K tile a load or MMA bar belongs to (None for epilogue and store)


def simulate(*, k_tiles: int, stages: int, load: float = 1.0, mma: float = 1.0, epilogue: float = 1.0,
             store: float = 1.0) -> list[Bar]:
    """Idealised schedule of one tile: loads serialise on one lane, MMAs on another, ring rules enforced."""
    S, KT = stages, k_tiles
    mode = release_mode(S)
    free_at = [0.0] * S  # when each stage becomes free for its next load
    load_end = [0.0] * KT
    bars: list[Bar] = []
    lane_free = 0.0
    mma_end_prev = 0.0
    loads_issued = 0
    mma_start = [0.0] * KT
    mma_done = [0.0] * KT

    def issue(j: int, when: float) -> None:
        nonlocal lane_free, loads_issued
        start = max(when, lane_free, free_at[j % S])
        lane_free = start + load
        load_end[j] = lane_free
        bars.append(Bar("TMA loads", start, lane_free, f"k{j}", j % S, j))
        loads_issued += 1

    for j in range(min(S, KT)):
        issue(j, 0.0)
    for k in range(KT):
        start = max(load_end[k], mma_end_prev)
        mma_start[k] = start
        mma_end_prev = mma_done[k] = start + mma
        bars.append(Bar("MMA", start, start + mma, f"k{k}", k % S, k))
        if mode == "previous":
            if k >= 1:
                free_at[(k - 1) % S] = max(mma_done[k - 1], start)
                j = k + S - 1
                if j < KT:
                    issue(j, start)
        else:
            free_at[k % S] = mma_done[k]
            j = k + S
            if j < KT:
                issue(j, mma_done[k])
    t = mma_end_prev
    bars.append(Bar("epilogue", t, t + epilogue, "C -> smem", None))
    bars.append(Bar("TMA store", t + epilogue, t + epilogue + store, "store + wait", None))
    return bars


# --- the picture of one CTA's work: what each level adds ---------------------------------------
#
# :func:`simulate` above draws one tile's load and MMA lanes, the same picture for every ring. The
# model below follows one CTA (and, for a cluster, its peer) through everything the plan adds:
# whole tiles back to back with the ring position carried across the boundary (persistent), a
# producer warpgroup apart from the consumers, a peer CTA whose release gates every refill
# (cluster), several consumer warpgroups with per-consumer panel stores overlapped with the next
# tile, and the stream-K tail piece with its partial-sum fixup. Durations are idealised (time
# units: one 128x128x64 K tile's load = its MMA = 1), to show the order and overlap of the steps,
# not their measured times.

#: Output rows and columns of the unit of work (a 128x128 tile) whose K tile's load and MMA take 1.
UNIT_TILE = 128 * 128
#: Columns of one output panel of a per-consumer staging ring (c_ring), as the designer lays it out.
PANEL_COLUMNS = 64
#: Idealised time of packing the accumulators to the output dtype (registers only).
PACK_TIME = 0.25
#: Idealised time of writing a tile's fp32 partial, or of summing the partials (stream-K fixup).
FIXUP_TIME = 1.0
#: How much later (idealised) the cluster peer's operands land (its A comes from elsewhere in L2), so
#: that a refill visibly waits for the later of the two CTAs' releases.
PEER_SKEW = 0.5
#: Whole tiles simulated at most (the rest are said, not drawn: the ring position stays exact).
MAX_WHOLE_TILES = 3
#: K iterations drawn at each end of a tile or tail piece in :func:`elide`.
PICTURE_HEAD, PICTURE_TAIL = 3, 3
#: Drawn width of an elided stretch, and the shortest empty stretch worth eliding (time units).
GAP_WIDTH, MIN_GAP = 2.0, 1.0


@dataclass(frozen=True)
class TimelineConfig:
    """What the picture of one CTA needs from a plan (see :meth:`from_plan`).

    ``whole_tiles``: whole tiles (work units) CTA 0 computes; ``tail``: its stream-K pieces
    (:class:`gemm_ladder.design.stream_k.Segment`), after the whole tiles; ``first_tail_position``:
    the ring position (K tiles consumed before) of the tail's first K tile.
    """

    k_tiles: int
    stages: int
    tile: tuple[int, int, int] = (128, 128, 64)
    whole_tiles: int = 1
    persistent: bool = False
    producer_warpgroup: bool = False
    consumers: int = 1
    cluster: int = 1
    c_ring: int = 0
    c_aliases_stages: bool = False
    release_previous: bool = True  # wgmma.wait_group 1: stage k-1 is released once MMA k is issued
    tail: tuple = ()
    tail_k_tiles: int = 0

    @classmethod
    def from_plan(cls, plan) -> "TimelineConfig":
        """The configuration of a :class:`gemm_ladder.design.plan.Plan` (read by attribute, no import:
        the plan module imports this one)."""
        from gemm_ladder.design.stream_k import StreamKTail

        sc = plan.schedule
        whole, tail = 1, ()
        if plan.persistent:
            clusters = max(1, sc.ctas // plan.cluster)
            units = -(-sc.m_tiles // plan.cluster) * sc.n_tiles
            first_tail = units
            if sc.stream_k and sc.stream_k.get("tail_units"):
                first_tail = sc.stream_k["whole_units"]
                tail = tuple(StreamKTail(units, clusters, sc.k_tiles, first_tail).segments(0))
            whole = len(range(0, first_tail, clusters))
        return cls(k_tiles=sc.k_tiles, stages=plan.stages, tile=tuple(plan.tile), whole_tiles=whole,
                   persistent=plan.persistent, producer_warpgroup=plan.consumers.producer_warpgroup,
                   consumers=plan.consumers.warpgroups, cluster=plan.cluster, c_ring=plan.smem.c_ring,
                   c_aliases_stages=plan.smem.c_aliases_stages,
                   # "two_back" drawn as "previous": the picture's release of k - 1 is one K tile early there
                   release_previous=plan.ring.release_mode in ("previous", "two_back") and plan.arch == "sm_90a",
                   tail=tail, tail_k_tiles=sc.k_tiles)


@dataclass(frozen=True)
class Step:
    """One bar of the picture: ``kind`` is load, mma, epilogue, store, pack, panel, partial or fixup.

    ``segment`` and ``iteration`` say which tile (or tail piece) and which of its K iterations the bar
    belongs to (a deferred panel belongs to the iteration it overlaps), for :func:`elide`.
    """

    lane: str
    start: float
    end: float
    label: str
    kind: str
    stage: int | None = None
    segment: int | None = None
    iteration: int | None = None
    thin: bool = False  # drawn half height: work that overlaps the bar beside it on the same lane


@dataclass(frozen=True)
class Mark:
    """A vertical line (``to_lane`` None) or an arrow from (``time``, ``lane``) to (``to_time``, ``to_lane``);
    ``segment``: the tile or piece it belongs to (it goes when that is elided)."""

    time: float
    text: str
    lane: str | None = None
    to_time: float | None = None
    to_lane: str | None = None
    segment: int | None = None


@dataclass(frozen=True)
class Segment:
    """Consecutive K tiles of one output tile in CTA 0's work: a whole tile or a stream-K piece.

    ``positions``: the ring position (K tiles consumed before) of each K tile; ``first_k``: the K
    tile the piece starts at; a piece is contributor ``mine`` (from 0) of ``contributors``.
    """

    index: int
    name: str
    positions: tuple[int, ...]
    whole: bool
    first_k: int = 0
    contributors: int = 1
    mine: int = 0
    unit: int | None = None


@dataclass(frozen=True)
class PipelinePicture:
    """Lanes (top to bottom), bars, marks, the segments the bars belong to, elided stretches
    ((start, end, text) in drawn time) and the legend's lines: what the picture shows."""

    lanes: tuple[str, ...]
    steps: tuple[Step, ...]
    marks: tuple[Mark, ...]
    segments: tuple[Segment, ...]
    notes: tuple[str, ...]
    whole_tiles: int = 1
    gaps: tuple[tuple[float, float, str], ...] = ()

    @property
    def end(self) -> float:
        return max(s.end for s in self.steps)


def tile_segments(cfg: TimelineConfig) -> tuple[Segment, ...]:
    """CTA 0's whole tiles (at most MAX_WHOLE_TILES simulated) and then its stream-K pieces."""
    out: list[Segment] = []
    simulated = min(cfg.whole_tiles, MAX_WHOLE_TILES) if cfg.persistent else 1
    for t in range(simulated):
        out.append(Segment(len(out), f"tile {t}", tuple(range(t * cfg.k_tiles, (t + 1) * cfg.k_tiles)), True))
    position = cfg.whole_tiles * cfg.k_tiles  # exact, whatever was simulated
    for piece in cfg.tail:
        n = piece.ke - piece.kb
        out.append(Segment(len(out), f"tail unit {piece.unit}", tuple(range(position, position + n)), False,
                           first_k=piece.kb, contributors=piece.contributors, mine=piece.mine, unit=piece.unit))
        position += n
    return tuple(out)


def pipeline_picture(cfg: TimelineConfig) -> PipelinePicture:
    """Simulate CTA 0 (and its cluster peer) over its tiles and tail: the whole picture, unelided.

    Rules (the kernels' protocol, idealised durations): a load goes into stage ``p % S`` once every
    consumer of every CTA in the cluster has released the K tile S positions earlier, one load at a
    time; a consumer's MMA of a K tile starts once its load has landed and its previous MMA (or
    epilogue) has ended; with ``release_previous`` the stage of K tile k - 1 is released when MMA k
    is issued (wait_group 1) and a tile's last stage when its MMA completes, else each stage when its
    MMA completes. Epilogue: the whole tile staged and then stored (a persistent CTA first waits for
    the previous store to have read the staging); or, with ``c_ring``, the accumulators packed, the
    first ``c_ring`` panels stored at once and the others staged one per K iteration of the next
    tile (a panel buffer is refilled once the store that last read it is done). A stream-K piece ends
    with its fp32 partial written, or, for the last contributor, the partials summed and the tile
    stored at once. Consumer warpgroups of one CTA run in step (drawn on each lane); the peer CTA's
    operands land PEER_SKEW later than CTA 0's.
    """
    bm, bn, _ = cfg.tile
    S, W = cfg.stages, cfg.consumers
    tile_work = bm * bn / UNIT_TILE
    load_t, mma_t = (bm + bn) / 256, tile_work  # bytes of A + B against 128 + 128 rows; the tile's MMA work
    panels = max(1, bn // PANEL_COLUMNS) if cfg.c_ring else 0
    panel_t = (bm // W) * PANEL_COLUMNS / UNIT_TILE
    segments = tile_segments(cfg)
    seq = [(seg, i, pos) for seg in segments for i, pos in enumerate(seg.positions)]
    n = len(seq)

    producer = "producer warpgroup: TMA loads" if cfg.producer_warpgroup else "thread 0: TMA loads"
    if W == 1:
        consumers = ["consumer warpgroup: MMA, epilogue" if cfg.producer_warpgroup else "warpgroup 0: MMA, epilogue"]
    else:
        consumers = [f"consumer {w + 1}: rows {w * (bm // W)}-{(w + 1) * (bm // W) - 1}" for w in range(W)]
    store_lane = "TMA stores (async)"
    peer = f"CTA 1: its {'consumers' if W > 1 else 'consumer'}" if cfg.cluster > 1 else None
    lanes = (producer, *consumers, store_lane, *((peer,) if peer else ()))
    ctas = range(cfg.cluster)

    steps: list[Step] = []
    marks: list[Mark] = []
    load_done = [0.0] * n
    released = [[0.0] * n for _ in ctas]
    done_upto = -1  # every CTA's release is known for positions <= done_upto
    ready = [0.0 for _ in ctas]
    state = {"lane_free": 0.0, "issued": 0, "store_free": 0.0, "staging_read": 0.0}
    panel_ends: list[float] = []  # CTA 0's panel stores, in order (one ring per consumer, in step)
    deferred: list[str] = []  # CTA 0's panels waiting for the next tile's K iterations
    told = set()

    def consumer_bar(r: int, start: float, end: float, label: str, kind: str, stage, seg: Segment, i: int,
                     thin: bool = False) -> None:
        for lane in (consumers if r == 0 else [peer]):
            steps.append(Step(lane, start, end, label, kind, stage, seg.index, i, thin))

    def store(start: float, duration: float, label: str, seg: Segment, i: int) -> float:
        begin = max(start, state["store_free"])
        state["store_free"] = begin + duration
        steps.append(Step(store_lane, begin, begin + duration, label, "store", None, seg.index, i))
        return begin + duration

    def stage_panel(now: float, label: str, seg: Segment, i: int, thin: bool = False) -> float:
        if len(panel_ends) >= cfg.c_ring:
            now = max(now, panel_ends[-cfg.c_ring])  # wait_group.read: the buffer's last store has read it
        consumer_bar(0, now, now + panel_t, label, "panel", None, seg, i, thin)
        panel_ends.append(store(now + panel_t, panel_t, label, seg, i))
        return now + panel_t

    def issue_until(j: int) -> None:
        while state["issued"] <= min(j, n - 1, done_upto + S):
            k = state["issued"]
            seg, i, pos = seq[k]
            free = max((released[r][k - S] for r in ctas), default=0.0) if k >= S else 0.0
            start = max(state["lane_free"], free)
            state["lane_free"] = load_done[k] = start + load_t
            steps.append(Step(producer, start, start + load_t, f"k{seg.first_k + i}", "load", pos % S, seg.index, i))
            if cfg.cluster > 1 and "multicast" not in told:
                told.add("multicast")
                marks.append(Mark(start + load_t, f"A + half of B per CTA; the B half is multicast to all {cfg.cluster} CTAs",
                                  lane=producer, to_time=start + load_t, to_lane=peer))
            if cfg.cluster > 1 and k >= S and "release" not in told and released[1][k - S] > released[0][k - S]:
                told.add("release")
                marks.append(Mark(released[1][k - S], f"refill of stage {pos % S} waits for the later release: "
                                  f"empty[s] counts {cfg.cluster} CTAs x {W} consumer(s)",
                                  lane=peer, to_time=start, to_lane=producer))
            state["issued"] += 1

    for k, (seg, i, pos) in enumerate(seq):
        issue_until(k)
        last = i == len(seg.positions) - 1
        for r in ctas:
            start = max(load_done[k] + PEER_SKEW * r, ready[r])
            end = ready[r] = start + mma_t
            if cfg.release_previous and i > 0:
                released[r][k - 1] = start
            if not cfg.release_previous or last:
                released[r][k] = end
            consumer_bar(r, start, end, f"k{seg.first_k + i}", "mma", pos % S, seg, i)
            if r == 0 and deferred:  # one panel of the previous tile per K iteration, beside its wgmma
                stage_panel(start, deferred.pop(0), seg, i, thin=True)
        done_upto = k if (last or not cfg.release_previous) else k - 1
        if i == 0 and seg.index > 0:
            first = min(s.start for s in steps if s.kind == "mma" and s.segment == seg.index)
            marks.append(Mark(first, f"{seg.name}: ring position {pos}, stage {pos % S}, parity {(pos // S) & 1} "
                                     "(carried)" if seg.whole else
                              f"stream-K: unit {seg.unit}, K tiles {seg.first_k}..{seg.first_k + len(seg.positions) - 1}"
                              f" of {cfg.tail_k_tiles}, contributor {seg.mine + 1} of {seg.contributors}",
                              segment=seg.index))
        if last:
            _epilogue(cfg, seg, i, segments, ctas, ready, consumer_bar, store, stage_panel, deferred, state,
                      tile_work, panels)
        issue_until(k + S)
    return PipelinePicture(lanes, tuple(steps), tuple(marks), segments, _notes(cfg), cfg.whole_tiles)


def _epilogue(cfg, seg, i, segments, ctas, ready, consumer_bar, store, stage_panel, deferred, state, tile_work,
              panels) -> None:
    """The end of one tile or tail piece, for every CTA (see :func:`pipeline_picture`)."""
    follows = seg.index + 1 < len(segments)
    for r in ctas:
        now = ready[r]
        if not seg.whole and seg.contributors > 1:
            last = seg.mine == seg.contributors - 1
            label, kind = ("sum partials", "fixup") if last else ("partial out", "partial")
            consumer_bar(r, now, now + FIXUP_TIME, label, kind, None, seg, i)
            now += FIXUP_TIME
            if not last:
                ready[r] = now
                continue
        if cfg.c_ring:
            consumer_bar(r, now, now + PACK_TIME, "pack", "pack", None, seg, i)
            now += PACK_TIME
            labels = [f"p{p}" for p in range(panels)]
            later = labels[cfg.c_ring:] if seg.whole and follows else []
            if r == 0:
                for label in labels[:len(labels) - len(later)]:
                    now = stage_panel(now, label, seg, i)
                deferred[:] = later
            else:
                now += (len(labels) - len(later)) * tile_work / panels
                consumer_bar(r, ready[r] + PACK_TIME, now, "panels", "panel", None, seg, i)
            ready[r] = now
            continue
        start = max(now, state["staging_read"]) if cfg.persistent and r == 0 else now
        consumer_bar(r, start, start + tile_work, "C→smem", "epilogue", None, seg, i)
        if r == 0:
            state["staging_read"] = store(start + tile_work, tile_work, "store", seg, i)
        ready[r] = start + tile_work


def _notes(cfg: TimelineConfig) -> tuple[str, ...]:
    """What the picture shows, one line each (the legend)."""
    out = [f"colour = stage of the {cfg.stages}-stage ring; idealised time: one 128x128x64 K tile's load = its MMA = 1"]
    if not cfg.release_previous:
        out.append("each load waits for the MMA before it to finish (wait_group 0, then release): no overlap")
    elif not cfg.persistent:
        out.append(f"loads run up to {cfg.stages - 1} K tiles ahead of the MMA; "
                   + ("the C staging lies over the drained stages" if cfg.c_aliases_stages else
                      "the epilogue follows the last MMA"))
    if cfg.persistent:
        out.append(f"persistent: CTA 0 computes {cfg.whole_tiles} whole tile(s); the ring position carries stage and "
                   "parity across each tile boundary; the next tile's loads run during this tile's epilogue")
    if cfg.producer_warpgroup:
        out.append("warp specialized: a producer warpgroup only issues loads (setmaxnreg down); the consumer "
                   "warpgroup(s) compute and store")
    if cfg.cluster > 1:
        out.append(f"cluster of {cfg.cluster}: each CTA loads its A and half of B, multicast to all; a stage is "
                   f"refilled once every CTA has released it (CTA 1's operands drawn landing {PEER_SKEW} later)")
    if cfg.consumers > 1:
        out.append(f"{cfg.consumers} consumer warpgroups share each stage, {cfg.tile[0] // cfg.consumers} rows each"
                   + (f"; each stores its panels through its own ring of {cfg.c_ring} buffers, the last ones during "
                      "the next tile's K iterations (thin bars)" if cfg.c_ring else ""))
    if cfg.tail:
        out.append("stream-K tail: after its whole tiles, CTA 0 computes a share of the last wave's K tiles; a tile "
                   "with several contributors is summed by the last one to arrive")
    return tuple(out)


def elide(picture: PipelinePicture, head: int = PICTURE_HEAD, tail: int = PICTURE_TAIL,
          whole_tiles: int = 2) -> PipelinePicture:
    """The picture with long stretches left out, so that its width no longer grows with K.

    Kept: the first ``whole_tiles`` whole tiles and every stream-K piece, and of each the first
    ``head`` and last ``tail`` K iterations with its epilogue. Each empty stretch longer than
    MIN_GAP that this opens is drawn GAP_WIDTH wide and named in ``gaps``.
    """
    by_index = {seg.index: seg for seg in picture.segments}

    def dropped(s: Step) -> bool:
        if s.segment is None:
            return False
        seg = by_index[s.segment]
        if seg.whole and seg.index >= whole_tiles:
            return True
        count = len(seg.positions)
        last = s.iteration == count - 1 and s.kind not in ("load", "mma")  # the epilogue
        return count > head + tail + 1 and not last and head <= (s.iteration or 0) < count - tail

    kept = [s for s in picture.steps if not dropped(s)]
    gone = [s for s in picture.steps if dropped(s)]
    gaps: list[tuple[float, float]] = []
    spans = sorted((s.start, s.end) for s in kept)
    reach = spans[0][1]
    for a, b in spans[1:]:
        if a - reach > MIN_GAP and any(g.start < a and g.end > reach for g in gone):
            gaps.append((reach, a))
        reach = max(reach, b)
    if any(g.end > reach for g in gone):  # whole tiles left out after the last one drawn
        gaps.append((reach, max(g.end for g in gone)))

    def moved(t: float) -> float:
        out = t
        for a, b in gaps:
            if t >= b:
                out -= (b - a) - GAP_WIDTH
            elif t > a:
                out -= (t - a) * (1 - GAP_WIDTH / (b - a))
        return out

    named = tuple((moved(a), moved(a) + GAP_WIDTH,
                   _omitted([g for g in gone if g.start < b and g.end > a], by_index, picture.whole_tiles, whole_tiles,
                            head, tail))
                  for a, b in gaps)
    steps = tuple(Step(s.lane, moved(s.start), moved(s.end), s.label, s.kind, s.stage, s.segment, s.iteration, s.thin)
                  for s in kept)
    marks = tuple(Mark(moved(m.time), m.text, m.lane, None if m.to_time is None else moved(m.to_time), m.to_lane,
                       m.segment)
                  for m in picture.marks
                  if m.segment is None or not (by_index[m.segment].whole and m.segment >= whole_tiles))
    return PipelinePicture(picture.lanes, steps, marks, picture.segments, picture.notes, picture.whole_tiles, named)


def _omitted(inside: list[Step], by_index: dict[int, Segment], whole_tiles: int, kept: int, head: int,
             tail: int) -> str:
    """What an elided stretch leaves out, by the rule of :func:`elide`: 'k 3..60 of tile 0', 'tiles 2..14'."""
    parts = []
    for index in sorted({s.segment for s in inside if s.segment is not None}):
        seg = by_index[index]
        if seg.whole and index >= kept:
            parts.append(f"tiles {index}..{whole_tiles - 1}" if whole_tiles - 1 > index else f"tile {index}")
        elif len(seg.positions) > head + tail + 1:
            parts.append(f"k {seg.first_k + head}..{seg.first_k + len(seg.positions) - tail - 1} of {seg.name}")
    return "; ".join(parts) or "omitted"
