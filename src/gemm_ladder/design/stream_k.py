"""Level 9's stream-K tail: which K iterations of the last, partial wave each cluster computes.

A persistent grid of G clusters walks U work units G apart. When U is not a multiple of G, the
last wave runs U mod G units while the other clusters sit idle: at 4096^3 on the H200 (256 units,
66 clusters) that is 3.88 waves taking the time of 4, at 8192^3 (1024 units) 15.5 taking 16.
Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix
Multiplication on the GPU", PPoPP 2023) splits work by K iterations instead of by tile. Here only
the tail is split (the "data-parallel + stream-K" hybrid): the first U - R units are computed
whole, and the R = U mod G tail units' K iterations, numbered it = u * k_tiles + kt, are divided
evenly, cluster c taking [floor(c T / G), floor((c + 1) T / G)) of the T = R * k_tiles.

A tile that several clusters contribute to is finished by a fixup: each contributor writes its
fp32 partial to a slot in a global workspace, counts itself on a per-tile atomic counter, and the
one that arrives last adds the slots in K order (so the sum does not depend on arrival order) and
stores the tile. The launch zeroes the counters on its stream first (runtime/workspace.py), so no
launch depends on how the one before it ended.

This module mirrors the kernel's integer arithmetic (``kernels/include/gemm_ladder/stream_k.cuh``)
exactly; the launch uses it to size the workspace and the tests check the two agree.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

#: The kernel does the tail's arithmetic in 32-bit ints: (clusters + 1) * R * k_tiles must stay below 2^31.
INT32_LIMIT = 2**31


class SplitOverflowError(ValueError):
    """A stream-K split whose workspace offsets ((clusters + 1) x split units x K iterations) pass the
    kernel's 32-bit arithmetic: the kernel cannot launch it (a ValueError)."""


@dataclass(frozen=True)
class Segment:
    """K tiles [kb, ke) of ``unit`` computed by one cluster; it is contributor ``mine`` of ``contributors``."""

    unit: int
    kb: int
    ke: int
    mine: int
    contributors: int


@dataclass(frozen=True)
class StreamKTail:
    """The split of a persistent schedule into whole units and a stream-K tail.

    units: work units of the problem (cluster-sized stacks of M tiles x one N tile);
    clusters: clusters in the grid (G); k_tiles: K iterations per unit;
    first_unit: units [0, first_unit) are computed whole; the tail is [first_unit, units).
    """

    units: int
    clusters: int
    k_tiles: int
    first_unit: int

    @property
    def tail_units(self) -> int:
        return self.units - self.first_unit

    @property
    def total(self) -> int:
        """K iterations in the tail (T)."""
        return self.tail_units * self.k_tiles

    def begin(self, c: int) -> int:
        """First tail iteration of cluster ``c`` (StreamKTail::begin)."""
        return c * self.total // self.clusters

    def owner(self, it: int) -> int:
        """The cluster whose range holds tail iteration ``it`` (StreamKTail::owner)."""
        return ((it + 1) * self.clusters + self.total - 1) // self.total - 1

    def segments(self, c: int) -> list[Segment]:
        """Cluster ``c``'s tail pieces in the order it computes them (StreamKTail::segment)."""
        out, it, end = [], self.begin(c), self.begin(c + 1)
        while it < end:
            u = it // self.k_tiles
            base = u * self.k_tiles
            ke = min(end - base, self.k_tiles)
            first, last = self.owner(base), self.owner(base + self.k_tiles - 1)
            out.append(Segment(self.first_unit + u, it - base, ke, c - first, last - first + 1))
            it = base + ke
        return out

    @functools.cached_property
    def max_contributors(self) -> int:
        """Most clusters contributing to one tail unit (1 when there is no tail): the workspace's slots per tile."""
        if self.total == 0:
            return 1
        kt = self.k_tiles
        # A unit has a second contributor only where a cluster's range begins inside it (past its first
        # iteration), so only those units (at most one a cluster) are counted: O(clusters), not O(units), which
        # the route pays on every candidate (a large layer's "all" split has ~10^5 tail units).
        inside = {(b - 1) // kt for b in (self.begin(c) for c in range(1, self.clusters)) if b % kt}
        return max([1] + [self.owner(u * kt + kt - 1) - self.owner(u * kt) + 1 for u in inside])

    def workspace_floats(self, cluster: int, consumers: int, tile_n: int) -> int:
        """fp32 partial slots: tail units x cluster CTAs x consumers x max_contributors x (64 x tile_n);
        none when no tile has two contributors (then no partial is ever written)."""
        if self.max_contributors == 1:
            return 0
        return self.tail_units * cluster * consumers * self.max_contributors * 64 * tile_n

    def counters(self, cluster: int, consumers: int) -> int:
        """int32 arrival counters: one per tail unit, CTA of the cluster and consumer warpgroup."""
        return self.tail_units * cluster * consumers

    def to_json(self) -> dict:
        return {"units": self.units, "clusters": self.clusters, "k_tiles": self.k_tiles,
                "whole_units": self.first_unit, "tail_units": self.tail_units,
                "tail_iterations_per_cluster": self.total / self.clusters if self.clusters else 0.0,
                "max_contributors": self.max_contributors}


#: Default of plan_tail's ``min_idle``. Measured on the H200 (docs/ladder.md, level 9; the figures in
#: docs/measured-choices.md): splitting a tail cost more than it saved where the last wave was mostly
#: busy, and gained no more than the run-to-run noise where it was mostly idle. A split tail's K
#: iterations run slower than whole units' (the clusters, at staggered K offsets, no longer share A
#: and B slices in L2; the partials' writes and the last arriver's reduction), so splitting pays only
#: when most clusters would otherwise sit idle. The tail also stores its tiles without the epilogue overlap.
DEFAULT_MIN_IDLE = 0.4


@functools.lru_cache(maxsize=256)
def plan_tail(units: int, clusters: int, k_tiles: int, min_idle: float = DEFAULT_MIN_IDLE) -> StreamKTail:
    """Split ``units`` work units over ``clusters`` clusters (``k_tiles`` K iterations each).

    The tail is the last partial wave (units mod clusters units), split only when
    - there is more than one wave (with fewer units than clusters the grid is cut to the units),
    - the last wave would leave more than ``min_idle`` of the clusters idle (see DEFAULT_MIN_IDLE),
    - the tail has at least one K iteration per cluster (R x k_tiles >= clusters): then every
      cluster's range is non-empty, which the kernel's count of a unit's contributors assumes
      (owner(last) - owner(first) + 1 would count empty ranges that never arrive), and
    - the kernel's 32-bit arithmetic holds ((clusters + 1) x tail iterations < 2^31).
    Otherwise the tail is empty (first_unit = units) and every unit is computed whole.

    Raises ValueError for non-positive units, clusters or k_tiles.
    """
    if units < 1 or clusters < 1 or k_tiles < 1:
        raise ValueError(f"units, clusters and k_tiles must be positive, got {units}, {clusters}, {k_tiles}")
    tail = units % clusters
    split = (units > clusters and tail > 0 and (clusters - tail) / clusters > min_idle
             and tail * k_tiles >= clusters and (clusters + 1) * tail * k_tiles < INT32_LIMIT)
    return StreamKTail(units=units, clusters=clusters, k_tiles=k_tiles, first_unit=units - tail if split else units)


@functools.lru_cache(maxsize=256)
def plan_wave(units: int, clusters: int, k_tiles: int) -> StreamKTail:
    """Split the last partial wave and the whole wave before it by K over every cluster ("data-parallel
    + one stream-K wave", the hybrid of Osama et al.'s paper, section 5): units
    [0, units - R - G) are computed whole (the same number by every cluster), and the R + G tail units'
    K iterations are divided evenly, so every cluster's range holds between k_tiles and 2 k_tiles
    iterations and no unit has more than two contributors. (plan_tail's split of the R units alone
    gives each of them about G / R contributors, whose partials the last arriver reads one after
    another.)

    With no partial wave (R = 0), no split (first_unit = units); with fewer than two waves of units,
    every unit is split (first_unit = 0, as the "all" policy over ``clusters``). The caller's
    ``clusters`` is the grid's: min(units, resident) for whole waves. Raises ValueError for
    non-positive counts, SplitOverflowError for a tail beyond the kernel's 32-bit arithmetic.
    """
    if units < 1 or clusters < 1 or k_tiles < 1:
        raise ValueError(f"units, clusters and k_tiles must be positive, got {units}, {clusters}, {k_tiles}")
    tail = units % clusters
    first = units if tail == 0 else max(0, units - tail - clusters)
    if (clusters + 1) * (units - first) * k_tiles >= INT32_LIMIT:
        raise SplitOverflowError(f"a split of {units - first} units x {k_tiles} K iterations over {clusters} clusters exceeds "
                         "the kernel's 32-bit stream-K arithmetic")
    return StreamKTail(units=units, clusters=clusters, k_tiles=k_tiles, first_unit=first)


def tail_idle_min(clusters: int, min_idle: float = DEFAULT_MIN_IDLE) -> int:
    """plan_tail's idle fraction as a count of clusters for a kernel that decides its tail on the device
    (:func:`tail_start_unit`): floor(min_idle x clusters), so that ``clusters - tail > idle_min`` holds
    exactly when ``(clusters - tail) / clusters > min_idle`` does. Raises ValueError for clusters < 1 or
    min_idle outside [0, 1)."""
    if clusters < 1 or not 0 <= min_idle < 1:
        raise ValueError(f"clusters = {clusters}, min_idle = {min_idle}: clusters >= 1, 0 <= min_idle < 1")
    return int(min_idle * clusters)


def tail_start_unit(units: int, clusters: int, k_tiles: int, idle_min: int) -> int:
    """The first unit of the tail a kernel computes on the device from its unit count
    (kernels/include/gemm_ladder/stream_k.cuh tail_start_unit, the grouped kernel's: its units depend on
    group sizes the host never reads), in the same integers: plan_tail's rule with ``idle_min`` from
    :func:`tail_idle_min`; ``units`` when nothing is split. The tests check the two rules agree."""
    tail = units % clusters
    split = (units > clusters and tail > 0 and clusters - tail > idle_min and tail * k_tiles >= clusters
             and (clusters + 1) * tail * k_tiles < INT32_LIMIT)
    return units - tail if split else units


def tail_piece_slots(tail: StreamKTail) -> dict[tuple[int, int], int]:
    """{(unit, cluster): slot} of every piece of ``tail`` in the grouped kernel's workspace layout: the
    piece of tail unit u (counted from the tail's first) computed by cluster c at slot u + c. Each unit's
    contributors take consecutive slots (FragmentPartials reads them so) and no two pieces share one:
    a cluster's range begins inside at most one unit, and the clusters over a unit are consecutive. The
    slots are below tail units + clusters - 1 < 2 x clusters (library/grouped.py tail_workspace)."""
    return {(seg.unit, c): seg.unit - tail.first_unit + c
            for c in range(tail.clusters) for seg in tail.segments(c)}
