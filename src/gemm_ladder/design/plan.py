"""``plan_gemm``: from a problem, a tile, a dtype, a stage count and an architecture, a complete TMA plan.

The plan is for ``c = a @ b.T`` (a: (M, K), b: (N, K), c: (M, N), all row-major) with fp32
accumulation, the contract of :mod:`gemm_ladder.contract`. It holds, together, what a TMA design must
give at once: suitability, tensor maps, shared-memory layout and swizzle, MMA descriptors, issuer and
consumers, load and store protocols, the stage ring with its barriers, initial phases and budget, and
the schedule. It computes numbers only (levels 4+ plan every new shape they launch on); the sentences
that explain them, and the three-phase timeline, are :mod:`gemm_ladder.design.describer`'s.

Shape-independent facts (everything a kernel compiles in) come from :func:`kernel_defines_for`;
:meth:`Plan.kernel_defines` returns the same dictionary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gemm_ladder.design.problem import (
    ArchInfo, DtypeInfo, PlanRefused, arch_info, ceil_div, dtype_info,
)
from gemm_ladder.design.ring import (
    Consumers, Issuer, LedgerRow, LoadProtocol, Ring, StoreProtocol, phase_ledger,
)
from gemm_ladder.design.stream_k import DEFAULT_MIN_IDLE, plan_tail
from gemm_ladder.design.smem import (
    MmaDescriptor, SmemLayout, TmemPlan, c_store_rows, mma_descriptor, plan_smem, plan_tmem,
)
from gemm_ladder.design.tensor_maps import TensorMapSpec, b_mn_box_lines, check_box, gemm_tensor_maps
from gemm_ladder.design.timeline import release_mode

SWIZZLE = "CU_TENSOR_MAP_SWIZZLE_128B"
SWIZZLE_BYTES = 128
MAX_REGISTERS = 255  # per thread (PTX ISA / CUDA C Programming Guide: 255 registers per thread)
#: gridDim.x, .y, .z at most (CUDA C++ Programming Guide, "Compute Capabilities": 2^31 - 1, 65535, 65535).
MAX_GRID = (2**31 - 1, 65535, 65535)
#: Below this many operand bytes per CTA tile, the host-side encode and the barrier round trips are not
#: amortised: TMA is correct but not worth it.
SMALL_COPY_BYTES = 64 * 1024
#: How the consumer warpgroups share the work: "cooperative" (every consumer reads every stage and holds
#: BM / consumers rows of each tile: the ladder's levels 7-9) or "pingpong" (tiles in turn, each consumer
#: a whole tile, one storing while another computes; its ring audit/ring.py RingConfig.pingpong proves).
SCHEDULES = ("cooperative", "pingpong")
#: Release lags planned: 1, the kernels' (wgmma.wait_group 1), and 2, a measuring build's (wait_group 2).
RELEASE_LAGS = (1, 2)

#: Unit rows per group of the persistent kernels' grouped order: the kernels get it as -DGL_GROUP_M
#: (TileScheduler::kGroupM in tile_scheduler.cuh, which refuses to compile without it).
GROUP_M = 8

ALTERNATIVE_COPY = ("vectorized thread copy (the level-3 path: every thread moves {w}-byte vectors "
                    "global -> shared with ld.global/st.shared, then a CTA barrier)")


def unit_coords(unit: int, units_m: int, tiles_n: int, group_m: int = GROUP_M) -> tuple[int, int]:
    """Work unit -> (unit row, N tile) in the persistent kernels' grouped order (``TileScheduler::coords``).

    Units walk down a group of ``group_m`` unit rows before moving to the next N tile; a unit row is a
    stack of ``cluster`` M tiles, of which CTA rank r computes M tile ``unit_row * cluster + r``.
    """
    per_group = group_m * tiles_n
    group, within = divmod(unit, per_group)
    first = group * group_m
    rows = min(units_m - first, group_m)
    return first + within % rows, within // rows


def units_span(begin: int, end: int, units_m: int, tiles_n: int, group_m: int = GROUP_M) -> tuple[int, int]:
    """(unit rows, N tiles) that units [begin, end) of the grouped order touch: how many distinct rows of A
    panels and columns of B panels they read. The same counts as walking :func:`unit_coords` over the range,
    in one step per group (a group's units are ``rows`` unit rows by ``tiles_n`` columns, column by column).
    Raises ValueError for a range outside [0, units_m x tiles_n]."""
    if not 0 <= begin <= end <= units_m * tiles_n:
        raise ValueError(f"units [{begin}, {end}) outside the {units_m} x {tiles_n} grid")
    per_group = group_m * tiles_n
    rows_touched, spans = 0, []
    g = begin // per_group
    while g * per_group < end:
        first = g * group_m
        rows = min(units_m - first, group_m)
        lo, hi = max(begin - g * per_group, 0), min(end - g * per_group, rows * tiles_n)
        if lo < hi:
            rows_touched += min(rows, hi - lo)  # a contiguous run down the columns: every row once it is `rows` long
            spans.append((lo // rows, (hi - 1) // rows))
        g += 1
    covered = set()  # at most tiles_n columns: the union of each group's contiguous span
    for c0, c1 in spans:
        if len(covered) == tiles_n:
            break
        covered.update(range(c0, c1 + 1))
    return rows_touched, len(covered)


@dataclass(frozen=True)
class Suitability:
    """Whether TMA fits this problem, why, and the alternative when it does not (or is not worth it)."""

    fits: bool
    worthwhile: bool
    reasons: tuple[str, ...]
    alternative: str | None = None

    def to_json(self) -> dict:
        return {"fits": self.fits, "worthwhile": self.worthwhile, "reasons": list(self.reasons),
                "alternative": self.alternative}


@dataclass(frozen=True)
class Schedule:
    """Output tiles, the grid, and the tails."""

    m_tiles: int
    n_tiles: int
    k_tiles: int
    tiles: int
    m_tail: int  # rows of the last M tile (BM when M % BM == 0)
    n_tail: int
    k_tail: int
    grid: tuple[int, int, int]  # non-persistent: (N tiles, M tiles, 1); persistent: (min(units, resident clusters) * cluster, 1, 1)
    cluster_dims: tuple[int, int, int]  # (1, 1, 1) non-persistent; (cluster, 1, 1) persistent: a cluster is one work unit
    ctas: int
    idle_ctas: int  # CTAs launched without a tile of their own (0: a persistent grid is capped at the work units)
    persistent: bool
    sm_count: int
    waves: float
    stream_k: dict | None = None  # level 9's tail split (design.stream_k.StreamKTail.to_json()), if planned

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["grid"], out["cluster_dims"] = list(self.grid), list(self.cluster_dims)
        return out


@dataclass(frozen=True)
class KernelConfig:
    """The shape-independent part of a plan (what the kernel compiles in)."""

    dtype: DtypeInfo
    arch: ArchInfo
    tile: tuple[int, int, int]
    stages: int
    cluster: int
    consumers: int
    producer_warpgroup: bool
    threads: int
    smem: SmemLayout
    descriptors: dict[str, MmaDescriptor]
    tmem: TmemPlan | None
    accumulator_registers: int
    expect_tx_bytes: int
    a_major: str = "k"  # "k" (the ladder's contract) or "mn" (library/operand.py)
    b_major: str = "k"
    pingpong: bool = False  # the consumers take tiles in turn (SCHEDULES), each a whole tile

    @property
    def empty_arrivals(self) -> int:
        """Arrivals that free a stage: one elected thread per consumer warpgroup that read it (wgmma: every
        consumer when cooperative, the tile's one consumer when ping-pong) or the one tcgen05.commit of
        the MMA-issuing thread (sm_100a), from every CTA of the cluster."""
        readers = 1 if self.pingpong else self.consumers
        return (readers if self.arch.mma == "wgmma" else 1) * self.cluster

    def defines(self) -> dict[str, int]:
        bm, bn, bk = self.tile
        s = self.smem
        return {
            "GL_BM": bm, "GL_BN": bn, "GL_BK": bk,
            "GL_STAGES": self.stages, "GL_CONSUMERS": self.consumers, "GL_CLUSTER": self.cluster,
            "GL_PRODUCER_WG": int(self.producer_warpgroup), "GL_THREADS": self.threads,
            "GL_SMEM_A_OFFSET": s.a_offset, "GL_SMEM_B_OFFSET": s.b_offset,
            "GL_SMEM_A_STAGE_BYTES": s.a_stage_bytes, "GL_SMEM_B_STAGE_BYTES": s.b_stage_bytes,
            "GL_SMEM_C_OFFSET": s.c_offset, "GL_SMEM_C_PANEL_BYTES": s.c_panel_bytes, "GL_C_PANELS": s.c_panels,
            "GL_C_RING": s.c_ring,
            "GL_SMEM_FULL_BAR_OFFSET": s.full_bar_offset, "GL_SMEM_EMPTY_BAR_OFFSET": s.empty_bar_offset,
            "GL_SMEM_BYTES": s.total_bytes, "GL_EXPECT_TX_BYTES": self.expect_tx_bytes,
            "GL_B_BOX_ROWS": bn // self.cluster,
            "GL_EMPTY_ARRIVALS": self.empty_arrivals,
            "GL_A_MN_MAJOR": int(self.a_major == "mn"), "GL_B_MN_MAJOR": int(self.b_major == "mn"),
            "GL_GROUP_M": GROUP_M,
            # ping-pong builds only (a cooperative kernel's defines, and so its build keys, are unchanged)
            **({"GL_PINGPONG": 1, "GL_SMEM_ORDER_BAR_OFFSET": s.order_bar_offset} if self.pingpong else {}),
        }


def _config(dtype: str, tile, stages: int, cluster: int, consumers: int, arch: str,
            producer_warpgroup: bool | None, c_aliases_stages: bool = False, c_ring: int = 0,
            c_from_registers: bool = False, a_major: str = "k", b_major: str = "k",
            pingpong: bool = False) -> KernelConfig:
    dt, ar = dtype_info(dtype), arch_info(arch)
    if pingpong:
        if consumers < 2 or producer_warpgroup is False:
            raise PlanRefused("ping-pong", f"consumers = {consumers}: a ping-pong schedule alternates tiles between at "
                              "least two consumer warpgroups, fed by a producer warpgroup of their own")
        if ar.mma != "wgmma":
            raise PlanRefused("ping-pong", f"{ar.name}: the ping-pong schedule is planned for wgmma consumers "
                              "(sm_90a); tcgen05 keeps its accumulators in TMEM")
        if not (c_ring or c_from_registers):
            raise PlanRefused("ping-pong", "c_ring = 0: each ping-pong consumer stores its own tile while the other "
                              "computes, so each needs its own staging ring and store issuer (c_ring >= 1) or "
                              "stores from registers")
    for name, major in (("a_major", a_major), ("b_major", b_major)):
        if major not in ("k", "mn"):
            raise PlanRefused("operand major", f"{name} = {major!r}: 'k' (K-major) or 'mn' (MN-major)")
    try:
        bm, bn, bk = (int(x) for x in tile)
    except (TypeError, ValueError):
        raise PlanRefused("tile", f"tile {tile!r} is not three integers (BM, BN, BK)") from None
    e = dt.elem_bytes
    if stages < 1:
        raise PlanRefused("PIPE_DEPTH", f"stages = {stages}; the ring needs at least 1 stage")
    if consumers < 1:
        raise PlanRefused("consumers", f"consumers = {consumers}; at least one consumer warpgroup")
    if cluster < 1 or cluster & (cluster - 1) or cluster > ar.max_cluster_portable:
        raise PlanRefused("cluster size", f"cluster = {cluster}; use a power of two <= {ar.max_cluster_portable} (portable cluster size)")
    # Box rules first: they decide whether TMA can be used at all.
    bn_slice = bn // cluster if cluster else bn
    try:
        check_box("a", (bk, bm) if a_major == "k" else (128 // e, bk), e, SWIZZLE)
        check_box("b", (bk, bn_slice) if b_major == "k" else (128 // e, b_mn_box_lines(bn, bk, cluster, e)), e, SWIZZLE)
        if not c_from_registers:
            check_box("c", (128 // e, c_store_rows(bm=bm, consumers=consumers, c_ring=c_ring, pingpong=pingpong)), e,
                      SWIZZLE)
    except PlanRefused as exc:
        raise PlanRefused(exc.rule, f"{exc.detail}; TMA does not fit this tile: use a {ALTERNATIVE_COPY.format(w=16)}"
                          f" or a tile with BM, BN/cluster <= 256 and BK * {e} a multiple of 16") from None
    if bn % cluster or (bn // cluster) % 8:
        raise PlanRefused(
            "multicast slice",
            f"BN = {bn} split over a cluster of {cluster} gives {bn / cluster:g} rows per CTA; each slice must be a "
            f"whole number of 8-row swizzle atoms (BN / cluster a multiple of 8) so it lands 1024-byte aligned",
        )
    if b_major == "mn" and (bn // cluster) % (128 // e) and not (bn == 128 // e and (bk // cluster) % 8 == 0):
        raise PlanRefused("multicast slice", f"an MN-major B slice of {bn // cluster} rows per CTA is not a whole number of "
                          f"{128 // e}-element TMA boxes (BN / cluster a multiple of {128 // e}), nor is the tile one box "
                          f"whose {bk} K lines split into whole 8-line swizzle atoms per CTA (BN = {128 // e}, "
                          f"BK / cluster a multiple of 8)")
    if c_ring < 0:
        raise PlanRefused("output staging", f"c_ring = {c_ring}: 0 (whole-tile staging) or the number of panel buffers per consumer")
    if c_ring and (bn * e // 128) % c_ring:
        raise PlanRefused("output staging", f"c_ring = {c_ring} does not divide the {bn * e // 128} column panels of a "
                          f"{bm} x {bn} tile: panel p must always use buffer p % c_ring")
    if c_ring and not (producer_warpgroup or (producer_warpgroup is None and (consumers > 1 or cluster > 1))):
        raise PlanRefused("output staging", "c_ring gives each consumer warpgroup its own staging ring and store issuer "
                          "(level 9): the loads need a producer warpgroup of their own")
    if (bn * e) % 128 and not c_from_registers:
        raise PlanRefused("C panels", f"BN * {e} = {bn * e} bytes is not a whole number of 128-byte store panels (BN a multiple of {128 // e})")
    rows_per_wg = bm if pingpong else bm // consumers  # ping-pong: each consumer holds a whole tile
    if ar.mma == "wgmma":
        if (not pingpong and bm % consumers) or rows_per_wg % 64:
            raise PlanRefused("wgmma M", f"BM = {bm} over {consumers} consumer warpgroup(s) gives {bm / consumers:g} rows each; "
                              "wgmma computes 64 rows per instruction, so each warpgroup needs a multiple of 64")
        if bn % 8 or bn > 256:
            raise PlanRefused("wgmma N", f"BN = {bn}: wgmma .m64nNk16 needs N a multiple of 8 and <= 256")
        acc = rows_per_wg * bn // 128
        if acc > MAX_REGISTERS:
            raise PlanRefused(
                "wgmma accumulator registers",
                f"({bm} / {1 if pingpong else consumers}) x {bn} fp32 accumulator = {acc} registers per thread > "
                f"{MAX_REGISTERS}; " + ("use BM 64 or a smaller BN (a ping-pong consumer holds a whole tile)" if pingpong
                                        else f"use {2 * consumers} consumer warpgroups or a smaller BN"),
            )
    else:
        if bm not in (64, 128, 256) or bm % consumers:
            raise PlanRefused("tcgen05 M", f"BM = {bm}: tcgen05.mma (cta_group::1) tiles of 64 or 128 rows (256 as two)")
        if bn % 16 or bn > 256:
            raise PlanRefused("tcgen05 N", f"BN = {bn}: tcgen05.mma kind::f16 with M=128 needs N a multiple of 16, <= 256")
        acc = 0
    if producer_warpgroup is None:
        producer_warpgroup = consumers > 1 or cluster > 1
    threads = 128 * consumers + (128 if producer_warpgroup else 0)
    descriptors = {
        "a": mma_descriptor("A", rows=bm, bk=bk, elem_bytes=e, swizzle_bytes=SWIZZLE_BYTES, arch=ar, major=a_major.upper()),
        "b": mma_descriptor("B", rows=bn, bk=bk, elem_bytes=e, swizzle_bytes=SWIZZLE_BYTES, arch=ar, major=b_major.upper()),
    }
    smem = plan_smem(bm=bm, bn=bn, bk=bk, elem_bytes=e, stages=stages, cluster=cluster, threads=threads, arch=ar,
                     c_aliases_stages=c_aliases_stages, consumers=consumers, c_ring=c_ring,
                     c_from_registers=c_from_registers, pingpong=pingpong)
    tmem = plan_tmem(bm=bm, bn=bn, arch=ar)
    return KernelConfig(dtype=dt, arch=ar, tile=(bm, bn, bk), stages=stages, cluster=cluster, consumers=consumers,
                        producer_warpgroup=producer_warpgroup, threads=threads, smem=smem, descriptors=descriptors,
                        tmem=tmem, accumulator_registers=acc, expect_tx_bytes=(bm + bn) * bk * e,
                        a_major=a_major, b_major=b_major, pingpong=pingpong)


def kernel_defines_for(dtype: str = "bf16", tile=(128, 128, 64), stages: int = 4, cluster: int = 1,
                       consumers: int = 1, arch: str = "sm_90a", producer_warpgroup: bool | None = None,
                       c_aliases_stages: bool = False, c_ring: int = 0, c_from_registers: bool = False,
                       a_major: str = "k", b_major: str = "k", pingpong: bool = False) -> dict[str, int]:
    """The compile-time constants (``-D``) of a kernel built for this configuration; no problem shape needed.

    ``a_major`` / ``b_major``: each operand K-major ("k") or MN-major ("mn") in memory and shared memory.
    ``pingpong``: the consumers take tiles in turn (:data:`SCHEDULES`' "pingpong"), adding GL_PINGPONG and
    the order barriers' offset.
    Raises :class:`PlanRefused` for configurations no shape could use (box, swizzle, smem, TMEM rules).
    """
    return _config(dtype, tile, stages, cluster, consumers, arch, producer_warpgroup, c_aliases_stages, c_ring,
                   c_from_registers, a_major, b_major, pingpong).defines()


def _tensor_maps(m: int, n: int, k: int, dt: DtypeInfo, tile, cluster: int, *, c_box_rows: int | None = None,
                 c_from_registers: bool = False, **layout) -> dict[str, TensorMapSpec]:
    """The plan's tensor maps (not validated): a, b and c, or only a and b when c is stored from registers.
    ``layout``: the operand majors and leading dimensions (gemm_tensor_maps' a_major, b_major, lda, ldb, ldc)."""
    bm, bn, bk = tile
    maps = gemm_tensor_maps(m, n, k, data_type=dt.tensor_map_type, elem_bytes=dt.elem_bytes, bm=bm, bn=bn, bk=bk,
                            cluster=cluster, swizzle=SWIZZLE, c_box_rows=c_box_rows, **layout)
    if c_from_registers:
        del maps["c"]
    return maps


def assess_suitability(m: int, n: int, k: int, dtype: str = "bf16", tile=(128, 128, 64), cluster: int = 1,
                       c_from_registers: bool = False, **layout) -> Suitability:
    """Can TMA describe a, b and c for this problem, and is it worth it? Never raises for shape rules.

    ``c_from_registers``: c is stored from registers, so only a and b need a tensor map.
    ``layout``: the operand majors and leading dimensions (gemm_tensor_maps' a_major, b_major, lda, ldb,
    ldc); none given is the ladder's dense row-major contract.
    """
    dt = dtype_info(dtype)
    bm, bn, bk = tile
    e = dt.elem_bytes
    maps = _tensor_maps(m, n, k, dt, tile, cluster, c_from_registers=c_from_registers, **layout)
    for spec in maps.values():
        try:
            spec.validate()
        except PlanRefused as exc:
            if exc.rule == "cuTensorMapEncodeTiled globalDim" and 0 in (m, n, k):
                alt = "no launch: M = 0 or N = 0 gives an empty result, K = 0 gives zeros (contract.trivial_result)"
            else:
                pitch = spec.global_strides[0] if spec.global_strides else 16
                w = math.gcd(pitch, 16)
                alt = ALTERNATIVE_COPY.format(w=w) + (f"; rows start only {w}-byte aligned here" if w < 16 else "")
            return Suitability(False, False, (str(exc),), alt)
    reasons = [
        "a, b and c are dense row-major matrices: regular rectangular boxes with fixed strides",
        f"row pitches {k * e} (a, b) and {n * e} (c) bytes are multiples of 16; dimensions within 2^32",
        "M, N and K tails: out-of-bounds box elements load as zero and are clipped on store (no masks)",
    ] if not c_from_registers else [
        "a and b are dense row-major matrices: regular rectangular boxes with fixed strides",
        f"row pitch {k * e} bytes (a, b) is a multiple of 16; dimensions within 2^32",
        "c is stored from registers (no tensor map): any pitch, masked at the M and N edges",
        "M, N and K tails: out-of-bounds box elements load as zero (no masks on the loads)",
    ]
    if layout:
        reasons[:2] = ["; ".join(f"{spec.name}: {spec.description}" for spec in maps.values()),
                       "pitches " + ", ".join(f"{spec.global_strides[0]} ({spec.name})" for spec in maps.values())
                       + " bytes are multiples of 16; dimensions within 2^32"]
    worthwhile = True
    alternative = None
    per_tile = (min(m, bm) + min(n, bn)) * k * e
    if per_tile < SMALL_COPY_BYTES and ceil_div(m, bm) * ceil_div(n, bn) == 1:
        worthwhile = False
        reasons.append(f"small: one output tile moving {per_tile} useful operand bytes (< {SMALL_COPY_BYTES}); "
                       "the host-side encode and barrier round trips are not amortised")
        alternative = ALTERNATIVE_COPY.format(w=16)
    for dim, size, b in (("M", m, bm), ("N", n, bn)):
        if size < b // 2:
            reasons.append(f"{dim} = {size} < half of the tile's {b}: most of every box is zero fill")
    return Suitability(True, worthwhile, tuple(reasons), alternative)


@dataclass(frozen=True)
class Plan:
    """A complete TMA pipeline plan, its numbers. Build with :func:`plan_gemm`.

    The prose that explains it (who issues what, the protocols step by step, the schedule's notes, the
    timeline rows, assumptions, risks, validation) is :func:`gemm_ladder.design.describer.describe`'s;
    the Markdown and the picture are :mod:`gemm_ladder.design.render`'s.
    """

    m: int
    n: int
    k: int
    dtype: str
    tile: tuple[int, int, int]
    stages: int
    cluster: int
    arch: str
    persistent: bool
    suitability: Suitability
    tensor_maps: dict[str, TensorMapSpec]
    smem: SmemLayout
    wgmma_descriptors: dict[str, MmaDescriptor]
    tmem: TmemPlan | None
    issuer: Issuer
    consumers: Consumers
    load_protocol: LoadProtocol
    store_protocol: StoreProtocol
    ring: Ring
    schedule: Schedule
    stream_k_min_idle: float  # plan_tail's threshold the stream-K tail was planned with
    _config: KernelConfig = field(repr=False, compare=False)

    @property
    def ledger(self) -> tuple[LedgerRow, ...]:
        return self.ring.ledger

    def kernel_defines(self) -> dict[str, int]:
        """Same as :func:`kernel_defines_for` with this plan's dtype, tile, stages, cluster, consumers, arch."""
        return self._config.defines()

    def to_json(self) -> dict:
        """The plan's numbers as JSON (what the kernel and the auditor read); ``gemm-ladder design
        --format json`` prints :func:`gemm_ladder.design.describer.plan_document`, this with the prose."""
        return {
            "schema": "gemm-ladder/design/1",
            "problem": {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "arch": self.arch,
                        "tile": list(self.tile), "stages": self.stages, "cluster": self.cluster,
                        "consumers": self.consumers.warpgroups, "persistent": self.persistent,
                        "producer_warpgroup": self.consumers.producer_warpgroup,
                        "c_aliases_stages": self.smem.c_aliases_stages, "c_ring": self.smem.c_ring,
                        "c_from_registers": self.smem.c_from_registers,
                        "a_major": self._config.a_major, "b_major": self._config.b_major,
                        **({"schedule": "pingpong"} if self._config.pingpong else {})},
            "suitability": self.suitability.to_json(),
            "tensor_maps": {k: v.to_json() for k, v in self.tensor_maps.items()},
            "smem": self.smem.to_json(),
            "wgmma_descriptors": {k: v.to_json() for k, v in self.wgmma_descriptors.items()},
            "tmem": self.tmem.to_json() if self.tmem else None,
            "issuer": self.issuer.to_json(),
            "consumers": self.consumers.to_json(),
            "load_protocol": self.load_protocol.to_json(),
            "store_protocol": self.store_protocol.to_json(),
            "ring": self.ring.to_json(),
            "schedule": self.schedule.to_json(),
            "kernel_defines": self.kernel_defines(),
        }


def _check_grid(grid: tuple[int, int, int], bm: int) -> None:
    """Raise PlanRefused when a one-CTA-per-tile ``grid`` exceeds :data:`MAX_GRID`: such a launch fails
    (gridDim.y, the M tiles, passes 65535 past M = 65535 x BM)."""
    for axis, extent, limit in zip("xyz", grid, MAX_GRID):
        if extent > limit:
            bound = f" (M <= {limit * bm} at BM = {bm})" if axis == "y" else ""
            raise PlanRefused("grid", f"grid {grid}: gridDim.{axis} = {extent} > {limit}, CUDA's limit{bound}; "
                              "use persistent=True (--persistent on the command line), whose 1-D grid walks the tiles")


def plan_gemm(m: int, n: int, k: int, dtype: str = "bf16", tile=(128, 128, 64), stages: int = 4, cluster: int = 1,
              consumers: int = 1, arch: str = "sm_90a", persistent: bool = False, *,
              producer_warpgroup: bool | None = None, c_aliases_stages: bool = False, c_ring: int = 0,
              stream_k: bool = False, stream_k_min_idle: float = DEFAULT_MIN_IDLE,
              c_from_registers: bool = False, a_major: str = "k", b_major: str = "k", lda: int | None = None,
              ldb: int | None = None, ldc: int | None = None, schedule: str = "cooperative",
              release_lag: int = 1) -> Plan:
    """Plan ``c = a @ b.T`` for a (M, K) and b (N, K) row-major; raises :class:`PlanRefused` naming the rule.

    ``producer_warpgroup``: a separate producer warpgroup issues the loads (warp specialization);
    None chooses it when ``consumers > 1`` or ``cluster > 1`` (levels 8 and 9 build on level 7).
    ``c_aliases_stages``: the output staging overlays the drained operand stages (one tile per CTA).
    ``c_ring``: R > 0 gives each consumer warpgroup its own ring of R one-panel staging buffers and its
    own store issuer, stored panel by panel (level 9); 0 stages the whole tile at once.
    ``stream_k``: split the last partial wave's units by K iterations over every cluster
    (design.stream_k.plan_tail decides whether it pays on this shape, with ``stream_k_min_idle``;
    level 9). Persistent only.
    ``c_from_registers``: the consumers store c from their accumulator registers (st.global, masked):
    no output staging, no c tensor map, any c pitch, and BN need not fill a 128-byte store panel. For a
    kernel that writes its fragment in a layout of its own (library/small_m.py plans C^T = B A^T this
    way and writes each fragment transposed into C).
    ``a_major``, ``b_major``: each operand "k" (element (r, k) at r * ld + k, the ladder's contract) or
    "mn" (at r + k * ld; the library's layouts, library/operand.py); ``lda``, ``ldb``, ``ldc``: leading
    dimensions in elements (default dense), which the tensor maps take as their global strides.
    ``schedule``: one of :data:`SCHEDULES`; "pingpong" needs a persistent grid, two or more consumers and
    each consumer's own output staging ring (``c_ring``) or ``c_from_registers``; its plan JSON says
    ``problem.schedule`` and its shared memory holds one ``order`` mbarrier per consumer.
    ``release_lag``: 1 (the kernels' ``wgmma.wait_group 1``: stage k released after the wgmma of k + 1;
    ``ring.release_mode`` "previous", or "current" with one stage) or 2 (a measuring build's
    ``wait_group 2``, library_gemm's release_lag: "two_back"), which needs a producer warpgroup and three
    stages or more.
    """
    m, n, k = int(m), int(n), int(k)
    if type(release_lag) is not int or release_lag not in RELEASE_LAGS:
        raise PlanRefused("release lag", f"release_lag = {release_lag!r}: 1 (wgmma.wait_group 1) or 2 (wait_group 2)")
    if schedule not in SCHEDULES:
        raise PlanRefused("schedule", f"schedule = {schedule!r}: use one of {', '.join(SCHEDULES)}")
    pingpong = schedule == "pingpong"
    if pingpong and not persistent:
        raise PlanRefused("ping-pong without persistent", "a ping-pong schedule alternates a CTA's tiles between its "
                          "consumers; a grid of one tile per CTA has none to alternate: use persistent=True")
    layout = {key: v for key, v in (("a_major", a_major), ("b_major", b_major), ("lda", lda), ("ldb", ldb),
                                    ("ldc", ldc)) if v not in (None, "k")}
    if c_aliases_stages and persistent:
        raise PlanRefused("output staging alias", "a persistent kernel loads the next tile while it stores this one: "
                          "its output staging cannot overlay the operand stages")
    if cluster > 1 and not persistent:
        raise PlanRefused("cluster without persistent", f"cluster = {cluster}: the ladder clusters only persistent grids "
                          "(levels 8-9: a 1-D grid, cluster dims (cluster, 1, 1), CTA rank r takes M tile unit_m * cluster + r); "
                          "a non-persistent grid (N tiles, M tiles, 1) launches no cluster: use persistent=True (--persistent on the command line) or cluster = 1")
    if stream_k and not persistent:
        raise PlanRefused("stream-K without persistent", "the stream-K tail splits the last wave of a persistent "
                          "grid; a grid of one CTA per tile has no wave to split: use persistent=True (--persistent on the command line)")
    cfg = _config(dtype, tile, stages, cluster, consumers, arch, producer_warpgroup, c_aliases_stages, c_ring,
                  c_from_registers, a_major, b_major, pingpong)
    bm, bn, bk = cfg.tile
    e = cfg.dtype.elem_bytes
    suit = assess_suitability(m, n, k, dtype, cfg.tile, cluster, c_from_registers=c_from_registers, **layout)
    if not suit.fits:
        raise PlanRefused(suit.reasons[0].split(":", 1)[0], suit.reasons[0].split(":", 1)[1].strip()
                          + f"; TMA does not fit: use {suit.alternative}")
    maps = _tensor_maps(m, n, k, cfg.dtype, cfg.tile, cluster, c_from_registers=c_from_registers,
                        c_box_rows=c_store_rows(bm=bm, consumers=consumers, c_ring=c_ring, pingpong=pingpong), **layout)
    for spec in maps.values():
        spec.validate()
    ar, smem, S = cfg.arch, cfg.smem, stages
    pw = cfg.producer_warpgroup
    if release_lag == 2 and (not pw or S < 3):
        raise PlanRefused("release lag", f"release_lag = 2 with {'no producer warpgroup' if not pw else f'{S} stages'}: "
                          "two wgmma groups in flight are planned for a warp-specialized ring of three stages or "
                          "more (a consumer holds two stages while it waits for a third)")
    first_wg = 1 if pw else 0
    first_thread = 128 * first_wg
    store_thread = first_thread  # thread 0 of consumer warpgroup 0
    if ar.mma == "wgmma":
        release_threads = tuple(first_thread + 128 * c for c in range(consumers))
    else:
        release_threads = (first_thread,)  # the MMA-issuing thread's tcgen05.commit
    issuer = Issuer(thread=0, warpgroup="producer" if pw else "consumer 0", store_thread=store_thread,
                    store_warpgroup="consumer 0", store_threads=release_threads if smem.c_ring else (store_thread,))
    consumers_info = Consumers(
        warpgroups=consumers, threads=128 * consumers, rows_per_warpgroup=bm if pingpong else bm // consumers,
        producer_warpgroup=pw,
        threads_per_cta=cfg.threads, accumulator_registers=cfg.accumulator_registers,
        first_warpgroup=first_wg, first_thread=first_thread, release_threads=release_threads,
    )
    a_box = maps["a"].box_bytes
    b_box = maps["b"].box_bytes
    # TMA boxes per tile: 1 for a K-major operand; an MN-major one takes one 128-byte-wide box per 64 rows
    a_boxes, b_boxes = bm * bk * e // a_box, (bn // cluster) * bk * e // b_box
    tx = a_box * a_boxes + b_box * b_boxes * cluster
    assert tx == cfg.expect_tx_bytes
    load = LoadProtocol(
        full_arrival_count=1, expect_tx_bytes=tx, a_box_bytes=a_box, b_box_bytes=b_box,
        b_boxes_per_stage=cluster * b_boxes, multicast_mask=(1 << cluster) - 1 if cluster > 1 else 0,
        empty_arrival_count=cfg.empty_arrivals, a_boxes_per_stage=a_boxes,
    )
    store = StoreProtocol(panels=smem.c_panels, panel_box=tuple(maps["c"].box_dim) if "c" in maps else (),
                          panel_bytes=smem.c_panel_bytes)
    m_tiles, n_tiles, k_tiles = ceil_div(m, bm), ceil_div(n, bn), ceil_div(k, bk)
    tiles = m_tiles * n_tiles
    tail = None
    if persistent:
        units = ceil_div(m_tiles, cluster) * n_tiles
        resident = max(1, ar.sm_count * smem.ctas_per_sm // cluster)  # clusters resident at once (estimate)
        ctas = min(units, resident) * cluster
        grid, cluster_dims = (ctas, 1, 1), (cluster, 1, 1)
        waves = units / (ctas // cluster)
        if stream_k:
            tail = plan_tail(units, ctas // cluster, k_tiles, stream_k_min_idle).to_json()
    else:
        grid, cluster_dims = (n_tiles, m_tiles, 1), (1, 1, 1)  # x over N tiles, y over M tiles; no cluster
        _check_grid(grid, bm)
        ctas = tiles
        waves = ctas / (ar.sm_count * smem.ctas_per_sm)
    schedule = Schedule(
        m_tiles=m_tiles, n_tiles=n_tiles, k_tiles=k_tiles, tiles=tiles, m_tail=m - (m_tiles - 1) * bm,
        n_tail=n - (n_tiles - 1) * bn, k_tail=k - (k_tiles - 1) * bk, grid=grid, cluster_dims=cluster_dims,
        ctas=ctas, idle_ctas=0, persistent=persistent, sm_count=ar.sm_count, waves=round(waves, 3), stream_k=tail,
    )
    # the ledger covers this tile's K iterations (two tiles' worth when persistent), at most three rounds
    ledger_len = min(k_tiles * (2 if persistent else 1), max(3 * S, 8))
    ring = Ring(
        pipe_depth=S, full_barriers=S, full_init_count=1, empty_barriers=S, empty_init_count=cfg.empty_arrivals,
        initial_phase=0, first_full_wait_parity=0, first_empty_wait_parity=1,
        release_mode="two_back" if release_lag == 2 else release_mode(S), lookahead=S - release_lag,
        smem_total_bytes=smem.total_bytes, ctas_per_sm=smem.ctas_per_sm, ledger=phase_ledger(ledger_len, S),
    )
    return Plan(
        m=m, n=n, k=k, dtype=dtype, tile=cfg.tile, stages=S, cluster=cluster, arch=arch, persistent=persistent,
        suitability=suit, tensor_maps=maps, smem=smem, wgmma_descriptors=cfg.descriptors, tmem=cfg.tmem,
        issuer=issuer, consumers=consumers_info, load_protocol=load, store_protocol=store, ring=ring,
        schedule=schedule, stream_k_min_idle=stream_k_min_idle, _config=cfg,
    )
