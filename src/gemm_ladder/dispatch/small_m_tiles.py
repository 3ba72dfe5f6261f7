"""How many M tiles the small-M kernel computes M in, and whether the general kernel runs instead: one
tile of the smallest bucket >= M, or t = 2, 3 or 4 tiles of the bucket that holds ceil(M / t) rows; or a
general kernel configuration measured faster. A measured decision, kept in ``table.json``'s
``"small_m"`` entry beside the general kernel's cost model and regenerated on the GPU by
``bench/library_small_m.py --tune``.

Why it is a choice and not a formula: the kernel's work units are (N tile, M tile) pairs
(kernels/library/sm90_gemm_small_m.cu), so more M tiles shrink each unit's accumulators and deepen the
ring, but every M tile reads its weight tile again; whether the extra reads come from L2 or from
DRAM depends on how the units of one weight tile are scheduled, which depends on N and K. The H200
measurements behind the shipped entry (its ``provenance``) show both outcomes.

Tile counts: t tiles means the bucket :func:`tile_bn` (M, t), the smallest holding ceil(M / t) rows; a
count is timed only where its bucket exists and differs from every smaller count's (:func:`tile_counts`:
M = 197 has one, two and four tiles, three tiles of BN 128 being two tiles' bucket; M <= 8 has one).

The entry: ``shapes``, the (N, K) the tune timed; ``decisions``, one per timed (M, N, K) with the
medians (microseconds) of one and two tiles (``one_tile_us``, ``two_tile_us``) and, where the tune timed
them, of three and four tiles (``three_tile_us``, ``four_tile_us``, with their buckets), and the tile
count the rule gives (``tiles``); then (a tune that timed them) the median of the general kernel's route
there (``general_us``, ``general_route``: the route dispatch takes when the small-M kernel is set
aside, the cost model's build and (BN, split)) and of the general kernel forced to its 64-row build with
one CTA per cluster (``general_bm64_us``, ``general_bm64_bn``, ``general_bm64_route``: the BN and split
the cost model ranks fastest for that build, :func:`gemm_ladder.dispatch.route.choose_general_build`),
and the kernel the rule gives (``kernel``: SMALL_M, GENERAL or GENERAL_BM64); ``tie``, the rule's margin.

Rule: each candidate, in order from the simplest launch, replaces the current choice only when its
median over passes is more than ``tie`` (2%) below the current choice's (a tie keeps the simpler launch).
Tiles (:func:`decide_tiles`): one tile, then two, three, four tiles (those timed). Then the kernel
(:func:`decide_general`): the small-M kernel in that tile count, then the general kernel's route, then
its 64-row one-CTA build. With only one- and two-tile times and the route's (an entry tuned before the
three- and four-tile counts and the 64-row build were timed), this is the earlier rule: two tiles when
more than 2% below one tile, then the route when more than 2% below that. A decision without a
general time keeps the small-M kernel.

The shipped entry (its ``provenance``: the H200 tunes of 2026-12-04 at 4cc6b09 and cd0fc03, merged: 104
(M, N, K) over 13 (N, K)) takes all of them: of its 104 decisions, 37 the general kernel's route, 12 its
64-row one-CTA build, and the small-M kernel in one (22), two (15), three (4) and four (14) tiles.

Lookup (:meth:`TilesRule.choose`), for the kernel's (M, N, K):

1. M <= 8: one tile (the smallest bucket; there is no smaller one to split into).
2. The timed shape nearest to (N, K) in log space, (log N - log N')^2 + (log K - log K')^2 (ties: the
   first listed). Nearest among every timed shape, so a shape near one whose M was not timed falls
   to rule 4 rather than borrowing another size's decision (the choice flips with the weight's size).
3. Among that shape's decisions whose M has the same one-tile bucket as M: the nearest M (ties: the
   larger); the bucket its tile count was timed in (the same for one and two tiles anywhere in a
   one-tile bucket's range; three and four tiles name the bucket that was timed, then M takes
   ceil(M / BN) tiles of it), and its kernel (``TilesChoice.general_why`` set when it is a general
   configuration, ``TilesChoice.general_bm64_bn`` when that is the 64-row one-CTA build, whose BN it is).
   When that shape is not the call's own (N, K) and the decision is three or four tiles or the 64-row
   build, it is decided again on its one- and two-tile and route times alone (:meth:`Decision.restricted`:
   those choices do not carry to a neighbouring N x K, MIN_TILES_EVIDENCE), and the why says so.
4. None there: one tile ("not measured").

dispatch/route.py's ``choose`` runs the choice: the small-M kernel in that bucket, or for GENERAL the
general kernel's route, for GENERAL_BM64 its 64-row one-CTA build at ``general_bm64_bn`` (the split the
cost model's), each where it copies no more than the small-M route (else the small-M kernel).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from gemm_ladder.dispatch.heuristic import TABLE_PATH

#: The table's key for this entry.
KEY = "small_m"
#: A candidate must be faster than the current choice by more than this fraction of its time (a tie
#: keeps the simpler launch).
TIE = 0.02
#: A decision's kernel values: the small-M kernel, the general kernel's route, the general kernel's
#: 64-row build with one CTA per cluster (at the decision's ``general_bm64_bn``).
SMALL_M, GENERAL, GENERAL_BM64 = "small_m", "general", "general_bm64"
#: The forced general build's tile rows and CTAs per cluster.
BM64_TILE_M, BM64_CLUSTER = 64, 1
#: The tile counts the rule decides among, and their words (the JSON keys ``<word>_tile_us``).
TILE_COUNTS = (1, 2, 3, 4)
WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}
#: The run that showed three and four tiles (and the 64-row build) do not carry to a neighbouring N x K.
MIN_TILES_EVIDENCE = "bench/results/2026-12-04_shapes_real_5models_bf16_cd0fc03.json"
#: The provenance of a table with no small-M entry.
NO_ENTRY = "no small_m entry in the dispatch table: one tile everywhere (the smallest bucket >= M)"


def _buckets():
    from gemm_ladder.library.small_m import BUCKETS, SMALL_M_MAX, bucket

    return BUCKETS, SMALL_M_MAX, bucket


def one_tile_bn(m: int) -> int:
    """The bucket that takes M in one tile (library.small_m.bucket); raises ValueError outside 1..256."""
    _, top, bucket = _buckets()
    if not 1 <= m <= top:
        raise ValueError(f"M = {m}: the small-M kernel takes 1 <= M <= {top}")
    return bucket(m)


def tile_bn(m: int, tiles: int) -> int:
    """The bucket that takes M in ``tiles`` tiles: the smallest that holds ceil(M / tiles) rows (the
    one-tile bucket's or a smaller count's where no smaller bucket holds them)."""
    one_tile_bn(m)
    if tiles not in TILE_COUNTS:
        raise ValueError(f"tiles = {tiles}: the rule decides among {TILE_COUNTS}")
    return _buckets()[2](-(-m // tiles))


def two_tile_bn(m: int) -> int:
    """The bucket that takes M in two tiles: the smallest that holds ceil(M / 2) rows (equal to
    :func:`one_tile_bn` for M <= 8, where there is no smaller bucket)."""
    return tile_bn(m, 2)


def tile_counts(m: int) -> tuple[int, ...]:
    """The tile counts with a bucket of their own at M: each count of TILE_COUNTS whose :func:`tile_bn`
    differs from every smaller count's ((1,) for M <= 8; (1, 2, 4) for M = 197)."""
    out, seen = [], set()
    for t in TILE_COUNTS:
        bn = tile_bn(m, t)
        if bn not in seen:
            seen.add(bn)
            out.append(t)
    return tuple(out)


def _replaces(candidate: float | None, current: float, tie: float) -> bool:
    return candidate is not None and candidate < current * (1.0 - tie)


def _tile_steps(times: dict[int, float], tie: float) -> list[tuple[int, int]]:
    """The rule's steps over the timed counts (``times``: count -> median): (count, the count it
    replaced) for each count taken, one tile first, each larger one taken when more than ``tie`` below the
    current choice's time."""
    chosen, steps = 1, []
    for t in sorted(times):
        if t > 1 and _replaces(times[t], times[chosen], tie):
            steps.append((t, chosen))
            chosen = t
    return steps


def decide_tiles(times: dict[int, float], tie: float = TIE) -> int:
    """The tile count: one tile, then each larger count timed (``times``: count -> median, microseconds)
    in turn, taken when more than ``tie`` below the current choice's time."""
    steps = _tile_steps(times, tie)
    return steps[-1][0] if steps else 1


def decide(one_tile_us: float, two_tile_us: float, tie: float = TIE) -> int:
    """The rule on one and two tiles: 2 when ``two_tile_us < one_tile_us * (1 - tie)``, else 1 (medians,
    microseconds)."""
    return decide_tiles({1: one_tile_us, 2: two_tile_us}, tie)


def decide_general(small_m_us: float, general_us: float | None, general_bm64_us: float | None = None,
                   tie: float = TIE) -> str:
    """The kernel: SMALL_M (``small_m_us``: the median of the tile count chosen); then GENERAL (the
    route) when ``general_us`` is more than ``tie`` below that; then GENERAL_BM64 (the 64-row one-CTA
    build) when ``general_bm64_us`` is more than ``tie`` below the choice so far. None: not timed."""
    kernel, current = SMALL_M, small_m_us
    if _replaces(general_us, current, tie):
        kernel, current = GENERAL, general_us
    if _replaces(general_bm64_us, current, tie):
        kernel = GENERAL_BM64
    return kernel


def decide_kernel(small_m_us: float, general_us: float | None, tie: float = TIE) -> str:
    """GENERAL when ``general_us < small_m_us * (1 - tie)`` (``small_m_us``: the median of the tile
    count chosen), else SMALL_M; SMALL_M when the general kernel was not timed (None)."""
    return decide_general(small_m_us, general_us, None, tie)


@dataclass(frozen=True)
class Decision:
    """One timed (M, N, K): the medians over passes (microseconds) of one and two tiles and (None: not
    timed) three and four, and the tile count the rule gives; ``general_us``: the general kernel's
    route's median there (None: not timed), ``general_route`` its configuration in words;
    ``general_bm64_us``: the general kernel's 64-row one-CTA build's median (None: not timed),
    ``general_bm64_bn`` its BN and ``general_bm64_route`` it in words; ``kernel``: the one the rule
    gives (SMALL_M, GENERAL or GENERAL_BM64)."""

    m: int
    n: int
    k: int
    tiles: int
    one_tile_us: float
    two_tile_us: float
    general_us: float | None = None
    kernel: str = SMALL_M
    general_route: str | None = None
    three_tile_us: float | None = None
    four_tile_us: float | None = None
    general_bm64_us: float | None = None
    general_bm64_bn: int | None = None
    general_bm64_route: str | None = None

    @property
    def tile_us(self) -> dict[int, float]:
        """The timed tile counts' medians: {count: microseconds}."""
        times = {1: self.one_tile_us, 2: self.two_tile_us, 3: self.three_tile_us, 4: self.four_tile_us}
        return {t: us for t, us in times.items() if us is not None}

    @property
    def small_m_us(self) -> float:
        """The median of the tile count chosen."""
        return self.tile_us[self.tiles]

    def bn(self, tiles: int) -> int:
        """The bucket ``tiles`` tiles were timed in (at this decision's M)."""
        return tile_bn(self.m, tiles)

    def restricted(self, tie: float = TIE) -> "Decision":
        """This decision on its one- and two-tile and route times alone (three and four tiles and the
        64-row build dropped, tile count and kernel decided again by the rule): what the lookup uses
        away from the (N, K) it was timed at (:meth:`TilesRule.choose`)."""
        two = replace(self, tiles=decide_tiles({1: self.one_tile_us, 2: self.two_tile_us}, tie), three_tile_us=None,
                      four_tile_us=None, general_bm64_us=None, general_bm64_bn=None, general_bm64_route=None)
        return replace(two, kernel=decide_general(two.small_m_us, self.general_us, None, tie))

    def to_json(self) -> dict:
        out = {"m": self.m, "n": self.n, "k": self.k, "tiles": self.tiles, "one_tile_bn": one_tile_bn(self.m),
               "two_tile_bn": two_tile_bn(self.m), "one_tile_us": round(self.one_tile_us, 3),
               "two_tile_us": round(self.two_tile_us, 3)}
        for t in (3, 4):
            if t in self.tile_us:
                out.update({f"{WORDS[t]}_tile_bn": self.bn(t), f"{WORDS[t]}_tile_us": round(self.tile_us[t], 3)})
        if self.general_us is not None:
            out.update(general_us=round(self.general_us, 3), general_route=self.general_route)
        if self.general_bm64_us is not None:
            out.update(general_bm64_us=round(self.general_bm64_us, 3), general_bm64_bn=self.general_bm64_bn,
                       general_bm64_route=self.general_bm64_route)
        if self.general_us is not None or self.general_bm64_us is not None:
            out["kernel"] = self.kernel
        return out


@dataclass(frozen=True)
class TilesChoice:
    """The small-M kernel's bucket ``bn`` and the number of M tiles it computes M in, and why;
    ``general_why`` (None: the small-M kernel): why the table measured a general configuration faster;
    ``general_bm64_bn`` (None: the route's configuration, where ``general_why`` is set): that
    configuration is the general kernel's 64-row build with one CTA per cluster, at this BN."""

    bn: int
    tiles: int
    why: str
    provenance: str
    general_why: str | None = None
    general_bm64_bn: int | None = None

    def to_json(self) -> dict:
        out = {"bn": self.bn, "m_tiles": self.tiles, "why": self.why, "provenance": self.provenance}
        if self.general_why:
            out["general_why"] = self.general_why
        if self.general_bm64_bn is not None:
            out["general_bm64_bn"] = self.general_bm64_bn
        return out


def _tiles_words(t: int) -> str:
    return "one tile" if t == 1 else f"{WORDS[t]} tiles"


def _tiles_verdict(d: Decision, tie: float) -> str:
    """Why the rule gave ``d.tiles``, in words ("two tiles faster by more than 2%")."""
    times, steps = d.tile_us, _tile_steps(d.tile_us, tie)
    chosen = steps[-1][0] if steps else 1
    if chosen == 1:
        return f"{' or '.join(WORDS[t] for t in sorted(times)[1:])} tiles not faster by more than {tie:.0%}"
    said = [f"{_tiles_words(t)} faster by more than {tie:.0%}" if prev == 1
            else f"{_tiles_words(t)} faster than {WORDS[prev]} by more than {tie:.0%}" for t, prev in steps]
    rest = [t for t in sorted(times) if t > chosen]
    if rest:
        said.append(f"{' or '.join(WORDS[t] for t in rest)} tiles not faster than {WORDS[chosen]} by more than "
                    f"{tie:.0%}")
    return ", then ".join(said[:len(steps)]) + "".join(f"; {s}" for s in said[len(steps):])


@dataclass(frozen=True)
class TilesRule:
    """The table's small-M entry (see the module docstring)."""

    provenance: str
    shapes: tuple[tuple[int, int], ...] = ()
    decisions: tuple[Decision, ...] = ()
    tie: float = TIE

    def _nearest_shape(self, n: int, k: int) -> tuple[int, int] | None:
        def dist(s):
            return (math.log(s[0] / max(n, 1))) ** 2 + (math.log(s[1] / max(k, 1))) ** 2
        return min(self.shapes, key=dist) if self.shapes else None

    def choose(self, m: int, n: int, k: int) -> TilesChoice:
        """The bucket and tile count for the kernel's (M, N, K) (M rows of x, N of the weight), and the
        general configuration where the table measured one faster; raises ValueError for M outside 1..256."""
        one = one_tile_bn(m)
        if tile_counts(m) == (1,):
            return TilesChoice(one, 1, f"M = {m} <= {one}: one tile of the smallest bucket", self.provenance)
        shape = self._nearest_shape(n, k)
        same = [d for d in self.decisions if shape and (d.n, d.k) == shape and one_tile_bn(d.m) == one]
        if not same:
            where = f"at {shape[0]} x {shape[1]}, the nearest timed N x K" if shape else "(no shape timed)"
            return TilesChoice(one, 1, f"not measured for M in BN {one}'s range {where}: one tile (the default)",
                               self.provenance)
        d = min(same, key=lambda d: (abs(d.m - m), -d.m))
        borrowed = ""
        if (d.n, d.k) != (n, k) and (d.tiles > 2 or d.kernel == GENERAL_BM64):
            # Three or four tiles, or the 64-row build, only at the (N, K) they were timed at: how their
            # units fill the SMs (N / 128 x tiles against 132) and whether t reads of the weight stay in L2
            # change between neighbouring shapes (measured: four tiles borrowed from 4096 x 4096 ran
            # 4608 x 3584 at M = 64 in 26.1 us, MIN_TILES_EVIDENCE, where two tiles had run it in 19.1,
            # bench/results/2026-12-04_shapes_real_dd7709e.json). Elsewhere
            # the nearest shape's one- and two-tile and route times decide, as before those were timed.
            d = d.restricted(self.tie)
            borrowed = (f" (three and four tiles and the 64-row build are taken only at the N x K they were timed "
                        f"at; here the one- and two-tile and route times decide)")
        # Buckets named as at the kernel's M for one and two tiles (the same across a one-tile bucket's
        # range), as timed for three and four (their buckets vary across it).
        timed = ", ".join(f"{_tiles_words(t)} (BN {tile_bn(m, t) if t <= 2 else d.bn(t)}) {us:.1f} us"
                          for t, us in d.tile_us.items())
        why = (f"timed at M = {d.m}, {d.n} x {d.k} (the nearest timed N x K): {timed}; "
               f"{_tiles_verdict(d, self.tie)}{borrowed}")
        bn = tile_bn(m, d.tiles) if d.tiles <= 2 else d.bn(d.tiles)
        general, bm64 = None, None
        if d.kernel in (GENERAL, GENERAL_BM64):
            near = (f"at M = {d.m}, {d.n} x {d.k} (the nearest timed M and N x K to the kernel's {m} x {n} x {k})")
            small = f"{d.small_m_us:.1f} us (the small-M kernel, {_tiles_words(d.tiles)})"
            if d.kernel == GENERAL:
                general = (f"the small_m table measured the general kernel faster {near}: {d.general_us:.1f} us "
                           f"({d.general_route or 'its route'}) against {small}; faster by more than {self.tie:.0%}"
                           f"{borrowed}")
            else:
                bm64 = d.general_bm64_bn
                route_won = decide_general(d.small_m_us, d.general_us, None, self.tie) == GENERAL
                route = ("" if d.general_us is None else f" and {d.general_us:.1f} us (the route"
                         + (f", {d.general_route})" if d.general_route else ")"))
                general = (f"the small_m table measured the general kernel's 64-row build with one CTA per cluster "
                           f"at BN {bm64} faster {near}: {d.general_bm64_us:.1f} us "
                           f"({d.general_bm64_route or f'BM 64 BN {bm64}'}) against {small}{route}; faster than "
                           f"{'the route' if route_won else 'the small-M kernel'} by more than {self.tie:.0%}")
        return TilesChoice(bn, -(-m // bn), why, self.provenance, general, bm64)

    @functools.cached_property
    def small_m_only(self) -> "TilesRule":
        """This rule with every decision's kernel the small-M one (tile counts kept, general times
        dropped), made once per rule (the route cache keys on the rule's identity): for a product the
        general times were not measured for (swiglu's small-M path: its up product writes float32 and its
        gate product carries the gated epilogue; the table timed plain GEMMs)."""
        return replace(self, decisions=tuple(replace(d, general_us=None, general_route=None, general_bm64_us=None,
                                                      general_bm64_bn=None, general_bm64_route=None, kernel=SMALL_M)
                                              for d in self.decisions))

    def buckets(self) -> set[int]:
        """Every bucket :meth:`choose` can return (the one-tile buckets, and the bucket of each decision
        that picks more tiles)."""
        return set(_buckets()[0]) | {d.bn(d.tiles) for d in self.decisions if d.tiles > 1}

    def to_json(self) -> dict:
        return {"provenance": self.provenance, "rule": f"one tile, then two, three, four tiles (those timed), each "
                f"taken when its median over passes is more than {self.tie:.0%} below the current choice's; then the "
                f"general kernel when its median is more than {self.tie:.0%} below that (its route); then its 64-row "
                f"build with one CTA per cluster when its median is more than {self.tie:.0%} below the choice so far; "
                f"else the small-M kernel", "tie": self.tie,
                "shapes": [list(s) for s in self.shapes], "decisions": [d.to_json() for d in self.decisions]}

    @classmethod
    def from_json(cls, d: dict) -> "TilesRule":
        """Parse the entry; raises ValueError naming what is malformed (a decision whose tile count or
        kernel the rule does not give from its own times, M outside 9..256, an (N, K) not in ``shapes``, a
        tile count timed where it has no bucket of its own...)."""
        def opt(e, key, kind=float):
            return None if e.get(key) is None else kind(e[key])

        try:
            tie = float(d.get("tie", TIE))
            shapes = tuple((int(s[0]), int(s[1])) for s in d.get("shapes", ()))
            decisions = tuple(Decision(int(e["m"]), int(e["n"]), int(e["k"]), int(e["tiles"]), float(e["one_tile_us"]),
                                       float(e["two_tile_us"]), opt(e, "general_us"), str(e.get("kernel", SMALL_M)),
                                       opt(e, "general_route", str), opt(e, "three_tile_us"), opt(e, "four_tile_us"),
                                       opt(e, "general_bm64_us"), opt(e, "general_bm64_bn", int),
                                       opt(e, "general_bm64_route", str))
                              for e in d.get("decisions", ()))
            rule = cls(str(d["provenance"]), shapes, decisions, tie)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"dispatch table, {KEY}: {type(exc).__name__}: {exc}") from None
        if not (math.isfinite(tie) and 0 <= tie < 1):
            raise ValueError(f"dispatch table, {KEY}: tie = {tie}: a fraction in [0, 1)")
        if any(min(s) < 1 for s in shapes):
            raise ValueError(f"dispatch table, {KEY}: shapes must be positive (N, K), got {list(shapes)}")
        for e in decisions:
            at = f"M = {e.m}, {e.n} x {e.k}"
            if (e.n, e.k) not in shapes:
                raise ValueError(f"dispatch table, {KEY}: decision at {e.n} x {e.k} is not one of the shapes")
            if not 9 <= e.m <= _buckets()[1]:
                raise ValueError(f"dispatch table, {KEY}: decision at M = {e.m}: M must be in 9..{_buckets()[1]} "
                                 "(M <= 8 has one bucket)")
            for t in e.tile_us:
                if t not in tile_counts(e.m):
                    raise ValueError(f"dispatch table, {KEY}: {at} times {WORDS[t]} tiles, whose bucket (BN "
                                     f"{tile_bn(e.m, t)}) is a smaller count's: timed once, under the smaller count")
            times = (*e.tile_us.values(), *(v for v in (e.general_us, e.general_bm64_us) if v is not None))
            if not all(math.isfinite(v) and v > 0 for v in times):
                raise ValueError(f"dispatch table, {KEY}: times at {at} must be positive")
            if e.general_bm64_us is not None and e.general_bm64_bn not in _general_bns():
                raise ValueError(f"dispatch table, {KEY}: {at}: general_bm64_bn = {e.general_bm64_bn}, not a width "
                                 f"the general kernel is built at ({', '.join(map(str, _general_bns()))})")
            if e.tiles != decide_tiles(e.tile_us, tie):
                raise ValueError(f"dispatch table, {KEY}: {at} says {e.tiles} tile(s), but the "
                                 f"rule gives {decide_tiles(e.tile_us, tie)} from its times")
            want = decide_general(e.small_m_us, e.general_us, e.general_bm64_us, tie)
            if e.kernel != want:
                raise ValueError(f"dispatch table, {KEY}: {at} says kernel {e.kernel!r}, but the "
                                 f"rule gives {want!r} from its times")
        return rule


def _general_bns() -> tuple[int, ...]:
    """The widths the general kernel has builds at (library/gemm.py's), read there rather than through
    dispatch.kernels.general_bns, which tests narrow to steer the cost model: a width the route cannot
    launch leaves the small-M kernel in place (route.choose), it does not make the table malformed."""
    from gemm_ladder.library.gemm import K_MAJOR_B_TILE_N, TILE_N

    return tuple(sorted({*TILE_N, *K_MAJOR_B_TILE_N}, reverse=True))


#: The rule with no entry: one tile everywhere.
ONE_TILE = TilesRule(NO_ENTRY)


def load_rule(path: Path = TABLE_PATH) -> TilesRule:
    """The small-M entry of the table in ``path`` (ONE_TILE's rule when it has none); raises ValueError
    when it is malformed."""
    d = json.loads(Path(path).read_text())
    return TilesRule.from_json(d[KEY]) if KEY in d else ONE_TILE


def fit(rows: list[dict], provenance: str, tie: float = TIE) -> TilesRule:
    """The entry from timings: ``rows`` of {"m", "n", "k", "one_tile_us": [per pass], "two_tile_us":
    [per pass]} (each pass's median, microseconds), optionally with "three_tile_us" and "four_tile_us"
    (per pass; absent or empty: not timed), "general_us" (per pass) and "general_route" (words), and
    "general_bm64_us" (per pass), "general_bm64_bn" and "general_bm64_route" (words); each (M, N, K)
    decided by :func:`decide_tiles`, then :func:`decide_general`, on the medians over passes.
    ``shapes``: every (N, K) timed, in first-seen order.

    Raises ValueError for a row without passes, for M outside 9..256, with a repeated (M, N, K), or
    timing a tile count whose bucket is a smaller count's.
    """
    import statistics

    def median(r, key):
        return statistics.median(r[key]) if r.get(key) else None

    shapes: dict[tuple[int, int], None] = {}
    decisions, seen = [], set()
    for r in rows:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        if (m, n, k) in seen:
            raise ValueError(f"fit: ({m}, {n}, {k}) timed twice")
        seen.add((m, n, k))
        if tile_counts(m) == (1,):
            raise ValueError(f"fit: M = {m} has one bucket only (M <= 8): nothing to decide")
        if not r["one_tile_us"] or not r["two_tile_us"]:
            raise ValueError(f"fit: ({m}, {n}, {k}) has no timed pass")
        times = {t: median(r, f"{WORDS[t]}_tile_us") for t in TILE_COUNTS}
        times = {t: us for t, us in times.items() if us is not None}
        if set(times) - set(tile_counts(m)):
            raise ValueError(f"fit: ({m}, {n}, {k}) times tile counts {sorted(set(times) - set(tile_counts(m)))} "
                             f"whose buckets are smaller counts' (M = {m} has {tile_counts(m)})")
        general, bm64 = median(r, "general_us"), median(r, "general_bm64_us")
        tiles = decide_tiles(times, tie)
        shapes[(n, k)] = None
        decisions.append(Decision(m, n, k, tiles, times[1], times[2], general,
                                  decide_general(times[tiles], general, bm64, tie), r.get("general_route"),
                                  times.get(3), times.get(4), bm64,
                                  None if bm64 is None else int(r["general_bm64_bn"]),
                                  None if bm64 is None else r.get("general_bm64_route")))
    return TilesRule(provenance, tuple(shapes), tuple(decisions), tie)


__all__ = ["BM64_CLUSTER", "BM64_TILE_M", "GENERAL", "GENERAL_BM64", "KEY", "NO_ENTRY", "ONE_TILE", "SMALL_M", "TIE",
           "TILE_COUNTS", "Decision", "TilesChoice", "TilesRule", "decide", "decide_general", "decide_kernel",
           "decide_tiles", "fit", "load_rule", "one_tile_bn", "tile_bn", "tile_counts", "two_tile_bn"]
