"""The auditor's state space: one state of a protocol's run, and every step that can follow it.

A state is ``(pcs, barriers, buffers, stores, events, observed)``, see :class:`Explorer`; a step is
one op of one role, a TMA load landing, or (in a reduced search) a role's atomic block or a burst
of landings before a blocked wait (:mod:`gemm_ladder.audit.reductions`). mbarrier semantics follow
the PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier" (see
:mod:`gemm_ladder.audit`).
"""

from __future__ import annotations

import itertools

from gemm_ladder.audit.compiled import CompiledProtocol
from gemm_ladder.audit.reductions import ReductionVoid


class Explorer:
    """State: (pcs, barriers, buffers, committed stores per role, in-flight loads, last observed phases).

    * barrier: (completed phases c, pending arrivals, tx-count); current parity = c % 2
    * buffer: (tag of the latest load or staging write, landed, unread-roles mask, reading-roles mask,
      stores that may still read it)
    * stores: per role, the staging buffers of its committed bulk groups that no wait_group covered yet
    * events: sorted tuple of ("L", ctas, ((buffers, barrier) per destination), bytes, tag, role)
    * obs: sorted ((role, barrier), c) pairs: the phase count a role saw when its last unannotated
      wait on that barrier passed (for the aliasing check of waits without a ``phase``)
    """

    def __init__(self, cp: CompiledProtocol, split_multicast: bool = False, mode: str = "none"):
        self.cp = cp
        self.split_multicast = split_multicast
        self.blocks = mode in ("blocks", "bursts")
        self.bursts = mode == "bursts"
        self.n_roles = len(cp.roles)
        self._ev_bars: dict = {}  # in-flight load -> the barriers it completes on (one per load op)

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
        """Each role moves one atomic block (``CompiledProtocol.block_end``); a block of private
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
        memo = self._ev_bars
        cands = []
        for ev in events:
            bars = memo.get(ev)
            if bars is None:
                bars = memo[ev] = frozenset(bari for _, bari in ev[2])
            if bi in bars:
                cands.append(ev)
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
            raise ReductionVoid(f"an arrival may complete {self._bar_name(bi)}")

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
