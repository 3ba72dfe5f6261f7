"""The search: breadth first over the states of a protocol's runs, reduced first where that is sound.

:func:`audit` is the entry point (see :mod:`gemm_ladder.audit` for what it proves and what it cannot
see); :func:`static_check` holds the rules that need no exploration.
"""

from __future__ import annotations

import time
from collections import deque

from gemm_ladder.audit.compiled import CompiledProtocol
from gemm_ladder.audit.explorer import Explorer
from gemm_ladder.audit.protocol import Protocol
from gemm_ladder.audit.reductions import ReductionVoid
from gemm_ladder.audit.result import AuditResult, Violation
from gemm_ladder.audit.symmetry import Symmetry

DEFAULT_MAX_STATES = 2_000_000
TRACE_STEPS = 20


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



def audit(protocol: Protocol, *, max_states: int = DEFAULT_MAX_STATES, trace_steps: int = TRACE_STEPS,
          stop_at_first: bool = False, split_multicast: bool = False, reduce: bool = True,
          symmetry: bool = True) -> AuditResult:
    """Explore every interleaving of ``protocol`` (bounded by its unrolled programs and ``max_states``).

    Returns an :class:`AuditResult`: ``ok`` (complete and no violation), ``violations`` (the first,
    shortest, counterexample of each kind, with the last ``trace_steps`` steps), ``states_explored``
    and the ``bounds`` the protocol was built for. ``split_multicast``: deliver a multicast load to
    each destination CTA as a separate event (more interleavings; by default a multicast lands in all
    its CTAs at once, one event). A state reached through a violation is not expanded
    further. Raises :class:`ProtocolError` when the protocol names a barrier or buffer it lacks.

    ``reduce`` (default): decide with a reduced search first (TMA completions in bursts, else atomic
    blocks; see :mod:`gemm_ladder.audit.reductions`: each finds a violation whenever the full search does, and
    only real ones); when it finds one, the full search runs to report the shortest counterexample
    of each kind, so the report does not depend on ``reduce``. ``reduction`` in the result names the
    search that decided. ``symmetry`` (with ``reduce``): the reduced searches visit one state per orbit
    of the protocol's automorphisms (interchangeable consumers, CTAs; :mod:`gemm_ladder.audit.symmetry`);
    ``symmetry_order`` in the result is the group's order (1: no symmetry used).
    """
    t0 = time.perf_counter()
    cp = CompiledProtocol(protocol)
    static = static_check(protocol)
    modes = []
    if reduce and cp.bursts_why_not is None:
        modes.append("bursts")
    if reduce and cp.blocks_why_not is None:
        modes.append("blocks")
    result = None
    sym = Symmetry(cp) if reduce and symmetry and modes else None
    for mode in modes:
        try:
            result = search(cp, Explorer(cp, split_multicast, mode), static, max_states, trace_steps,
                             stop_at_first, sym)
        except ReductionVoid:
            result = None
            continue
        break
    reduction = mode if result is not None else "none"
    if result is None or len(result[0]) > len(static):
        # no reduced search applied, or it found a violation: the full search reports the shortest
        # counterexample of each kind (a reduced search's violations are real; kept if the full
        # search cannot finish without finding one)
        full = search(cp, Explorer(cp, split_multicast), static, max_states, trace_steps, stop_at_first)
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
                       reduction=reduction, notes=list(protocol.notes),
                       symmetry_order=sym.order if sym is not None and reduction != "none" else 1)



def search(cp: CompiledProtocol, explorer: Explorer, static: list[Violation], max_states: int, trace_steps: int,
            stop_at_first: bool, symmetry: Symmetry | None = None):
    """Breadth-first search from the initial state: (violations, states, transitions, complete).

    With ``symmetry``, each state reached is replaced by its canonical image (one state per orbit);
    ``parent`` then also records which renaming led there, so that a trace is told in one naming."""
    violations: list[Violation] = list(static)
    seen_kinds = {v.kind for v in violations}
    canon = symmetry.canon if symmetry is not None and symmetry.order > 1 else None
    init = explorer.initial()
    if canon is not None:
        init = canon(init)[0]
    parent: dict = {init: None}
    images: dict = {}  # a state reached -> its canonical image (many transitions reach one state)
    queue = deque([init])
    transitions = 0
    complete = True

    def report(kind: str, message: str, state, last_label=None):
        if kind in seen_kinds:
            return
        seen_kinds.add(kind)
        steps = []
        s = state
        renamings = []
        while parent[s] is not None:
            prev, label, gi = parent[s]
            steps.append(label)
            renamings.append(gi)
            s = prev
        steps.reverse()
        renamings.reverse()
        if last_label is not None:
            steps.append(last_label)
        if canon is not None:
            # step i was taken in the canonical naming of the state before it; map it back through the
            # inverse renamings of the canonicalisations before it (the run as it happened)
            h = None
            for i, label in enumerate(steps):
                if h is not None:
                    steps[i] = h.label(label)
                if i < len(renamings) and renamings[i]:
                    g_inv = symmetry.inverse[renamings[i]]
                    h = g_inv if h is None else h.compose(g_inv)
            if h is not None:
                message = _renamed_message(explorer, kind, message, h.state(state),
                                           None if last_label is None else steps[-1])
        steps = [part for label in steps for part in (label[1] if label[0] == "B" else (label,))]
        shown = steps[-trace_steps:]
        lines = [explorer.render(lbl) for lbl in shown] or ["(the initial state: every barrier in phase 0, nothing "
                                                            "issued; no role can take its first step)"]
        violations.append(Violation(kind, message, lines, omitted_steps=len(steps) - len(shown)))

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
            gi = 0
            if new in parent:
                continue  # seen (a state kept is canonical, and its own canonical image)
            if canon is not None:
                hit = images.get(new)
                if hit is None:
                    hit = images[new] = canon(new)
                new, gi = hit
                if new in parent:
                    continue
            if len(parent) >= max_states:
                complete = False
                continue
            parent[new] = (state, label, gi)
            queue.append(new)
    if queue:
        complete = False
    return violations, len(parent), transitions, complete


def _renamed_message(explorer: Explorer, kind: str, message: str, state, last_label) -> str:
    """The violation's message told of ``state`` (the run's own naming, not the canonical one)."""
    if last_label is None:
        found = [m for k, m in explorer.state_violations(state) if k == kind]
        if found:
            return found[0]
        if kind == "deadlock":
            return explorer.describe_deadlock(state)
        return message
    for _new, label, viol in explorer.successors(state):
        if label == last_label and viol is not None and viol[0] == kind:
            return viol[1]
    return message
