"""The reduced searches: when they may be used, and where a role's atomic blocks end.

**Reduced searches** (``reduce=True``, the default) decide whether any violation is reachable while
visiting far fewer states (orders of magnitude fewer on level 8's larger bounds, where the full search
does not finish in CI's time: docs/measured-choices.md). A clean, complete reduced search proves the protocol for its bounds; when
one finds a violation, the full search (:func:`gemm_ladder.audit.audit`) runs to report the shortest counterexample of each
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

This module holds the static side (the preconditions, each op's mover class, the blocks); the
transitions that run a block or land a burst are :class:`gemm_ladder.audit.explorer.Explorer`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gemm_ladder.audit.compiled import CompiledProtocol


class ReductionVoid(Exception):
    """A reduced search met a state its soundness argument excludes: search with less reduction."""


def blocks_precondition(cp: CompiledProtocol) -> str | None:
    """Why the atomic-block reduction may not be used here (None: it may).

    Every wait must name its phase, and each role's waits on one barrier instance must ask for
    consecutive phases from -1 or 0 (then a wait can pass early by one phase at most, whatever
    its parity, before an earlier violation: the case the argument needs).
    """
    for ri, prog in enumerate(cp.progs):
        last: dict[int, int] = {}
        for op in prog:
            if op[0] != "wait":
                continue
            _, bi, _parity, phase = op
            if phase is None:
                return f"{cp.roles[ri].name} has a wait without a phase"
            want = last[bi] + 1 if bi in last else None
            if (want is None and phase not in (-1, 0)) or (want is not None and phase != want):
                return f"{cp.roles[ri].name} waits on {cp.bar_info[bi][0]} for non-consecutive phases"
            last[bi] = phase
    return None


def bursts_precondition(cp: CompiledProtocol) -> str | None:
    """Why TMA completions may not be landed in bursts (None: they may): every wait's parity must be
    the one of its phase (phase % 2), so a wait passes only once its phase has completed."""
    for ri, prog in enumerate(cp.progs):
        for op in prog:
            if op[0] == "wait" and op[2] != op[3] % 2:
                return f"{cp.roles[ri].name} waits on {cp.bar_info[op[1]][0]} with the parity of another phase"
    return None


def block_ends(cp: CompiledProtocol) -> list[list[int]]:
    """For each role and pc, the end (exclusive) of the atomic block that starts there
    (``pc + 1`` everywhere when :func:`blocks_precondition` fails)."""
    pure: dict[int, bool] = {}
    return [[_block_end(cp, ri, pc, pure) for pc in range(len(prog))] for ri, prog in enumerate(cp.progs)]


def _pure_counter(cp: CompiledProtocol, bi: int, cache: dict[int, bool]) -> bool:
    """A barrier that only counts plain arrivals of one count (no tx bytes): arrivals commute."""
    if bi not in cache:
        cache[bi] = _pure_counter_uncached(cp, bi)
    return cache[bi]


def _pure_counter_uncached(cp: CompiledProtocol, bi: int) -> bool:
    counts = set()
    for prog in cp.progs:
        for op in prog:
            if op[0] == "arrive" and op[1] == bi:
                counts.add(op[2])
            elif op[0] == "expect" and op[1] == bi:
                return False
            elif op[0] == "load" and any(bari == bi for _, _, bari in op[1]):
                return False
    return len(counts) <= 1


def _mover(cp: CompiledProtocol, ri: int, pc: int, cache: dict[int, bool]) -> str:
    """Lipton's mover class of an op against every other role and every TMA completion: 'R' (right
    mover: delaying it past others' steps keeps their effect or makes a violation), 'L' (left
    mover: doing it earlier does the same), 'B' (both: a private staging op), 'N' (neither)."""
    op = cp.progs[ri][pc]
    kind = op[0]
    if cp.private[ri][pc]:
        return "B"
    if kind in ("read", "rbegin"):
        return "R"
    if kind == "load" or (kind == "arrive" and _pure_counter(cp, op[1], cache)):
        return "L"
    return "N"


def _block_end(cp: CompiledProtocol, ri: int, pc: int, cache: dict[int, bool]) -> int:
    """End (exclusive) of the atomic block starting at ``pc``: [wait] R* [N] L* (B anywhere)."""
    prog = cp.progs[ri]
    if cp.blocks_why_not is not None:
        return pc + 1
    i = pc + 1 if prog[pc][0] == "wait" else pc
    committed = False  # past the N (or the first L): only L and B may follow
    while i < len(prog):
        if prog[i][0] == "wait":
            break
        m = _mover(cp, ri, i, cache)
        if m in ("R", "N") and committed:
            break
        if m in ("N", "L"):
            committed = True
        i += 1
    return max(i, pc + 1)
