"""Shared-memory layout, the MMA shared-memory descriptors, and tensor memory (sm_100a).

Sources:

* PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" -> "Shared Memory Matrix
  Layout" (swizzling modes: the 128B swizzle atom is 8 rows x 128 bytes = 1024 bytes, and the pattern
  repeats every 1024 bytes from a 1024-byte-aligned address) and "Matrix Descriptor Format" (wgmma):
  bits 0-13 start address >> 4, bits 16-29 leading-dimension byte offset >> 4, bits 32-45
  stride-dimension byte offset >> 4, bits 49-51 base offset, bits 62-63 layout type
  (0 interleave/none, 1 128B swizzle, 2 64B swizzle, 3 32B swizzle).
* PTX ISA, "Tensor Core 5th Generation" -> "Shared Memory Descriptor" (tcgen05): same address fields,
  bits 46-48 the fixed value 0b001, bits 61-63 swizzle (0 none, 1 128B with 32B atom, 2 128B,
  4 64B, 6 32B).
* PTX ISA, "Tensor Memory": 128 lanes x 512 columns of 32 bits per CTA, allocated in powers of two
  columns (>= 32) by ``tcgen05.alloc``.
* CUDA C Programming Guide, compute capability table: 227 KB (232448 bytes) of dynamic shared memory
  per block, 228 KB per SM, 1 KB reserved per block.

Layout (offsets from a 1024-byte-aligned base; the kernel rounds its dynamic shared memory pointer up to
1024 itself, which is what the 1024 bytes of slack in the total pay for)::

    [A stage 0 .. S-1][B stage 0 .. S-1][C staging: BN*e/128 panels of BM x 128 B][full bar x S][empty bar x S]

or, with ``c_ring`` = R (level 9), C staging as a ring of R one-panel buffers per consumer warpgroup
(each the warpgroup's BM / consumers rows x 128 B), stored panel by panel::

    [A stage 0 .. S-1][B stage 0 .. S-1][C buffer 0.0 .. 0.R-1, 1.0 .. 1.R-1, ...][full bar x S][empty bar x S]

or, with ``c_aliases_stages`` (level 5), C staging laid over the stages from offset 0::

    [A stage 0 .. S-1][B stage 0 .. S-1]   (C staging overlays these once the ring has drained)
    [full bar x S][empty bar x S]          (after max(stages, C staging))

or, with ``c_from_registers`` (library/small_m.py), no C staging: the consumers store from registers::

    [A stage 0 .. S-1][B stage 0 .. S-1][full bar x S][empty bar x S]
"""

from __future__ import annotations

from dataclasses import dataclass

from gemm_ladder.design.problem import ArchInfo, PlanRefused, align_up

SWIZZLE_ATOM_BYTES = 1024  # 8 rows x 128 bytes
BARRIER_BYTES = 8  # one mbarrier object: a 64-bit word, 8-byte aligned
ALIGN_SLACK = 1024


@dataclass(frozen=True)
class SmemLayout:
    """Byte offsets and sizes of every shared-memory region of the kernel (one CTA)."""

    stages: int
    a_offset: int
    a_stage_bytes: int
    b_offset: int
    b_stage_bytes: int
    b_slice_bytes: int  # what one CTA of the cluster writes into each CTA's B stage (multicast)
    c_offset: int
    c_bytes: int
    c_panel_bytes: int
    c_panels: int
    full_bar_offset: int
    empty_bar_offset: int
    barriers_end: int
    total_bytes: int  # dynamic shared memory to request: barriers_end + 1024 bytes of alignment slack
    max_per_block: int
    ctas_per_sm: int
    ctas_per_sm_limit: str  # which resource limits ctas_per_sm
    c_aliases_stages: bool = False  # C staging overlays the operand stages (one tile per CTA, ring drained)
    c_ring: int = 0  # 0: one whole-tile staging; R: R one-panel buffers per consumer warpgroup
    c_ring_owners: int = 1  # consumer warpgroups, each with its own ring (when c_ring)
    c_from_registers: bool = False  # no C staging: the consumers store the output from their registers
    order_bar_offset: int | None = None  # ping-pong: one order[i] mbarrier per consumer warpgroup after empty[]

    @property
    def c_staging(self) -> str:
        """Where the output staging lives, and why that is legal."""
        if self.c_from_registers:
            return ("no C staging: the consumers store the output straight from their accumulator registers "
                    "(st.global), so every byte after the stages and barriers is left to the operand stages")
        if self.c_aliases_stages:
            return (f"C staging ({self.c_bytes} bytes) overlays the operand stages from offset {self.c_offset} "
                    f"instead of following them (saves {self.c_bytes} bytes per CTA: more CTAs per SM). Legal only "
                    "because the ring has drained before the epilogue writes it: one tile per CTA (not persistent), "
                    "every load consumed and none in flight, every warpgroup past its last MMA (wgmma.wait_group 0) "
                    "and a CTA barrier before the first write")
        if self.c_ring:
            return (f"C staging ({self.c_bytes} bytes) is a ring of {self.c_ring} one-panel buffers ({self.c_panel_bytes} bytes: "
                    f"a consumer warpgroup's rows x 128 B) per consumer warpgroup ({self.c_ring_owners}), after the operand "
                    f"stages at offset {self.c_offset}: each warpgroup stores its fragment panel by panel, waiting "
                    f"(wait_group.read {self.c_ring - 1}) only for the store that last read the buffer it refills; "
                    f"{self.c_panels * self.c_panel_bytes * self.c_ring_owners - self.c_bytes} bytes fewer than a whole-tile "
                    "staging, which buys operand stages")
        return (f"C staging ({self.c_bytes} bytes) follows the operand stages at offset {self.c_offset}: "
                "it may be written while loads (e.g. the next tile's, when persistent) still land in the stages")

    def a_stage(self, s: int) -> int:
        return self.a_offset + s * self.a_stage_bytes

    def b_stage(self, s: int) -> int:
        return self.b_offset + s * self.b_stage_bytes

    def full_bar(self, s: int) -> int:
        return self.full_bar_offset + s * BARRIER_BYTES

    def empty_bar(self, s: int) -> int:
        return self.empty_bar_offset + s * BARRIER_BYTES

    def regions(self) -> list[tuple[str, int, int]]:
        """(name, offset, bytes) of every region, in address order."""
        rows = [(f"A stage {s}", self.a_stage(s), self.a_stage_bytes) for s in range(self.stages)]
        rows += [(f"B stage {s}", self.b_stage(s), self.b_stage_bytes) for s in range(self.stages)]
        tag = " (overlays the stages)" if self.c_aliases_stages else ""
        if self.c_ring:
            rows += [(f"C buffer {w}.{r} (consumer {w})", self.c_offset + (w * self.c_ring + r) * self.c_panel_bytes,
                      self.c_panel_bytes) for w in range(self.c_ring_owners) for r in range(self.c_ring)]
        else:
            rows += [(f"C panel {p}{tag}", self.c_offset + p * self.c_panel_bytes, self.c_panel_bytes)
                     for p in range(self.c_panels)]
        rows += [(f"full[{s}]", self.full_bar(s), BARRIER_BYTES) for s in range(self.stages)]
        rows += [(f"empty[{s}]", self.empty_bar(s), BARRIER_BYTES) for s in range(self.stages)]
        if self.order_bar_offset is not None:  # one per consumer, up to the barriers' end
            rows += [(f"order[{w}]", self.order_bar_offset + w * BARRIER_BYTES, BARRIER_BYTES)
                     for w in range((self.barriers_end - self.order_bar_offset) // BARRIER_BYTES)]
        return rows

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        if out["order_bar_offset"] is None:  # a cooperative kernel has none (its plans' JSON unchanged)
            del out["order_bar_offset"]
        out["c_staging"] = self.c_staging
        out["regions"] = [{"name": n, "offset": o, "bytes": b} for n, o, b in self.regions()]
        return out


def c_store_rows(*, bm: int, consumers: int = 1, c_ring: int = 0, pingpong: bool = False) -> int:
    """Rows one output store covers: the tile's BM, or with ``c_ring`` one consumer warpgroup's BM / consumers
    (``pingpong``: a consumer holds the whole tile, BM)."""
    if pingpong:
        return bm
    return bm // consumers if c_ring else bm


def _order_bar_bytes(consumers: int, pingpong: bool) -> int:
    """A ping-pong plan's order mbarriers, one per consumer warpgroup (none otherwise)."""
    return consumers * BARRIER_BYTES if pingpong else 0


def c_staging_bytes(*, bm: int, bn: int, elem_bytes: int, consumers: int = 1, c_ring: int = 0,
                    c_from_registers: bool = False, pingpong: bool = False) -> tuple[int, int, int]:
    """(panel bytes, panels per tile row, total staging bytes) of the output staging.

    A panel is 128 bytes of columns (64 bf16/fp16) by the rows one store covers (:func:`c_store_rows`);
    with ``c_ring`` each consumer warpgroup has ``c_ring`` such buffers, else one per panel of the tile;
    with ``c_from_registers`` there is none (0, 0, 0).
    """
    if c_from_registers:
        return 0, 0, 0
    panels = bn * elem_bytes // 128
    panel = c_store_rows(bm=bm, consumers=consumers, c_ring=c_ring, pingpong=pingpong) * 128
    return panel, panels, panel * (consumers * c_ring if c_ring else panels)


def plan_smem(*, bm: int, bn: int, bk: int, elem_bytes: int, stages: int, cluster: int, threads: int,
              arch: ArchInfo, c_aliases_stages: bool = False, consumers: int = 1, c_ring: int = 0,
              c_from_registers: bool = False, pingpong: bool = False) -> SmemLayout:
    """Compute the layout; raise :class:`PlanRefused` when it exceeds the arch's per-block limit.

    ``c_aliases_stages``: the output staging overlays the operand stages instead of following them.
    Legal only for a kernel whose epilogue starts after the ring has drained (every load consumed,
    none in flight, every warpgroup past its last wgmma), i.e. one tile per CTA; it buys occupancy
    (more CTAs per SM) at no cost to the pipeline.

    ``c_ring``: R > 0 gives each of the ``consumers`` warpgroups a ring of R one-panel staging buffers
    (stored panel by panel) instead of one whole-tile staging: at BM x BN = 128 x 256 bf16 with two
    consumers and R = 2, 32 KiB instead of 64 KiB, the room for a fourth 48 KiB stage.

    ``c_from_registers``: no output staging at all (the consumers store from registers).

    ``pingpong``: the consumers take tiles in turn, each storing whole BM-row panels through its own ring,
    and one ``order`` mbarrier per consumer follows the empty barriers (audit/ring.py RingConfig.pingpong).
    """
    if (bool(c_ring) + c_aliases_stages + c_from_registers) > 1:
        raise PlanRefused("output staging", "c_ring, c_aliases_stages and c_from_registers are different output "
                          "layouts: pick one (on the command line: --c-ring or --c-aliases-stages)")
    a_stage = bm * bk * elem_bytes
    b_stage = bn * bk * elem_bytes
    a_off = 0
    b_off = align_up(a_off + stages * align_up(a_stage, SWIZZLE_ATOM_BYTES), SWIZZLE_ATOM_BYTES)
    a_stage_stride = align_up(a_stage, SWIZZLE_ATOM_BYTES)
    b_stage_stride = align_up(b_stage, SWIZZLE_ATOM_BYTES)
    stages_end = align_up(b_off + stages * b_stage_stride, SWIZZLE_ATOM_BYTES)
    c_panel, c_panels, c_bytes = c_staging_bytes(bm=bm, bn=bn, elem_bytes=elem_bytes, consumers=consumers, c_ring=c_ring,
                                                 c_from_registers=c_from_registers, pingpong=pingpong)
    c_off = a_off if c_aliases_stages else stages_end
    full_off = max(stages_end, c_off + c_bytes)  # C ends 1024-aligned (c_panel is a multiple of 1024 when BM % 8 == 0)
    empty_off = full_off + stages * BARRIER_BYTES
    order_off = empty_off + stages * BARRIER_BYTES if pingpong else None
    end = empty_off + stages * BARRIER_BYTES + _order_bar_bytes(consumers, pingpong)
    total = end + ALIGN_SLACK
    if total > arch.max_smem_per_block:
        raise PlanRefused(
            "shared memory per block",
            f"{stages} stages x (A {a_stage} + B {b_stage}) + C staging {c_bytes} + barriers "
            f"{end - empty_off + stages * BARRIER_BYTES} + alignment slack {ALIGN_SLACK} = {total} bytes > "
            f"{arch.max_smem_per_block} bytes allowed per block on {arch.name}; "
            f"at most {max_stages(bm=bm, bn=bn, bk=bk, elem_bytes=elem_bytes, arch=arch, c_aliases_stages=c_aliases_stages, consumers=consumers, c_ring=c_ring, c_from_registers=c_from_registers, pingpong=pingpong)}"
            " stages fit this tile",
        )
    per_cta = total + arch.smem_reserved_per_block
    by_smem = arch.smem_per_sm // per_cta
    by_threads = arch.max_threads_per_sm // threads
    ctas = min(by_smem, by_threads, arch.max_blocks_per_sm)
    limit = ("shared memory" if ctas == by_smem else "threads" if ctas == by_threads else "blocks per SM")
    if cluster > 1:
        limit += f" (a cluster of {cluster} spreads over {cluster} SMs)"
    return SmemLayout(
        stages=stages, a_offset=a_off, a_stage_bytes=a_stage_stride, b_offset=b_off, b_stage_bytes=b_stage_stride,
        b_slice_bytes=b_stage // cluster, c_offset=c_off, c_bytes=c_bytes, c_panel_bytes=c_panel, c_panels=c_panels,
        full_bar_offset=full_off, empty_bar_offset=empty_off, barriers_end=end, total_bytes=total,
        max_per_block=arch.max_smem_per_block, ctas_per_sm=ctas, ctas_per_sm_limit=limit,
        c_aliases_stages=c_aliases_stages, c_ring=c_ring, c_ring_owners=consumers if c_ring else 1,
        c_from_registers=c_from_registers, order_bar_offset=order_off,
    )


def max_stages(*, bm: int, bn: int, bk: int, elem_bytes: int, arch: ArchInfo, c_aliases_stages: bool = False,
               consumers: int = 1, c_ring: int = 0, c_from_registers: bool = False, pingpong: bool = False) -> int:
    """The largest stage count whose layout fits the per-block limit (0 if none)."""
    c_bytes = c_staging_bytes(bm=bm, bn=bn, elem_bytes=elem_bytes, consumers=consumers, c_ring=c_ring,
                              c_from_registers=c_from_registers, pingpong=pingpong)[2]
    fixed = (0 if c_aliases_stages else c_bytes) + ALIGN_SLACK + _order_bar_bytes(consumers, pingpong)
    per_stage = align_up(bm * bk * elem_bytes, SWIZZLE_ATOM_BYTES) + align_up(bn * bk * elem_bytes, SWIZZLE_ATOM_BYTES) + 2 * BARRIER_BYTES
    return max(0, (arch.max_smem_per_block - fixed) // per_stage)


# --- MMA shared-memory descriptors ---------------------------------------------------------------------

#: wgmma layout type (bits 62-63) and tcgen05 swizzle code (bits 61-63), by swizzle span in bytes.
WGMMA_LAYOUT_TYPE = {128: 1, 64: 2, 32: 3, 0: 0}
TCGEN05_SWIZZLE_CODE = {128: 2, 64: 4, 32: 6, 0: 0}


@dataclass(frozen=True)
class MmaDescriptor:
    """The 64-bit shared-memory matrix descriptor of one operand (without its start address).

    ``template`` is the descriptor with start address 0; the kernel ORs in ``(addr & 0x3FFFF) >> 4``
    for each stage, and adds ``k_step_encoded`` to the start-address field per k16 step inside the
    128-byte swizzled row.
    """

    operand: str
    instruction: str
    major: str  # "K" (the ladder's a and b) or "MN" (the library's column-major a, row-major b of torch.mm)
    swizzle_bytes: int
    layout_type: int
    layout_type_bits: str
    leading_byte_offset: int
    leading_byte_offset_encoded: int
    stride_byte_offset: int
    stride_byte_offset_encoded: int
    base_offset: int
    k_step_bytes: int
    k_step_encoded: int
    k_steps_per_tile: int
    rows: int  # BM (A) or BN (B)
    template: int
    agrees_with_tma: bool
    statement: str

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["template_hex"] = f"{self.template:#018x}"
        return out


def mma_descriptor(operand: str, *, rows: int, bk: int, elem_bytes: int, swizzle_bytes: int, arch: ArchInfo,
                   inst_k: int = 16, major: str = "K") -> MmaDescriptor:
    """Descriptor fields for a K-major operand whose rows are ``bk * elem_bytes`` bytes wide, or
    (``major="MN"``) an MN-major one stored as TMA boxes of one swizzle span of M/N by ``bk`` K rows.

    Refuses (:class:`PlanRefused`) when the swizzle span disagrees with the row width: a K-major
    swizzled layout needs exactly one swizzle span of K per row (BK * e == span), else the MMA reads the
    rows from the wrong places. MN-major (PTX ISA, "Shared Memory Matrix Layout", canonical layouts:
    ((span/16, n), (8, k)) : ((1, LBO), (span/16, SBO)) in 16-byte units) has the span along M/N instead:
    LBO = the step between span-wide groups of M/N (one box: BK rows x span bytes), SBO = 8 K rows
    (8 x span bytes), and a k16 step moves the start by 16 rows (16 x span bytes). sm_90a's wgmma only.
    """
    if major == "MN":
        return _mn_major_descriptor(operand, rows=rows, bk=bk, elem_bytes=elem_bytes, swizzle_bytes=swizzle_bytes,
                                    arch=arch, inst_k=inst_k)
    if major != "K":
        raise PlanRefused("operand major", f"operand {operand}: major {major!r} is 'K' or 'MN'")
    row_bytes = bk * elem_bytes
    if row_bytes != swizzle_bytes:
        match = {32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}.get(row_bytes)
        offer = (f"use the matching swizzle {match} (MMA layout type for {row_bytes}B swizzle), or BK = {swizzle_bytes // elem_bytes}"
                 if match else f"use BK = {swizzle_bytes // elem_bytes} so one row is one {swizzle_bytes}-byte swizzle span")
        raise PlanRefused(
            "swizzle vs MMA layout",
            f"operand {operand}: BK = {bk} gives an inner box of {row_bytes} bytes != the {swizzle_bytes}-byte "
            f"swizzle span of the K-major {swizzle_bytes}B-swizzled {arch.mma} layout; {offer}",
        )
    if bk % inst_k:
        raise PlanRefused("MMA K step", f"BK = {bk} is not a multiple of the instruction K = {inst_k}")
    lbo, sbo = 16, 8 * swizzle_bytes  # LBO unused for swizzled K-major (state 16, encoded 1); SBO = 8 rows
    k_step = inst_k * elem_bytes
    if arch.mma == "wgmma":
        layout = WGMMA_LAYOUT_TYPE[swizzle_bytes]
        template = (layout << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16)
        bits = "62-63"
        instruction = "wgmma.mma_async"
    else:
        layout = TCGEN05_SWIZZLE_CODE[swizzle_bytes]
        template = (layout << 61) | (0b001 << 46) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16)
        bits = "61-63 (and 0b001 in bits 46-48)"
        instruction = "tcgen05.mma"
    statement = (
        f"TMA writes each {operand} row (K-major, {row_bytes} bytes = one swizzle span) with "
        f"CU_TENSOR_MAP_SWIZZLE_{swizzle_bytes}B into 1024-byte-aligned stages; the {instruction} descriptor "
        f"reads the same {swizzle_bytes}B swizzle (layout type {layout}), 8-row groups {sbo} bytes apart, "
        f"advancing the start address by {k_step} bytes per k{inst_k} step: the layouts agree."
    )
    return MmaDescriptor(
        operand=operand, instruction=instruction, major="K", swizzle_bytes=swizzle_bytes, layout_type=layout,
        layout_type_bits=bits, leading_byte_offset=lbo, leading_byte_offset_encoded=lbo >> 4,
        stride_byte_offset=sbo, stride_byte_offset_encoded=sbo >> 4, base_offset=0, k_step_bytes=k_step,
        k_step_encoded=k_step >> 4, k_steps_per_tile=bk // inst_k, rows=rows, template=template,
        agrees_with_tma=True, statement=statement,
    )


def _mn_major_descriptor(operand: str, *, rows: int, bk: int, elem_bytes: int, swizzle_bytes: int, arch: ArchInfo,
                        inst_k: int) -> MmaDescriptor:
    span_elems = swizzle_bytes // elem_bytes
    if arch.mma != "wgmma" or swizzle_bytes != 128:
        raise PlanRefused("MN-major operand", f"operand {operand}: the MN-major layout is planned for wgmma with the "
                          f"128B swizzle only (arch {arch.name}, swizzle {swizzle_bytes} B)")
    if rows % span_elems:
        raise PlanRefused("MN-major operand", f"operand {operand}: {rows} rows per CTA tile is not a whole number of "
                          f"{span_elems}-element ({swizzle_bytes}-byte) TMA boxes")
    if bk % inst_k:
        raise PlanRefused("MMA K step", f"BK = {bk} is not a multiple of the instruction K = {inst_k}")
    lbo, sbo = bk * swizzle_bytes, 8 * swizzle_bytes
    k_step = inst_k * swizzle_bytes
    layout = WGMMA_LAYOUT_TYPE[swizzle_bytes]
    template = (layout << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16)
    statement = (
        f"TMA writes {operand} (MN-major) as {rows // span_elems} box(es) of {span_elems} elements x {bk} K rows, "
        f"{swizzle_bytes} bytes per K row, CU_TENSOR_MAP_SWIZZLE_{swizzle_bytes}B, 1024-byte aligned, {lbo} bytes "
        f"apart; the wgmma descriptor (transpose immediate 1) reads the same {swizzle_bytes}B swizzle (layout type "
        f"{layout}), groups of {span_elems} M/N elements {lbo} bytes apart (LBO), 8-row K groups {sbo} bytes apart "
        f"(SBO), advancing the start address by {k_step} bytes per k{inst_k} step: the layouts agree."
    )
    return MmaDescriptor(
        operand=operand, instruction="wgmma.mma_async", major="MN", swizzle_bytes=swizzle_bytes, layout_type=layout,
        layout_type_bits="62-63", leading_byte_offset=lbo, leading_byte_offset_encoded=lbo >> 4,
        stride_byte_offset=sbo, stride_byte_offset_encoded=sbo >> 4, base_offset=0, k_step_bytes=k_step,
        k_step_encoded=k_step >> 4, k_steps_per_tile=bk // inst_k, rows=rows, template=template,
        agrees_with_tma=True, statement=statement,
    )


@dataclass(frozen=True)
class TmemPlan:
    """Tensor memory of the fp32 accumulator on sm_100a (one CTA)."""

    lanes: int
    columns_used: int
    columns_allocated: int  # tcgen05.alloc: power of two, >= 32
    columns_available: int

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def plan_tmem(*, bm: int, bn: int, arch: ArchInfo) -> TmemPlan | None:
    """None without tensor memory; else the accumulator's columns. Refuses above 512 columns.

    An fp32 accumulator of BM x BN with BM <= 128 takes BM lanes and BN columns; each further 128 rows
    take BN more columns.
    """
    if not arch.tmem_columns:
        return None
    used = -(-bm // 128) * bn
    if used > arch.tmem_columns:
        raise PlanRefused(
            "tensor memory columns",
            f"fp32 accumulator {bm} x {bn} needs {used} columns of {arch.tmem_lanes} lanes > {arch.tmem_columns} columns per CTA",
        )
    alloc = 32
    while alloc < used:
        alloc *= 2
    return TmemPlan(lanes=min(bm, arch.tmem_lanes), columns_used=used, columns_allocated=alloc,
                    columns_available=arch.tmem_columns)
