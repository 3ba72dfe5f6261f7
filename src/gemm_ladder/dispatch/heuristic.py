"""How the dispatcher picks the library kernel's tile width (BN) and split policy: a cost model whose
named parameters live in ``table.json`` beside this file, regenerated from timings on the GPU by
``bench/library.py --tune``.

The library kernel is persistent: up to G clusters (of ``cluster`` CTAs, one per SM) walk U work
units, a unit being ``cluster`` stacked 128 x BN tiles, each K_t = ceil(K / 64) K iterations long;
its split policy ("none", "tail", "all", "wave": library/gemm.py split_schedule) decides which
units are computed whole and which are shared by K over every cluster (stream-K). The model charges the
busiest cluster's critical path (:func:`work`): ``k_iter_us[BN]`` per whole K iteration,
``split_k_iter_us[BN]`` per shared one, and when any unit is shared its fixup (each contributor's
fp32 partial written, the last arriver adding them in K order): ``fixup_us`` once plus
``fixup_contributor_us`` per contributor of the most shared unit, both quoted for BN = 256 and scaled
by BN / 256 (a partial is 64 x BN floats per consumer); and ``fixed_us`` per launch (setup, the first
load's latency, the last tile's store). Split K iterations cost ``split_beyond_l2_scale`` times more
where the split units' operand panels exceed ``l2_bytes`` (:meth:`CostModel.split_iter_scale`). The
per-contributor term is what tells "tail" (a few units, each shared by about G / R clusters) from "wave"
(R + G units, two contributors each). Builds with one CTA per cluster or 64-row tiles have their K iterations
scaled per width by the table's ``cluster1_k_iter_scale``, ``bm64_k_iter_scale`` and
``cluster1_bm64_k_iter_scale``, and one CTA at 128 rows in one wave by ``cluster1_one_wave_scale``
(:func:`rank`, :meth:`CostModel.one_wave_scale`); the route leaves a 64-row build past ``bm64_max_waves``
waves unranked (:meth:`CostModel.ranks`).

The table's ``provenance`` says where the numbers come from: "untuned default: ..." (derived by the
rule written beside each value from measurements in bench/results/) or "tuned on <GPU> <date>
<commit>" (fitted by :func:`fit` to ``bench/library.py --tune`` timings). ``explain`` repeats it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from gemm_ladder.design.plan import units_span
from gemm_ladder.design.problem import ceil_div
from gemm_ladder.design.stream_k import INT32_LIMIT, SplitOverflowError, StreamKTail, plan_tail, plan_wave

TABLE_PATH = Path(__file__).with_name("table.json")
#: Cost tables fitted on other GPUs, beside table.json: ``table_<name>.json``, each with a "devices" list of
#: the device names (torch.cuda.get_device_properties().name) it is for; table.json serves every other.
DEVICE_TABLE_GLOB = "table_*.json"
SPLITS = ("none", "tail", "all", "wave")
#: The library kernel's tile rows and K depth, and its cluster (CTAs stacked along M).
TILE_M, TILE_K, CLUSTER = 128, 64, 2
#: The split policies ranked for a cluster-1 build: those measured against the pair (whole tiles, and the
#: tail of "tail"). Split throughout ("all", "wave"), one CTA per cluster ran 1.01x the pair's time (median)
#: but up to 1.48x (twice the contributors a unit; 2026-12-04_tiles_forced_clusters_08fda8b.json), which the
#: model does not predict.
CLUSTER1_SPLITS = ("none", "tail")
#: The tile width the fixup's figures are quoted for (they scale with BN / FIXUP_BN).
FIXUP_BN = 256
#: Bytes an operand element of the general kernel (bf16, fp16): the split phase's loads are counted in them.
OPERAND_BYTES = 2


@dataclass(frozen=True)
class Work:
    """The critical path of one configuration: whole and split K iterations of the busiest cluster,
    the clusters the launch uses (``grid_clusters``), and the most clusters sharing one unit
    (``contributors``: 1 when no unit is shared)."""

    bn: int
    split: str
    units: int
    clusters: int
    k_tiles: int
    whole_iters: int
    split_iters: int
    grid_clusters: int
    contributors: int = 1
    #: CTAs per cluster of the build (2: level 9's pair sharing B; 1: one CTA).
    cluster: int = CLUSTER
    #: Tile rows of the build (128: level 9's two consumers; 64: one).
    bm: int = TILE_M
    #: Bytes of the operand panels the split units read over all of K (A's rows and B's columns they touch,
    #: 2 bytes an element: the general kernel's 16-bit operands); 0 without a split.
    split_bytes: int = 0

    @property
    def waves(self) -> float:
        """Units per resident cluster (fractional: the last wave's fill shows)."""
        return self.units / self.clusters

    @property
    def splits(self) -> bool:
        return self.split_iters > 0


def work(m: int, n: int, k: int, bn: int, split: str, clusters: int, *, cluster: int = CLUSTER, bm: int = TILE_M) -> Work:
    """The critical path of (BN, split) on (M, N, K) over ``clusters`` resident clusters, by the
    library kernel's schedule (library/gemm.py split_schedule): "none" every unit whole over
    min(units, clusters) clusters; "tail" level 9's rule (design.stream_k.plan_tail, the last partial
    wave split when it would leave more than DEFAULT_MIN_IDLE of the clusters idle); "all" every
    unit's K iterations shared by min(clusters, iterations) clusters; "wave" the last partial wave
    and one whole wave shared (design.stream_k.plan_wave; "all" below two waves). Iterations of a unit that no
    other cluster shares count as whole.

    Raises ValueError for an unknown split or non-positive extents, SplitOverflowError (a ValueError)
    for an "all" or "wave" split the kernel's 32-bit stream-K arithmetic cannot launch.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if min(m, n, k, clusters, bn) < 1:
        raise ValueError(f"M, N, K, BN and clusters must be positive, got {m}, {n}, {k}, {bn}, {clusters}")
    units = ceil_div(ceil_div(m, bm), cluster) * ceil_div(n, bn)
    kt = ceil_div(k, TILE_K)
    if split == "wave" and units >= 2 * min(units, clusters):
        g = min(units, clusters)
        sched = plan_wave(units, g, kt)
    elif split in ("all", "wave"):  # "wave" with fewer than two waves of units is "all" (library/gemm.py)
        g = min(clusters, units * kt)
        if (g + 1) * units * kt >= INT32_LIMIT:  # as library/gemm.py split_schedule: no such launch
            raise SplitOverflowError(f"split {split!r} of {units} units x {kt} K iterations over {g} clusters exceeds "
                                     "the kernel's 32-bit stream-K arithmetic")
        sched = StreamKTail(units=units, clusters=g, k_tiles=kt, first_unit=0)
    else:
        g = min(units, clusters)
        sched = plan_tail(units, g, kt) if split == "tail" else StreamKTail(units, g, kt, units)
    whole = ceil_div(sched.first_unit, g) * kt
    shared = ceil_div(sched.total, g) if sched.tail_units else 0
    if shared and sched.max_contributors == 1:  # every unit computed by one cluster: nothing to fix up
        whole, shared = whole + shared, 0
    split_bytes = 0
    if shared:
        units_m, tiles_n = ceil_div(ceil_div(m, bm), cluster), ceil_div(n, bn)
        rows, cols = units_span(sched.first_unit, units, units_m, tiles_n)
        # The split range ends at the last unit, so the rows and columns it leaves out are whole ones: what it
        # reads is M and N less those (a partial last tile, or a pair's empty second tile, counts as it is).
        split_bytes = (m - (units_m - rows) * cluster * bm + n - (tiles_n - cols) * bn) * k * OPERAND_BYTES
    return Work(bn, split, units, clusters, kt, whole, shared, g, sched.max_contributors if shared else 1, cluster, bm,
                split_bytes)


@dataclass(frozen=True)
class CostModel:
    """Microseconds per K iteration (whole and split, per BN), per split launch and per contributor of its
    most shared unit (at BN = FIXUP_BN), and per launch."""

    k_iter_us: dict[int, float]
    split_k_iter_us: dict[int, float]
    fixup_us: float
    fixed_us: float
    provenance: str
    rules: dict[str, str] = field(default_factory=dict)
    fixup_contributor_us: float = 0.0
    #: Per tile width, a cluster-1 build's K iteration time over the 2-CTA pair's (1.0 where absent):
    #: measured, not fitted by the tune (which times the pair).
    cluster1_k_iter_scale: dict[int, float] = field(default_factory=dict)
    #: Per tile width, a 64-row build's whole K iteration time over the 128-row build's at the same cluster
    #: size (a width absent: the 64-row build is not ranked): measured, not fitted by the tune.
    bm64_k_iter_scale: dict[int, float] = field(default_factory=dict)
    #: Per tile width, a 64-row build's K iteration with one CTA per cluster over the 2-CTA pair's (in place
    #: of ``cluster1_k_iter_scale`` for 64-row builds; 1.0 where absent): measured, not fitted.
    cluster1_bm64_k_iter_scale: dict[int, float] = field(default_factory=dict)
    #: The device's L2 bytes, and the factor on a split K iteration's time where the split units' operand
    #: panels exceed it (:meth:`split_iter_scale`); 0 and 1.0: no such factor (a table whose split terms were
    #: fitted on split timings that hold that cost).
    l2_bytes: int = 0
    split_beyond_l2_scale: float = 1.0
    #: Per tile width, a 128-row build's K iteration with one CTA per cluster over the 2-CTA pair's where its
    #: whole tiles fit in one wave and nothing is split (:meth:`one_wave_scale`; 1.0 where absent): chosen from
    #: committed timings (the table's rule says how), not fitted by the tune.
    cluster1_one_wave_scale: dict[int, float] = field(default_factory=dict)
    #: The most waves a 64-row build is ranked at where M spans more than one 64-row tile (:meth:`ranks`; 0: no
    #: limit): set from committed timings, not fitted by the tune.
    bm64_max_waves: float = 0.0

    @property
    def tuned(self) -> bool:
        return self.provenance.startswith("tuned")

    @property
    def bns(self) -> tuple[int, ...]:
        return tuple(sorted(self.k_iter_us, reverse=True))

    def split_iter_scale(self, w: Work) -> float:
        """The factor on ``w``'s split K iterations: ``split_beyond_l2_scale`` where the split units' operand
        panels (``w.split_bytes``) exceed ``l2_bytes``, else 1.0.

        Why: whole units run in step (every cluster at the same K tile, so the A and B tiles they share come
        from DRAM once and from L2 after); split ones do not (each cluster starts its share of the split
        iterations at its own K offset), so where their panels do not fit in L2 more of their loads come from
        DRAM. An empirical factor, not a bandwidth bound: fitted on the H200's committed timings (the table's
        rule says which), where the table's fit, made on shorter K, predicted the 128-row split launches at
        K >= 8192 10-20% fast (medians of measured over predicted 1.10-1.20 by policy) and the whole ones
        within 2%, so gemma-7b's down_proj at 511 rows took its "all" split (148 us) over a whole-tile build
        (120 us)."""
        return beyond_l2_scale(w, self.l2_bytes, self.split_beyond_l2_scale)

    def ranks(self, w: Work, m: int) -> bool:
        """Whether the route ranks ``w`` (of a product with ``m`` rows) at all: every build, but a 64-row one past
        ``bm64_max_waves`` waves (where set) only when ``m`` fits in one 64-row tile.

        Why: a 64-row tile loads its B panel for half the rows a 128-row tile does, so over many waves the
        64-row build moves about twice the operand bytes from L2 for the same product (where M spans more than
        one 64-row tile: with one, either build loads B once), which the per-iteration scales (measured where
        the 64-row build fills the SMs the 128-row one leaves idle) do not charge. On the H100, Qwen2.5's
        down_proj at 2048 rows (896 tiles of 64 x 128, 6.8 waves) was predicted 427 us and took 646, where one
        CTA of 128 x 256 took 383 (bench/results/2026-12-06_tiles_forced_h100_lows_h100_2c96e90.json)."""
        return not (w.bm == 64 and self.bm64_max_waves and w.waves > self.bm64_max_waves and m > 64)

    def one_wave_scale(self, w: Work) -> float:
        """The factor on ``w``'s whole K iterations for one CTA per cluster at 128 rows where its tiles fit in one
        wave and nothing is split: ``cluster1_one_wave_scale[bn]``, else 1.0.

        Why: there the pair's B multicast saves no load that another wave would repeat, while its cluster
        costs a barrier at setup (0.80-0.93 us against 0.26-0.42 with one CTA) and a slower loop at 128 x 128
        (0.41 against 0.35 us an iteration at 1000 x 4608 x 3584), both measured by the timeline build
        (docs/where-time-goes.md); over many waves the two builds' timings tie (the table's own 1.0). Without
        it the two predictions are equal and the route took the pair, which the committed timings put 4-13%
        behind one CTA at one wave (ViT-L's fc2 at 1576 rows: 26.2 against 30.2 us)."""
        if w.cluster != 1 or w.bm != TILE_M or w.splits or w.waves > 1:
            return 1.0
        return self.cluster1_one_wave_scale.get(w.bn, 1.0)

    def predict_us(self, w: Work) -> float:
        """Predicted time of one launch, microseconds."""
        scale = 1.0
        if w.cluster == 1:  # measured on whole tiles only
            scale = (self.cluster1_bm64_k_iter_scale if w.bm == 64 else self.cluster1_k_iter_scale).get(w.bn, 1.0)
            scale *= self.one_wave_scale(w)
        rows = self.bm64_k_iter_scale[w.bn] if w.bm == 64 else 1.0  # a 64-row tile's iteration over a 128-row one's
        t = (self.fixed_us + w.whole_iters * self.k_iter_us[w.bn] * scale * rows
             + w.split_iters * self.split_k_iter_us[w.bn] * rows * self.split_iter_scale(w))
        if w.splits:
            t += (self.fixup_us + self.fixup_contributor_us * w.contributors) * w.bn / FIXUP_BN
        return t

    def to_json(self) -> dict:
        """The table's entries; ``cluster1_k_iter_scale`` only when set (a refit from the tune, which has
        none, then leaves the table's own in place)."""
        out = {"provenance": self.provenance,
               "k_iter_us": {str(bn): v for bn, v in self.k_iter_us.items()},
               "split_k_iter_us": {str(bn): v for bn, v in self.split_k_iter_us.items()},
               "fixup_us": self.fixup_us, "fixup_contributor_us": self.fixup_contributor_us, "fixed_us": self.fixed_us,
               "rules": dict(self.rules)}
        if self.cluster1_k_iter_scale:
            out["cluster1_k_iter_scale"] = {str(bn): v for bn, v in self.cluster1_k_iter_scale.items()}
        if self.bm64_k_iter_scale:
            out["bm64_k_iter_scale"] = {str(bn): v for bn, v in self.bm64_k_iter_scale.items()}
        if self.cluster1_bm64_k_iter_scale:
            out["cluster1_bm64_k_iter_scale"] = {str(bn): v for bn, v in self.cluster1_bm64_k_iter_scale.items()}
        if self.l2_bytes:
            out["l2_bytes"], out["split_beyond_l2_scale"] = self.l2_bytes, self.split_beyond_l2_scale
        if self.cluster1_one_wave_scale:
            out["cluster1_one_wave_scale"] = {str(bn): v for bn, v in self.cluster1_one_wave_scale.items()}
        if self.bm64_max_waves:
            out["bm64_max_waves"] = self.bm64_max_waves
        return out

    @classmethod
    def from_json(cls, d: dict) -> "CostModel":
        """Parse a table; raises ValueError naming what is missing or not a finite non-negative number.
        ``fixup_contributor_us`` may be absent (a table fitted before it: 0)."""
        try:
            model = cls({int(bn): float(v) for bn, v in d["k_iter_us"].items()},
                        {int(bn): float(v) for bn, v in d["split_k_iter_us"].items()},
                        float(d["fixup_us"]), float(d["fixed_us"]), str(d["provenance"]), dict(d.get("rules", {})),
                        float(d.get("fixup_contributor_us", 0.0)),
                        {int(bn): float(v) for bn, v in d.get("cluster1_k_iter_scale", {}).items()},
                        {int(bn): float(v) for bn, v in d.get("bm64_k_iter_scale", {}).items()},
                        {int(bn): float(v) for bn, v in d.get("cluster1_bm64_k_iter_scale", {}).items()},
                        _whole(d.get("l2_bytes", 0)), float(d.get("split_beyond_l2_scale", 1.0)),
                        {int(bn): float(v) for bn, v in d.get("cluster1_one_wave_scale", {}).items()},
                        float(d.get("bm64_max_waves", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:  # int(inf), float(10**400)
            raise ValueError(f"dispatch table: {type(exc).__name__}: {exc}") from None
        values = [*model.k_iter_us.values(), *model.split_k_iter_us.values(), model.fixup_us, model.fixed_us,
                  model.fixup_contributor_us, model.l2_bytes]
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(f"dispatch table: every time must be a finite number >= 0, got {values}")
        for name in ("cluster1_k_iter_scale", "bm64_k_iter_scale", "cluster1_bm64_k_iter_scale",
                     "cluster1_one_wave_scale"):
            if not all(math.isfinite(v) and v > 0 for v in getattr(model, name).values()):
                raise ValueError(f"dispatch table: {name} must be finite and > 0, got {getattr(model, name)}")
        if not (math.isfinite(model.bm64_max_waves) and model.bm64_max_waves >= 0):
            raise ValueError(f"dispatch table: bm64_max_waves must be finite and >= 0, got {model.bm64_max_waves}")
        if not (math.isfinite(model.split_beyond_l2_scale) and model.split_beyond_l2_scale > 0):
            raise ValueError(f"dispatch table: split_beyond_l2_scale must be finite and > 0, got "
                             f"{model.split_beyond_l2_scale}")
        if not model.l2_bytes and model.split_beyond_l2_scale != 1.0:
            raise ValueError("dispatch table: split_beyond_l2_scale needs l2_bytes (the L2 it is beyond), got "
                             f"{model.split_beyond_l2_scale} with no l2_bytes")
        if set(model.k_iter_us) != set(model.split_k_iter_us) or not model.k_iter_us:
            raise ValueError("dispatch table: k_iter_us and split_k_iter_us must name the same tile widths")
        return model


def beyond_l2_scale(w: Work, l2_bytes: int, scale: float) -> float:
    """``scale`` where ``w``'s split units' operand panels exceed ``l2_bytes`` (0: no L2 given), else 1.0: the
    rule of :meth:`CostModel.split_iter_scale`, which :func:`fit` applies to its samples too."""
    return scale if l2_bytes and w.split_bytes > l2_bytes else 1.0


def _whole(v) -> int:
    """A JSON count: an int (not a bool, a float or a string); raises TypeError otherwise."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected a whole number, got {v!r}")
    return v


def load_table(path: Path = TABLE_PATH) -> CostModel:
    """The cost model in ``path`` (the package's table by default); raises ValueError if malformed."""
    return CostModel.from_json(json.loads(Path(path).read_text()))


def device_tables(directory: Path = TABLE_PATH.parent) -> dict[str, Path]:
    """Device name -> the cost table fitted on it (``table_<name>.json`` files beside table.json, each naming
    its devices in "devices"). Raises ValueError where two tables claim one device or a table names none."""
    out: dict[str, Path] = {}
    for path in sorted(Path(directory).glob(DEVICE_TABLE_GLOB)):
        names = json.loads(path.read_text()).get("devices")
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"dispatch table {path.name}: 'devices' must list the device names it is for")
        for name in names:
            if name in out:
                raise ValueError(f"dispatch tables {out[name].name} and {path.name} both claim {name!r}")
            out[name] = path
    return out


def table_path_for(device_name: str | None, directory: Path = TABLE_PATH.parent) -> Path:
    """The cost table for a device of that name: the table fitted on it (:func:`device_tables`), else
    table.json (``device_name`` None: no device to ask, the table.json one)."""
    default = Path(directory) / TABLE_PATH.name
    return device_tables(directory).get(device_name, default) if device_name else default


@dataclass(frozen=True)
class Candidate:
    """One configuration the kernel supports, its critical path and predicted time."""

    work: Work
    predicted_us: float

    def to_json(self) -> dict:
        w = self.work
        return {"bn": w.bn, "split": w.split, "predicted_us": round(self.predicted_us, 2), "units": w.units,
                "waves": round(w.waves, 3), "whole_k_iters": w.whole_iters, "split_k_iters": w.split_iters,
                "grid_clusters": w.grid_clusters, "contributors": w.contributors, "cluster": w.cluster, "bm": w.bm,
                "split_bytes": w.split_bytes}


def rank(model: CostModel, m: int, n: int, k: int, clusters: int, configs: list[tuple[int, str]], *,
         cluster: int = CLUSTER, bm: int = TILE_M) -> list[Candidate]:
    """``configs`` ((BN, split) pairs the kernel supports, built for clusters of ``cluster`` CTAs, of which
    ``clusters`` are resident) by predicted time, fastest first.

    A cluster-1 build's unit is one tile on one SM, charged ``k_iter_us`` per K iteration as a 2-CTA unit
    (two tiles on two SMs) is, times the table's ``cluster1_k_iter_scale`` for its width (1.0 where absent):
    measured on the H200 (bench/tiles_forced.py, bench/results/2026-12-04_tiles_forced_clusters_08fda8b.json,
    whole tiles at even M-tile counts, where both have the same tiles per SM), one CTA per cluster took
    0.85x the pair's time at BN 64 (median of 14; 13 below 0.97x: its cluster slices of B are 32-row
    boxes) and 0.97-1.06x at BN 128-256 (medians 1.01, 1.02, 0.98), which the table leaves at 1.0.
    A 64-row build with one CTA per cluster is charged the table's ``cluster1_bm64_k_iter_scale`` for its
    width instead (1.0 where absent): measured on the H200 (the autotune's own timings in
    bench/shapes_real.py --autotune at 52f0b90, L2 not flushed, on 8-39 plain layer shapes per width), one
    CTA took 0.89-0.90x the pair's time at BN 64 and 128, 0.94x at 192 and 0.97x at 256 (medians); on those
    timings the table's pick among each row's timed candidates was 2.4% slower than the fastest (geometric
    mean over 213 plain rows: bench/route_regret.py) with the scale left out, 1.3% with it.
    Where the M tiles are odd in number the pair's units count an idle twin's tile and a cluster-1
    launch's do not; a split cluster-1 unit has up to twice the contributors (132 clusters, not 66).
    A 128-row cluster-1 build whose whole tiles fit in one wave, nothing split, is charged the table's
    ``cluster1_one_wave_scale`` for its width besides (:meth:`CostModel.one_wave_scale`). This function ranks
    every configuration given; the route then leaves out a 64-row one past ``bm64_max_waves`` waves
    (:meth:`CostModel.ranks`, dispatch/route.py's ``_ranked_general``).

    A 64-row build (``bm`` 64: one consumer warpgroup, twice the M tiles) is charged its whole and split K
    iterations times the table's ``bm64_k_iter_scale`` for its width (KeyError where absent), its fixup as the
    128-row build's: measured on the H200 (bench/tiles_forced.py --tile-m 128,64,
    bench/results/2026-12-04_tiles_forced_bm64_dd7709e.json, 16 real layer shapes), a 64-row tile's whole
    K iteration took 0.80x the 128-row tile's at BN 64 and 0.59-0.63x at BN 128-256 (the medians over both
    cluster sizes of the model's fitted per-iteration time; the table holds 0.72 at BN 64 since 2026-12-06, its
    rule says why); with the same scale on its split
    iterations and the fixup unchanged, the model predicts the 64-row split launches 6% (one CTA) and 11%
    (2-CTA) slower than measured (medians), the 128-row ones within 0-3%.

    Ties go to the earlier entry of ``configs`` (list the simpler configurations first: wider tiles,
    fewer splits). A split the kernel cannot launch (:class:`SplitOverflowError`: "all" or "wave"
    at very long K) is left out. Raises KeyError for a BN the table has no time for (callers keep to
    ``model.bns``)."""
    cands = []
    for bn, s in configs:
        try:
            w = work(m, n, k, bn, s, clusters, cluster=cluster, bm=bm)
        except SplitOverflowError:
            continue
        cands.append(Candidate(w, model.predict_us(w)))
    order = sorted(range(len(cands)), key=lambda i: (round(cands[i].predicted_us, 6), i))
    return [cands[i] for i in order]


def features(w: Work, bns: tuple[int, ...], split_scale: float = 1.0) -> list[float]:
    """The model's regressors for one configuration: whole and split iterations for each tile width of
    ``bns`` (zero but for the configuration's own BN; the split ones times ``split_scale``, the configuration's
    :meth:`CostModel.split_iter_scale`), the split flag and the contributors of the most shared unit (each times
    BN / FIXUP_BN; zero without a split), 1."""
    row = []
    for bn in bns:
        row += [float(w.whole_iters if w.bn == bn else 0), float(w.split_iters * split_scale if w.bn == bn else 0)]
    scale = w.bn / FIXUP_BN if w.splits else 0.0
    return row + [scale, scale * w.contributors, 1.0]


def fit(samples: list[tuple[Work, float]], provenance: str, *, l2_bytes: int = 0,
        split_beyond_l2_scale: float = 1.0) -> CostModel:
    """Least-squares fit of the model's parameters to measured times (``(work, microseconds)`` pairs).
    ``l2_bytes`` and ``split_beyond_l2_scale``: the factor on split iterations beyond L2 the fitted model keeps
    (:meth:`CostModel.split_iter_scale`; measured, not fitted here), applied to the samples it covers, so that
    the split terms are fitted as the model will use them.

    The table gets one ``k_iter_us`` and ``split_k_iter_us`` per tile width that has timed samples
    (widest first), so a width the tune timed becomes one the dispatcher can choose, and one it did
    not stays out of the table (route.choose ranks only the table's widths). Relative errors are
    minimised (each row weighted by 1 / measured time), so a 10 us shape counts as much as a 1 ms one.
    A parameter with no sample behind it (say, no split configuration timed) or fitted below zero is
    clamped at zero and named in ``rules``. Uses numpy (a dependency).

    Raises ValueError with fewer samples than parameters (2 per tile width, plus 3).
    """
    import numpy as np

    bns = tuple(sorted({w.bn for w, _ in samples}, reverse=True))
    params = 2 * len(bns) + 3
    if len(samples) < max(6, params):
        raise ValueError(f"fit needs at least {max(6, params)} timed configurations, got {len(samples)}")
    x = np.array([features(w, bns, beyond_l2_scale(w, l2_bytes, split_beyond_l2_scale)) for w, _ in samples])
    t = np.array([us for _, us in samples])
    coef, *_ = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)
    names = [f"{kind}[{bn}]" for bn in bns for kind in ("k_iter_us", "split_k_iter_us")] + ["fixup_us",
                                                                                          "fixup_contributor_us", "fixed_us"]
    rules = {}
    for i, name in enumerate(names):
        if not x[:, i].any():
            rules[name] = "no timed configuration exercises it: set to 0"
            coef[i] = 0.0
        elif coef[i] < 0:
            rules[name] = f"fitted {coef[i]:.3g} < 0: clamped to 0"
            coef[i] = 0.0
        else:
            rules[name] = f"least squares over {len(samples)} timed configurations (relative error)"
    c = [float(v) for v in coef]
    fixup, per_contributor = c[2 * len(bns)], c[2 * len(bns) + 1]
    return CostModel({bn: c[2 * i] for i, bn in enumerate(bns)}, {bn: c[2 * i + 1] for i, bn in enumerate(bns)},
                     fixup, c[-1], provenance, rules, per_contributor, l2_bytes=l2_bytes,
                     split_beyond_l2_scale=split_beyond_l2_scale)
