"""The layouts library kernel: ``D (M, N) = A (M, K) @ B (N, K)^T`` with A and B each K-major or
MN-major and any leading dimension a TMA tensor map can describe, at level 9's speed.

Kernel: ``kernels/library/sm90_gemm.cu``, level 9's kernel (persistent, producer warpgroup, 2-CTA
cluster multicasting B, two consumer warpgroups of 64 rows on a 128 x BN tile, per-consumer panel
rings overlapped with the next tile, stream-K) compiled from the designer's plan for one
configuration (A's major, B's major, BN). An MN-major operand's tensor map has M (or N) as its inner
dimension; the kernel loads it as boxes of 64 elements x BK rows and reads it with wgmma's transpose
immediate and the MN-major shared-memory descriptor (``ptx/wgmma.cuh`` gives the derivation).

For ``torch.mm(a, b)`` the operands are ``A = operand_view(a, k_dim=1)`` and
``B = operand_view(b, k_dim=0)`` (:mod:`gemm_ladder.library.operand`): a row-major ``a`` is K-major,
a column-major one MN-major; a row-major ``b`` is MN-major, a column-major one (``w.T`` of a
row-major weight) K-major. The output D is row-major (M, N) with any pitch TMA allows; a
column-major output is D^T = B A^T, which the caller gets by swapping the views.

Refused (:meth:`LibraryGemm.supports` names the rule; the API helper repacks such operands): pitches
that are not a multiple of 16 bytes, bases not 16-byte aligned, dtypes other than bf16/fp16, an
output dtype other than the inputs'.

The build with ``c_from_registers`` (``library_gemm(..., c_from_registers=True)``; the kernel's
GL_C_FROM_REGISTERS) writes C straight from the consumers' registers with masked stores
(kernels/include/gemm_ladder/register_store.cuh) instead of TMA stores: any row pitch >= N and any
element-aligned base, and (``out_fp32``) a float32 output. Its plan stages no C in shared memory, so
its ring is as deep as shared memory allows without the panel rings (design.smem.max_stages). The
dispatcher takes it for outputs the TMA build cannot write (dispatch/route.py).

Its ``out_e4m3`` build (BN 128 or 256) writes the output quantized: e4m3 values and one fp32 scale per
row and 128 columns, computed in the epilogue from the fp32 result (after the fused epilogue, if any), as
``quantize_fp8(result, (1, 128))`` computes them (kernels/include/gemm_ladder/quantized_store.cuh). The
launch takes the scales' buffer beside c (``bind``'s ``scales``).

``launch`` raises :class:`~gemm_ladder.contract.GemmInputError` with the same rule before anything is
launched.

The stream-K split is the caller's (``split``, :func:`split_schedule`): ``"tail"`` (level 9's rule:
the last partial wave split by K when it would leave more than 40% of the clusters idle), ``"all"``
(every unit split by K over every resident cluster: for problems with fewer tiles than SMs), or
``"none"``. A split tile is reduced by its last contributor to arrive, adding the partials in K order.

Two other builds were measured without gain and removed (docs/library.md: what was measured, and the
commit that last had them): a staged copy of C through per-warp shared memory for the outputs the
register store writes, and a stream-K fixup distributed over a split tile's contributors.
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from gemm_ladder.contract import DTYPES, GemmInputError, dtype_name
from gemm_ladder.design.plan import RELEASE_LAGS, plan_gemm
from gemm_ladder.design.problem import arch_info, ceil_div
from gemm_ladder.design.smem import max_stages
from gemm_ladder.design.stream_k import (
    DEFAULT_MIN_IDLE, INT32_LIMIT, SplitOverflowError, StreamKTail, plan_tail, plan_wave,
)
from gemm_ladder.library import kernel as K
from gemm_ladder.library.bound import BoundLaunch
from gemm_ladder.library.epilogue import EpilogueCall, compile_with_epilogue
from gemm_ladder.library.kernel import DATA_PARALLEL, STORE_REGISTERS, STORE_TMA, STREAM_K, KernelConfig, Operands
from gemm_ladder.library.operand import TMA_ALIGN_BYTES, Major, OperandView, operand_view
from gemm_ladder.runtime.compiler import compile_kernel
from gemm_ladder.runtime.module import LaunchGeometry, device_index, load
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import split_workspace_refresher
from gemm_ladder.library.lru import cached
from gemm_ladder.library.quantized import QUANT_OUT, kernel_views, quantized_buffers

SOURCE = "library/sm90_gemm.cu"
#: The family's name in a KernelConfig, and its kernel's entry point.
FAMILY = "sm90_gemm"
KERNEL_NAME = "gemm_kernel"
#: The stream-K schedules (:func:`split_schedule`, what :meth:`LibraryGemm.launch` takes; the swiglu
#: kernel takes these too).
SPLITS = ("tail", "all", "none", "wave")
#: The policies the dispatcher ranks and the bench times (dispatch/kernels.py kernel_splits): the simpler first.
RANKED_SPLITS = ("none", "tail", "all", "wave")
#: Output tile widths built (BM is level 9's 128: two consumer warpgroups of 64 rows). 64 gives twice
#: the tiles of 128 (1024^3: 128 tiles for 132 SMs instead of 64) for mid-size problems.
TILE_N = (64, 128, 256)
#: Tile widths built beside TILE_N for a K-major B only (the designer refuses an MN-major B's 96-row
#: cluster slice at 192: not whole 64-element boxes; tile_n_built). The route ranks them
#: where the cost table times them: 128 x 192 tiles fill the SMs where 128 and 256 leave a wave part-empty
#: (8192 x 768: 128 units of 192 against 192 of 128 or 96 of 256 on 66 clusters).
K_MAJOR_B_TILE_N = (192,)
#: Tile widths built for a K-major B with the register store only (``c_from_registers``): not whole 64-column
#: TMA store panels. Shaped to fill 132 SMs where the others leave a wave part-empty (1023 x 768: 128 tiles of
#: 64 x 96; 1023 x 2304: 128 of 128 x 144), as cuBLAS's 96- and 144-wide tiles there (issue 23's profile), and 32
#: (64 x 32, cuBLAS's tile on decode-sized layers: 96 tiles at 64 x 3072). Not among the route's widths
#: (dispatch.kernels.general_bns) until a tune times them.
REGISTER_STORE_TILE_N = (32, 96, 144)
#: Tile heights built: level 9's 128 (two consumer warpgroups of 64 rows), and 64 (one consumer: twice
#: the tiles, where 128-row tiles leave SMs idle).
TILE_M = (128, 64)
#: A tile height built but not routed (an explicit build: ``library_gemm(..., bm=256)``): two consumer
#: warpgroups of 128 rows each (two 64-row fragments), cooperative, every unit whole. Fewer, larger tiles,
#: sharing each stage's B between 256 rows: cuBLAS's 256-row tiles on issue 23's mid-M layers (256 x 144 at
#: 1000 x 4608 x 3584, 256 x 128 at 12608 x 1024 x 4096). Not yet measured.
TALL_TILE_M = 256
#: Whether ``linear``'s bias is added by the tensor cores as one more K step of each tile (sm90_gemm.cu's bias
#: stage, bias_stage.cuh) in the builds that allow it (:meth:`LibraryGemm.epilogue_call`), rather than loaded
#: and added in the epilogue. On since its GPU run (bench/device/smoke_bias_mma.sh: the GPU tests, compute-sanitizer,
#: bench/experiments/bias_mma.py; the figures in docs/epilogues.md); a module setting so that the experiment
#: and the tests can bind both.
BIAS_BY_MMA = True
#: CTAs per cluster built: level 9's 2 (B multicast to vertically adjacent tiles), and 1.
CLUSTERS = (2, 1)
#: Panel buffers per consumer's store ring: level 9's 2, or the tile's panels when it has fewer (one
#: 64-column panel at BN = 64; the ring must divide the panels: design/plan.py).
C_RING = 2
MAJORS = ("k", "mn")


def tile_n_built(b_major: str, bn: int, c_from_registers: bool = False) -> bool:
    """Whether the kernel is built at tile width ``bn`` for a B of major ``b_major`` ("k" or "mn"): every
    width of :data:`TILE_N`, :data:`K_MAJOR_B_TILE_N`'s for a K-major B, and with ``c_from_registers``
    :data:`REGISTER_STORE_TILE_N`'s for a K-major B."""
    return (bn in TILE_N or (bn in K_MAJOR_B_TILE_N and b_major == "k")
            or (c_from_registers and bn in REGISTER_STORE_TILE_N and b_major == "k"))


def split_schedule(units: int, resident_clusters: int, k_tiles: int, split: str,
                   min_idle: float = DEFAULT_MIN_IDLE) -> StreamKTail:
    """The clusters a launch uses and how it splits its ``units`` work units by K.

    The result's ``clusters`` is the grid's cluster count and its ``first_unit`` the kernel's
    ``tail_first_unit`` (units from it on are split by K iterations over every cluster):

    * ``"none"``: min(units, resident) clusters, every unit whole (first_unit = units);
    * ``"tail"``: the same clusters; the last partial wave split when it would leave more than
      ``min_idle`` of them idle (:func:`gemm_ladder.design.stream_k.plan_tail`, level 9's rule);
    * ``"all"``: every unit split over min(resident, units x k_tiles) clusters, so that each has at
      least one K iteration (the kernel's count of a unit's contributors assumes it). For problems
      with fewer tiles than SMs, whose whole grid would otherwise leave SMs idle.
    * ``"wave"``: the last partial wave and the whole wave before it split over min(units, resident)
      clusters, at most two contributors per unit (:func:`gemm_ladder.design.stream_k.plan_wave`);
      "all" where there are fewer than two waves of units, nothing where the waves are whole.

    Raises ValueError for an unknown ``split``, non-positive counts, or an ``"all"`` split beyond the
    kernel's 32-bit tail arithmetic ((clusters + 1) x units x k_tiles < 2^31).
    """
    if split not in SPLITS:
        raise ValueError(f"split = {split!r}: use one of {', '.join(SPLITS)}")
    if units < 1 or resident_clusters < 1 or k_tiles < 1:
        raise ValueError(f"units, resident_clusters and k_tiles must be positive, got {units}, {resident_clusters}, {k_tiles}")
    if split == "all":
        clusters = min(resident_clusters, units * k_tiles)
        if (clusters + 1) * units * k_tiles >= INT32_LIMIT:
            raise SplitOverflowError(f"split='all' over {units} units x {k_tiles} K iterations on {clusters} clusters exceeds "
                             "the kernel's 32-bit stream-K arithmetic; use split='tail' or 'none'")
        return StreamKTail(units=units, clusters=clusters, k_tiles=k_tiles, first_unit=0)
    clusters = min(units, resident_clusters)
    if split == "wave":
        if units < 2 * clusters:  # fewer than two waves: every unit split, as "all" (each cluster one K iteration at least)
            return split_schedule(units, resident_clusters, k_tiles, "all")
        return plan_wave(units, clusters, k_tiles)
    if split == "tail":
        return plan_tail(units, clusters, k_tiles, min_idle)
    return StreamKTail(units=units, clusters=clusters, k_tiles=k_tiles, first_unit=units)


@dataclass(frozen=True, eq=False)
class LibraryGemm:
    """Level 9's kernel for one operand layout and tile width, on :class:`OperandView` operands.

    Build with :func:`library_gemm`. Each dtype (and fused epilogue) is one build, whose
    :class:`~gemm_ladder.library.kernel.KernelConfig` is :meth:`config`; builds and loaded modules are
    kept per config (library/kernel.py). The ladder's level 9 (levels/tma.py) runs the same kernel
    source as a teaching rung; this class shares its planner (design/) and none of its code.
    """

    name: str
    idea: str
    tile: tuple[int, int, int]
    stages: int
    c_ring: int
    a_major: Major = "k"
    b_major: Major = "k"
    #: Store C from the consumers' registers (masked global stores, any pitch) instead of TMA stores.
    c_from_registers: bool = False
    #: With c_from_registers: write C in float32 (the inputs stay bf16/fp16).
    out_fp32: bool = False
    #: With c_from_registers: write C quantized, e4m3 values with one fp32 scale per row and 128 columns.
    out_e4m3: bool = False
    #: The tail split's threshold (design.stream_k.plan_tail): level 9's.
    stream_k_min_idle: float = DEFAULT_MIN_IDLE
    #: CTAs per cluster: level 9's 2 (vertically adjacent tiles sharing B by multicast), or 1 (one CTA
    #: per SM alone: no idle twin where the M tiles are odd in number, no multicast).
    cluster: int = 2
    #: Two consumer warpgroups take the tiles (64 rows, or 128 as two fragments) in turn, one storing its
    #: tile while the other computes (sm90_gemm.cu's GL_PINGPONG; the designer's "pingpong" schedule): every
    #: unit whole, no stream-K tail.
    pingpong: bool = False
    #: A measuring build (GL_TIMELINE: library_gemm's ``timeline``), never the dispatcher's.
    timeline: bool = False
    #: wgmma groups left in flight behind the newest, the ring's release lag (cluster_ring.cuh's
    #: GL_RELEASE_LAG): 1, level 9's; 2 in a measuring build (library_gemm's ``release_lag``).
    release_lag: int = 1
    #: CTAs resident per SM: 1, or 2 in a measuring build of the 64-row tile on one CTA per cluster
    #: (library_gemm's ``ctas_per_sm``; sm90_gemm.cu's GL_CTAS_PER_SM).
    ctas_per_sm: int = 1
    _launches: OrderedDict = field(default_factory=OrderedDict, repr=False, compare=False)
    _maps: OrderedDict = field(default_factory=OrderedDict, repr=False, compare=False)
    _specs: OrderedDict = field(default_factory=OrderedDict, repr=False, compare=False)

    source = SOURCE
    kernel_name = KERNEL_NAME
    #: The rung whose rules the resource gate holds this kernel to (gates/resources.py's
    #: check_level_resources: wgmma in SASS, TMA loads): level 9's, whose kernel this is.
    number = 9
    #: Level 9's configuration: a producer warpgroup, persistent with a stream-K tail (its two consumer
    #: warpgroups, or one: ``consumers``; its 2-CTA clusters multicasting B, or one CTA: ``cluster``).
    persistent = True
    producer_warpgroup = True

    def config(self, dtype: str, arch: str = "sm_90a", epilogue_source: str | None = None) -> KernelConfig:
        """The build of this kernel for ``dtype`` inputs ('bf16' or 'fp16') with the fused epilogue
        ``epilogue_source`` (or none): its key and its ``-D`` constants (:meth:`KernelConfig.defines`)."""
        return _config(self, dtype, arch).with_epilogue(epilogue_source)

    def defines(self, dtype: str) -> dict[str, int | str]:
        """The designer's ``-D`` constants of this kernel's plan (without the dtype and store switches)."""
        return self.config(dtype).plan_defines()

    def build_defines(self, dtype: str) -> dict[str, int | str]:
        """Every ``-D`` constant of the build for ``dtype``: the plan's, and GL_C_FROM_REGISTERS /
        GL_OUT_FP32 for a build that stores C from registers (none for the TMA build, whose source and
        SASS stay level 9's)."""
        return self.config(dtype).defines()

    def geometry(self, dtype: str) -> LaunchGeometry:
        """Threads, dynamic shared memory and cluster size of a launch (the plan's)."""
        d = self.defines(dtype)
        return LaunchGeometry(threads=int(d["GL_THREADS"]), dynamic_smem=int(d["GL_SMEM_BYTES"]), cluster=self.cluster)

    def _units(self, m: int, n: int) -> int:
        """Work units of a persistent launch: cluster-sized stacks of M tiles x N tiles."""
        return ceil_div(ceil_div(m, self.tile[0]), self.cluster) * ceil_div(n, self.tile[1])

    @property
    def consumers(self) -> int:
        """Consumer warpgroups: level 9's 2 of 64 rows each (BM = 128), 1 (BM = 64), 2 taking the
        tiles in turn (ping-pong, BM 64 or 128), or 2 of 128 rows each (BM 256)."""
        return 2 if self.pingpong or self.tile[0] == TALL_TILE_M else self.tile[0] // 64

    @property
    def whole_units_only(self) -> bool:
        """Whether every unit is computed whole (no stream-K split built): ping-pong, and the 256-row tile."""
        return self.pingpong or self.tile[0] == TALL_TILE_M

    @property
    def splits(self) -> tuple[str, ...]:
        """The split policies the dispatcher may rank for this kernel: a ping-pong or 256-row build splits none."""
        return ("none",) if self.whole_units_only else RANKED_SPLITS

    @property
    def default_split(self) -> str:
        """The split a launch takes when given none: level 9's "tail", or "none" for a ping-pong or 256-row build."""
        return "none" if self.whole_units_only else "tail"

    @property
    def output_store(self) -> str:
        """How this build writes C: 'C from registers' or 'TMA store' (``explain`` says it)."""
        return "C from registers" if self.c_from_registers else "TMA store"

    #: The kernel's accumulator pairs are neighbours along a row of its output (epilogue.cuh's fragment).
    pair_along_kernel_cols = True

    def translation_unit(self, dtype: str, epilogue_source: str | None = None) -> str:
        """The source compiled: a fused epilogue's generated code (library/epilogue.py), then the kernel."""
        return f'// gemm-ladder library {self.name}, {dtype}\n{epilogue_source or ""}#include "{SOURCE}"\n'

    def build(self, dtype: str, arch: str = "sm_90a", epilogue_source: str | None = None):
        """Compile (or fetch from the cache) the cubin for ``dtype``, with the fused epilogue whose generated
        code is ``epilogue_source`` (:meth:`EpilogueCall.source`) or none. Raises CompileError with nvcc's
        message (an epilogue's: see :func:`compile_with_epilogue`)."""
        return GEMM.build(self.config(dtype, arch, epilogue_source))

    def loaded(self, dtype: str, device: torch.device, epilogue_source: str | None = None):
        """The build for ``dtype`` (and epilogue) loaded on ``device``, compiled first if needed."""
        config = self.config(dtype, epilogue_source=epilogue_source)

        def make():
            g = self.geometry(dtype)
            kernel = load(GEMM.build(config), device, threads=g.threads, dynamic_smem=g.dynamic_smem, cluster=g.cluster)
            if self.ctas_per_sm > 1:  # all of the SM's shared memory for the L1/shared split, so both rings fit
                kernel.prefer_shared_memory_carveout(100)
            return kernel

        return K.loaded(config, device_index(device), make)

    def plan(self, m: int, n: int, k: int, dtype: str, *, lda: int | None = None, ldb: int | None = None,
             ldc: int | None = None):
        """The designer's plan on one problem: (M, N, K), dtype 'bf16'/'fp16', leading dimensions in
        elements (default dense), which its tensor maps take as global strides. Raises PlanRefused."""
        extra = {"c_from_registers": True} if self.c_from_registers else {}
        return plan_gemm(m, n, k, dtype, tile=self.tile, stages=self.stages, cluster=self.cluster,
                         consumers=self.consumers, persistent=self.persistent,
                         producer_warpgroup=self.producer_warpgroup, c_ring=self.c_ring, stream_k=not self.whole_units_only,
                         stream_k_min_idle=self.stream_k_min_idle, a_major=self.a_major, b_major=self.b_major,
                         lda=lda, ldb=ldb, ldc=ldc, schedule="pingpong" if self.pingpong else "cooperative",
                         release_lag=self.release_lag, **extra)

    # --- the rules ------------------------------------------------------------------------------
    def supports(self, a: OperandView, b: OperandView, c: torch.Tensor, *,
                 c_padding_writable: bool = False) -> str | None:
        """None if this kernel computes ``c = A @ B^T`` for these operands, else the rule they break.

        ``c_padding_writable``: c is the caller's own workspace, whose row padding up to the next 16
        bytes may be overwritten. Without it, N must fill whole 16-byte chunks: the TMA store writes
        the last chunk of a row whole, into c's padding (measured: docs/measured-choices.md).

        a: (M, K) view, b: (N, K) view, c: (M, N) tensor with stride (ldc, 1). The rules, in the order
        checked: bf16 or fp16, one dtype for all three (c float32 for the ``out_fp32`` build, e4m3 for the
        ``out_e4m3`` one); A and B in
        this kernel's majors; K equal; M, N, K in 1..kernel.MAX_EXTENT; c of shape (M, N), row-major; every
        base 16-byte aligned and every pitch a multiple of 16 bytes (TMA: CUDA Driver API,
        cuTensorMapEncodeTiled globalAddress and globalStrides), except c's in the ``c_from_registers``
        build (any pitch >= N, a base aligned to its element); one CUDA device.
        """
        for name, v in (("a", a), ("b", b)):
            if not isinstance(v, OperandView):
                return f"{name} must be an OperandView (gemm_ladder.library.operand), got {type(v).__name__}"
        if not isinstance(c, torch.Tensor):
            return f"c must be a torch.Tensor, got {type(c).__name__}"
        dt = a.tensor.dtype
        if dt not in DTYPES.values():
            return f"a: dtype {dt} is not one of bf16, fp16"
        if self.out_fp32 or self.out_e4m3:
            want = torch.float32 if self.out_fp32 else QUANT_OUT
            if b.tensor.dtype != dt or c.dtype != want:
                return (f"a and b must share one dtype and c must be {want} ({self.name} writes a "
                        f"{'float32' if self.out_fp32 else 'quantized e4m3'} output): got {dt}, {b.tensor.dtype}, {c.dtype}")
        elif b.tensor.dtype != dt or c.dtype != dt:
            return f"a, b and c must share one dtype (the output is in the inputs' dtype): got {dt}, {b.tensor.dtype}, {c.dtype}"
        for name, v, want in (("a", a, self.a_major), ("b", b, self.b_major)):
            if v.major != want:
                return (f"{name} is {v.major}-major; this kernel ({self.name}) reads it {want}-major: "
                        f"use library_gemm(a_major={a.major!r}, b_major={b.major!r})")
        m, n, k = a.rows, b.rows, a.k
        if b.k != k:
            return f"a has K = {k} but b has K = {b.k}"
        if refusal := K.extents_refusal({"M": m, "N": n, "K": k}):
            return refusal
        if c.dim() != 2 or tuple(c.shape) != (m, n):
            return f"c has shape {tuple(c.shape)}; the product is ({m}, {n})"
        if n > 1 and c.stride(1) != 1:
            return (f"c has strides {tuple(c.stride())}: it must be row-major, stride (ldc, 1) (a column-major "
                    "output is D^T = B A^T: swap the views)")
        ldc = _ldc(c)
        if ldc < n:
            return f"c: row pitch {ldc} < N = {n}: its rows would overlap"
        e = c.element_size()
        if self.c_from_registers:  # stored from registers: any pitch >= N, any element-aligned base
            if c.data_ptr() % e:
                return f"c: base {c.data_ptr():#x} is not aligned to its {e}-byte elements"
        # Each map's pitch in its own element size: a float32 c (out_fp32) is 4 bytes, a and b 2.
        tma_mapped = (("a", a.data_ptr, a.ld * a.elem_bytes), ("b", b.data_ptr, b.ld * b.elem_bytes))
        if not self.c_from_registers:
            tma_mapped += (("c", c.data_ptr(), ldc * e),)
        for name, ptr, pitch_bytes in tma_mapped:
            if ptr % TMA_ALIGN_BYTES or pitch_bytes % TMA_ALIGN_BYTES:
                return (f"{name}: base {ptr:#x} and pitch {pitch_bytes} bytes must both be multiples of "
                        f"{TMA_ALIGN_BYTES} (TMA); repack it into an aligned buffer")
        if not self.c_from_registers and (n * e) % TMA_ALIGN_BYTES and not (c_padding_writable and ldc * e >= -(-n * e // TMA_ALIGN_BYTES) * TMA_ALIGN_BYTES):
            return (f"c: N = {n} columns = {n * e} bytes, not a multiple of {TMA_ALIGN_BYTES}: the TMA store writes "
                    f"the row's last 16-byte chunk whole, into c's padding; write into a workspace "
                    f"(c_padding_writable=True) and copy back")
        dev = a.tensor.device
        if dev.type != "cuda" or b.tensor.device != dev or c.device != dev:
            return f"a, b and c must be on one CUDA device: got {dev}, {b.tensor.device}, {c.device}"
        return None

    # --- launching (GPU) --------------------------------------------------------------------------
    def launch(self, a: OperandView, b: OperandView, c: torch.Tensor, *, split: str | None = None,
               c_padding_writable: bool = False, epilogue: EpilogueCall | None = None,
               scales: torch.Tensor | None = None) -> None:
        """``c = A @ B^T`` on the current stream. a: (M, K), b: (N, K) views; c: (M, N), stride (ldc, 1).

        ``split``: "tail", "all", "none" or "wave" (:func:`split_schedule`); None: the build's default
        (:attr:`default_split`). While a CUDA graph is being
        captured the launch runs unsplit (as level 9 does: a graph would keep the stream-K
        workspace's addresses beyond its cache). A ping-pong build computes every unit whole
        (``splits`` is ("none",)): any other split is refused with ValueError.

        ``epilogue``: a fused epilogue bound to its inputs in the caller's output coordinates and
        oriented (``swap``: c is the transpose of the caller's output); its extents must be c's (or
        c's transpose). Built into the kernel (one build per generated source).

        Without an epilogue and outside a graph capture, the bound launch (:meth:`bind`) is kept in
        library/kernel.py's bind cache by its config and what a call changes (every address, extent,
        stride, dtype and the stream it depends on: :meth:`BindCache.key`), so a call
        repeated on the same tensors costs one driver call: the dispatcher's repacked operands and
        output workspaces come back at the same addresses from torch's caching allocator, and a new
        bind per call took most of such a call's host time.

        ``scales`` (the ``out_e4m3`` build, and only it): where the output's scales go, a float32 CUDA
        tensor of shape (ceil(N / 128), R), R >= M, stride (ld, 1): the scale of row r and columns
        [128 b, 128 b + 128) at ``scales[b, r]`` (a transposed view of it is
        ``quantize_fp8(c, (1, 128))``'s column-major layout). Such a launch is bound per call.

        Raises GemmInputError naming the rule (:meth:`supports`, :func:`scales_refusal`) and ValueError
        for an unknown ``split``, before any launch; EpilogueCompileError when nvcc rejects the
        epilogue's CUDA.
        """
        split = split or self.default_split
        if epilogue is None and scales is None and c.is_cuda and not torch.cuda.is_current_stream_capturing():
            key = bind_key(self.config(dtype_name(a.tensor.dtype)), a, b, c, split, c_padding_writable,
                           torch.cuda.current_stream(c.device).cuda_stream)
            K.BINDS.get_or_bind(key, lambda: self.bind(a, b, c, split=split, c_padding_writable=c_padding_writable))()
            return
        self.bind(a, b, c, split=split, c_padding_writable=c_padding_writable, epilogue=epilogue, scales=scales)()

    def bind(self, a: OperandView, b: OperandView, c: torch.Tensor, *, split: str | None = None,
             c_padding_writable: bool = False, epilogue: EpilogueCall | None = None,
             scales: torch.Tensor | None = None) -> BoundLaunch:
        """:meth:`launch` bound to these operands' addresses and the current stream, for repeated calls
        (library/bound.py): checks, schedule, tensor maps and packed arguments done once; each call of
        the result zeroes a split launch's counters (on the stream) and launches. With ``epilogue`` the
        kernel is its build and takes its EpilogueParams last (the kernel's GL_EPILOGUE_ARG), bound to
        the epilogue inputs' addresses; its scalars can be refreshed per call
        (:meth:`BoundLaunch.set_scalars`). Same arguments and errors as :meth:`launch`; nothing is
        launched here."""
        reason = self.supports(a, b, c, c_padding_writable=c_padding_writable) or scales_refusal(self, c, scales)
        if reason is not None:
            raise GemmInputError(reason)
        split = split or self.default_split
        if split not in SPLITS:
            raise ValueError(f"split = {split!r}: use one of {', '.join(SPLITS)}")
        if split not in self.splits:
            why = "ping-pong" if self.pingpong else "the 256-row tile"
            raise ValueError(f"split = {split!r}: {self.name} computes every unit whole ({why}); use split='none'")
        m, n, k = a.rows, b.rows, a.k
        dtype = dtype_name(a.tensor.dtype)
        if epilogue is not None and (epilogue.rows, epilogue.cols) != ((n, m) if epilogue.swap else (m, n)):
            raise GemmInputError(f"epilogue bound to a {epilogue.rows} x {epilogue.cols} output, but c is {m} x {n}"
                                 + (" (transposed)" if epilogue.swap else ""))
        if epilogue is not None:
            epilogue = self.epilogue_call(epilogue, a.tensor.dtype)
        source = epilogue.source() if epilogue is not None else None
        kernel = compile_with_epilogue(lambda: self.loaded(dtype, c.device, source), epilogue)
        capturing = torch.cuda.is_current_stream_capturing()
        key = (m, n, k, dtype, device_index(c.device), split, capturing, source)  # the build's occupancy
        tail = cached(self._launches, key, lambda: split_schedule(
            self._units(m, n), kernel.max_active_clusters(c.device), ceil_div(k, self.tile[2]),
            "none" if capturing else split, self.stream_k_min_idle))
        stream = torch.cuda.current_stream(c.device)  # the workspace's stream and the launch's must be one
        split_args = [ctypes.c_void_p(0), ctypes.c_void_p(0)]  # partials, counters: untouched for whole units
        map_kwargs = self.view_map_kwargs(a, b, c)
        args = [*self.view_maps(a, b, c, map_kwargs)]
        if self.c_from_registers:  # sm90_gemm.cu's GL_C_ARG: the output's pointer and row pitch, not a map
            args += [ctypes.c_void_p(c.data_ptr()), ctypes.c_longlong(_ldc(c))]
        if self.out_e4m3:  # and the scales' pointer and row pitch
            args += [ctypes.c_void_p(scales.data_ptr()), ctypes.c_longlong(scales.stride(0))]
        args += [ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
                ctypes.c_int(tail.first_unit if tail.tail_units else tail.units), ctypes.c_int(tail.max_contributors),
                *split_args]
        params = None
        if epilogue is not None:  # sm90_gemm.cu's GL_EPILOGUE_ARG: one more argument, last
            params = epilogue.params(pair_along_cols=self.pair_along_kernel_cols != epilogue.swap)
            args.append(params)
        roles = self.arg_roles(a, b, c, epilogue is not None, map_kwargs)
        prepared = kernel.prepare((tail.clusters * self.cluster, 1, 1), args, stream.cuda_stream)
        if not tail.tail_units:
            return BoundLaunch(prepared, params=params, roles=roles)
        floats = tail.workspace_floats(self.cluster, self.consumers, self.tile[1])
        counters = tail.counters(self.cluster, self.consumers)

        fresh_workspace = split_workspace_refresher(stream, floats, counters, split_args)
        return BoundLaunch(prepared, fresh_workspace, params=params, roles=roles, workspace=(floats, counters))

    def epilogue_call(self, call: EpilogueCall, dtype: torch.dtype) -> EpilogueCall:
        """The epilogue this build runs for ``call`` (oriented) on operands of ``dtype``: ``linear``'s bias
        added by the tensor cores as one more K step (its epilogue's ``mma_twin``, sm90_gemm.cu's bias stage,
        bias_stage.cuh) where :meth:`bias_refusal` finds nothing against it; else ``call``."""
        if self.bias_refusal(call, dtype) is not None:
            return call
        return replace(call, epilogue=call.epilogue.mma_twin)

    def bias_refusal(self, call: EpilogueCall, dtype: torch.dtype) -> str | None:
        """Why this build does not add ``call``'s bias (oriented, operands of ``dtype``) by its MMA, or None:
        :data:`BIAS_BY_MMA` off; an epilogue with no twin (a user's, alpha != 1: the MMA would add the bias to
        the unscaled sum, or no bias); a ping-pong consumer holds whole tiles and the 256-row tile's two fragments
        (the stage's k16 step is one fragment's); a release lag of 2 (the stage's release assumes one group
        behind); swapped at BN 256 (the bias on the A side spilled 16 bytes there, ptxas, where the direct
        orientation does not); a bias not of the operands' dtype (the stage holds operand elements) or of a
        stride other than 1."""
        if not BIAS_BY_MMA:
            return "the bias stage is off: library.gemm.BIAS_BY_MMA"
        twin = call.epilogue.mma_twin
        if twin is None:
            return "no bias the MMA can add (a user's epilogue, alpha != 1, or no bias)"
        if self.pingpong:
            return "a ping-pong build"
        if self.tile[0] == TALL_TILE_M:
            return "the 256-row tile"
        if self.release_lag != 1:
            return "a release lag of 2"
        if call.swap and self.tile[1] >= 256:
            return "a swapped output at BN 256 (the stage spilled there)"
        t, (_, sc) = call.tensors[call.epilogue.tensor_inputs.index(twin.mma_vector)]
        if t.dtype != dtype:
            return f"a {t.dtype} bias, not the operands' {dtype}"
        if sc != 1:
            return "a bias of stride other than 1"
        return None

    def arg_roles(self, a: OperandView, b: OperandView, c: torch.Tensor, epilogue: bool,
                  map_kwargs: list | None = None) -> list:
        """What each argument :meth:`bind` packs is, in its order (:class:`BoundLaunch`'s ``roles``):
        kept beside ``bind``'s argument list, which it mirrors. ``map_kwargs``: :meth:`view_map_kwargs`
        of these views, when the caller has them."""
        roles = [("map", name.upper(), kw) for name, kw in map_kwargs or self.view_map_kwargs(a, b, c)]
        if self.c_from_registers:
            roles += [("ptr", "C"), ("value",)]
        if self.out_e4m3:
            roles += [("ptr", "scales"), ("value",)]
        roles += [("value",)] * 5 + [("partials",), ("counters",)]
        if epilogue:
            roles.append(("epilogue",))
        return roles

    def view_map_kwargs(self, a: OperandView, b: OperandView, c: torch.Tensor) -> list[tuple[str, dict]]:
        """(name, cuTensorMapEncodeTiled keyword arguments) of each map :meth:`view_maps` encodes, in its
        order; the plan's specs cached per layout."""
        m, n, k, ldc = a.rows, b.rows, a.k, _ldc(c)
        dtype = dtype_name(a.tensor.dtype)
        shape = (m, n, k, a.ld, b.ld, None if self.c_from_registers else ldc, dtype)
        names = (("a", a.data_ptr), ("b", b.data_ptr)) + (() if self.c_from_registers else (("c", c.data_ptr()),))
        specs = cached(self._specs, shape, lambda: self.plan(m, n, k, dtype, lda=a.ld, ldb=b.ld,
                                                             ldc=shape[5]).tensor_maps)
        return [(name, specs[name].encode_kwargs(ptr)) for name, ptr in names]

    def view_maps(self, a: OperandView, b: OperandView, c: torch.Tensor, map_kwargs: list | None = None) -> list:
        """The encoded tensor maps (a, b, c; a and b only in the ``c_from_registers`` build) of the plan
        for these views (its specs: :meth:`view_map_kwargs`, or ``map_kwargs`` when the caller has
        them), cached per pointers and layout: a bind made again for addresses the bound launches no
        longer hold encodes nothing (encoding in Python costs more than a small launch:
        docs/measured-choices.md)."""
        key = (a.data_ptr, b.data_ptr, c.data_ptr(), a.rows, b.rows, a.k, a.ld, b.ld,
               None if self.c_from_registers else _ldc(c), a.tensor.dtype)
        return cached(self._maps, key, lambda: [encode_tiled(kw) for _, kw in map_kwargs or self.view_map_kwargs(a, b, c)])

    def __call__(self, a: torch.Tensor, b: torch.Tensor, *, split: str | None = None) -> torch.Tensor:
        """``a @ b.T`` (the ladder's contract, ``F.linear(a, b)``) with a (M, K) and b (N, K) in this
        kernel's layouts: a K-major is row-major, MN-major column-major; likewise b. ``split``: as
        :meth:`launch`. Returns a new row-major (M, N)
        tensor; the ``out_e4m3`` build returns (values (M, N) e4m3, scales (M, ceil(N / 128)) fp32
        column-major), as ``quantize_fp8(a @ b.T, (1, 128))`` lays them out. Raises GemmInputError naming
        the rule before any launch."""
        va, vb = operand_view(a, k_dim=1), operand_view(b, k_dim=1)
        for name, v, t in (("a", va, a), ("b", vb, b)):
            if v is None:
                raise GemmInputError(f"{name} with strides {tuple(t.stride())} is neither row- nor column-major")
        if va.rows == 0 or vb.rows == 0:
            return torch.empty((va.rows, vb.rows), dtype=a.dtype, device=a.device)
        if self.out_e4m3:
            if va.k == 0:
                raise GemmInputError("K = 0: the quantized output of zeros is quantize_fp8 of zeros; not launched")
            values, scales = quantized_buffers(va.rows, vb.rows, a.device)
            c, scale_rows = kernel_views(values, scales)
            self.launch(va, vb, c, split=split, scales=scale_rows)
            return values, scales
        if va.k == 0:
            return torch.zeros((va.rows, vb.rows), dtype=a.dtype, device=a.device)
        c = torch.empty((va.rows, vb.rows), dtype=torch.float32 if self.out_fp32 else a.dtype, device=a.device)
        self.launch(va, vb, c, split=split)
        return c


def scales_refusal(kernel: LibraryGemm, c: torch.Tensor, scales: torch.Tensor | None) -> str | None:
    """Why ``scales`` cannot take ``kernel``'s output scales for output ``c`` (M, N) (:meth:`LibraryGemm.launch`
    says the layout), or None: given exactly for the ``out_e4m3`` build; float32, 2-D (ceil(N / 128), R) with
    R >= M and stride (ld, 1), on c's device, not overlapping c."""
    if not kernel.out_e4m3:
        return None if scales is None else f"scales given, but {kernel.name} writes no quantized output"
    if not isinstance(scales, torch.Tensor):
        return f"{kernel.name} writes e4m3 values and their scales: pass scales (a float32 tensor), got {type(scales).__name__}"
    m, n = c.shape
    blocks = ceil_div(n, 128)
    if scales.dtype != torch.float32 or scales.dim() != 2 or scales.shape[0] != blocks or scales.shape[1] < m:
        return (f"scales: {scales.dtype} of shape {tuple(scales.shape)}; the output's are float32 of shape "
                f"({blocks}, >= {m}): one per 128 columns and row")
    if (scales.shape[1] > 1 and scales.stride(1) != 1) or scales.stride(0) < scales.shape[1]:
        return f"scales: strides {tuple(scales.stride())}; the kernel writes rows of stride (ld, 1), ld >= {scales.shape[1]}"
    if scales.device != c.device:
        return f"scales on {scales.device}, the output on {c.device}"
    lo, hi = scales.data_ptr(), scales.data_ptr() + 4 * ((blocks - 1) * scales.stride(0) + scales.shape[1])
    c_lo, c_hi = c.data_ptr(), c.data_ptr() + c.element_size() * ((m - 1) * _ldc(c) + n)
    if lo < c_hi and c_lo < hi:
        return "scales overlap the output"
    return None


def _ldc(c: torch.Tensor) -> int:
    """The output's row pitch in elements; one row has no pitch, so take N rounded up to 16 bytes."""
    if c.shape[0] > 1:
        return c.stride(0)
    per16 = TMA_ALIGN_BYTES // c.element_size()
    return ceil_div(max(c.shape[1], 1), per16) * per16


def bind_key(config: KernelConfig, a: OperandView, b: OperandView, c: torch.Tensor, split: str,
             c_padding_writable: bool, stream_handle: int) -> tuple:
    """What :meth:`LibraryGemm.bind` depends on, for a launch without an epilogue: the build's config,
    each operand's first element's address, extents, leading dimension, major, dtype and device; c's
    address, shape, strides, dtype and device; the split, the padding rule and the stream
    (:meth:`BindCache.key <gemm_ladder.library.kernel.BindCache.key>`). Two calls with one key bind alike."""
    return K.BindCache.key(config, Operands(a, b, c), _options(split, c_padding_writable), stream_handle)


def _options(split: str, c_padding_writable: bool) -> tuple:
    """The launch options of a bind, as the bind cache keys them (the route's ``options`` order)."""
    return (("c_padding_writable", c_padding_writable), ("split", split))


def library_gemm(a_major: str, b_major: str, bn: int = 256, *, c_from_registers: bool = False,
                 out_fp32: bool = False, cluster: int = 2, bm: int = 128, pingpong: bool = False,
                 timeline: bool = False, out_e4m3: bool = False, release_lag: int = 1,
                 ctas_per_sm: int = 1) -> LibraryGemm:
    """The layouts kernel for A ``a_major`` and B ``b_major`` ("k" or "mn") with tile width ``bn``
    (64, 128 or 256; 192 with a K-major B; 96 and 144 with a K-major B and ``c_from_registers``,
    :data:`REGISTER_STORE_TILE_N`); one instance per configuration, so builds, loaded kernels and maps are
    cached.

    ``c_from_registers``: the build that stores C from registers (any pitch; see the module docstring);
    ``out_fp32`` (only with it): its float32-output build; ``out_e4m3`` (only with it, at BN 128 or 256): its
    quantized-output build (e4m3 values and 1 x 128 scales: the module docstring). ``cluster``: 2 (level 9's pair of CTAs sharing
    B) or 1 (one CTA per cluster: the build for an odd number of M tiles, whose last pair would have an
    idle twin). ``bm``: 128 (level 9's two consumer warpgroups of 64 rows) or 64 (one consumer: twice the
    tiles of a 128-row tile, for problems whose 128-row tiles leave SMs idle), or 256 (:data:`TALL_TILE_M`, not
    routed: two consumers of 128 rows each on one tile, each holding two 64-row fragments, every unit whole; at
    ``bn`` <= 192 (BN 192: three stages beside the TMA store's panels); not with ``pingpong``, ``out_e4m3``,
    ``release_lag`` 2 or ``ctas_per_sm`` 2; docs/where-time-goes.md). ``pingpong`` (with
    ``bm`` = 64, or 128 at ``bn`` <= 192): two consumer warpgroups take the
    tiles in turn, each a whole tile in its registers (at 128 rows two 64-row fragments; measured against the
    route in docs/where-time-goes.md, not routed), each storing its tile while the other runs its main loop (the
    designer's "pingpong" schedule, audited by audit/ring.py), for short K and heavy epilogues; every unit whole (split "none"). ``timeline``: a measuring build, never the
    dispatcher's: the kernel's GL_TIMELINE stamps (per CTA %globaltimer and clock64 at the points of its
    TimelineSlot enum, into its ``gl_timeline_ns`` / ``gl_timeline_clk`` __device__ arrays;
    kernels/include/gemm_ladder/timeline.cuh), read by bench/experiments/gemm_timeline.py; the same plan,
    ring and launch as without it. ``release_lag``: 1 (level 9's: wgmma.wait_group 1, stage k released
    once the wgmma of k + 1 is issued) or 2, a measuring build, never the dispatcher's, that keeps two
    groups in flight behind the newest and releases stage k after the wgmma of k + 2 (cluster_ring.cuh's
    GL_RELEASE_LAG; audited by audit/ring.py at lag 2): whether a short group (64 x 64: 128 tensor-pipe
    cycles) leaves the pipe idle while the consumer turns around (docs/where-time-goes.md).
    ``ctas_per_sm``: 1, or 2, a measuring build, never the dispatcher's, of the 64-row tile (``bm`` 64) on one
    CTA per cluster at BN 64 with the TMA store (BN 128 spilled at 128 registers): two CTAs resident per SM, so
    that two consumers' wgmma groups from independent tiles share the tensor pipe (the 64-row loop runs at a
    third of its rate behind one consumer: docs/where-time-goes.md); launch bounds of two CTAs (128 registers a
    thread), the ring in half the SM's shared memory (6 stages), the persistent grid twice the SMs (the
    occupancy API's count).

    Stages: the most that fit in shared memory (design.smem.max_stages) beside the panel rings: 4 at
    BN = 256 (level 9's), 5 at 192, 6 at BN = 128, 8 at BN = 64 (``c_ring``: the largest ring of at most 2
    panel buffers per consumer that divides the tile's panels: 2, 1, 2, 1); with no C staging
    (c_from_registers): 4 at 256, 5 at 192, 7 at 128, 9 at 64; with 64-row tiles (one consumer's panel ring):
    5 at 256, 6 at 192, 8 at 128, 13 at 64 (ping-pong: two consumers' panel rings, design.smem.max_stages; at 128
    rows 5 at BN 128 and 8 at 64 with the TMA store, 5 at 192, 6 at 144, 7 at 128, 8 at 96 and 9 at 64 from
    registers); at 256 rows 4 at BN 64 and 128 with the TMA store (a ring of one 128-row panel a consumer), 4 at
    BN 128-192 and 5 at 96 from registers.
    Raises ValueError for any other major, width, cluster or tile height, ``out_fp32`` or ``out_e4m3``
    without ``c_from_registers``, both, ``out_e4m3`` at a BN that is not a multiple of 128, ``pingpong``
    with ``bm`` other than 64 or 128 (128 at ``bn`` <= 128, or <= 192 with ``c_from_registers``; at 128 x 128
    with the TMA store a fused residual beside bias + GELU spilled 84 bytes: right, slower, not gated), a
    ``release_lag`` other than the int 1 or 2, or ``ctas_per_sm`` 2 on another build than the one above.
    """
    # One cache key per configuration however it is spelled (bn positional or by name, flags defaulted
    # or given): every caller then shares one instance, and its builds and bindings.
    # Checked before the cache: True and 1.0 hash as 1 does, and would be handed its build unchecked.
    if type(release_lag) is not int or release_lag not in RELEASE_LAGS:
        raise ValueError(f"release_lag = {release_lag!r}: one of {RELEASE_LAGS} wgmma groups in flight behind the "
                         "newest")
    if type(ctas_per_sm) is not int or ctas_per_sm not in (1, 2):
        raise ValueError(f"ctas_per_sm = {ctas_per_sm!r}: 1 or 2")
    if ctas_per_sm == 2 and (bm != 64 or cluster != 1 or pingpong or c_from_registers or bn != 64):
        raise ValueError(f"ctas_per_sm = 2 with bm = {bm}, cluster = {cluster}, bn = {bn}, pingpong = {pingpong}, "
                         f"c_from_registers = {c_from_registers}: built for the 64-row tile's one consumer on one CTA "
                         "per cluster, BN 64, TMA store (128 registers a thread: BN 128 spilled)")
    return _library_gemm(a_major, b_major, bn, bool(c_from_registers), bool(out_fp32), cluster, bm, bool(pingpong),
                         bool(timeline), bool(out_e4m3), release_lag, ctas_per_sm)


@functools.lru_cache(maxsize=None)
def _library_gemm(a_major: str, b_major: str, bn: int, c_from_registers: bool, out_fp32: bool,
                  cluster: int = 2, bm: int = 128, pingpong: bool = False, timeline: bool = False,
                  out_e4m3: bool = False, release_lag: int = 1, ctas_per_sm: int = 1) -> LibraryGemm:
    if bm not in TILE_M and bm != TALL_TILE_M:
        raise ValueError(f"bm = {bm!r}: the kernel is built for BM in {TILE_M} (64 rows per consumer warpgroup), and "
                         f"{TALL_TILE_M} (128 rows per consumer, not routed)")
    if bm == TALL_TILE_M and (pingpong or out_e4m3 or release_lag != 1 or ctas_per_sm != 1 or bn > 192):
        raise ValueError(f"bm = {bm} with bn = {bn}, pingpong = {pingpong}, out_e4m3 = {out_e4m3}, release_lag = "
                         f"{release_lag}, ctas_per_sm = {ctas_per_sm}: the 256-row tile is built cooperative, each "
                         "consumer holding 128 x BN (BN <= 192: 192 accumulator registers a thread), with the "
                         "bf16/fp16/fp32 outputs, release lag 1, one CTA per SM")
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster = {cluster!r}: the kernel is built for clusters of {' or '.join(map(str, CLUSTERS))} CTAs")
    if a_major not in MAJORS or b_major not in MAJORS:
        raise ValueError(f"a_major = {a_major!r}, b_major = {b_major!r}: each is one of {', '.join(MAJORS)}")
    if not tile_n_built(b_major, bn, c_from_registers):
        raise ValueError(f"bn = {bn!r}: the kernel is built for BN in {TILE_N}, {K_MAJOR_B_TILE_N} with a K-major B, and "
                         f"{REGISTER_STORE_TILE_N} with a K-major B and c_from_registers=True"
                         + (f" (b_major = {b_major!r}, c_from_registers = {c_from_registers})"
                            if bn in K_MAJOR_B_TILE_N + REGISTER_STORE_TILE_N else ""))
    if out_fp32 and not c_from_registers:
        raise ValueError("out_fp32=True needs c_from_registers=True: only the register store writes float32")
    if out_e4m3 and (not c_from_registers or out_fp32 or bn % 128):
        raise ValueError(f"out_e4m3=True with c_from_registers={c_from_registers}, out_fp32={out_fp32}, bn = {bn}: the "
                         "quantized output is the register store's (not float32 too), its 1 x 128 scale blocks whole "
                         "columns of a tile (BN 128 or 256)")
    if pingpong and not (bm == 64 or (bm == 128 and bn <= 192)):
        raise ValueError(f"pingpong=True with bm = {bm}, bn = {bn}: each ping-pong consumer holds a whole tile in its "
                         "registers, built at 64 rows, or 128 rows at BN <= 192 (192 accumulator registers a thread)")
    consumers = 2 if pingpong or bm == TALL_TILE_M else bm // 64
    panels = bn // 64
    # The ring divides the panels. The 256-row tile's panels are 128 rows (16 KiB): a ring of one, so that four
    # stages fit beside the two consumers' buffers (its panels are all stored at the tile's end, not deferred).
    c_ring = 0 if c_from_registers else 1 if bm == TALL_TILE_M else max(r for r in range(1, C_RING + 1) if panels % r == 0)
    arch = arch_info("sm_90a")
    if ctas_per_sm > 1:  # each CTA's block plus the system's reservation in its share of the SM
        arch = replace(arch, max_smem_per_block=min(arch.max_smem_per_block, arch.smem_per_sm // ctas_per_sm
                                                    - arch.smem_reserved_per_block))
    stages = max_stages(bm=bm, bn=bn, bk=64, elem_bytes=2, arch=arch, consumers=consumers, c_ring=c_ring,
                        c_from_registers=c_from_registers, pingpong=pingpong)
    suffix = (("_creg" if c_from_registers else "") + ("_f32" if out_fp32 else "") + ("_e4m3" if out_e4m3 else "")
              + ("_c1" if cluster == 1 else "")
              + ("_bm64" if bm == 64 else "_bm256" if bm == TALL_TILE_M else "") + ("_pp" if pingpong else "") + ("_tl" if timeline else "")
              + ("" if release_lag == 1 else f"_lag{release_lag}") + ("" if ctas_per_sm == 1 else f"_x{ctas_per_sm}"))
    return LibraryGemm(
        name=f"sm90_gemm_{a_major}{b_major}_bn{bn}{suffix}",
        idea=f"level 9's kernel with A {a_major}-major and B {b_major}-major in shared memory, any TMA pitch, "
             f"a {bm} x {bn} tile"
             + (", C stored from registers (any pitch)" if c_from_registers else "")
             + (", float32 output" if out_fp32 else "")
             + (", e4m3 output with 1 x 128 scales" if out_e4m3 else "")
             + (", one CTA per cluster" if cluster == 1 else "")
             + (", two consumers taking the tiles in turn (ping-pong)" if pingpong else "")
             + (", timestamps per CTA (a measuring build)" if timeline else "")
             + (f", {release_lag} wgmma groups in flight behind the newest (a measuring build)" if release_lag != 1 else "")
             + (f", {ctas_per_sm} CTAs per SM (a measuring build)" if ctas_per_sm != 1 else ""),
        tile=(bm, bn, 64), stages=stages, c_ring=c_ring, a_major=a_major, b_major=b_major,
        c_from_registers=c_from_registers, out_fp32=out_fp32, cluster=cluster, pingpong=pingpong, timeline=timeline,
        out_e4m3=out_e4m3, release_lag=release_lag, ctas_per_sm=ctas_per_sm,
    )


@functools.lru_cache(maxsize=1024)
def _config(kernel: LibraryGemm, dtype: str, arch: str) -> KernelConfig:
    # The register-store build reads GL_C_FROM_REGISTERS (the small-M kernel always stores from registers,
    # so the switch is this family's own constant); GL_OUT_FP32 comes with the config's output dtype.
    return KernelConfig(
        FAMILY, dtype=dtype, out_dtype="fp32" if kernel.out_fp32 else "e4m3" if kernel.out_e4m3 else dtype, arch=arch, a_major=kernel.a_major,
        b_major=kernel.b_major, tile=kernel.tile, stages=kernel.stages, cluster=kernel.cluster,
        consumers=kernel.consumers, producer_warpgroup=kernel.producer_warpgroup, c_ring=kernel.c_ring,
        store=STORE_REGISTERS if kernel.c_from_registers else STORE_TMA,
        schedule=DATA_PARALLEL if kernel.whole_units_only else STREAM_K, pingpong=kernel.pingpong,
        extra=((("GL_C_FROM_REGISTERS", 1),) if kernel.c_from_registers else ())
        + ((("GL_TIMELINE", 1),) if kernel.timeline else ())
        + ((("GL_RELEASE_LAG", kernel.release_lag),) if kernel.release_lag != 1 else ())
        + ((("GL_CTAS_PER_SM", kernel.ctas_per_sm),) if kernel.ctas_per_sm != 1 else ()))


def epilogue_for(config: KernelConfig, call: EpilogueCall, dtype: torch.dtype) -> EpilogueCall:
    """The epilogue that ``config``'s build runs for ``call`` (oriented as the route runs it) on operands of
    ``dtype``: :meth:`LibraryGemm.epilogue_call` for this family's builds, ``call`` itself for another
    family's. What a precompile builds must be what a launch binds (dispatch/precompile.py)."""
    return kernel_for(config).epilogue_call(call, dtype) if config.family == FAMILY else call


def kernel_for(config: KernelConfig) -> LibraryGemm:
    """The :class:`LibraryGemm` whose builds ``config`` describes (its majors, tile width, store and
    output dtype); raises ValueError for a config of another family or one this family does not build."""
    if config.family != FAMILY:
        raise ValueError(f"config of family {config.family!r} given to {FAMILY}")
    kernel = library_gemm(config.a_major, config.b_major, config.tile[1], c_from_registers=config.c_from_registers,
                          out_fp32=config.out_fp32, out_e4m3=config.out_e4m3, cluster=config.cluster, bm=config.tile[0],
                          pingpong=config.pingpong, timeline=("GL_TIMELINE", 1) in config.extra,
                          release_lag=dict(config.extra).get("GL_RELEASE_LAG", 1),
                          ctas_per_sm=dict(config.extra).get("GL_CTAS_PER_SM", 1))
    if kernel.config(config.dtype, config.arch, config.epilogue) != config:
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    return kernel


class Sm90Gemm:
    """The general kernel family behind the :class:`~gemm_ladder.library.kernel.Kernel` protocol:
    configs in, builds and bound launches out (the dispatcher's way in; :class:`LibraryGemm` is the
    per-configuration object the tests and benches hold)."""

    family = FAMILY
    splits = RANKED_SPLITS

    def config(self, a_major: str, b_major: str, bn: int, dtype: str, *, store: str = STORE_TMA,
               out_dtype: str | None = None, cluster: int = 2, bm: int = 128, pingpong: bool = False) -> KernelConfig:
        """The build for A ``a_major``, B ``b_major``, tile ``bm`` x ``bn``, ``dtype`` inputs, C stored by
        ``store`` in ``out_dtype`` (default the inputs'; "fp32" and "e4m3" only from registers), clusters of
        ``cluster`` CTAs (2 or 1), ping-pong consumers (``pingpong``, BM 64 or 128) or level 9's."""
        return library_gemm(a_major, b_major, bn, c_from_registers=store == STORE_REGISTERS,
                            out_fp32=out_dtype == "fp32", out_e4m3=out_dtype == "e4m3", cluster=cluster, bm=bm,
                            pingpong=pingpong).config(dtype)

    def supports(self, config: KernelConfig, problem: Operands, **rules) -> str | None:
        a = problem.a
        if isinstance(a, OperandView) and a.tensor.dtype in DTYPES.values() and dtype_name(a.tensor.dtype) != config.dtype:
            return f"a has dtype {a.tensor.dtype}: this build ({config.dtype}) takes {config.dtype} inputs"
        return kernel_for(config).supports(problem.a, problem.b, problem.c, **rules)

    def build(self, config: KernelConfig):
        kernel = kernel_for(config)

        def make():
            return compile_kernel(kernel.translation_unit(config.dtype, config.epilogue), KERNEL_NAME,
                                  arch=config.arch, defines=config.defines())

        return K.built(config, make)

    def bind(self, config: KernelConfig, problem: Operands, *, split: str | None = None,
             c_padding_writable: bool = False) -> BoundLaunch:
        return kernel_for(config.with_epilogue(None)).bind(problem.a, problem.b, problem.c, split=split,
                                                            c_padding_writable=c_padding_writable,
                                                            epilogue=problem.epilogue,
                                                            scales=problem.more[0] if problem.more else None)

    def launch(self, bound: BoundLaunch, stream=None) -> None:
        bound()

    def loaded(self, config: KernelConfig, device: torch.device):
        return kernel_for(config.with_epilogue(None)).loaded(config.dtype, device, config.epilogue)

    def describe(self, config: KernelConfig) -> dict:
        kernel = kernel_for(config.with_epilogue(None))
        return {"name": kernel.name, "source": SOURCE, "tile": list(config.tile), "stages": config.stages,
                "cluster": config.cluster, "consumers": "ping-pong" if config.pingpong else "cooperative"}


#: The general kernel family (library/kernel.py's Kernel protocol).
GEMM = Sm90Gemm()


__all__ = ["FAMILY", "GEMM", "LibraryGemm", "SPLITS", "Sm90Gemm", "bind_key", "kernel_for", "library_gemm", "split_schedule",
           "tile_n_built"]
