"""How many M tiles the small-M kernel computes M in: one tile of the smallest bucket >= M, or two
tiles of the bucket that holds ceil(M / 2) rows. A measured decision, kept in ``table.json``'s
``"small_m"`` entry beside the general kernel's cost model and regenerated on the GPU by
``bench/library_small_m.py --tune``.

Why it is a choice and not a formula: the kernel's work units are (N tile, M tile) pairs
(kernels/library/sm90_gemm_small_m.cu), so two M tiles halve each unit's accumulators and deepen the
ring, but every M tile reads its weight tile again; whether the second read comes from L2 or from
DRAM depends on how the units of one weight tile are scheduled, which depends on N and K. The H200
measurements behind the shipped entry (its ``provenance``) show both outcomes.

The entry: ``shapes``, the (N, K) the tune timed; ``decisions``, one per timed (M, N, K) with both
medians (microseconds) and the tile count the rule gives, and (a tune that timed it) the median of the
general kernel's route there (the route dispatch takes when the small-M kernel is set aside: the cost
model's (BN, split)) and the kernel the rule gives; ``tie``, the rule's margin.

Rule (:func:`decide`): two tiles when their median over passes is more than ``tie`` (2%) below one
tile's; otherwise one tile (a tie keeps the simpler launch). Then (:func:`decide_kernel`) the general
kernel when its median is more than ``tie`` below the chosen tile count's; otherwise the small-M
kernel (a tie keeps it). A decision without a general time (an entry tuned before it was timed) keeps
the small-M kernel.

Lookup (:meth:`TilesRule.choose`), for the kernel's (M, N, K):

1. M <= 8: one tile (the smallest bucket; there is no smaller one to split into).
2. The timed shape nearest to (N, K) in log space, (log N - log N')^2 + (log K - log K')^2 (ties: the
   first listed). Nearest among every timed shape, so a shape near one whose M was not timed falls
   to rule 4 rather than borrowing another size's decision (the choice flips with the weight's size).
3. Among that shape's decisions whose M has the same one-tile bucket as M: the nearest M (ties: the
   larger); its tile count, and its kernel (``TilesChoice.general_why`` set when it is the general one).
4. None there: one tile ("not measured").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from gemm_ladder.dispatch.heuristic import TABLE_PATH

#: The table's key for this entry.
KEY = "small_m"
#: Two tiles must be faster by more than this fraction of one tile's time (a tie keeps one tile).
TIE = 0.02
#: A decision's kernel values.
SMALL_M, GENERAL = "small_m", "general"
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


def two_tile_bn(m: int) -> int:
    """The bucket that takes M in two tiles: the smallest that holds ceil(M / 2) rows (equal to
    :func:`one_tile_bn` for M <= 8, where there is no smaller bucket)."""
    one_tile_bn(m)
    return _buckets()[2](-(-m // 2))


def decide(one_tile_us: float, two_tile_us: float, tie: float = TIE) -> int:
    """The rule: 2 when ``two_tile_us < one_tile_us * (1 - tie)``, else 1 (medians, microseconds)."""
    return 2 if two_tile_us < one_tile_us * (1.0 - tie) else 1


def decide_kernel(small_m_us: float, general_us: float | None, tie: float = TIE) -> str:
    """GENERAL when ``general_us < small_m_us * (1 - tie)`` (``small_m_us``: the median of the tile
    count :func:`decide` chose), else SMALL_M; SMALL_M when the general kernel was not timed (None)."""
    return GENERAL if general_us is not None and general_us < small_m_us * (1.0 - tie) else SMALL_M


@dataclass(frozen=True)
class Decision:
    """One timed (M, N, K): both medians over passes (microseconds) and the tile count the rule gives;
    ``general_us``: the general kernel's median there (None: not timed), ``general_route`` its
    configuration in words, and ``kernel`` the one the rule gives (SMALL_M or GENERAL)."""

    m: int
    n: int
    k: int
    tiles: int
    one_tile_us: float
    two_tile_us: float
    general_us: float | None = None
    kernel: str = SMALL_M
    general_route: str | None = None

    @property
    def small_m_us(self) -> float:
        """The median of the tile count chosen."""
        return self.two_tile_us if self.tiles == 2 else self.one_tile_us

    def to_json(self) -> dict:
        out = {"m": self.m, "n": self.n, "k": self.k, "tiles": self.tiles, "one_tile_bn": one_tile_bn(self.m),
               "two_tile_bn": two_tile_bn(self.m), "one_tile_us": round(self.one_tile_us, 3),
               "two_tile_us": round(self.two_tile_us, 3)}
        if self.general_us is not None:
            out.update(general_us=round(self.general_us, 3), general_route=self.general_route, kernel=self.kernel)
        return out


@dataclass(frozen=True)
class TilesChoice:
    """The small-M kernel's bucket ``bn`` and the number of M tiles it computes M in, and why;
    ``general_why`` (None: the small-M kernel): why the table measured the general kernel faster."""

    bn: int
    tiles: int
    why: str
    provenance: str
    general_why: str | None = None

    def to_json(self) -> dict:
        out = {"bn": self.bn, "m_tiles": self.tiles, "why": self.why, "provenance": self.provenance}
        if self.general_why:
            out["general_why"] = self.general_why
        return out


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
        """The bucket and tile count for the kernel's (M, N, K) (M rows of x, N of the weight); raises
        ValueError for M outside 1..256."""
        one, two = one_tile_bn(m), two_tile_bn(m)
        if one == two:
            return TilesChoice(one, 1, f"M = {m} <= {one}: one tile of the smallest bucket", self.provenance)
        shape = self._nearest_shape(n, k)
        same = [d for d in self.decisions if shape and (d.n, d.k) == shape and one_tile_bn(d.m) == one]
        if not same:
            where = f"at {shape[0]} x {shape[1]}, the nearest timed N x K" if shape else "(no shape timed)"
            return TilesChoice(one, 1, f"not measured for M in BN {one}'s range {where}: one tile (the default)",
                               self.provenance)
        d = min(same, key=lambda d: (abs(d.m - m), -d.m))
        faster = "two tiles faster by more than" if d.tiles == 2 else "two tiles not faster by more than"
        why = (f"timed at M = {d.m}, {d.n} x {d.k} (the nearest timed N x K): one tile (BN {one}) "
               f"{d.one_tile_us:.1f} us, two tiles (BN {two}) {d.two_tile_us:.1f} us; {faster} {self.tie:.0%}")
        general = None
        if d.kernel == GENERAL:
            general = (f"the small_m table measured the general kernel faster at M = {d.m}, {d.n} x {d.k} (the "
                       f"nearest timed M and N x K to the kernel's {m} x {n} x {k}): {d.general_us:.1f} us "
                       f"({d.general_route or 'its route'}) against {d.small_m_us:.1f} us (the small-M kernel, "
                       f"{'two tiles' if d.tiles == 2 else 'one tile'}); faster by more than {self.tie:.0%}")
        if d.tiles == 2:
            return TilesChoice(two, -(-m // two), why, self.provenance, general)
        return TilesChoice(one, 1, why, self.provenance, general)

    def buckets(self) -> set[int]:
        """Every bucket :meth:`choose` can return (the one-tile buckets, and the two-tile bucket of each
        decision that picks two tiles)."""
        return set(_buckets()[0]) | {two_tile_bn(d.m) for d in self.decisions if d.tiles == 2}

    def to_json(self) -> dict:
        return {"provenance": self.provenance, "rule": f"two tiles when their median over passes is more than "
                f"{self.tie:.0%} below one tile's; else one tile; then the general kernel when its median is more "
                f"than {self.tie:.0%} below that; else the small-M kernel", "tie": self.tie,
                "shapes": [list(s) for s in self.shapes], "decisions": [d.to_json() for d in self.decisions]}

    @classmethod
    def from_json(cls, d: dict) -> "TilesRule":
        """Parse the entry; raises ValueError naming what is malformed (a decision whose tile count the
        rule does not give from its own times, M outside 2..256, an (N, K) not in ``shapes``...)."""
        try:
            tie = float(d.get("tie", TIE))
            shapes = tuple((int(s[0]), int(s[1])) for s in d.get("shapes", ()))
            decisions = tuple(Decision(int(e["m"]), int(e["n"]), int(e["k"]), int(e["tiles"]), float(e["one_tile_us"]),
                                       float(e["two_tile_us"]),
                                       None if e.get("general_us") is None else float(e["general_us"]),
                                       str(e.get("kernel", SMALL_M)),
                                       None if e.get("general_route") is None else str(e["general_route"]))
                              for e in d.get("decisions", ()))
            rule = cls(str(d["provenance"]), shapes, decisions, tie)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"dispatch table, {KEY}: {type(exc).__name__}: {exc}") from None
        if not (math.isfinite(tie) and 0 <= tie < 1):
            raise ValueError(f"dispatch table, {KEY}: tie = {tie}: a fraction in [0, 1)")
        if any(min(s) < 1 for s in shapes):
            raise ValueError(f"dispatch table, {KEY}: shapes must be positive (N, K), got {list(shapes)}")
        for e in decisions:
            if (e.n, e.k) not in shapes:
                raise ValueError(f"dispatch table, {KEY}: decision at {e.n} x {e.k} is not one of the shapes")
            if not 9 <= e.m <= _buckets()[1]:
                raise ValueError(f"dispatch table, {KEY}: decision at M = {e.m}: M must be in 9..{_buckets()[1]} "
                                 "(M <= 8 has one bucket)")
            times = (e.one_tile_us, e.two_tile_us) + ((e.general_us,) if e.general_us is not None else ())
            if not all(math.isfinite(v) and v > 0 for v in times):
                raise ValueError(f"dispatch table, {KEY}: times at M = {e.m}, {e.n} x {e.k} must be positive")
            if e.tiles != decide(e.one_tile_us, e.two_tile_us, tie):
                raise ValueError(f"dispatch table, {KEY}: M = {e.m}, {e.n} x {e.k} says {e.tiles} tile(s), but the "
                                 f"rule gives {decide(e.one_tile_us, e.two_tile_us, tie)} from its times")
            if e.kernel != decide_kernel(e.small_m_us, e.general_us, tie):
                raise ValueError(f"dispatch table, {KEY}: M = {e.m}, {e.n} x {e.k} says kernel {e.kernel!r}, but the "
                                 f"rule gives {decide_kernel(e.small_m_us, e.general_us, tie)!r} from its times")
        return rule


#: The rule with no entry: one tile everywhere.
ONE_TILE = TilesRule(NO_ENTRY)


def load_rule(path: Path = TABLE_PATH) -> TilesRule:
    """The small-M entry of the table in ``path`` (ONE_TILE's rule when it has none); raises ValueError
    when it is malformed."""
    d = json.loads(Path(path).read_text())
    return TilesRule.from_json(d[KEY]) if KEY in d else ONE_TILE


def fit(rows: list[dict], provenance: str, tie: float = TIE) -> TilesRule:
    """The entry from timings: ``rows`` of {"m", "n", "k", "one_tile_us": [per pass], "two_tile_us":
    [per pass]} (each pass's median, microseconds), optionally with "general_us": [per pass] and
    "general_route" (words); each (M, N, K) decided by :func:`decide`, then :func:`decide_kernel`, on
    the medians over passes. ``shapes``: every (N, K) timed, in first-seen order.

    Raises ValueError for a row without passes, for M outside 9..256, or with a repeated (M, N, K).
    """
    import statistics

    shapes: dict[tuple[int, int], None] = {}
    decisions, seen = [], set()
    for r in rows:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        if (m, n, k) in seen:
            raise ValueError(f"fit: ({m}, {n}, {k}) timed twice")
        seen.add((m, n, k))
        if one_tile_bn(m) == two_tile_bn(m):
            raise ValueError(f"fit: M = {m} has one bucket only (M <= 8): nothing to decide")
        if not r["one_tile_us"] or not r["two_tile_us"]:
            raise ValueError(f"fit: ({m}, {n}, {k}) has no timed pass")
        one, two = statistics.median(r["one_tile_us"]), statistics.median(r["two_tile_us"])
        general = statistics.median(r["general_us"]) if r.get("general_us") else None
        tiles = decide(one, two, tie)
        shapes[(n, k)] = None
        decisions.append(Decision(m, n, k, tiles, one, two, general,
                                  decide_kernel(two if tiles == 2 else one, general, tie), r.get("general_route")))
    return TilesRule(provenance, tuple(shapes), tuple(decisions), tie)


__all__ = ["GENERAL", "KEY", "NO_ENTRY", "ONE_TILE", "SMALL_M", "TIE", "Decision", "TilesChoice", "TilesRule",
           "decide", "decide_kernel", "fit",
           "load_rule", "one_tile_bn", "two_tile_bn"]
