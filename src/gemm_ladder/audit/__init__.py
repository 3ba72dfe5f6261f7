"""The pipeline protocol auditor: a bounded model check of a stage-ring protocol.

    >>> from gemm_ladder.audit import audit, protocol_for_level, protocol_from_plan
    >>> audit(protocol_for_level(8, k_iters=3, tiles=2, stages=4)).ok
    True

``audit(protocol)`` explores **every interleaving** of the protocol's roles (their programs run one
op at a time, in any order) and of the asynchronous events the hardware adds: each TMA load landing
(it writes the buffers, then completes its bytes on the barrier of each destination CTA; a multicast
lands in all its CTAs as one event unless ``split_multicast``). A TMA store needs no event: nothing
in the protocol waits for it but ``wait_group``, so it is taken to read its staging buffer until the
``wait_group.read`` that covers its bulk group (the hardware may finish sooner; a write before that
wait is a race in some run, so it is reported). The search is breadth first over states,
with every visited state remembered, so each state is expanded once and each counterexample is a
shortest one. One sound partial-order reduction: an epilogue op (write staging, store, wait_group)
of a role that alone uses its staging buffers commutes with everything else, so it is taken at once
instead of being interleaved.

**Reduced searches** (``reduce=True``, the default) decide first whether any violation is reachable,
visiting far fewer states; a violation is always reported from the full search
(:mod:`gemm_ladder.audit.reductions` gives the arguments and their preconditions).

It proves, for the bounds the protocol was unrolled for (see ``bounds`` in the result; the level
builders use small K iteration counts, 1..5, and tiles per CTA, 1..3):

* **no deadlock**: no reachable state where a program is unfinished and nothing can move;
* **no early overwrite**: a load is never issued into a buffer stage that one of the readers of its
  previous contents has not read yet (or is still reading);
* **no early read**: a read never sees a buffer whose load has not landed, nor data of another
  iteration than the one it expects (stale data after a phase error);
* **staging reuse**: the epilogue never writes an output staging buffer that a TMA store still reads
  (no ``wait_group.read`` of the writing role's bulk groups, each role has its own, covered that
  store's ``commit_group``), a store always sends the tile (panel) its role wrote there, and no CTA
  exits with a load or store in flight;
* **phases**: a wait never passes on an older phase of matching parity, and no waiter is ever two or
  more phases behind its barrier ("phase aliasing": ``try_wait.parity`` cannot tell phase n from n+2);
  with persistent tiles the same checks run over several tiles with the phase carried;
* **arrivals**: a barrier never receives more arrivals than its pending count (an arrival count too
  small for its arrivers);
* statically: each handoff barrier has exactly one producing role kind (arrivals, expect_tx and the TMA
  completions of the loads it issues) and one consuming role kind (waits).

mbarrier semantics follow the PTX ISA ("Parallel Synchronization and Communication Instructions:
mbarrier"): a barrier starts in phase 0 with ``arrival_count`` pending arrivals and tx-count 0; an
arrive decrements the pending count, expect_tx raises the tx-count, a TMA completion lowers it; when
both are zero the phase completes, its parity flips and the pending count resets.
``try_wait.parity(p)`` passes when the current phase's parity differs from p (the phase of parity p
has completed), so parity 1 passes at once on a fresh barrier.

What the model cannot see:

* the memory model and the proxies: ``fence.proxy.async`` between ``st.shared`` and a TMA store,
  ``fence.mbarrier_init``, acquire/release scopes of cluster arrivals are assumed right;
* real timing: only orderings; a protocol that is correct but slow looks the same as a fast one;
* hardware limits: the tx-count range (2^20 - 1) and the number of bulk groups in flight (a plan's
  byte counts against its tensor maps' boxes, and its stages against shared memory, are checked by
  :func:`check_plan`, outside the search);
* threads inside a role: a warpgroup is one program counter (``wgmma`` is ``.sync.aligned``), so races
  between the threads of one warpgroup (say, writing staging before the elected thread's wait_group
  returned, without a named barrier) are invisible; a ``consume`` op is one atomic read unless the
  program splits it into ``read_begin`` / ``read_end``;
* more K iterations or tiles than were unrolled: a bug that needs a longer run goes unseen. The
  command line and :func:`audit_plan` unroll at least 3 x stages K iterations per CTA, so that every
  stage is used three times (reused twice) and every barrier's parity wraps around
  (:func:`min_iterations`); ring protocols repeat with period 2 * stages iterations, so a longer run
  adds states, not cases (an argument, not a proof). The builders themselves take any bounds.

A designer plan is audited by :func:`audit_plan`: :func:`check_plan`'s arithmetic (expect_tx against
the bytes its tensor maps deliver per stage, arrival counts against the arrivers it names, the phase
ledger against the ring's initial phases, its stages against shared memory), then the search over
the ring it describes, each role's steps in the plan's ``ring.order``. docs/auditor.md says what each
check means and lists the seeded faults it rejects (tests/audit_faults.py).

The package, by concern: :mod:`~gemm_ladder.audit.protocol` (the model: roles, barriers, buffers,
ops, JSON), :mod:`~gemm_ladder.audit.ring` (one builder for every ring, from a :class:`RingConfig`),
:mod:`~gemm_ladder.audit.levels` and :mod:`~gemm_ladder.audit.plans` (the protocols of the ladder's
levels and of designer plans), :mod:`~gemm_ladder.audit.compiled`, :mod:`~gemm_ladder.audit.explorer`,
:mod:`~gemm_ladder.audit.reductions` and :mod:`~gemm_ladder.audit.search` (the model check),
:mod:`~gemm_ladder.audit.result` (what it returns). It reads a plan as JSON and imports nothing from
the designer. Command line: ``gemm-ladder audit``.
"""

from gemm_ladder.audit.levels import LEVELS, LevelRefused, protocol_for_level
from gemm_ladder.audit.plans import (PLAN_SCHEMA, PlanBoundsError, PlanFormatError, audit_plan, check_plan,
                                     min_iterations, plan_bounds, protocol_from_json, protocol_from_plan)
from gemm_ladder.audit.protocol import Barrier, Buffer, Op, Protocol, ProtocolError, Role
from gemm_ladder.audit.result import AuditResult, Violation
from gemm_ladder.audit.ring import RingConfig, build_ring_protocol
from gemm_ladder.audit.search import DEFAULT_MAX_STATES, TRACE_STEPS, audit, static_check

__all__ = [
    "DEFAULT_MAX_STATES", "LEVELS", "PLAN_SCHEMA", "TRACE_STEPS", "AuditResult", "Barrier", "Buffer", "LevelRefused",
    "Op", "PlanBoundsError", "PlanFormatError", "Protocol", "ProtocolError", "RingConfig", "Role", "Violation",
    "audit", "audit_plan", "build_ring_protocol", "check_plan", "min_iterations", "plan_bounds",
    "protocol_for_level", "protocol_from_json", "protocol_from_plan", "static_check",
]
