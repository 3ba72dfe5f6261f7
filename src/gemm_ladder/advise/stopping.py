"""The method's stopping rule (:mod:`gemm_ladder.advise`), made operational: did each level of a climb earn its complexity?

The rule (the method's "Stopping rule"): if the kernel is already close to the practical roofline, or added
complexity no longer brings a stable gain, stop upgrading and keep the simpler version. Here, per dtype
of one results JSON (docs/results-schema.md):

* **Gain**: per timed shape, the level below's median time over this level's (both timed interleaved in
  the same run, so the ratio holds while the clock moves). Shapes under gpu.MIN_TIMED_FLOPS are left
  out, as the performance gate leaves them out. A shape timed twice (4096^3 is in ``square`` and
  ``llm``) counts once, at the geometric mean of its ratios.
* **Noise**: per shape, max(the level's ``PerfExpectation.noise`` from the registry (levels/__init__.py;
  ``PerfExpectation().noise`` for a kernel not in it), the p10-p90 half-spread of each of the two
  timings in the file (``Timing.spread``)): the tolerance the performance gate itself applies. The
  level's noise is the median over its shapes; the verdict says which of the two bound it.
* **Earned**: the geometric-mean gain exceeds 1 + noise, and no shape is slower beyond its own noise
  (a stable gain). Otherwise **not earned**: by the rule the climb should have stopped at the level below.
* **Kept**: walking up, the climb keeps a level only if it also beats the last kept level by the same
  test; a level that recovers what the one below lost (level 7 after level 6) is compared with the
  level kept before the loss.
* **Practical roofline**: cuBLAS timed in the same run. A level whose geometric-mean ratio to cuBLAS is
  at least 1 - noise is at it: there the rule says stop.

How ``gates/climb.py`` should use it (left to the lead; this module imports only ``gemm_ladder.levels``,
``gemm_ladder.gates.performance`` and :mod:`gemm_ladder.advise.climb_data`, which imports only the latter,
so climb can import it without a cycle)::

    from gemm_ladder.advise.stopping import judge_climb
    verdicts = judge_climb(result)                    # after run_gates filled result["rows"]
    result["stopping"] = [v.to_json() for v in verdicts]    # one object per dtype
    for v in verdicts:                                # a column of the climb table, per level row
        cell = v.verdict(level_number).short()        # e.g. "not earned: 0.65x L5"
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gemm_ladder.advise.climb_data import TimedRow, timed_rows
from gemm_ladder.gates.performance import Timing
from gemm_ladder.levels.base import PerfExpectation

Shape = tuple[int, int, int]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def noise_floor(level: int | None) -> tuple[float, str]:
    """The level's own noise allowance (PerfExpectation.noise) and where it was read."""
    from gemm_ladder.levels import LEVELS

    if level in LEVELS:
        return LEVELS[level].perf.noise, f"PerfExpectation.noise of level {level}"
    return PerfExpectation().noise, "PerfExpectation().noise (default)"


@dataclass(frozen=True)
class ShapeGain:
    """One shape's ratio (the slower one's time over the faster one's: > 1 is a gain) and its noise."""

    shape: Shape
    ratio: float
    tolerance: float
    bound_by: str  # "floor" (PerfExpectation.noise) or "spread" (the timings' own)

    @property
    def outcome(self) -> str:
        if self.ratio > 1 + self.tolerance:
            return "gain"
        if self.ratio < 1 - self.tolerance:
            return "loss"
        return "tie"

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "ratio": self.ratio, "tolerance": self.tolerance,
                "bound_by": self.bound_by, "outcome": self.outcome}


@dataclass(frozen=True)
class Comparison:
    """Level ``upper`` against ``lower`` (a level number, or None for cuBLAS) over their common shapes."""

    upper: int | None
    lower: int | None
    shapes: tuple[ShapeGain, ...]
    floor: float
    floor_source: str

    @property
    def measured(self) -> bool:
        return bool(self.shapes)

    @property
    def gain(self) -> float | None:
        return geomean([s.ratio for s in self.shapes]) if self.shapes else None

    @property
    def noise(self) -> float | None:
        return statistics.median(s.tolerance for s in self.shapes) if self.shapes else None

    @property
    def counts(self) -> dict[str, int]:
        c = {"gain": 0, "loss": 0, "tie": 0}
        for s in self.shapes:
            c[s.outcome] += 1
        return c

    @property
    def earned(self) -> bool:
        return self.measured and self.gain > 1 + self.noise and self.counts["loss"] == 0

    @property
    def at_parity_or_better(self) -> bool:
        """The ratio is at least 1 - noise (used against cuBLAS: at the practical roofline)."""
        return self.measured and self.gain >= 1 - self.noise

    def noise_statement(self) -> str:
        if not self.shapes:
            return ""
        spread = [s for s in self.shapes if s.bound_by == "spread"]
        s = f"noise {self.noise:.1%} (median per shape of max({self.floor_source} = {self.floor:.0%}, the p10-p90 " \
            f"half-spread of both timings in the file)"
        if spread:
            worst = max(spread, key=lambda g: g.tolerance)
            s += f"; the measured spread bound it on {len(spread)} of {len(self.shapes)} shapes, up to " \
                 f"{worst.tolerance:.1%} at {'x'.join(map(str, worst.shape))}"
        else:
            s += "; the floor bound it on every shape"
        return s + ")"

    def figures(self) -> str:
        """'0.65x (geomean over 8 shapes, 0.58-0.69; 8 slower beyond noise)'."""
        if not self.shapes:
            return "not measured"
        lo, hi = min(s.ratio for s in self.shapes), max(s.ratio for s in self.shapes)
        c = self.counts
        parts = [f"{c[k]} {w}" for k, w in (("gain", "faster"), ("loss", "slower"), ("tie", "within noise")) if c[k]]
        return (f"{self.gain:.2f}x (geomean over {len(self.shapes)} timed shape(s), {lo:.2f}-{hi:.2f}; "
                f"{', '.join(parts)})")

    def to_json(self) -> dict[str, Any]:
        return {"upper": self.upper, "lower": self.lower, "gain": self.gain, "noise": self.noise,
                "floor": self.floor, "floor_source": self.floor_source, "counts": self.counts,
                "earned": self.earned, "shapes": [s.to_json() for s in self.shapes]}


def _by_shape(rows: list[TimedRow]) -> dict[Shape, dict[str, Timing]]:
    out: dict[Shape, dict[str, Timing]] = defaultdict(dict)
    for r in rows:
        out[r.shape][r.shape_set] = r.timing
    return out


def compare(upper: list[TimedRow], lower: list[TimedRow], upper_level: int | None,
            lower_level: int | None) -> Comparison:
    """``upper`` against ``lower`` on the (shape set, shape) pairs both were timed on in one run."""
    floor, floor_source = noise_floor(upper_level)
    up, low = _by_shape(upper), _by_shape(lower)
    shapes = []
    for shape in sorted(set(up) & set(low)):
        pairs = [(up[shape][s], low[shape][s]) for s in sorted(set(up[shape]) & set(low[shape]))]
        if not pairs:
            continue
        ratio = geomean([b.median_ms / a.median_ms for a, b in pairs])
        spread = max(max(a.spread, b.spread) for a, b in pairs)
        shapes.append(ShapeGain(shape, ratio, max(floor, spread), "spread" if spread > floor else "floor"))
    return Comparison(upper_level, lower_level, tuple(shapes), floor, floor_source)


@dataclass(frozen=True)
class LevelVerdict:
    """One level of a climb judged by the stopping rule; ``reason`` gives the measured figures."""

    dtype: str
    level: int
    name: str
    verdict: str  # "earned", "not earned", "not measured", "first" (the lowest timed level: nothing below)
    below: Comparison | None
    kept_before: int | None  # the level the climb kept before this one
    vs_kept: Comparison | None
    keeps: bool  # the climb keeps this level (it beats the level kept before it)
    vs_cublas: Comparison | None
    roofline_fraction: float | None
    reason: str

    @property
    def at_practical_roofline(self) -> bool:
        return bool(self.vs_cublas and self.vs_cublas.at_parity_or_better)

    def short(self) -> str:
        """A table cell: 'earned: 1.14x L4', 'not earned: 0.65x L5', 'not measured'."""
        if self.below is None or not self.below.measured:
            return self.verdict
        return f"{self.verdict}: {self.below.gain:.2f}x L{self.below.lower}"

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype, "level": self.level, "name": self.name, "verdict": self.verdict, "keeps": self.keeps,
            "stop_before": self.verdict == "not earned", "reason": self.reason,
            "vs_below": self.below.to_json() if self.below else None, "kept_before": self.kept_before,
            "vs_kept": self.vs_kept.to_json() if self.vs_kept else None,
            "vs_cublas": self.vs_cublas.gain if self.vs_cublas else None,
            "at_practical_roofline": self.at_practical_roofline, "roofline_fraction": self.roofline_fraction,
        }


@dataclass
class ClimbVerdict:
    """The stopping rule over one dtype of a climb: a verdict per level, the level kept, the stop."""

    dtype: str
    levels: list[LevelVerdict] = field(default_factory=list)

    def verdict(self, level: int) -> LevelVerdict | None:
        return next((v for v in self.levels if v.level == level), None)

    @property
    def kept(self) -> int | None:
        """The level the climb ends up keeping (the last one that beat every level kept below it)."""
        kept = [v.level for v in self.levels if v.keeps]
        return kept[-1] if kept else None

    @property
    def not_earned(self) -> list[LevelVerdict]:
        return [v for v in self.levels if v.verdict == "not earned"]

    @property
    def roofline_level(self) -> int | None:
        """The first level at the practical roofline (cuBLAS in the same run), if any."""
        return next((v.level for v in self.levels if v.at_practical_roofline), None)

    def summary(self) -> str:
        parts = []
        if self.kept is not None:
            v = self.verdict(self.kept)
            parts.append(f"keep level {self.kept} ({v.name})"
                         + (f", {v.vs_cublas.gain:.2f}x cuBLAS" if v.vs_cublas and v.vs_cublas.measured else ""))
        for v in self.not_earned:
            parts.append(f"level {v.level} did not earn its complexity ({v.below.figures()} against level "
                         f"{v.below.lower}): by the rule the climb should have stopped at level {v.below.lower}"
                         + ("" if not any(w.keeps for w in self.levels if w.level > v.level) else
                            ", unless it is only the base of a later level that does earn"))
        if (r := self.roofline_level) is not None:
            parts.append(f"at the practical roofline (cuBLAS in the same run) from level {r}")
        return "; ".join(parts) if parts else "no timed level rows: nothing to judge"

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "kept": self.kept, "roofline_level": self.roofline_level,
                "not_earned": [v.level for v in self.not_earned], "summary": self.summary(),
                "levels": [v.to_json() for v in self.levels]}


def _reason(level: int, below: Comparison | None, below_level: int | None, vs_kept: Comparison | None,
            kept: int | None) -> tuple[str, str]:
    if below_level is None:
        return "first", "the lowest level of the climb: nothing below to compare with"
    if below is None or not below.measured:
        return "not measured", (f"no timed shape shared with level {below_level} in this result "
                                "(a level whose domain excludes every timed shape is never timed)")
    if below.earned:
        verdict = "earned"
        reason = f"earned its complexity: {below.figures()} against level {below_level}, {below.noise_statement()}"
    else:
        verdict = "not earned"
        why = ("slower than" if below.gain < 1 - below.noise else "no stable gain over")
        reason = (f"did not earn its complexity: {why} level {below_level}, {below.figures()}, "
                  f"{below.noise_statement()}; by the stopping rule, stop at level {below_level} and keep the simpler version")
    if kept is not None and kept != below_level and vs_kept is not None and vs_kept.measured:
        reason += (f"; against level {kept}, the last level kept: {vs_kept.figures()}, "
                   + ("kept" if vs_kept.earned else "not kept (no stable gain over it)"))
    return verdict, reason


def judge_climb(result: dict[str, Any]) -> list[ClimbVerdict]:
    """Apply the stopping rule to a results JSON (a dict, docs/results-schema.md): one verdict per dtype.

    Levels are taken in the order of their numbers among the result's ``levels``; "the level below" is
    the previous one listed. Only rows that passed and were timed on judged shapes count; a row with a
    missing or mistyped value is left out (docs/results-schema.md: readers treat it as missing). Returns an
    empty list when the result has no rows at all.
    """
    from gemm_ladder.levels import LEVELS

    described = [lv for lv in result.get("levels") or [] if isinstance(lv.get("number"), int)]
    numbers = sorted({lv["number"] for lv in described})
    names = {lv["number"]: str(lv.get("name") or "") for lv in described}
    dtypes = sorted({r["dtype"] for r in result.get("rows") or [] if isinstance(r.get("dtype"), str)})
    out = []
    for dtype in dtypes:
        rows = timed_rows(result, dtype)
        per_level = {n: [r for r in rows if r.kind == "level" and r.level == n] for n in numbers}
        cublas = [r for r in rows if r.kind == "cublas"]
        verdict = ClimbVerdict(dtype)
        kept: int | None = None
        for i, n in enumerate(numbers):
            below_level = numbers[i - 1] if i else None
            below = compare(per_level[n], per_level[below_level], n, below_level) if below_level is not None else None
            vs_kept = compare(per_level[n], per_level[kept], n, kept) if kept is not None else None
            label, reason = _reason(n, below, below_level, vs_kept, kept)
            timed = bool(per_level[n])
            if kept is None:
                keeps = timed
            else:
                keeps = bool(vs_kept and vs_kept.earned)
            vs_cublas = compare(per_level[n], cublas, n, None) if timed else None
            fractions = [r.roofline_fraction for r in per_level[n] if r.roofline_fraction]
            name = names.get(n) or (LEVELS[n].name if n in LEVELS else "")
            verdict.levels.append(LevelVerdict(
                dtype, n, name, label, below, kept, vs_kept, keeps, vs_cublas,
                geomean(fractions) if fractions else None, reason))
            if keeps:
                kept = n
        out.append(verdict)
    return out
