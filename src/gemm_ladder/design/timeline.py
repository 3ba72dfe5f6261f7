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
                   persistent: bool = False, mma: str = "wgmma", c_from_registers: bool = False) -> tuple[TimelineRow, ...]:
    """The rows for one output tile with ``k_tiles`` K iterations and ``stages`` stages.

    ``c_from_registers``: the drain stores the accumulators from registers (no staging, no TMA store).
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
    for k in range(KT):
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
