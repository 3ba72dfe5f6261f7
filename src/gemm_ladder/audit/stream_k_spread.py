"""The stream-K tail's distributed fixup (split "tail_spread", ``stream_k_spread.cuh``), checked for one
schedule: no deadlock, no slot read before every contributor handed it in, every element of every
split fragment reduced and stored exactly once, and each reduced in K order.

Each cluster's consumer warpgroup (every CTA rank and consumer runs the same control flow on its own
fragment, slots and counter, so one program per cluster stands for all) is modelled as the kernel's
tail loop runs it (:func:`programs`): for each segment of its range, a split unit's segment hands in
its slot (``hand_in``); if the segment ends the range the warpgroup then waits until the unit's
counter reaches ``need`` (``wait``) and reduces its share (``reduce``: float4s [lo, hi), slots in the
order given). :func:`check` runs the programs to a fixpoint: a hand-in only adds to a counter and a
passed wait stays passed, so every enabled step stays enabled and every maximal interleaving ends in
the same state (the system is monotone and confluent): a program left waiting there waits in every
run, and a program that finishes there finishes in every run. The other properties are checked on
the events: a wait's ``need`` against the unit's hand-ins (a smaller need would let a reader pass
before the last hand-in), the shares against the fragment, the slot order against K order.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemm_ladder.design.stream_k import StreamKTail, spread_share


@dataclass(frozen=True)
class Step:
    """One step of a warpgroup's tail: ``kind`` in hand_in (``slot``), wait (``need``), reduce (``lo``,
    ``hi``, ``order``: the slots added, in order)."""

    kind: str
    unit: int
    slot: int = -1
    need: int = 0
    lo: int = 0
    hi: int = 0
    order: tuple[int, ...] = ()


def programs(tail: StreamKTail, tile_n: int) -> list[list[Step]]:
    """Each cluster's steps on the split units of ``tail``, as the GL_SK_SPREAD kernel's tail loop takes
    them (sm90_gemm.cu): hand in; if the segment ends the range, wait for all contributors and reduce
    share ``mine`` of ``participants``."""
    f4 = 16 * tile_n
    out = []
    for c in range(tail.clusters):
        segs, prog = tail.segments(c), []
        for i, s in enumerate(segs):
            if s.contributors == 1:
                continue
            prog.append(Step("hand_in", s.unit, slot=s.mine))
            if i == len(segs) - 1:
                p = tail.participants(s.unit, s.contributors)
                lo, hi = spread_share(s.mine, p, f4)
                prog += [Step("wait", s.unit, need=s.contributors),
                         Step("reduce", s.unit, lo=lo, hi=hi, order=tuple(range(s.contributors)))]
        out.append(prog)
    return out


def check(tail: StreamKTail, tile_n: int, progs: list[list[Step]] | None = None) -> list[str]:
    """The violations of the distributed fixup on ``tail`` for 64 x ``tile_n`` fragments (empty: none).
    ``progs`` (default :func:`programs`) lets a test check a mutated protocol."""
    progs = programs(tail, tile_n) if progs is None else progs
    f4 = 16 * tile_n
    problems: list[str] = []
    # K order: slot i of a unit is its i-th contributor's partial, the contributors in K order.
    contributors: dict[int, list[int]] = {}
    for c in range(tail.clusters):
        for s in tail.segments(c):
            if s.contributors > 1:
                contributors.setdefault(s.unit, []).append((s.kb, c, s.mine))
    handed: dict[int, list[int]] = {}
    for prog in progs:
        for st in prog:
            if st.kind == "hand_in":
                handed.setdefault(st.unit, []).append(st.slot)
    for unit, entries in sorted(contributors.items()):
        entries.sort()
        if [mine for _, _, mine in entries] != list(range(len(entries))):
            problems.append(f"unit {unit}: slots {[m for _, _, m in entries]} are not its contributors in K order")
        if sorted(handed.get(unit, [])) != list(range(len(entries))):
            problems.append(f"unit {unit}: slots handed in {sorted(handed.get(unit, []))}, want each of "
                            f"0..{len(entries) - 1} once")
    # Liveness: run to the fixpoint (monotone: see the module docstring).
    count: dict[int, int] = {}
    pc = [0] * len(progs)
    moved = True
    while moved:
        moved = False
        for ri, prog in enumerate(progs):
            while pc[ri] < len(prog):
                st = prog[pc[ri]]
                if st.kind == "wait" and count.get(st.unit, 0) < st.need:
                    break
                if st.kind == "hand_in":
                    count[st.unit] = count.get(st.unit, 0) + 1
                pc[ri] += 1
                moved = True
    for ri, prog in enumerate(progs):
        if pc[ri] < len(prog):
            st = prog[pc[ri]]
            problems.append(f"cluster {ri} waits forever on unit {st.unit} ({count.get(st.unit, 0)} of {st.need} "
                            "hand-ins ever arrive)")
    # Safety: a wait passes only once every contributor handed in; shares cover each fragment once.
    covered: dict[int, list[int]] = {}
    for ri, prog in enumerate(progs):
        waited: set[int] = set()
        for st in prog:
            n = len(contributors.get(st.unit, []))
            if st.kind == "wait":
                if st.need < n:
                    problems.append(f"cluster {ri} may read unit {st.unit} after {st.need} of its {n} hand-ins")
                waited.add(st.unit)
            elif st.kind == "reduce":
                if st.unit not in waited:
                    problems.append(f"cluster {ri} reduces unit {st.unit} without waiting for its hand-ins")
                if st.order != tuple(range(n)):
                    problems.append(f"cluster {ri} adds unit {st.unit}'s slots in order {st.order}, not K order")
                cov = covered.setdefault(st.unit, [0] * f4)
                for q in range(st.lo, st.hi):
                    cov[q] += 1
    for unit in sorted(contributors):
        cov = covered.get(unit, [0] * f4)
        if any(v != 1 for v in cov):
            bad = [q for q, v in enumerate(cov) if v != 1]
            problems.append(f"unit {unit}: float4s {bad[0]}..{bad[-1]} ({len(bad)} of {f4}) reduced "
                            f"{sorted({cov[q] for q in bad})} times, not once")
    return problems


__all__ = ["Step", "check", "programs"]
