"""The pipeline protocol auditor: a bounded model check of a stage-ring protocol.

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

**Reduced searches** (``reduce=True``, the default) decide whether any violation is reachable while
visiting far fewer states (level 8 at S=4, K=5, T=3: 1,090 states in 0.2 s; atomic blocks alone:
1.8 million states in 4 minutes; the full search spent 10 minutes on level 8's matrix before
reaching S=4, K=2, T=2). A clean, complete reduced search proves the protocol for its bounds; when
one finds a violation, the full search above runs to report the shortest counterexample of each
kind, so a report never depends on the reduction. A reduced search reports only real violations
(each of its transitions is a run of the full search's). The first of the two whose preconditions
hold is used:

1. **TMA completions in bursts** (on top of 2). A load lands only when a role is blocked on a wait
   for its barrier: one transition lands a set of in-flight loads whose bytes complete that phase,
   then runs the waiter's block. Any run can be rearranged so that each landing comes just before
   the first wait that needs its phase: delaying a landing changes no other step except to turn a
   read or reload of its buffers, or an exit, into a violation. A state with loads in flight stands
   for the states their landing leads to: a waiter whose barrier those loads could complete once
   more is reported as aliased. Preconditions: those of 2; each wait's parity is its phase's
   (phase % 2, so a wait passes only once its phase completed); and no arrival on a barrier that
   receives TMA bytes can complete a phase (whatever in-flight loads landed first), checked at each
   such arrival during the search, which otherwise starts again with 2.
2. **Atomic blocks** (Lipton's reduction). Each role's program is cut into blocks ``[wait] R* [N] L*``
   that run as one transition once the wait passes. R are right movers: wgmma reads (``consume``,
   ``read_begin``), whose delay past other roles' steps only makes a load into their buffer see them
   pending. L are left movers: TMA load issues and arrivals on a barrier that only counts plain
   arrivals of one count, whose advance only makes a load see unread or in-flight data, or completes
   a phase sooner (a waiter that had passed on the older phase is then aliased or stuck). N is one
   step of neither kind (``expect_tx``, other arrivals, ``read_end``, shared staging). A private
   staging op moves both ways and may sit anywhere. Precondition: every wait names its phase and
   each role's waits on a barrier ask for consecutive phases from -1 or 0, so no wait can pass two
   phases early before an earlier violation (the one case where an earlier arrival would hide a
   violation rather than expose one).

These arguments were checked against the full search on 3,900 random mutations of the level
protocols (one or two of: dropped, swapped and moved ops, flipped parities, shifted phases, changed
arrival counts, expected and loaded bytes, load stages and multicast destinations, read tags and
``pending``; a fifth with ``split_multicast``): each reduced search found a violation exactly when
the full search did. tests/test_audit.py keeps a sample (every single-op deletion of three level
protocols, and the seeded faults).

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
* hardware limits: the tx-count range (2^20 - 1), the number of bulk groups in flight, shared memory
  capacity, and whether the byte counts match the tensor maps' boxes (they are taken as given);
* threads inside a role: a warpgroup is one program counter (``wgmma`` is ``.sync.aligned``), so races
  between the threads of one warpgroup (say, writing staging before the elected thread's wait_group
  returned, without a named barrier) are invisible; a ``consume`` op is one atomic read unless the
  program splits it into ``read_begin`` / ``read_end``;
* more K iterations or tiles than were unrolled: a bug that needs a longer run goes unseen (ring
  protocols repeat with period 2 * stages iterations, so K up to 2 * stages + 1 covers the phase
  wrap-around, but this is an argument, not a proof).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field

from gemm_ladder.design.protocol import Op, Protocol

__all__ = ["audit", "AuditResult", "Violation", "ProtocolError", "static_check",
           "DEFAULT_MAX_STATES", "TRACE_STEPS"]

DEFAULT_MAX_STATES = 2_000_000
TRACE_STEPS = 20
_REDUCTION_NAMES = {"blocks": " (atomic blocks)", "bursts": " (atomic blocks, TMA completions in bursts)"}


class ProtocolError(ValueError):
    """The protocol is malformed (unknown barrier or buffer, stage out of range, ...)."""


class _ReductionVoid(Exception):
    """A reduced search met a state its soundness argument excludes: search with less reduction."""


@dataclass
class Violation:
    """One property that fails, with the last steps of a shortest run that shows it."""

    kind: str
    message: str
    trace: list[str] = field(default_factory=list)
    omitted_steps: int = 0

    def to_json(self) -> dict:
        return {"kind": self.kind, "message": self.message, "trace": list(self.trace),
                "omitted_steps": self.omitted_steps}

    def render(self) -> str:
        lines = [f"[{self.kind}] {self.message}"]
        if self.trace:
            if self.omitted_steps:
                lines.append(f"    ... {self.omitted_steps} earlier steps")
            width = len(str(self.omitted_steps + len(self.trace)))
            for i, step in enumerate(self.trace, start=self.omitted_steps + 1):
                lines.append(f"    {i:>{width}}. {step}")
        return "\n".join(lines)


@dataclass
class AuditResult:
    """``ok`` is True only when the whole bounded state space was explored and nothing failed."""

    protocol: str
    ok: bool
    complete: bool
    violations: list[Violation]
    states_explored: int
    transitions: int
    bounds: dict
    seconds: float
    max_states: int
    reduction: str = "none"  # the reduced search that proved it ("bursts", "blocks"; see the module docstring)

    def to_json(self) -> dict:
        return {"protocol": self.protocol, "ok": self.ok, "complete": self.complete,
                "violations": [v.to_json() for v in self.violations],
                "states_explored": self.states_explored, "transitions": self.transitions,
                "bounds": dict(self.bounds), "seconds": round(self.seconds, 3), "max_states": self.max_states,
                "reduction": self.reduction}

    def render(self) -> str:
        bounds = ", ".join(f"{k}={v}" for k, v in self.bounds.items())
        verdict = "OK" if self.ok else ("VIOLATIONS" if self.violations else "INCOMPLETE")
        lines = [f"audit {self.protocol}: {verdict}",
                 f"  bounded model check{_REDUCTION_NAMES.get(self.reduction, '')}: "
                 f"{self.states_explored} states, {self.transitions} transitions, "
                 f"{self.seconds:.2f} s; bounds: {bounds or 'none recorded'}"]
        if not self.complete:
            lines.append(f"  state bound reached ({self.max_states} states): exploration incomplete")
        if self.ok:
            lines.append("  proved for these bounds only: no deadlock, no early overwrite, no early or stale read, "
                         "no staging reuse before its store drained, no phase error or aliasing, "
                         "one producer and one consumer kind per barrier")
        for v in self.violations:
            lines.append(v.render())
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# compilation: names -> dense indices


class _Compiled:
    def __init__(self, p: Protocol):
        self.p = p
        self.roles = p.roles
        self.bar_index: dict[tuple[str, int, int], int] = {}
        self.bar_info: list[tuple[str, int, int, int]] = []  # name, cta, stage, arrival_count
        for b in p.barriers:
            for c in (b.ctas if b.ctas is not None else range(p.ctas)):
                for s in range(b.stages):
                    self.bar_index[(b.name, c, s)] = len(self.bar_info)
                    self.bar_info.append((b.name, c, s, b.arrival_count))
        self.buf_index: dict[tuple[str, int, int], int] = {}
        self.buf_info: list[tuple[str, int, int, str]] = []  # name, cta, stage, kind
        for b in p.buffers:
            for c in (b.ctas if b.ctas is not None else range(p.ctas)):
                for s in range(b.stages):
                    self.buf_index[(b.name, c, s)] = len(self.buf_info)
                    self.buf_info.append((b.name, c, s, b.kind))
        self.progs: list[list[tuple]] = []
        self.readers: dict[tuple[int, int], int] = {}  # (buffer, tag) -> mask of reading roles
        for ri, role in enumerate(p.roles):
            prog = []
            for pc, op in enumerate(role.program):
                prog.append(self._compile(ri, role.cta, pc, op))
            self.progs.append(prog)
        self.cta_roles = [[i for i, r in enumerate(p.roles) if r.cta == c] for c in range(p.ctas)]
        # Staging ops of a role that alone touches its staging buffers commute with every other
        # transition: the search takes them at once (a sound partial-order reduction).
        owners: dict[int, set] = {}
        for ri, prog in enumerate(self.progs):
            for op in prog:
                if op[0] in ("write", "commit"):
                    owners.setdefault(op[1], set()).add(ri)
        private_roles = {ri for ri, prog in enumerate(self.progs)
                         if all(owners[op[1]] == {ri} for op in prog if op[0] in ("write", "commit"))}
        self.private = [[ri in private_roles and op[0] in ("write", "commit", "swait") for op in prog]
                        for ri, prog in enumerate(self.progs)]
        self._pure: dict[int, bool] = {}
        self.blocks_why_not = self._blocks_precondition()
        self.tx_bars = {bari for prog in self.progs for op in prog if op[0] == "load" for _, _, bari in op[1]}
        self.bursts_why_not = self.blocks_why_not or self._bursts_precondition()
        self.block_end = [[self._block_end(ri, pc) for pc in range(len(prog))]
                          for ri, prog in enumerate(self.progs)]
        self.block_private = [[all(self.private[ri][i] for i in range(pc, self.block_end[ri][pc]))
                               for pc in range(len(prog))] for ri, prog in enumerate(self.progs)]

    # -- atomic blocks (see _Explorer.successors and the module docstring) ------------------------------
    def _blocks_precondition(self) -> str | None:
        """Why the atomic-block reduction may not be used here (None: it may).

        Every wait must name its phase, and each role's waits on one barrier instance must ask for
        consecutive phases from -1 or 0 (then a wait can pass early by one phase at most, whatever
        its parity, before an earlier violation: the case the argument needs).
        """
        for ri, prog in enumerate(self.progs):
            last: dict[int, int] = {}
            for op in prog:
                if op[0] != "wait":
                    continue
                _, bi, _parity, phase = op
                if phase is None:
                    return f"{self.roles[ri].name} has a wait without a phase"
                want = last[bi] + 1 if bi in last else None
                if (want is None and phase not in (-1, 0)) or (want is not None and phase != want):
                    return f"{self.roles[ri].name} waits on {self.bar_info[bi][0]} for non-consecutive phases"
                last[bi] = phase
        return None

    def _bursts_precondition(self) -> str | None:
        """Why TMA completions may not be landed in bursts (None: they may): every wait's parity must be
        the one of its phase (phase % 2), so a wait passes only once its phase has completed."""
        for ri, prog in enumerate(self.progs):
            for op in prog:
                if op[0] == "wait" and op[2] != op[3] % 2:
                    return f"{self.roles[ri].name} waits on {self.bar_info[op[1]][0]} with the parity of another phase"
        return None

    def _pure_counter(self, bi: int) -> bool:
        """A barrier that only counts plain arrivals of one count (no tx bytes): arrivals commute."""
        if bi not in self._pure:
            self._pure[bi] = self._pure_counter_uncached(bi)
        return self._pure[bi]

    def _pure_counter_uncached(self, bi: int) -> bool:
        counts = set()
        for prog in self.progs:
            for op in prog:
                if op[0] == "arrive" and op[1] == bi:
                    counts.add(op[2])
                elif op[0] == "expect" and op[1] == bi:
                    return False
                elif op[0] == "load" and any(bari == bi for _, _, bari in op[1]):
                    return False
        return len(counts) <= 1

    def _mover(self, ri: int, pc: int) -> str:
        """Lipton's mover class of an op against every other role and every TMA completion: 'R' (right
        mover: delaying it past others' steps keeps their effect or makes a violation), 'L' (left
        mover: doing it earlier does the same), 'B' (both: a private staging op), 'N' (neither)."""
        op = self.progs[ri][pc]
        kind = op[0]
        if self.private[ri][pc]:
            return "B"
        if kind in ("read", "rbegin"):
            return "R"
        if kind == "load" or (kind == "arrive" and self._pure_counter(op[1])):
            return "L"
        return "N"

    def _block_end(self, ri: int, pc: int) -> int:
        """End (exclusive) of the atomic block starting at ``pc``: [wait] R* [N] L* (B anywhere)."""
        prog = self.progs[ri]
        if self.blocks_why_not is not None:
            return pc + 1
        i = pc + 1 if prog[pc][0] == "wait" else pc
        committed = False  # past the N (or the first L): only L and B may follow
        while i < len(prog):
            if prog[i][0] == "wait":
                break
            m = self._mover(ri, i)
            if m in ("R", "N") and committed:
                break
            if m in ("N", "L"):
                committed = True
            i += 1
        return max(i, pc + 1)

    def _bar(self, ri, op: Op, cta: int) -> int:
        key = (op.barrier, cta, op.stage)
        if key not in self.bar_index:
            raise ProtocolError(f"{self.roles[ri].name}: {op.describe()}: no barrier {op.barrier}[{op.stage}] "
                                f"in cta{cta}")
        return self.bar_index[key]

    def _buf(self, ri, op: Op, name: str, cta: int, stage: int, kind: str) -> int:
        key = (name, cta, stage)
        if key not in self.buf_index:
            raise ProtocolError(f"{self.roles[ri].name}: {op.describe()}: no buffer {name}[{stage}] in cta{cta}")
        bi = self.buf_index[key]
        if self.buf_info[bi][3] != kind:
            raise ProtocolError(f"{self.roles[ri].name}: {op.describe()}: {name} is a {self.buf_info[bi][3]} "
                                f"buffer, not {kind}")
        return bi

    def _compile(self, ri: int, own: int, pc: int, op: Op) -> tuple:
        cta = own if op.cta is None else op.cta
        if op.op == "wait":
            return ("wait", self._bar(ri, op, cta), op.parity, op.phase)
        if op.op == "arrive":
            return ("arrive", self._bar(ri, op, cta), op.count)
        if op.op == "expect_tx":
            return ("expect", self._bar(ri, op, cta), op.bytes, op.count if op.arrive else 0)
        if op.op == "issue_load":
            dests = []
            for d in (op.dests if op.dests else (cta,)):
                bufs = tuple(self._buf(ri, op, n, d, op.stage, "operand") for n in op.buffers)
                dests.append((d, bufs, self._bar(ri, op, d)))
            return ("load", tuple(dests), op.bytes, -1 if op.tag is None else op.tag)
        if op.op in ("consume", "read_begin", "read_end"):
            bufs = tuple(self._buf(ri, op, n, cta, op.stage, "operand") for n in op.buffers)
            if op.op != "read_end":
                for b in bufs:
                    t = -1 if op.tag is None else op.tag
                    self.readers[(b, t)] = self.readers.get((b, t), 0) | (1 << ri)
            return ({"consume": "read", "read_begin": "rbegin", "read_end": "rend"}[op.op], bufs,
                    -1 if op.tag is None else op.tag)
        if op.op in ("write_staging", "store_commit"):
            b = self._buf(ri, op, op.buffers[0], cta, 0, "staging")
            # the staged data: whose fragment (the writing role), which tile, which panel
            return ("write" if op.op == "write_staging" else "commit", b, (ri, op.tag, op.panel))
        if op.op == "store_wait":
            return ("swait", op.pending)
        raise ProtocolError(f"cannot compile {op}")  # pragma: no cover


def static_check(p: Protocol) -> list[Violation]:
    """The rules that need no exploration: one producing and one consuming role kind per handoff barrier."""
    out: list[Violation] = []
    producers: dict[str, set] = {}
    consumers: dict[str, set] = {}
    for role in p.roles:
        for op in role.program:
            if op.op in ("arrive", "expect_tx", "issue_load"):
                producers.setdefault(op.barrier, set()).add(role.kind)
            elif op.op == "wait":
                consumers.setdefault(op.barrier, set()).add(role.kind)
    for b in p.barriers:
        if b.kind == "sync":
            continue
        prod, cons = producers.get(b.name, set()), consumers.get(b.name, set())
        if len(prod) != 1 or len(cons) != 1:
            out.append(Violation(
                "handoff_roles",
                f"barrier {b.name} must have exactly one producing role kind and one consuming role kind; "
                f"producers (arrive / expect_tx / TMA completion): {sorted(prod) or 'none'}, "
                f"consumers (wait): {sorted(cons) or 'none'}"))
    return out


# ----------------------------------------------------------------------------------------------------
# the search


def audit(protocol: Protocol, *, max_states: int = DEFAULT_MAX_STATES, trace_steps: int = TRACE_STEPS,
          stop_at_first: bool = False, split_multicast: bool = False, reduce: bool = True) -> AuditResult:
    """Explore every interleaving of ``protocol`` (bounded by its unrolled programs and ``max_states``).

    Returns an :class:`AuditResult`: ``ok`` (complete and no violation), ``violations`` (the first,
    shortest, counterexample of each kind, with the last ``trace_steps`` steps), ``states_explored``
    and the ``bounds`` the protocol was built for. ``split_multicast``: deliver a multicast load to
    each destination CTA as a separate event (more interleavings; by default a multicast lands in all
    its CTAs at once, one event). A state reached through a violation is not expanded
    further. Raises :class:`ProtocolError` when the protocol names a barrier or buffer it lacks.

    ``reduce`` (default): decide with a reduced search first (TMA completions in bursts, else atomic
    blocks; see the module docstring: each finds a violation whenever the full search does, and
    only real ones); when it finds one, the full search runs to report the shortest counterexample
    of each kind, so the report does not depend on ``reduce``. ``reduction`` in the result names the
    search that decided.
    """
    t0 = time.perf_counter()
    cp = _Compiled(protocol)
    static = static_check(protocol)
    modes = []
    if reduce and cp.bursts_why_not is None:
        modes.append("bursts")
    if reduce and cp.blocks_why_not is None:
        modes.append("blocks")
    result = None
    for mode in modes:
        try:
            result = _search(cp, _Explorer(cp, split_multicast, mode), static, max_states, trace_steps,
                             stop_at_first)
        except _ReductionVoid:
            result = None
            continue
        break
    reduction = mode if result is not None else "none"
    if result is None or len(result[0]) > len(static):
        # no reduced search applied, or it found a violation: the full search reports the shortest
        # counterexample of each kind (a reduced search's violations are real; kept if the full
        # search cannot finish without finding one)
        full = _search(cp, _Explorer(cp, split_multicast), static, max_states, trace_steps, stop_at_first)
        if result is not None and full[3] and len(full[0]) == len(static):
            # a reduced search explores a subset of the full search's runs: its violation must be
            # found again; a complete, clean full search means the reduction is wrong, say so loudly
            raise RuntimeError(f"auditor bug: the {mode} search found {result[0][len(static)].kind} in "
                               f"{protocol.name!r} but the full search finished clean; please report this protocol")
        if result is None or len(full[0]) > len(static) or full[3]:
            result, reduction = full, "none"
    found, states, transitions, complete = result
    bounds = dict(protocol.bounds)
    bounds.setdefault("roles", len(protocol.roles))
    bounds.setdefault("ctas", protocol.ctas)
    return AuditResult(protocol=protocol.name, ok=complete and not found, complete=complete,
                       violations=found, states_explored=states, transitions=transitions,
                       bounds=bounds, seconds=time.perf_counter() - t0, max_states=max_states,
                       reduction=reduction)


def _search(cp: _Compiled, explorer: _Explorer, static: list[Violation], max_states: int, trace_steps: int,
            stop_at_first: bool):
    """Breadth-first search from the initial state: (violations, states, transitions, complete)."""
    violations: list[Violation] = list(static)
    seen_kinds = {v.kind for v in violations}
    init = explorer.initial()
    parent: dict = {init: None}
    queue = deque([init])
    transitions = 0
    complete = True

    def report(kind: str, message: str, state, last_label=None):
        if kind in seen_kinds:
            return
        seen_kinds.add(kind)
        steps = []
        s = state
        while parent[s] is not None:
            prev, label = parent[s]
            steps.append(label)
            s = prev
        steps.reverse()
        if last_label is not None:
            steps.append(last_label)
        steps = [part for label in steps for part in (label[1] if label[0] == "B" else (label,))]
        shown = steps[-trace_steps:]
        violations.append(Violation(kind, message, [explorer.render(lbl) for lbl in shown],
                                    omitted_steps=len(steps) - len(shown)))

    while queue:
        if stop_at_first and violations:
            break
        state = queue.popleft()
        for kind, message in explorer.state_violations(state):
            report(kind, message, state)
        succ = explorer.successors(state)
        if not succ and not explorer.finished(state):
            report("deadlock", explorer.describe_deadlock(state), state)
        for new, label, viol in succ:
            transitions += 1
            if viol is not None:
                report(viol[0], viol[1], state, label)
                continue
            if new in parent:
                continue
            if len(parent) >= max_states:
                complete = False
                continue
            parent[new] = (state, label)
            queue.append(new)
    if queue:
        complete = False
    return violations, len(parent), transitions, complete


class _Explorer:
    """State: (pcs, barriers, buffers, committed stores per role, in-flight loads, last observed phases).

    * barrier: (completed phases c, pending arrivals, tx-count); current parity = c % 2
    * buffer: (tag of the latest load or staging write, landed, unread-roles mask, reading-roles mask,
      stores that may still read it)
    * stores: per role, the staging buffers of its committed bulk groups that no wait_group covered yet
    * events: sorted tuple of ("L", ctas, ((buffers, barrier) per destination), bytes, tag, role)
    * obs: sorted ((role, barrier), c) pairs: the phase count a role saw when its last unannotated
      wait on that barrier passed (for the aliasing check of waits without a ``phase``)
    """

    def __init__(self, cp: _Compiled, split_multicast: bool = False, mode: str = "none"):
        self.cp = cp
        self.split_multicast = split_multicast
        self.blocks = mode in ("blocks", "bursts")
        self.bursts = mode == "bursts"
        self.n_roles = len(cp.roles)

    def initial(self):
        bars = tuple((0, info[3], 0) for info in self.cp.bar_info)
        bufs = tuple((None, True, 0, 0, 0) for _ in self.cp.buf_info)
        return (tuple(0 for _ in self.cp.roles), bars, bufs, tuple(() for _ in self.cp.roles), (), ())

    def finished(self, state) -> bool:
        pcs = state[0]
        return all(pcs[i] >= len(self.cp.progs[i]) for i in range(self.n_roles))

    # -- barrier arithmetic -------------------------------------------------------------------
    def _arrive(self, bars: list, bi: int, count: int):
        c, pend, tx = bars[bi]
        pend -= count
        if pend < 0:
            name, cta, s, n = self.cp.bar_info[bi]
            return ("arrival_overflow",
                    f"{name}[{s}]@cta{cta} received more arrivals than its pending count (init count {n}): "
                    f"an arrival count too small for the roles that arrive, or an extra arrive")
        if pend == 0 and tx == 0:
            c, pend = c + 1, self.cp.bar_info[bi][3]
        bars[bi] = (c, pend, tx)
        return None

    @staticmethod
    def _after(bars, bi: int, nbytes: int, count: int):
        """Barrier ``bi`` after an arrival of ``count`` with ``nbytes`` expected, before any completion."""
        c, pend, tx = bars[bi]
        nb = list(bars)
        nb[bi] = (c, pend - count, tx + nbytes)
        return nb

    def _tx(self, bars: list, bi: int, delta: int):
        c, pend, tx = bars[bi]
        tx += delta
        if pend == 0 and tx == 0:
            c, pend = c + 1, self.cp.bar_info[bi][3]
        bars[bi] = (c, pend, tx)

    def _bar_name(self, bi: int) -> str:
        name, cta, s, _ = self.cp.bar_info[bi]
        return f"{name}[{s}]@cta{cta}"

    def _buf_name(self, bi: int) -> str:
        name, cta, s, kind = self.cp.buf_info[bi]
        return f"{name}@cta{cta}" if kind == "staging" else f"{name}[{s}]@cta{cta}"

    def _staged(self, data, ri: int | None = None) -> str:
        """'tile 0' / 'tile 1 panel 2' for staged data (writer, tile, panel); the writer when not ``ri``."""
        writer, tile, panel = data
        text = f"tile {tile}" + ("" if panel is None else f" panel {panel}")
        if ri is not None and writer != ri:
            text += f" of {self.cp.roles[writer].name}"
        return text

    def _roles_in(self, mask: int) -> str:
        return ", ".join(self.cp.roles[i].name for i in range(self.n_roles) if mask >> i & 1)

    # -- transitions ---------------------------------------------------------------------------
    def successors(self, state):
        if self.blocks:
            return self._block_successors(state)
        pcs, bars, bufs, groups, events, obs = state
        out = []
        for ri in range(self.n_roles):
            pc = pcs[ri]
            if pc < len(self.cp.progs[ri]) and self.cp.private[ri][pc]:
                return [self._step(state, ri, self.cp.progs[ri][pc])]
        for ri in range(self.n_roles):
            pc = pcs[ri]
            prog = self.cp.progs[ri]
            if pc >= len(prog):
                continue
            r = self._step(state, ri, prog[pc])
            if r is not None:
                out.append(r)
        for ei, ev in enumerate(events):
            if ei and events[ei - 1] == ev:
                continue  # identical events are interchangeable
            out.append(self._event(state, ei, ev))
        return out

    def _block_successors(self, state):
        """Each role moves one atomic block (see :meth:`_Compiled._block_end`); a block of private
        staging ops alone is taken at once; each in-flight load lands as its own event."""
        pcs, events = state[0], state[4]
        cp = self.cp
        for ri in range(self.n_roles):
            pc = pcs[ri]
            if pc < len(cp.progs[ri]) and cp.block_private[ri][pc]:
                return [self._block(state, ri)]
        out = []
        for ri in range(self.n_roles):
            if pcs[ri] < len(cp.progs[ri]):
                r = self._block(state, ri)
                if r is not None:
                    out.append(r)
                elif self.bursts:
                    out.extend(self._burst_blocks(state, ri))
        if self.bursts:
            return out  # loads land only in the burst a blocked waiter needs
        for ei, ev in enumerate(events):
            if ei and events[ei - 1] == ev:
                continue
            out.append(self._event(state, ei, ev))
        return out

    # -- TMA completions in bursts -------------------------------------------------------------
    def _bursts_to(self, events, bi: int, target: int):
        """The sets of in-flight loads completing on barrier ``bi`` whose bytes sum to ``target``."""
        cands = [ev for ev in events if any(bari == bi for _, bari in ev[2])]
        seen = set()
        for n in range(1, len(cands) + 1):
            for combo in itertools.combinations(cands, n):
                if sum(ev[3] for ev in combo) == target and combo not in seen:
                    seen.add(combo)
                    yield combo

    def _completable(self, bars, events, bi: int) -> bool:
        """Could landing some in-flight loads complete barrier ``bi``'s current phase right now?"""
        c, pend, tx = bars[bi]
        return pend == 0 and tx > 0 and next(self._bursts_to(events, bi, tx), None) is not None

    def _burst_blocks(self, state, ri):
        """Role ``ri`` is blocked on a wait for a tx barrier: land each set of in-flight loads that
        completes its phase, then run the role's block (one transition each)."""
        op = self.cp.progs[ri][state[0][ri]]
        bi = op[1]
        if bi not in self.cp.tx_bars:
            return []
        c, pend, tx = state[1][bi]
        if pend != 0 or tx <= 0:
            return []
        out = []
        for combo in self._bursts_to(state[4], bi, tx):
            st = state
            labels = []
            for ev in combo:
                st, label, _ = self._event(st, st[4].index(ev), ev)
                labels.append(label)
            r = self._block(st, ri)
            if r is None:
                continue
            new, label, viol = r
            out.append((new, ("B", tuple(labels) + (label[1] if label[0] == "B" else (label,))), viol))
        return out

    def _check_arrival(self, bars, events, bi: int):
        """In burst mode an arrival on a tx barrier must not be able to complete its phase (with any
        in-flight loads landed first): the argument for bursts needs completions to come from landings."""
        c, pend, tx = bars[bi]
        if pend == 0 and (tx == 0 or next(self._bursts_to(events, bi, tx), None) is not None):
            raise _ReductionVoid(f"an arrival may complete {self._bar_name(bi)}")

    def _block(self, state, ri):
        """Run role ``ri``'s block from its pc as one transition; None if its first op (a wait) blocks.
        Stops at the first op that is a violation (the state after it is not expanded)."""
        prog = self.cp.progs[ri]
        start = state[0][ri]
        end = self.cp.block_end[ri][start]
        labels = []
        viol = None
        for pc in range(start, end):
            r = self._step(state, ri, prog[pc])
            if r is None:
                return None  # only the first op can block: the others are never waits
            state, label, viol = r
            labels.append(label)
            if viol is not None:
                break
        if len(labels) == 1:
            return state, labels[0], viol
        return state, ("B", tuple(labels)), viol

    def _step(self, state, ri, op):
        pcs, bars, bufs, groups, events, obs = state
        kind = op[0]
        label = ("R", ri, pcs[ri])
        viol = None
        new_pcs = pcs[:ri] + (pcs[ri] + 1,) + pcs[ri + 1:]
        if kind == "wait":
            _, bi, parity, phase = op
            c = bars[bi][0]
            if c % 2 == parity:
                return None  # blocked
            label = ("R", ri, pcs[ri], c)
            if phase is not None:
                if c <= phase:
                    viol = ("phase_error",
                            f"{self.cp.roles[ri].name} waited on {self._bar_name(bi)} for phase {phase} with parity "
                            f"{parity} and passed though that phase has not completed (barrier has completed {c} "
                            f"phases; parity {parity} matches an older phase)")
                return (state[:0] + (new_pcs,) + state[1:], label, viol)
            key = (ri, bi)
            d = dict(obs)
            d[key] = c
            return ((new_pcs, bars, bufs, groups, events, tuple(sorted(d.items()))), label, None)
        if kind == "arrive":
            _, bi, count = op
            nb = list(bars)
            if self.bursts and bi in self.cp.tx_bars:
                self._check_arrival(self._after(bars, bi, 0, count), events, bi)
            viol = self._arrive(nb, bi, count)
            return ((new_pcs, tuple(nb), bufs, groups, events, obs), label, viol)
        if kind == "expect":
            _, bi, nbytes, count = op
            nb = list(bars)
            if self.bursts and bi in self.cp.tx_bars:
                self._check_arrival(self._after(bars, bi, nbytes, count), events, bi)
            c, pend, tx = nb[bi]
            nb[bi] = (c, pend, tx + nbytes)
            if count:
                viol = self._arrive(nb, bi, count)
            else:
                self._tx(nb, bi, 0)
            return ((new_pcs, tuple(nb), bufs, groups, events, obs), label, viol)
        if kind == "load":
            _, dests, nbytes, tag = op
            nbuf = list(bufs)
            new_events = list(events)
            for d, bis, bari in dests:
                for b in bis:
                    ver, landed, unread, reading, _st = nbuf[b]
                    pending = unread | reading
                    if pending and viol is None:
                        what = "has not landed yet" if not landed else "is still unread"
                        viol = ("early_overwrite",
                                f"{self.cp.roles[ri].name} issued load #{tag} into {self._buf_name(b)} while load "
                                f"#{ver} there {what} by {self._roles_in(pending)}")
                    elif not landed and viol is None:
                        viol = ("early_overwrite",
                                f"{self.cp.roles[ri].name} issued load #{tag} into {self._buf_name(b)} while load "
                                f"#{ver} into it is still in flight")
                    nbuf[b] = (tag, False, self.cp.readers.get((b, tag), 0), 0, 0)
                if self.split_multicast:
                    new_events.append(("L", (d,), ((bis, bari),), nbytes, tag, ri))
            if not self.split_multicast:
                new_events.append(("L", tuple(d for d, _, _ in dests), tuple((bis, bari) for _, bis, bari in dests),
                                   nbytes, tag, ri))
            return ((new_pcs, bars, tuple(nbuf), groups, tuple(sorted(new_events)), obs), label, viol)
        if kind in ("read", "rbegin", "rend"):
            _, bis, tag = op
            nbuf = list(bufs)
            bit = 1 << ri
            for b in bis:
                ver, landed, unread, reading, st = nbuf[b]
                if kind != "rend" and viol is None:
                    if ver != tag:
                        viol = ("stale_read",
                                f"{self.cp.roles[ri].name} read {self._buf_name(b)} expecting load #{tag} but it "
                                f"holds " + ("nothing yet" if ver is None else f"load #{ver}"))
                    elif not landed:
                        viol = ("read_before_landed",
                                f"{self.cp.roles[ri].name} read {self._buf_name(b)} before load #{tag} landed "
                                f"(a missing or passed-too-early full-barrier wait)")
                if kind == "read":
                    unread &= ~bit
                elif kind == "rbegin":
                    unread &= ~bit
                    reading |= bit
                else:
                    reading &= ~bit
                nbuf[b] = (ver, landed, unread, reading, st)
            return ((new_pcs, bars, tuple(nbuf), groups, events, obs), label, viol)
        if kind == "write":
            _, b, tag = op
            ver, landed, unread, reading, st = bufs[b]
            if st:
                viol = ("staging_overwrite",
                        f"{self.cp.roles[ri].name} wrote staging {self._buf_name(b)} for {self._staged(tag)} while "
                        f"the TMA store of {self._staged(ver, ri)} still reads it (no wait_group.read that covers "
                        f"its bulk group after its commit_group)")
            nbuf = list(bufs)
            nbuf[b] = (tag, True, 0, 0, st)
            return ((new_pcs, bars, tuple(nbuf), groups, events, obs), label, viol)
        if kind == "commit":
            _, b, tag = op
            ver, landed, unread, reading, st = bufs[b]
            if ver != tag:
                viol = ("store_of_unwritten_staging",
                        f"{self.cp.roles[ri].name} stored {self._staged(tag)} from {self._buf_name(b)}, which holds "
                        + ("nothing" if ver is None else self._staged(ver, ri)))
            nbuf = list(bufs)
            nbuf[b] = (ver, landed, unread, reading, st + 1)
            ng = groups[:ri] + (groups[ri] + (b,),) + groups[ri + 1:]
            return ((new_pcs, bars, tuple(nbuf), ng, events, obs), label, viol)
        if kind == "swait":
            keep = op[1]
            mine = groups[ri]
            if len(mine) <= keep:
                return ((new_pcs, bars, bufs, groups, events, obs), label, None)
            nbuf = list(bufs)
            for b in mine[:len(mine) - keep]:
                ver, landed, unread, reading, st = nbuf[b]
                nbuf[b] = (ver, landed, unread, reading, st - 1)
            ng = groups[:ri] + (mine[len(mine) - keep:],) + groups[ri + 1:]
            return ((new_pcs, bars, tuple(nbuf), ng, events, obs), label, None)
        raise AssertionError(kind)  # pragma: no cover

    def _event(self, state, ei, ev):
        pcs, bars, bufs, groups, events, obs = state
        rest = events[:ei] + events[ei + 1:]
        if True:
            _, ctas, deliveries, nbytes, tag, ri = ev
            nbuf = list(bufs)
            nb = list(bars)
            for bis, bari in deliveries:
                for b in bis:
                    ver, landed, unread, reading, st = nbuf[b]
                    if ver == tag:
                        nbuf[b] = (ver, True, unread, reading, st)
                self._tx(nb, bari, -nbytes)
            return ((pcs, tuple(nb), tuple(nbuf), groups, rest, obs), ("L", ev), None)

    # -- state properties ----------------------------------------------------------------------
    def state_violations(self, state):
        pcs, bars, bufs, groups, events, obs = state
        out = []
        obs_d = dict(obs) if obs else {}
        for ri in range(self.n_roles):
            prog = self.cp.progs[ri]
            if pcs[ri] >= len(prog):
                continue
            op = prog[pcs[ri]]
            if op[0] != "wait":
                continue
            _, bi, parity, phase = op
            c = bars[bi][0]
            behind = c - phase if phase is not None else c - obs_d.get((ri, bi), 0)
            if self.bursts and behind == 1 and bi in self.cp.tx_bars and self._completable(bars, events, bi):
                behind = 2  # loads in flight can complete the next phase before it looks
            if behind >= 2:
                target = f"phase {phase}" if phase is not None else "the phase after the last one it saw"
                out.append(("phase_aliasing",
                            f"{self.cp.roles[ri].name} waits on {self._bar_name(bi)} (parity {parity}) for {target}, "
                            f"but the barrier has already completed {c} phases: the waiter is {behind} phases "
                            f"behind and try_wait.parity cannot tell them apart"))
        for cta, rids in enumerate(self.cp.cta_roles):
            if not all(pcs[i] >= len(self.cp.progs[i]) for i in rids):
                continue
            what = [f"TMA store from {self._buf_name(b)} (committed by {self.cp.roles[i].name}, never waited)"
                    for i in rids for b in groups[i]]
            what += [f"TMA load #{ev[4]} into {','.join(self._buf_name(b) for bis, _ in ev[2] for b in bis)}"
                     for ev in events if cta in ev[1]]
            if what:
                out.append(("exit_in_flight",
                            f"every role of cta{cta} has finished while a {what[0]} may still be in flight "
                            f"(its shared memory may be released under it: a missing wait_group, or a load "
                            f"that nobody waits for)"))
        return out

    def describe_deadlock(self, state) -> str:
        pcs, bars, bufs, groups, events, obs = state
        parts = []
        for ri, role in enumerate(self.cp.roles):
            prog = self.cp.progs[ri]
            if pcs[ri] >= len(prog):
                continue
            op = prog[pcs[ri]]
            desc = role.program[pcs[ri]].describe(role.cta)
            if op[0] == "wait":
                c, pend, tx = bars[op[1]]
                parts.append(f"{role.name} blocked at '{desc}' ({self._bar_name(op[1])} is in phase {c}, parity "
                             f"{c % 2}, {pend} arrival(s) and {tx} tx bytes pending)")
            else:
                parts.append(f"{role.name} at '{desc}'")
        lead = ("no role can move and nothing is in flight" if not events else
                "no role can move and no load in flight completes a phase that a blocked role waits for")
        return lead + ": " + "; ".join(parts)

    def render(self, label) -> str:
        if label[0] == "R":
            ri, pc = label[1], label[2]
            role = self.cp.roles[ri]
            op = role.program[pc]
            text = f"{role.name}: {op.describe(role.cta)}"
            if op.op == "wait" and len(label) > 3:
                text += f" -> passes ({label[3]} phases completed)"
            if op.note:
                text += f"  [{op.note}]"
            return text
        ev = label[1]
        if True:
            _, ctas, deliveries, nbytes, tag, ri = ev
            where = "; ".join(f"{','.join(self._buf_name(b) for b in bis)} ({nbytes} B complete on "
                              f"{self._bar_name(bari)})" for bis, bari in deliveries)
            return f"  (async) TMA load #{tag} from {self.cp.roles[ri].name} lands in {where}"
