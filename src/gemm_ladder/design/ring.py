"""Roles and protocols: issuer, consumers, the load protocol (mbarrier + expect_tx), the store protocol
(bulk async-groups), and the stage ring with its phase ledger.

Sources:

* PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier": a phase completes when
  the pending arrival count and the transaction count both reach zero; ``mbarrier.arrive.expect_tx``
  ("expect-tx operation") raises the transaction count by the given bytes and then arrives;
  ``mbarrier.try_wait.parity`` with parity P waits for the completion of the phase whose parity is P,
  and on a freshly initialised barrier (current phase 0, incomplete) a wait for parity 1 returns at once
  (it refers to the "preceding" phase, considered complete).
* PTX ISA, "cp.async.bulk.tensor": loads complete on an mbarrier (``.mbarrier::complete_tx::bytes``),
  with ``.multicast::cluster`` delivering the same box (and its complete_tx) to every CTA in the mask;
  stores complete through bulk async-groups: ``cp.async.bulk.commit_group`` and
  ``cp.async.bulk.wait_group.read N`` (the source shared memory may be reused once reads are done).
* PTX ISA, "membar/fence": ``fence.proxy.async.shared::cta`` orders generic-proxy writes to shared
  memory (the epilogue's st.shared) before async-proxy reads (the TMA store).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Issuer:
    """The threads that issue TMA: one thread issues every load, one thread every store.

    As the ladder's kernels do it: thread 0 (warpgroup 0) initialises the barriers and issues every load
    and arrive.expect_tx. With a producer warpgroup (levels 7-9) warpgroup 0 is the producer and the
    stores are issued by thread 128, thread 0 of consumer warpgroup 0 (warpgroup 1); without one
    (levels 4-6) thread 0 is also a consumer and issues the stores too.
    """

    thread: int  # the load issuer's thread index within the CTA (always 0)
    warpgroup: str  # the load issuer's role: "producer" (warpgroup 0) or "consumer 0" (also computes)
    store_thread: int  # the TMA store issuer's thread index (0, or 128 with a producer warpgroup)
    store_warpgroup: str  # "consumer 0" (warpgroup 0 without a producer warpgroup, warpgroup 1 with one)
    store_threads: tuple[int, ...] = ()  # every TMA store issuer: (store_thread,), or thread 0 of each consumer (c_ring)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Consumers:
    """The threads that wait on full barriers and read the stages (MMA warpgroups).

    Consumer warpgroup c is CTA warpgroup ``first_warpgroup + c`` (1 + c after a producer warpgroup,
    else c); its thread 0 (``release_threads[c]``) arrives on the empty barriers.
    """

    warpgroups: int
    threads: int
    rows_per_warpgroup: int
    producer_warpgroup: bool
    threads_per_cta: int
    accumulator_registers: int  # fp32 accumulator registers per consumer thread (0 on sm_100a: TMEM)
    first_warpgroup: int  # CTA warpgroup index of consumer 0 (1 with a producer warpgroup, else 0)
    first_thread: int  # 128 * first_warpgroup
    release_threads: tuple[int, ...]  # thread 0 of each consumer warpgroup: the empty-barrier arrivers

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["release_threads"] = list(self.release_threads)
        return out


@dataclass(frozen=True)
class LoadProtocol:
    """Ready/free handshake of each stage of the ring."""

    full_arrival_count: int
    expect_tx_bytes: int
    a_box_bytes: int
    b_box_bytes: int
    b_boxes_per_stage: int  # TMA instructions landing in each CTA's B stage (one per cluster CTA)
    multicast_mask: int  # 0 without multicast
    empty_arrival_count: int
    a_boxes_per_stage: int = 1  # TMA instructions landing in each CTA's A stage (an MN-major A: one per 64 rows)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class StoreProtocol:
    """How C leaves shared memory: ``panels`` bulk async-group stores of ``panel_box``, never a byte count."""

    panels: int
    panel_box: tuple[int, int]
    panel_bytes: int

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["panel_box"] = list(self.panel_box)
        return out


@dataclass(frozen=True)
class LedgerRow:
    """What each side waits for at one K iteration (global index ``iteration`` across tiles)."""

    iteration: int
    stage: int
    round: int
    full_wait_parity: int  # consumer: mbarrier.try_wait.parity full[stage], this parity
    empty_wait_parity: int  # producer: mbarrier.try_wait.parity empty[stage], this parity, before loading
    empty_passes_immediately: bool

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def ledger_row(i: int, stages: int) -> LedgerRow:
    r = i // stages
    return LedgerRow(iteration=i, stage=i % stages, round=r, full_wait_parity=r & 1,
                     empty_wait_parity=(r & 1) ^ 1, empty_passes_immediately=(r == 0))


def phase_ledger(iterations: int, stages: int) -> tuple[LedgerRow, ...]:
    """Rows for iterations 0..iterations-1: stage = i % S, full parity = (i // S) & 1, empty parity = that ^ 1."""
    return tuple(ledger_row(i, stages) for i in range(iterations))


@dataclass(frozen=True)
class Ring:
    """The stage ring: depth, barriers with their init counts and initial phases, budget."""

    pipe_depth: int
    full_barriers: int
    full_init_count: int
    empty_barriers: int
    empty_init_count: int
    initial_phase: int  # every barrier starts in phase 0
    first_full_wait_parity: int
    first_empty_wait_parity: int
    release_mode: str  # "previous" (wgmma.wait_group 1, release k-1), "current" (wait_group 0, release k) or
    #                    "two_back" (a measuring build's wait_group 2, release k-2: library_gemm's release_lag)
    lookahead: int  # loads in flight ahead of the stage being computed, in steady state
    smem_total_bytes: int
    ctas_per_sm: int
    ledger: tuple[LedgerRow, ...]
    #: The order of each role's steps, as the kernels run them (the auditor builds its programs from it,
    #: so an order that breaks the protocol can be written into a plan and is found): the producer's per
    #: stage, the consumer's per K iteration, the store issuer's per staging buffer.
    order: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("producer", ("producer_acquire", "producer_commit")),
        ("consumer", ("consumer_wait", "mma", "consumer_release")),
        ("store", ("store_drain", "write_staging", "store_commit")))

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("ledger", "order")}
        out["ledger"] = [r.to_json() for r in self.ledger]
        out["order"] = {role: list(steps) for role, steps in self.order}
        return out
