"""``plan_gemm``: from a problem, a tile, a dtype, a stage count and an architecture, a complete TMA plan.

The plan is for ``c = a @ b.T`` (a: (M, K), b: (N, K), c: (M, N), all row-major) with fp32
accumulation, the contract of :mod:`gemm_ladder.contract`. It holds, together, what a TMA design must
give at once: suitability, tensor maps, shared-memory layout and swizzle, MMA
descriptors, issuer and consumers, load and store protocols, the stage ring with its barriers, initial
phases and budget, and the three-phase timeline.

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
from gemm_ladder.design.tensor_maps import TensorMapSpec, check_box, gemm_tensor_maps
from gemm_ladder.design.timeline import TimelineRow, build_timeline, release_mode

SWIZZLE = "CU_TENSOR_MAP_SWIZZLE_128B"
SWIZZLE_BYTES = 128
MAX_REGISTERS = 255  # per thread (PTX ISA / CUDA C Programming Guide: 255 registers per thread)
#: Below this many operand bytes per CTA tile, the host-side encode and the barrier round trips are not
#: amortised: TMA is correct but not worth it.
SMALL_COPY_BYTES = 64 * 1024
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
    notes: tuple[str, ...]
    stream_k: dict | None = None  # level 9's tail split (design.stream_k.StreamKTail.to_json()), if planned

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["grid"], out["cluster_dims"], out["notes"] = list(self.grid), list(self.cluster_dims), list(self.notes)
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

    @property
    def empty_arrivals(self) -> int:
        """Arrivals that free a stage: one elected thread per consumer warpgroup (wgmma) or the one
        tcgen05.commit of the MMA-issuing thread (sm_100a), from every CTA of the cluster."""
        return (self.consumers if self.arch.mma == "wgmma" else 1) * self.cluster

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
            "GL_GROUP_M": GROUP_M,
        }


def _config(dtype: str, tile, stages: int, cluster: int, consumers: int, arch: str,
            producer_warpgroup: bool | None, c_aliases_stages: bool = False, c_ring: int = 0) -> KernelConfig:
    dt, ar = dtype_info(dtype), arch_info(arch)
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
        check_box("a", (bk, bm), e, SWIZZLE)
        check_box("b", (bk, bn_slice), e, SWIZZLE)
        check_box("c", (128 // e, c_store_rows(bm=bm, consumers=consumers, c_ring=c_ring)), e, SWIZZLE)
    except PlanRefused as exc:
        raise PlanRefused(exc.rule, f"{exc.detail}; TMA does not fit this tile: use a {ALTERNATIVE_COPY.format(w=16)}"
                          f" or a tile with BM, BN/cluster <= 256 and BK * {e} a multiple of 16") from None
    if bn % cluster or (bn // cluster) % 8:
        raise PlanRefused(
            "multicast slice",
            f"BN = {bn} split over a cluster of {cluster} gives {bn / cluster:g} rows per CTA; each slice must be a "
            f"whole number of 8-row swizzle atoms (BN / cluster a multiple of 8) so it lands 1024-byte aligned",
        )
    if c_ring < 0:
        raise PlanRefused("output staging", f"c_ring = {c_ring}: 0 (whole-tile staging) or the number of panel buffers per consumer")
    if c_ring and (bn * e // 128) % c_ring:
        raise PlanRefused("output staging", f"c_ring = {c_ring} does not divide the {bn * e // 128} column panels of a "
                          f"{bm} x {bn} tile: panel p must always use buffer p % c_ring")
    if c_ring and (consumers < 2 or producer_warpgroup is False):
        raise PlanRefused("output staging", "c_ring gives each consumer warpgroup its own staging ring and store issuer "
                          "(level 9): it needs two or more consumer warpgroups and a producer warpgroup")
    if (bn * e) % 128:
        raise PlanRefused("C panels", f"BN * {e} = {bn * e} bytes is not a whole number of 128-byte store panels (BN a multiple of {128 // e})")
    rows_per_wg = bm // consumers
    if ar.mma == "wgmma":
        if bm % consumers or rows_per_wg % 64:
            raise PlanRefused("wgmma M", f"BM = {bm} over {consumers} consumer warpgroup(s) gives {bm / consumers:g} rows each; "
                              "wgmma computes 64 rows per instruction, so each warpgroup needs a multiple of 64")
        if bn % 8 or bn > 256:
            raise PlanRefused("wgmma N", f"BN = {bn}: wgmma .m64nNk16 needs N a multiple of 8 and <= 256")
        acc = rows_per_wg * bn // 128
        if acc > MAX_REGISTERS:
            raise PlanRefused(
                "wgmma accumulator registers",
                f"({bm} / {consumers}) x {bn} fp32 accumulator = {acc} registers per thread > {MAX_REGISTERS}; "
                f"use {2 * consumers} consumer warpgroups or a smaller BN",
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
        "a": mma_descriptor("A", rows=bm, bk=bk, elem_bytes=e, swizzle_bytes=SWIZZLE_BYTES, arch=ar),
        "b": mma_descriptor("B", rows=bn, bk=bk, elem_bytes=e, swizzle_bytes=SWIZZLE_BYTES, arch=ar),
    }
    smem = plan_smem(bm=bm, bn=bn, bk=bk, elem_bytes=e, stages=stages, cluster=cluster, threads=threads, arch=ar,
                     c_aliases_stages=c_aliases_stages, consumers=consumers, c_ring=c_ring)
    tmem = plan_tmem(bm=bm, bn=bn, arch=ar)
    return KernelConfig(dtype=dt, arch=ar, tile=(bm, bn, bk), stages=stages, cluster=cluster, consumers=consumers,
                        producer_warpgroup=producer_warpgroup, threads=threads, smem=smem, descriptors=descriptors,
                        tmem=tmem, accumulator_registers=acc, expect_tx_bytes=(bm + bn) * bk * e)


def kernel_defines_for(dtype: str = "bf16", tile=(128, 128, 64), stages: int = 4, cluster: int = 1,
                       consumers: int = 1, arch: str = "sm_90a", producer_warpgroup: bool | None = None,
                       c_aliases_stages: bool = False, c_ring: int = 0) -> dict[str, int]:
    """The compile-time constants (``-D``) of a kernel built for this configuration; no problem shape needed.

    Raises :class:`PlanRefused` for configurations no shape could use (box, swizzle, smem, TMEM rules).
    """
    return _config(dtype, tile, stages, cluster, consumers, arch, producer_warpgroup, c_aliases_stages, c_ring).defines()


def assess_suitability(m: int, n: int, k: int, dtype: str = "bf16", tile=(128, 128, 64), cluster: int = 1) -> Suitability:
    """Can TMA describe a, b and c for this problem, and is it worth it? Never raises for shape rules."""
    dt = dtype_info(dtype)
    bm, bn, bk = tile
    e = dt.elem_bytes
    maps = gemm_tensor_maps(m, n, k, data_type=dt.tensor_map_type, elem_bytes=e, bm=bm, bn=bn, bk=bk,
                            cluster=cluster, swizzle=SWIZZLE)
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
    ]
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
    """A complete TMA pipeline plan. Build with :func:`plan_gemm`."""

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
    timeline: tuple[TimelineRow, ...]
    schedule: Schedule
    assumptions: tuple[str, ...]
    risks: tuple[str, ...]
    validation: tuple[str, ...]
    _config: KernelConfig = field(repr=False, compare=False)

    @property
    def ledger(self) -> tuple[LedgerRow, ...]:
        return self.ring.ledger

    def kernel_defines(self) -> dict[str, int]:
        """Same as :func:`kernel_defines_for` with this plan's dtype, tile, stages, cluster, consumers, arch."""
        return self._config.defines()

    def conclusion(self) -> str:
        bm, bn, bk = self.tile
        return (f"TMA with {self.stages}-stage ring ({'producer warpgroup + ' if self.consumers.producer_warpgroup else ''}"
                f"{self.consumers.warpgroups} consumer warpgroup(s), {self.consumers.threads_per_cta} threads), "
                f"tile {bm}x{bn}x{bk}, 128B swizzle, {self.smem.total_bytes} bytes of dynamic shared memory, "
                f"{self.smem.ctas_per_sm} CTA(s)/SM, cluster {self.cluster}"
                + ("" if self.suitability.worthwhile else "; correct but not worth it here (see suitability)"))

    def to_json(self) -> dict:
        return {
            "schema": "gemm-ladder/design/1",
            "problem": {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "arch": self.arch,
                        "tile": list(self.tile), "stages": self.stages, "cluster": self.cluster,
                        "consumers": self.consumers.warpgroups, "persistent": self.persistent,
                        "producer_warpgroup": self.consumers.producer_warpgroup,
                        "c_aliases_stages": self.smem.c_aliases_stages, "c_ring": self.smem.c_ring},
            "conclusion": self.conclusion(),
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
            "timeline": [r.to_json() for r in self.timeline],
            "schedule": self.schedule.to_json(),
            "kernel_defines": self.kernel_defines(),
            "assumptions": list(self.assumptions),
            "risks": list(self.risks),
            "validation": list(self.validation),
        }

    def to_markdown(self) -> str:
        from gemm_ladder.design.render import plan_markdown

        return plan_markdown(self)

    def write_timeline_png(self, path) -> None:
        from gemm_ladder.design.render import timeline_png

        timeline_png(self, path)


def plan_gemm(m: int, n: int, k: int, dtype: str = "bf16", tile=(128, 128, 64), stages: int = 4, cluster: int = 1,
              consumers: int = 1, arch: str = "sm_90a", persistent: bool = False, *,
              producer_warpgroup: bool | None = None, c_aliases_stages: bool = False, c_ring: int = 0,
              stream_k: bool = False, stream_k_min_idle: float = DEFAULT_MIN_IDLE) -> Plan:
    """Plan ``c = a @ b.T`` for a (M, K) and b (N, K) row-major; raises :class:`PlanRefused` naming the rule.

    ``producer_warpgroup``: a separate producer warpgroup issues the loads (warp specialization);
    None chooses it when ``consumers > 1`` or ``cluster > 1`` (levels 8 and 9 build on level 7).
    ``c_aliases_stages``: the output staging overlays the drained operand stages (one tile per CTA).
    ``c_ring``: R > 0 gives each consumer warpgroup its own ring of R one-panel staging buffers and its
    own store issuer, stored panel by panel (level 9); 0 stages the whole tile at once.
    ``stream_k``: split the last partial wave's units by K iterations over every cluster
    (design.stream_k.plan_tail decides whether it pays on this shape, with ``stream_k_min_idle``;
    level 9). Persistent only.
    """
    m, n, k = int(m), int(n), int(k)
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
    cfg = _config(dtype, tile, stages, cluster, consumers, arch, producer_warpgroup, c_aliases_stages, c_ring)
    bm, bn, bk = cfg.tile
    e = cfg.dtype.elem_bytes
    suit = assess_suitability(m, n, k, dtype, cfg.tile, cluster)
    if not suit.fits:
        raise PlanRefused(suit.reasons[0].split(":", 1)[0], suit.reasons[0].split(":", 1)[1].strip()
                          + f"; TMA does not fit: use {suit.alternative}")
    maps = gemm_tensor_maps(m, n, k, data_type=cfg.dtype.tensor_map_type, elem_bytes=e, bm=bm, bn=bn, bk=bk,
                            cluster=cluster, swizzle=SWIZZLE,
                            c_box_rows=c_store_rows(bm=bm, consumers=consumers, c_ring=c_ring))
    for spec in maps.values():
        spec.validate()
    ar, smem, S = cfg.arch, cfg.smem, stages

    pw = cfg.producer_warpgroup
    first_wg = 1 if pw else 0
    first_thread = 128 * first_wg
    store_thread = first_thread  # thread 0 of consumer warpgroup 0
    if ar.mma == "wgmma":
        release_threads = tuple(first_thread + 128 * c for c in range(consumers))
    else:
        release_threads = (first_thread,)  # the MMA-issuing thread's tcgen05.commit
    last_thread = cfg.threads - 1
    store_threads = release_threads if smem.c_ring else (store_thread,)
    issuer = Issuer(
        thread=0, warpgroup="producer" if pw else "consumer 0", store_thread=store_thread, store_warpgroup="consumer 0",
        store_threads=store_threads,
        description=(
            ("thread 0 (lane 0 of warpgroup 0, the producer warpgroup: threads 0-127, setmaxnreg down) initialises "
             "the barriers and issues every TMA load and arrive.expect_tx; the other 127 producer threads idle. "
             + (f"Thread 0 of each consumer warpgroup (threads {', '.join(map(str, store_threads))}) issues that "
                "warpgroup's own TMA stores (commit_group / wait_group.read)" if smem.c_ring else
                f"Thread {store_thread} (thread 0 of consumer warpgroup 0 = warpgroup 1) issues every TMA store "
                "(commit_group / wait_group.read)")) if pw else
            ("thread 0 (lane 0 of warpgroup 0, also a consumer) initialises the barriers and issues every TMA load, "
             "arrive.expect_tx and TMA store of the CTA; no other thread issues TMA")),
    )
    if ar.mma == "wgmma":
        releasers = ("thread 0 of each consumer warpgroup (thread" + ("s " if consumers > 1 else " ")
                     + ", ".join(map(str, release_threads)) + ") arrives on the empty barriers")
    else:
        releasers = f"thread {first_thread} issues tcgen05.mma and its tcgen05.commit arrives on the empty barriers"
    consumers_info = Consumers(
        warpgroups=consumers, threads=128 * consumers, rows_per_warpgroup=bm // consumers, producer_warpgroup=pw,
        threads_per_cta=cfg.threads, accumulator_registers=cfg.accumulator_registers,
        first_warpgroup=first_wg, first_thread=first_thread, release_threads=release_threads,
        description=(f"{consumers} consumer warpgroup(s) = CTA warpgroup(s) {first_wg}..{first_wg + consumers - 1} "
                     f"(threads {first_thread}-{last_thread}), 128 threads each, wait on full[s] and read stage s through "
                     f"{'wgmma descriptors' if ar.mma == 'wgmma' else 'tcgen05.mma (issued by one thread) descriptors'}; "
                     + (f"it computes the whole {bm} x {bn} tile; " if consumers == 1 else
                        f"consumer c computes rows [{bm // consumers}c, {bm // consumers}c + {bm // consumers}) x all {bn} columns; ")
                     + 
                     f"{releasers}"
                     + ("; setmaxnreg: producer down (40), consumers up (232)" if pw else
                        "; thread 0 is both the TMA issuer and a consumer")),
    )
    a_box = maps["a"].box_bytes
    b_box = maps["b"].box_bytes
    mask = (1 << cluster) - 1 if cluster > 1 else 0
    tx = a_box + b_box * cluster
    assert tx == cfg.expect_tx_bytes
    steps = [
        f"init (thread 0, before any use): mbarrier.init full[s], count 1; mbarrier.init empty[s], count "
        f"{cfg.empty_arrivals}; fence.mbarrier_init.release.cluster (or fence.proxy.async) then "
        f"{'barrier.cluster.arrive/wait' if cluster > 1 else '__syncthreads'} so TMA and peers see initialised barriers",
        "producer_acquire: the load issuer (thread 0) waits empty[s] with parity ((i / S) & 1) ^ 1 (round 0 passes at once)",
        f"producer_commit: mbarrier.arrive.expect_tx full[s], {tx} bytes (A {a_box} + B {b_box * cluster}); "
        f"cp.async.bulk.tensor.2d A box -> A stage s; B box{' slice r, .multicast::cluster mask ' + hex(mask) + ' -> B stage s + r*' + str(b_box) + ' in every CTA' if cluster > 1 else ' -> B stage s'}, "
        "both .mbarrier::complete_tx::bytes on full[s]",
        "consumer_wait: every consumer thread waits full[s] with parity (i / S) & 1",
        ("consumer_release: after the MMA that read stage s is complete, thread 0 of each consumer warpgroup "
         f"(thread{'s' if consumers > 1 else ''} {', '.join(map(str, release_threads))}) "
         + ("arrives on empty[s] of every CTA of the cluster (mapa + mbarrier.arrive.shared::cluster)" if cluster > 1
            else "arrives on empty[s]")) if ar.mma == "wgmma" else
        ("consumer_release: the MMA-issuing thread's tcgen05.commit"
         + (".multicast::cluster arrives on empty[s] of every CTA" if cluster > 1 else " arrives on empty[s]")
         + " when the MMAs that read stage s complete"),
    ]
    if cluster > 1:
        steps.append(f"expect_tx stays {tx}: each CTA receives its own A box and all {cluster} B slices by multicast; "
                     f"empty count {cfg.empty_arrivals}: a stage is refilled by multicast only when every CTA's consumers released it")
    steps.append("out-of-bounds box elements (M, N, K tails) are zero-filled and still counted in the transaction bytes")
    load = LoadProtocol(
        full_arrival_count=1, expect_tx_bytes=tx, a_box_bytes=a_box, b_box_bytes=b_box, b_boxes_per_stage=cluster,
        multicast_mask=mask, empty_arrival_count=cfg.empty_arrivals,
        empty_arrivers=(f"thread 0 of each consumer warpgroup ({consumers}: thread{'s' if consumers > 1 else ''} "
                        f"{', '.join(map(str, release_threads))}) x CTAs per cluster ({cluster})"
                        if ar.mma == "wgmma" else
                        f"the MMA-issuing thread's tcgen05.commit{'.multicast::cluster' if cluster > 1 else ''} x CTAs per cluster ({cluster})"),
        steps=tuple(steps),
    )
    if smem.c_ring:
        R, rows = smem.c_ring, bm // consumers
        issuers = ", ".join(str(t) for t in release_threads)
        store_steps = (
            f"each consumer warpgroup w has its own ring of {R} one-panel buffers ({rows} rows x 128 B) and its own store "
            f"issuer, its thread 0 (threads {issuers}); it stores its {rows} x {bn} fragment as {smem.c_panels} panels, "
            f"panel counter q running across tiles, buffer q % {R}",
            f"per panel: the issuer waits cp.async.bulk.wait_group.read {R - 1} (the store that last read this buffer has "
            f"finished reading it), then named barrier 2 + w over the warpgroup's 128 threads",
            "the warpgroup writes the panel's 64 columns, converted to the input dtype, into the buffer (128B swizzle); "
            "fence.proxy.async.shared::cta; named barrier 2 + w again",
            f"the issuer: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (c map, box {tuple(maps['c'].box_dim)}) at "
            f"(n0 + 64p, m0 + {rows}w), then cp.async.bulk.commit_group: one bulk group per panel; out-of-bounds "
            "rows/columns are clipped",
            f"schedule: panels 0..{min(R, smem.c_panels) - 1} at the end of the tile (their buffers were last read a tile "
            f"ago); panels {min(R, smem.c_panels)}..{smem.c_panels - 1} stay in registers, packed to the output dtype, and go "
            "out one per K iteration of the next tile, each right after that iteration's wgmma is issued (after the "
            "CTA's last tile, at once), so the tensor cores are not idle while they drain",
            "no consumer waits for another's store, and the producer keeps loading the next tile's stages meanwhile; "
            "each issuer waits cp.async.bulk.wait_group.read 0 before the CTA exits",
        )
    else:
        store_steps = (
            (("consumers, after wgmma.wait_group 0 and a __syncthreads (the staging overlays the operand stages: every "
              "warp must have finished reading them; the ring has drained, no load is in flight) "
              if smem.c_aliases_stages else
              f"consumers (persistent: after the store issuer's (thread {store_thread}) cp.async.bulk.wait_group.read 0 "
              "for the previous tile and a barrier) ")
             + "write the accumulators, converted to the input dtype, into C staging (128B-swizzled panels)"),
            ("fence.proxy.async.shared::cta by every writing thread, then "
             + (f"named barrier 1 over the {128 * consumers} consumer threads (the producer warpgroup does not take part; "
                f"the store issuer, thread {store_thread}, is one of them)" if pw else
                "__syncthreads (every thread is a consumer; thread 0, the store issuer, among them)")),
            f"store issuer (thread {store_thread}): {smem.c_panels} x cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (c map, box {tuple(maps['c'].box_dim)}), "
            "coordinates (n0 + 64p, m0); out-of-bounds rows/columns are clipped",
            f"store issuer (thread {store_thread}): cp.async.bulk.commit_group",
            f"store issuer (thread {store_thread}): cp.async.bulk.wait_group.read 0 before C staging is written again (next tile) or the CTA exits",
        )
    store = StoreProtocol(
        panels=smem.c_panels, panel_box=tuple(maps["c"].box_dim), panel_bytes=smem.c_panel_bytes,
        steps=store_steps,
        never="never a byte count or an mbarrier on the store side: stores complete through bulk async-groups",
    )
    m_tiles, n_tiles, k_tiles = ceil_div(m, bm), ceil_div(n, bn), ceil_div(k, bk)
    tiles = m_tiles * n_tiles
    notes = []
    if persistent:
        units_m = ceil_div(m_tiles, cluster)
        units = units_m * n_tiles
        resident = max(1, ar.sm_count * smem.ctas_per_sm // cluster)  # clusters resident at once (estimate)
        ctas = min(units, resident) * cluster
        grid, cluster_dims = (ctas, 1, 1), (cluster, 1, 1)
        idle = 0
        unit_stride = ctas // cluster
        walk = ", ".join(f"({um * cluster}, {tn})" for um, tn in
                         (unit_coords(u, units_m, n_tiles) for u in range(0, units, unit_stride)[:4]))
        notes.append(
            f"persistent: 1-D grid of min({units} work units, {resident} resident clusters) x {cluster} CTA(s) = {ctas} CTAs, "
            f"cluster dims {cluster_dims}; a work unit is a stack of {cluster} M tile(s) x one N tile "
            f"({units_m} unit row(s) x {n_tiles} N tiles); a CTA takes unit = blockIdx.x / {cluster}, then steps by "
            f"gridDim.x / {cluster} = {unit_stride}; CTA rank r computes M tile unit_m * {cluster} + r; "
            f"the K iteration counter (stage, parity) continues across tiles")
        notes.append(
            f"grouped order (tile_scheduler.cuh, {GROUP_M} unit rows per group): unit u -> group u / ({GROUP_M} x {n_tiles}), "
            f"unit_m walks down the group's rows first, then N: the clusters resident at once share rows of A and columns of B in L2")
        notes.append(f"CTA 0 computes tiles (M tile, N tile) {walk}{', ...' if units > 4 * unit_stride else ''}")
        notes.append(f"resident clusters: {ar.sm_count} SMs x {smem.ctas_per_sm} CTA(s)/SM / {cluster}, a hypothesis; the launch "
                     "asks the occupancy API (cuOccupancyMaxActiveClusters), which also knows a cluster must fit one GPC")
        waves = units / unit_stride
        if stream_k:
            tail = plan_tail(units, unit_stride, ceil_div(k, bk), stream_k_min_idle)
            tail_json = tail.to_json()
            if tail.tail_units:
                notes.append(
                    f"stream-K tail (stream_k.cuh): units [0, {tail.first_unit}) whole, {unit_stride} apart; the last "
                    f"{tail.tail_units} units' {tail.total} K iterations split evenly, cluster c taking "
                    f"[floor(c x {tail.total} / {unit_stride}), floor((c + 1) x {tail.total} / {unit_stride})) "
                    f"(~{tail.total / unit_stride:.1f} each); a tile shared by up to {tail.max_contributors} clusters is "
                    f"finished by the last to arrive (fp32 partials in a per-stream workspace of "
                    f"{tail.workspace_floats(cluster, consumers, bn) * 4 / 2**20:.1f} MiB, summed in K order; int32 arrival "
                    "counters zeroed on the stream before each launch)")
            else:
                notes.append(f"stream-K tail: not split ({units} units on {unit_stride} clusters: no partial wave, or "
                             f"it would leave at most {stream_k_min_idle:.0%} of the clusters idle, or fewer tail K "
                             "iterations than clusters); every unit is computed whole")
        if m_tiles % cluster:
            notes.append(f"{m_tiles} M tiles is not a multiple of the cluster ({cluster}): in the last unit row, ranks "
                         f">= {m_tiles % cluster} compute a tile wholly below M: they still load (zero fill), multicast their B "
                         "slice and release stages; their store writes nothing (the box is clipped)")
    else:
        grid, cluster_dims = (n_tiles, m_tiles, 1), (1, 1, 1)  # x over N tiles, y over M tiles; no cluster
        ctas = tiles
        idle = 0
        waves = ctas / (ar.sm_count * smem.ctas_per_sm)
        notes.append(f"one CTA per output tile: grid (N tiles, M tiles, 1) = {grid}, no cluster; "
                     "CTA (x, y) computes rows y*BM.., columns x*BN..")
    schedule = Schedule(
        m_tiles=m_tiles, n_tiles=n_tiles, k_tiles=k_tiles, tiles=tiles, m_tail=m - (m_tiles - 1) * bm,
        n_tail=n - (n_tiles - 1) * bn, k_tail=k - (k_tiles - 1) * bk, grid=grid, cluster_dims=cluster_dims,
        ctas=ctas, idle_ctas=idle, persistent=persistent, sm_count=ar.sm_count, waves=round(waves, 3),
        notes=tuple(notes), stream_k=tail_json if persistent and stream_k else None,
    )
    # the ledger covers this tile's K iterations (two tiles' worth when persistent), at most three rounds
    ledger_len = min(k_tiles * (2 if persistent else 1), max(3 * S, 8))
    mode = release_mode(S)
    ring = Ring(
        pipe_depth=S, full_barriers=S, full_init_count=1, empty_barriers=S, empty_init_count=cfg.empty_arrivals,
        initial_phase=0, first_full_wait_parity=0, first_empty_wait_parity=1, release_mode=mode,
        lookahead=S - 1,
        smem_total_bytes=smem.total_bytes, ctas_per_sm=smem.ctas_per_sm, ledger=phase_ledger(ledger_len, S),
    )
    timeline = build_timeline(k_tiles=k_tiles, stages=S, expect_tx=tx, c_panels=smem.c_panels,
                              k_steps=bk // 16, cluster=cluster, persistent=persistent, mma=ar.mma)
    assumptions = (
        "from the user: shape, dtype, tile, stages, cluster, consumers, arch",
        "contract: a (M, K) and b (N, K) row-major, c = a @ b.T row-major, fp32 accumulation",
        "hypothesis: base pointers 16-byte aligned (checked again by encode_kwargs(base_ptr)); torch allocations are 256-byte aligned",
        f"hypothesis: {ar.sm_count} SMs ({ar.sm_count_source}) for grid and wave counts",
        "the timeline picture is an idealised model (equal load and MMA durations), not a measurement",
    )
    risks = [
        "stage count: the best PIPE_DEPTH must be measured on real shapes; this plan only proves it fits",
        f"shared memory: {smem.total_bytes} bytes leave {smem.ctas_per_sm} CTA(s) per SM (limited by {smem.ctas_per_sm_limit})",
        "fallback when TMA is refused (strides, alignment): the vectorized thread copy of level 3, or pad K / N to a multiple of 8",
    ]
    if cluster > 1:
        risks.append("cluster: a CTA must not exit while a peer may multicast into it or arrive on its barriers (end with a cluster barrier)")
    if not suit.worthwhile:
        risks.append(f"not worth it at this size: {suit.alternative}")
    validation = (
        "correctness: asymmetric shapes with tails in M, N and K (e.g. 1000 x 1032 x 520), K tiles = 1, < S, not a multiple of S",
        "protocol: gemm-ladder audit on this ring (each handoff one producer, one consumer; phases from the ledger)",
        f"falsifiable: with S = {S} the MMA lane should stay busy once the ring is full; compare the measured time of S = 1 "
        f"vs S = {S} on a large K (if equal, the loads are not overlapping the MMA)",
    )
    return Plan(
        m=m, n=n, k=k, dtype=dtype, tile=cfg.tile, stages=S, cluster=cluster, arch=arch, persistent=persistent,
        suitability=suit, tensor_maps=maps, smem=smem, wgmma_descriptors=cfg.descriptors, tmem=cfg.tmem,
        issuer=issuer, consumers=consumers_info, load_protocol=load, store_protocol=store, ring=ring,
        timeline=timeline, schedule=schedule, assumptions=assumptions, risks=tuple(risks), validation=validation,
        _config=cfg,
    )
