"""Symmetry reduction: roles that run the same program up to a renaming are interchangeable.

Two consumer warpgroups of a CTA run one program on their own staging buffers; the CTAs of a cluster
run one program on their own barriers and buffers (each CTA's producer multicasts its own slice of B).
Such a renaming (of roles, CTAs, barriers and buffers at once) that maps every program onto a program
of the protocol is an **automorphism**: it maps each run of the protocol onto a run, step for step,
with the same violations (the same kinds, at renamed places). So the search need only visit one
state of each orbit: each state is replaced by its canonical image (the least of its images under the
automorphism group), and a violation is reachable from the canonical image exactly when it is from the
state (Emerson and Sistla, "Symmetry and model checking", 1996; Ip and Dill, "Better verification
through symmetry", 1996).

Nothing is assumed about which roles are symmetric: :func:`automorphisms` finds the renamings from the
compiled programs, op for op, so a fault written into one consumer only (or one CTA only) breaks the
symmetry it would hide behind and the search runs over the unreduced space for those roles. The
reduced searches of :mod:`gemm_ladder.audit.reductions` compose with it: their choices depend only on
a state's structure (which op each role is at, which loads are in flight), which an automorphism
preserves; and every state they expand is still expanded by the same rule, only in a renamed copy.

Counterexample traces are reported in one consistent naming: :func:`Symmetry.relabel` maps each step's
label back through the renamings composed along the path.
"""

from __future__ import annotations

import itertools
from math import factorial
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gemm_ladder.audit.compiled import CompiledProtocol

#: The most role permutations tried when looking for automorphisms (6 roles of two kinds: 2! x 4! = 48;
#: beyond this the reduction is not used: the group is searched, not assumed).
MAX_CANDIDATES = 5040


class _Perm:
    """One automorphism: role, barrier, buffer and CTA maps (old index -> new index)."""

    def __init__(self, roles, bars, bufs, ctas, staging):
        self.roles, self.bars, self.bufs, self.ctas, self.staging = roles, bars, bufs, ctas, staging
        inv = _inverse
        # where each new position takes its value from (a state is renamed by gathering)
        self.roles_src, self.bars_src, self.bufs_src = inv(roles), inv(bars), inv(bufs)
        self.staging_src = [staging[j] for j in self.bufs_src]
        self.masks = [self._mask(m) for m in range(1 << len(roles))]
        self._events: dict = {}
        # the gathers as C-level calls (the search renames every state it reaches)
        self._take_roles = _gather(self.roles_src)
        self._take_bars = _gather(self.bars_src)
        self._operand_images: dict = {}
        self._staging_images: dict = {}
        self._buf_plan = [(j, self._staging_images if stg else self._operand_images)
                          for j, stg in zip(self.bufs_src, self.staging_src)]

    def inverse(self) -> _Perm:
        return _Perm(_inverse(self.roles), _inverse(self.bars), _inverse(self.bufs), _inverse(self.ctas),
                     [self.staging[j] for j in _inverse(self.bufs)])

    def compose(self, other: _Perm) -> _Perm:
        """self after other."""
        return _Perm([self.roles[j] for j in other.roles], [self.bars[j] for j in other.bars],
                     [self.bufs[j] for j in other.bufs], [self.ctas[j] for j in other.ctas], other.staging)

    # -- the renaming of a state and of a step --------------------------------------------------
    def _mask(self, m: int) -> int:
        out = 0
        for i, j in enumerate(self.roles):
            if m >> i & 1:
                out |= 1 << j
        return out

    def event(self, ev):
        """The renamed in-flight load (memoised: there is one per load op of the programs)."""
        out = self._events.get(ev)
        if out is None:
            out = self._events[ev] = self._event(ev)
        return out

    def _event(self, ev):
        _, ctas, deliveries, nbytes, tag, ri = ev
        dl = sorted(zip((self.ctas[c] for c in ctas),
                        (tuple(self.bufs[b] for b in bis) for bis, _ in deliveries),
                        (self.bars[bari] for _, bari in deliveries)))
        return ("L", tuple(c for c, _, _ in dl), tuple((bis, bari) for _, bis, bari in dl), nbytes, tag,
                self.roles[ri])

    def pcs(self, pcs):
        return self._take_roles(pcs)

    def barriers(self, bars):
        return self._take_bars(bars)

    def state(self, state, pcs=None):
        pcs0, bars, bufs, groups, events, obs = state
        r = self.roles
        if pcs is None:
            pcs = self.pcs(pcs0)
        fb = self.bufs
        ngroups = tuple([tuple([fb[b] for b in g]) if g else g for g in self._take_roles(groups)])
        nbars = self._take_bars(bars)
        nbufs = []
        for j, memo in self._buf_plan:  # a buffer's image depends on its value alone: memoised
            b = bufs[j]
            img = memo.get(b)
            if img is None:
                img = memo[b] = self._buffer(b, memo is self._staging_images)
            nbufs.append(img)
        if events:
            memo = self._events
            nevents = tuple(sorted([memo[ev] if ev in memo else self.event(ev) for ev in events]))
        else:
            nevents = events
        nobs = tuple(sorted([((r[ri], self.bars[bi]), c) for (ri, bi), c in obs])) if obs else obs
        return (pcs, nbars, tuple(nbufs), ngroups, nevents, nobs)

    def _buffer(self, b, staging: bool):
        """The renamed value of one buffer (see :class:`gemm_ladder.audit.explorer.Explorer`)."""
        ver, landed, unread, reading, st = b
        if staging and ver is not None:
            ver = (self.roles[ver[0]], ver[1], ver[2])
        elif not unread and not reading:
            return b  # nothing in it names a role
        return (ver, landed, self.masks[unread], self.masks[reading], st)

    def label(self, label):
        if label[0] == "B":
            return ("B", tuple(self.label(x) for x in label[1]))
        if label[0] == "R":
            return ("R", self.roles[label[1]]) + tuple(label[2:])
        return ("L", self.event(label[1]))


def _gather(src):
    """``seq -> tuple(seq[j] for j in src)``, as one itemgetter call."""
    if len(src) == 1:
        j = src[0]
        return lambda seq: (seq[j],)
    return itemgetter(*src) if src else (lambda seq: ())


def _inverse(m):
    out = [0] * len(m)
    for i, j in enumerate(m):
        out[j] = i
    return out


def _bind(m: dict, inv: dict, a, b) -> bool:
    if a in m:
        return m[a] == b
    if b in inv:
        return False
    m[a] = b
    inv[b] = a
    return True


def _match(cp: CompiledProtocol, sigma: list[int]) -> _Perm | None:
    """The automorphism with role map ``sigma``, or None if the programs do not map onto each other."""
    bm, bi_ = {}, {}
    fm, fi_ = {}, {}
    cm, ci_ = {}, {}
    reads = []
    for ri, rj in enumerate(sigma):
        if not _bind(cm, ci_, cp.roles[ri].cta, cp.roles[rj].cta):
            return None
    for ri, rj in enumerate(sigma):
        pa, pb = cp.progs[ri], cp.progs[rj]
        if len(pa) != len(pb):
            return None
        for a, b in zip(pa, pb):
            k = a[0]
            if k != b[0]:
                return None
            if k == "wait":
                if a[2:] != b[2:] or not _bind(bm, bi_, a[1], b[1]):
                    return None
            elif k in ("arrive", "expect"):
                if a[2:] != b[2:] or not _bind(bm, bi_, a[1], b[1]):
                    return None
            elif k == "load":
                if a[2:] != b[2:] or len(a[1]) != len(b[1]):
                    return None
                # the destinations as a set: each (cta, buffers, barrier) onto the target's at the mapped CTA
                tgt = {c: (bis, bari) for c, bis, bari in b[1]}
                for c, bis, bari in a[1]:
                    if cm.get(c) not in tgt:
                        return None
                    tb, tbar = tgt[cm[c]]
                    if len(tb) != len(bis) or not _bind(bm, bi_, bari, tbar):
                        return None
                    if not all(_bind(fm, fi_, x, y) for x, y in zip(bis, tb)):
                        return None
            elif k in ("read", "rbegin", "rend"):
                if a[2] != b[2] or len(a[1]) != len(b[1]):
                    return None
                reads.append((a[1], b[1]))
            elif k in ("write", "commit"):
                (wa, ta, pa_), (wb, tb_, pb_) = a[2], b[2]
                if sigma[wa] != wb or (ta, pa_) != (tb_, pb_) or not _bind(fm, fi_, a[1], b[1]):
                    return None
            elif a != b:
                return None
    # a read's buffers are a set (one wgmma reads them all): those the loads bound must map onto the
    # target's set, the rest are bound in order
    for xa, xb in reads:
        rest_a = [x for x in xa if x not in fm]
        rest_b = [y for y in xb if y not in fi_]
        if len(rest_a) != len(rest_b) or not all(_bind(fm, fi_, x, y) for x, y in zip(rest_a, rest_b)):
            return None
        if {fm[x] for x in xa} != set(xb):
            return None
    # barriers and buffers no program names stay where they are
    nb, nf = len(cp.bar_info), len(cp.buf_info)
    for i in range(nb):
        if i not in bm:
            if i in bi_:
                return None
            bm[i] = bi_[i] = i
    for i in range(nf):
        if i not in fm:
            if i in fi_:
                return None
            fm[i] = fi_[i] = i
    if any(cp.bar_info[i][3] != cp.bar_info[j][3] or cp.bar_info[i][0] != cp.bar_info[j][0] for i, j in bm.items()):
        return None  # same init count, same barrier array
    if any(cp.buf_info[i][3] != cp.buf_info[j][3] for i, j in fm.items()):
        return None
    ctas = [cm.get(c, c) for c in range(len(cp.cta_roles))]
    if sorted(ctas) != list(range(len(ctas))):
        return None
    # the search's bookkeeping must map too: who reads which load (a mask of roles)
    perm = _Perm(list(sigma), [bm[i] for i in range(nb)], [fm[i] for i in range(nf)], ctas,
                 [info[3] == "staging" for info in cp.buf_info])
    for (b, tag), mask in cp.readers.items():
        if cp.readers.get((perm.bufs[b], tag), 0) != perm.masks[mask]:
            return None
    for ri, rj in enumerate(sigma):
        if cp.private[ri] != cp.private[rj] or cp.block_end[ri] != cp.block_end[rj]:
            return None
    return perm


def automorphisms(cp: CompiledProtocol) -> list[_Perm]:
    """Every renaming of roles (within a kind), CTAs, barriers and buffers that maps the protocol onto
    itself, the identity first; only the identity when the candidates exceed :data:`MAX_CANDIDATES`."""
    classes: dict[tuple, list[int]] = {}
    for ri, role in enumerate(cp.roles):
        classes.setdefault((role.kind, len(cp.progs[ri])), []).append(ri)
    groups = [g for g in classes.values()]
    n_cand = 1
    for g in groups:
        n_cand *= factorial(len(g))
    n = len(cp.roles)
    ident = _match(cp, list(range(n)))
    if ident is None:  # pragma: no cover (the identity always maps)
        raise AssertionError("identity is not an automorphism")
    if n_cand > MAX_CANDIDATES or n_cand == 1:
        return [ident]
    out = [ident]
    for choice in itertools.product(*(itertools.permutations(g) for g in groups)):
        sigma = [0] * n
        for g, img in zip(groups, choice):
            for a, b in zip(g, img):
                sigma[a] = b
        if sigma == list(range(n)):
            continue
        p = _match(cp, sigma)
        if p is not None:
            out.append(p)
    return out


class Symmetry:
    """Canonical images of states under a protocol's automorphism group."""

    def __init__(self, cp: CompiledProtocol):
        self.group = automorphisms(cp)
        self.inverse = [g.inverse() for g in self.group]

    @property
    def order(self) -> int:
        return len(self.group)

    def canon(self, state):
        """(a canonical image of ``state``, the index of the renaming that gives it).

        The image with the least program counters, then barriers, ties broken by the image's hash: an image of the
        state whatever the tie-break (what soundness needs); the same one for every state of the
        orbit except on a hash collision, which only costs a state visited twice."""
        group = self.group
        if len(group) == 1:
            return state, 0
        pcs = state[0]
        best_pcs, ties = pcs, [0]
        for i in range(1, len(group)):
            q = group[i].pcs(pcs)
            if q < best_pcs:
                best_pcs, ties = q, [i]
            elif q == best_pcs:
                ties.append(i)
        if len(ties) > 1:  # then the least barriers (cheap to rename: integers only)
            bars = state[1]
            keyed = [(bars if i == 0 else group[i].barriers(bars), i) for i in ties]
            lo = min(k for k, _ in keyed)
            ties = [i for k, i in keyed if k == lo]
        if len(ties) == 1:
            i = ties[0]
            return (state, 0) if i == 0 else (group[i].state(state, best_pcs), i)
        best = best_i = best_h = None
        for i in ties:
            img = state if i == 0 else group[i].state(state, best_pcs)
            h = hash(img)
            if best is None or h < best_h:
                best, best_i, best_h = img, i, h
        return best, best_i
