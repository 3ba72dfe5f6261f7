"""The small-M library kernel: ``D (M, N) = A (M, K) @ B (N, K)^T`` for M <= 256 (decode, small batches).

Kernel: ``kernels/library/sm90_gemm_small_m.cu`` (its header comment gives the design). It computes
C^T = B A^T so the large N sits on wgmma's M (128 rows of B per tile, two consumer warpgroups) and
M on wgmma's N (BN, the M bucket: 8, 16, 32, 64, 128, 192 or 256), and splits all K iterations
evenly over the CTAs with a deterministic fp32 reduction. The weight B is read once, so the kernel
is memory-bound while M is small; the ring takes every byte of shared memory the plan leaves.

Operands (:class:`~gemm_ladder.library.operand.OperandView`): B (w) K-major (``F.linear``'s weight)
or MN-major (the (K, N) row-major weight of ``x @ W``); A (x) K-major, or MN-major in the buckets
BN >= 64 (M > 32); each with any pitch ``ld`` whose bytes are a multiple of 16 and a 16-byte aligned
base (what a TMA tensor map can describe). An MN-major operand is loaded as 128-byte-swizzled boxes of
64 M or N elements by 64 K rows and read with wgmma's transpose bit (tma_load_operand, mma_k_tile):
an MN-major A tile of BN < 64 rows is narrower than one such box, so those buckets refuse it; a copy
of A costs M x K x 2 bytes, a few percent of the weight's N x K x 2 (the API helper repacks it). C
(M, N) of the inputs' dtype or float32, row-major (any ``ldc >= N``) or column-major (any pitch >= M),
2-byte (4-byte) aligned as its dtype is. One build per (dtype, output dtype, majors).

The designer plans it (:meth:`SmallMGemm.plan`) as the transposed problem ``C^T (N, M) = B A^T``:
the plan's ``a`` is the weight B and its ``b`` is x (A), tile (128, BN, 64), two consumer warpgroups
and a producer warpgroup, and ``c_from_registers`` (no output staging, no output tensor map). The
launch's split (:meth:`SmallMGemm.schedule`) is :class:`~gemm_ladder.design.stream_k.StreamKTail`
over every unit (first_unit 0): the same arithmetic as level 9's tail, the kernel's and the host's.
(A build reducing the partials through a cluster's distributed shared memory instead of a global
workspace was measured no faster and removed: docs/library.md.)
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from gemm_ladder.contract import DTYPES, dtype_name
from gemm_ladder.design.plan import Plan, plan_gemm
from gemm_ladder.design.problem import arch_info, ceil_div
from gemm_ladder.design.smem import max_stages
from gemm_ladder.design.stream_k import INT32_LIMIT, StreamKTail
from gemm_ladder.library import kernel as K
from gemm_ladder.library.bound import BoundLaunch
from gemm_ladder.library.kernel import SPLIT_K, STORE_REGISTERS, KernelConfig, Operands
from gemm_ladder.library.epilogue import EpilogueCall, compile_with_epilogue
from gemm_ladder.library.operand import OperandView
from gemm_ladder.runtime.compiler import CompiledKernel, compile_kernel
from gemm_ladder.runtime.module import LaunchGeometry, LoadedKernel, device_index, load
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import (  # noqa: F401 (re-exported)
    COUNTER_ARENA, COUNTERS, WORKSPACES, CounterArena, split_workspace_refresher,
)
from gemm_ladder.library.lru import cached

#: Largest M this kernel takes; above it the weight is no longer the whole cost (level 9's domain).
SMALL_M_MAX = 256
#: The M buckets, one build each: wgmma N values (PTX ISA, wgmma .m64nNk16: N a multiple of 8, <= 256)
#: that ptx/wgmma_ops.cuh provides. M goes to the smallest bucket >= M (one tile), or to a smaller bucket
#: in ceil(M / BN) tiles where the dispatcher's measured rule says so (dispatch/small_m_tiles.py).
BUCKETS = (8, 16, 32, 64, 128, 192, 256)
#: Weight rows per CTA tile (wgmma M): two consumer warpgroups of 64 rows.
TILE_ROWS = 128
CONSUMERS = 2
#: K per stage: one 128-byte swizzle span of 2-byte elements.
BK = 64
#: K iterations (of BK) each range of a split unit gets at least, by the grid rule (SmallMGemm.ctas): the
#: unit's last contributor adds every range's fp32 partial, so a unit split to one iteration a CTA spends
#: longer reducing than streaming. Measured on the H200 (bench/tiles_forced.py,
#: bench/results/2026-12-04_tiles_forced_small_m_be836b8.json): Mixtral's router 37 x 8 x 4096 (64
#: iterations) took 23.0 us split over 64 CTAs a unit and 9.7 us over 8; T5's wo at M = 1 (48 iterations,
#: 6 units) 12.2 us over 22 a unit, 9.8-9.9 over 4-8; GPT-2's c_proj at M = 1 and 64 (12 iterations)
#: 8.9 and 10.4 us split, 7.1 and 8.0 whole.
MIN_SPLIT_K_ITERS = 8
#: Rows (M or N elements) of one MN-major box: the 128-byte swizzle span (tma_tile.cuh's kMnBoxElems).
MN_BOX_ROWS = 64
SOURCE = "library/sm90_gemm_small_m.cu"
KERNEL_NAME = "sm90_gemm_small_m"
#: The family's name in a KernelConfig.
FAMILY = KERNEL_NAME
#: Tensor maps and launch schedules kept per instance (least recently used dropped first).


#: The counter arena of split launches (runtime/workspace.py; a module global so that tests can swap it).
_COUNTERS = COUNTERS



@functools.lru_cache(maxsize=256)
def split_work(units: int, k_tiles: int, ctas: int) -> StreamKTail:
    """All ``units`` x ``k_tiles`` K iterations split evenly over ``ctas`` CTAs (StreamKTail, first_unit 0).

    Raises ValueError when a CTA would get no iteration (``ctas`` > the iterations: the kernel's
    contributor count assumes every range is non-empty) or the kernel's 32-bit arithmetic would
    overflow ((ctas + 1) x iterations >= 2^31).
    """
    total = units * k_tiles
    if not 1 <= ctas <= total:
        raise ValueError(f"ctas = {ctas}: the grid must have between 1 and {total} CTAs (one K iteration each at least)")
    if (ctas + 1) * total >= INT32_LIMIT:
        raise ValueError(f"({ctas} CTAs + 1) x {total} K iterations >= 2^31: the kernel's split arithmetic is 32-bit")
    return StreamKTail(units=units, clusters=ctas, k_tiles=k_tiles, first_unit=0)


@dataclass(frozen=True, eq=False)
class SmallMGemm:
    """One M bucket of the small-M kernel: ``bn`` columns of C^T (rows of C) per tile.

    ``stages``: the ring depth; None takes as many as fit in shared memory (design.smem.max_stages).
    ``timeline``: a measuring build, never the dispatcher's: the kernel's GL_TIMELINE stamps (per CTA
    %globaltimer and clock64 at the points of its TimelineSlot enum, into its ``gl_timeline_ns`` /
    ``gl_timeline_clk`` __device__ arrays; kernels/include/gemm_ladder/timeline.cuh), read by
    bench/small_m_timeline.py. The same plan, ring and launch as without it.
    ``ctas_per_sm``: 1 (every shipped build) or 2, an experiment's build for BN <= 64 (the kernel's
    GL_CTAS_PER_SM): launch bounds of two CTAs per SM, so 80 registers per thread at launch and 96 for
    the consumers after setmaxnreg (two CTAs of 384 threads share the SM's 65536 registers: CUDA C++
    Programming Guide, compute capability 9.0 limits); the default ring is then the deepest that fits in
    half the SM's shared memory, and the loaded kernel asks for the largest shared-memory carveout
    (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 100) so that both rings fit. The grid rule
    (:meth:`ctas`) takes its residency from the occupancy API, so twice the CTAs split the work.
    """

    bn: int
    stages: int | None = None
    timeline: bool = False
    ctas_per_sm: int = 1
    _maps: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _specs: dict = field(default_factory=dict, repr=False)
    _launches: OrderedDict = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        if self.bn not in BUCKETS:
            raise ValueError(f"bn = {self.bn}: the small-M kernel is built for BN in {BUCKETS}")
        if self.ctas_per_sm not in (1, 2) or (self.ctas_per_sm == 2 and self.bn > 64):
            raise ValueError(f"ctas_per_sm = {self.ctas_per_sm} with BN = {self.bn}: 1, or 2 for BN <= 64 (the "
                             "consumers' 96 registers hold at most a 64 x 64 fragment's 32 accumulators)")

    @property
    def tile(self) -> tuple[int, int, int]:
        """(rows of B, rows of A, K) per tile: (128, BN, 64)."""
        return (TILE_ROWS, self.bn, BK)

    def ring_stages(self, dtype: str, arch: str = "sm_90a") -> int:
        """The ring depth: ``stages``, or the most that fit with no output staging."""
        if self.stages is not None:
            return self.stages
        info = arch_info(arch)
        if self.ctas_per_sm > 1:  # each CTA's block plus the system's reservation in its share of the SM
            info = replace(info, max_smem_per_block=min(info.max_smem_per_block, info.smem_per_sm // self.ctas_per_sm
                                                        - info.smem_reserved_per_block))
        return max_stages(bm=TILE_ROWS, bn=self.bn, bk=BK, elem_bytes=DTYPES[dtype].itemsize, arch=info,
                          c_from_registers=True)

    # --- building (no GPU needed) -----------------------------------------------------------------
    # ``a_major`` / ``b_major``: A's (x) and B's (w) order, "k" or "mn" (library/operand.py). In the plan
    # of the transposed problem they swap places: its a is B, its b is A.
    def config(self, dtype: str, arch: str = "sm_90a", *, out_fp32: bool = False, a_major: str = "k",
               b_major: str = "k", epilogue_source: str | None = None) -> KernelConfig:
        """The build of this bucket for ``dtype`` inputs, A ``a_major`` and B ``b_major``, a float32
        output (``out_fp32``) or not, and the fused epilogue ``epilogue_source`` (or none): its key and
        its ``-D`` constants (:meth:`KernelConfig.defines`). The kernel computes C^T = B A^T
        (``swap_operands``: its plan's first operand is B), stores from registers and splits K."""
        return _config(self, dtype, arch, out_fp32, a_major, b_major).with_epilogue(epilogue_source)

    def defines(self, dtype: str, arch: str = "sm_90a", *, a_major: str = "k", b_major: str = "k") -> dict[str, int]:
        """The plan's compile-time constants for ``dtype`` ('bf16' or 'fp16'); raises PlanRefused."""
        return self.config(dtype, arch, a_major=a_major, b_major=b_major).plan_defines()

    #: The kernel's accumulator pairs are neighbours along a column of its C (rows m, m + 1).
    pair_along_kernel_cols = False

    def build(self, dtype: str, arch: str = "sm_90a", *, out_fp32: bool = False, a_major: str = "k",
              b_major: str = "k", epilogue_source: str | None = None) -> CompiledKernel:
        """Compile (or fetch from the cache) the cubin for ``dtype``; ``out_fp32`` writes C in float32;
        ``epilogue_source``: a fused epilogue's generated code (library/epilogue.py), or none.

        Needs nvcc, not a GPU. Raises CompilerNotFoundError without nvcc, CompileError with its message,
        PlanRefused for majors this bucket cannot load (A MN-major below BN = 64).
        """
        return SMALL_M.build(self.config(dtype, arch, out_fp32=out_fp32, a_major=a_major, b_major=b_major,
                                         epilogue_source=epilogue_source))

    def translation_unit(self, config: KernelConfig) -> str:
        """The source compiled for ``config``: a fused epilogue's generated code, then the kernel."""
        # With an epilogue: its loads branch around out-of-range elements here (fused_epilogue.cuh's
        # GL_EPI_BRANCHED_LOADS): this kernel stores each pair right after its epilogue, and the
        # branch-free loads, hoisted together by ptxas, spilled.
        epi = f'#define GL_EPI_BRANCHED_LOADS 1\n{config.epilogue}' if config.epilogue else ""
        return (f'// gemm-ladder library: small M, BN = {self.bn}, {config.dtype}, A {config.a_major}-major, '
                f'B {config.b_major}-major\n{epi}#include "{SOURCE}"\n')

    def geometry(self, dtype: str) -> LaunchGeometry:
        """Threads (384: a producer and two consumer warpgroups), dynamic shared memory, no cluster."""
        d = self.defines(dtype)
        return LaunchGeometry(threads=int(d["GL_THREADS"]), dynamic_smem=int(d["GL_SMEM_BYTES"]), cluster=1)

    def plan(self, m: int, n: int, k: int, dtype: str, *, a_major: str = "k", b_major: str = "k",
             lda: int | None = None, ldb: int | None = None) -> Plan:
        """The designer's plan of this kernel on D (M, N) = A (M, K) @ B (N, K)^T.

        It is the plan of the transposed problem C^T (N, M) = B A^T that the kernel computes: the
        plan's ``m`` is N and its ``a`` map is the weight B (``b_major``, ``ldb``), its ``n`` is M and
        its ``b`` map is A (``a_major``, ``lda``); c is stored from registers (no output tensor map).
        Its ring (stages, barriers, phases, expect_tx) and shared-memory map are the kernel's
        (``kernel_defines()`` are its ``-D`` constants); the launch's split of the work is
        :meth:`schedule`, not the plan's persistent schedule. Raises PlanRefused naming the rule.
        """
        plan = plan_gemm(n, m, k, dtype, tile=self.tile, stages=self.ring_stages(dtype), cluster=1,
                         consumers=CONSUMERS, persistent=True, producer_warpgroup=True, c_from_registers=True,
                         a_major=b_major, b_major=a_major, lda=ldb, ldb=lda)
        return plan

    # --- operands ----------------------------------------------------------------------------------
    def supports(self, a: OperandView, b: OperandView, c: torch.Tensor) -> str | None:
        """None when this kernel computes ``c = A @ B^T`` for these operands, else the rule broken.

        a: A (M, K), x; b: B (N, K), the weight; c: the (M, N) output. Rules: bf16 or fp16 inputs of
        one dtype, c in that dtype or float32, all on one CUDA device; K equal; M <= 256; A and B
        K-major with a 16-byte aligned base and a pitch of a multiple of 16 bytes (TMA, CUDA Driver
        API cuTensorMapEncodeTiled: globalAddress, globalStrides); c of shape (M, N), row-major with
        a pitch >= N or column-major with a pitch >= M. Empty M, N or K are supported (nothing to
        launch, or zeros).
        """
        dtype = a.tensor.dtype
        if dtype not in DTYPES.values():
            return f"a has dtype {dtype}: the small-M kernel takes bfloat16 or float16"
        if b.tensor.dtype != dtype:
            return f"a and b must share a dtype, got a={dtype}, b={b.tensor.dtype}"
        if c.dtype not in (dtype, torch.float32):
            return f"c has dtype {c.dtype}: the output is the inputs' dtype ({dtype}) or torch.float32"
        m, n, k = a.rows, b.rows, a.k
        if b.k != k:
            return f"a is (M, K) = ({m}, {k}) and b is (N, K) = ({n}, {b.k}): K differs"
        if m > SMALL_M_MAX:
            return f"M = {m} > {SMALL_M_MAX}: the small-M kernel takes M <= {SMALL_M_MAX}"
        if max(n, k) >= INT32_LIMIT:
            return f"N = {n}, K = {k}: TMA coordinates are 32-bit, N and K must be below 2^31"
        if c.dim() != 2 or tuple(c.shape) != (m, n):
            return f"c has shape {tuple(c.shape)}, expected (M, N) = ({m}, {n})"
        sm, sn = c.stride()
        if not ((sn == 1 or n <= 1) and (sm >= n or m <= 1)) and not ((sm == 1 or m <= 1) and (sn >= m or n <= 1)):
            return (f"c has strides {(sm, sn)}: it must be row-major (stride (ldc, 1), ldc >= N = {n}) or "
                    f"column-major (stride (1, ld), ld >= M = {m})")
        for name, v in (("a", a), ("b", b)) if 0 not in (m, n, k) else ():  # empty: no tensor map is made
            if name == "a" and v.major == "mn" and self.bn % MN_BOX_ROWS:
                return (f"a is MN-major: the small-M kernel loads an MN-major A in boxes of {MN_BOX_ROWS} rows, "
                        f"which this bucket's BN = {self.bn} does not fill (M > 32 takes a bucket that does); "
                        "repack it K-major")
            if not v.tma_ok:
                return (f"{name} (base {v.data_ptr:#x}, ld {v.ld} elements = {v.ld * v.elem_bytes} bytes) is not "
                        "16-byte aligned in base and pitch: a TMA tensor map cannot describe it "
                        "(cuTensorMapEncodeTiled globalAddress and globalStrides); repack it")
        for name, t in (("a", a.tensor), ("b", b.tensor), ("c", c)):
            if t.device.type != "cuda":
                return f"{name} is on {t.device}: the small-M kernel runs on a CUDA device"
        if not a.tensor.device == b.tensor.device == c.device:
            return f"a, b and c must be on one device, got {a.tensor.device}, {b.tensor.device}, {c.device}"
        return None

    # --- launching (GPU) ---------------------------------------------------------------------------
    def loaded(self, dtype: str, device: torch.device, *, out_fp32: bool = False, a_major: str = "k",
               b_major: str = "k", epilogue_source: str | None = None) -> LoadedKernel:
        """The kernel for ``dtype`` and these majors loaded on ``device`` (compiled first if needed)."""
        config = self.config(dtype, out_fp32=out_fp32, a_major=a_major, b_major=b_major,
                             epilogue_source=epilogue_source)

        def make():
            g = self.geometry(dtype)
            kernel = load(SMALL_M.build(config), device, threads=g.threads, dynamic_smem=g.dynamic_smem,
                          cluster=g.cluster)
            if self.ctas_per_sm > 1:  # ask for all of the SM's shared memory, so that two rings fit beside each other
                kernel.prefer_shared_memory_carveout(100)
            return kernel

        return K.loaded(config, device_index(device), make)

    def ctas(self, m: int, n: int, k: int, resident: int, splits: int | None = None) -> int:
        """The grid (CTAs) for a problem, by the documented rule.

        ``splits`` None: with fewer units than resident CTAs, each unit's K split in
        min(resident // units, K iterations // :data:`MIN_SPLIT_K_ITERS`) even ranges, at least one (no
        CTA straddles two units); with as many units as resident CTAs or more, min(resident CTAs, K
        iterations) CTAs share every iteration evenly (stream-K). On the H200 the first beat stream-K
        wherever units < 132 and stream-K beat one CTA per unit at 224 units; the cap at
        MIN_SPLIT_K_ITERS iterations a range was measured on decode rows with few units
        (docs/measured-choices.md). ``splits`` = s:
        units x min(s, K tiles), each unit's K tiles split in s even ranges (classic split-K; s = 1
        splits nothing and needs no workspace).
        """
        units = self.units(m, n)
        k_tiles = ceil_div(k, BK)
        if splits is None:
            if units < resident:
                return units * max(1, min(resident // units, k_tiles // MIN_SPLIT_K_ITERS))
            return min(resident, units * k_tiles)
        if splits < 1:
            raise ValueError(f"splits = {splits}: at least 1 (None chooses)")
        return units * min(splits, k_tiles)

    def schedule(self, m: int, n: int, k: int, ctas: int) -> StreamKTail:
        """How ``ctas`` CTAs share the K iterations of every unit (N tile x M tile) of (M, N, K)."""
        return split_work(self.units(m, n), ceil_div(k, BK), ctas)

    def units(self, m: int, n: int) -> int:
        """Work units of (M, N): N tiles of 128 x M tiles of BN."""
        return ceil_div(n, TILE_ROWS) * ceil_div(m, self.bn)

    def split_text(self) -> str:
        """The split of a launch in words (explain's ``split``)."""
        return ("K split by the small-M rule (SmallMGemm.ctas: whole units split evenly, or stream-K past the "
                "resident CTAs), partials reduced through a global workspace by the last contributor")

    def _tensor_map(self, name: str, view: OperandView, a: OperandView, b: OperandView, dtype: str):
        """The encoded map ``name`` of the plan ('a': the weight B, 'b': A) over ``view``'s storage.

        Cached per operand: a weight keeps its map while the activations change from call to call, so
        a decode step encodes one map (Python's cost per map: docs/measured-choices.md), not two, and plans nothing. The plan gives the
        map's dimensions, box and swizzle for the operands' majors; the pitch is the view's.
        """
        key = (name, view.data_ptr, view.ld, view.major, view.rows, view.k, dtype)

        def encode():
            m, n, k = a.rows, b.rows, a.k
            plan_key = (m, n, k, dtype, a.major, b.major, a.ld, b.ld)  # the plan checks the pitches TMA takes
            specs = cached(self._specs, plan_key, lambda: self.plan(m, n, k, dtype, a_major=a.major, b_major=b.major,
                                                                    lda=a.ld, ldb=b.ld).tensor_maps)
            spec = replace(specs[name], global_strides=(view.ld * view.elem_bytes,))
            return encode_tiled(spec.encode_kwargs(view.data_ptr))

        return cached(self._maps, key, encode)

    def _tensor_map_kwargs(self, name: str, view: OperandView, a: OperandView, b: OperandView, dtype: str) -> dict:
        """The cuTensorMapEncodeTiled keyword arguments of :meth:`_tensor_map` (the same plan and pitch)."""
        m, n, k = a.rows, b.rows, a.k
        plan_key = (m, n, k, dtype, a.major, b.major, a.ld, b.ld)
        specs = cached(self._specs, plan_key, lambda: self.plan(m, n, k, dtype, a_major=a.major, b_major=b.major,
                                                                lda=a.ld, ldb=b.ld).tensor_maps)
        return replace(specs[name], global_strides=(view.ld * view.elem_bytes,)).encode_kwargs(view.data_ptr)

    def _checked(self, a: OperandView, b: OperandView, c: torch.Tensor, epilogue: EpilogueCall | None):
        """(M, N, K) of a call :meth:`supports` accepts and whose epilogue is bound to c's shape, else ValueError."""
        reason = self.supports(a, b, c)
        if reason is not None:
            raise ValueError(reason)
        m, n, k = a.rows, b.rows, a.k
        if epilogue is not None and (epilogue.rows, epilogue.cols) != ((n, m) if epilogue.swap else (m, n)):
            raise ValueError(f"epilogue bound to a {epilogue.rows} x {epilogue.cols} output, but c is {m} x {n}"
                             + (" (transposed)" if epilogue.swap else ""))
        return m, n, k

    def launch(self, a: OperandView, b: OperandView, c: torch.Tensor, *, splits: int | None = None,
               epilogue: EpilogueCall | None = None) -> None:
        """c = A @ B^T on the current stream. a: A (M, K); b: B (N, K); c: (M, N) (see :meth:`supports`).

        ``splits``: see :meth:`ctas` (None: the documented rule). Under CUDA graph capture the units
        are not split (splits = 1): a captured graph would keep the workspace's addresses beyond its
        cache. The result is bitwise the same on every run with the same grid (the partials are added
        in K order).

        ``epilogue``: a fused epilogue bound to the caller's output and oriented (``swap``: c is the
        transpose of the caller's output), applied after the reduction, before the one rounding.

        Raises ValueError with the rule when :meth:`supports` refuses the operands or ``splits``
        cannot be used (or K = 0 with an epilogue: the caller decides that case);
        EpilogueCompileError when nvcc rejects an epilogue's CUDA; CudaError from the driver.
        """
        m, n, k = self._checked(a, b, c, epilogue)
        if m == 0 or n == 0:
            return
        if k == 0:
            if epilogue is not None:
                raise ValueError("K = 0 with an epilogue: nothing to launch; the caller applies the epilogue to zeros")
            c.zero_()  # the empty sum
            return
        self.bind(a, b, c, splits=splits, epilogue=epilogue)()

    def bind(self, a: OperandView, b: OperandView, c: torch.Tensor, *, splits: int | None = None,
             epilogue: EpilogueCall | None = None) -> BoundLaunch:
        """:meth:`launch` bound to these operands' addresses and the current stream, for repeated calls
        (library/bound.py): checks, schedule, tensor maps and packed arguments done once; each call of
        the result takes fresh zeroed counters for a split launch and launches. With ``epilogue`` the
        kernel is its build and takes its EpilogueParams last (the kernel's GL_EPILOGUE_ARG), bound to
        the epilogue inputs' addresses; its scalars can be refreshed per call
        (:meth:`BoundLaunch.set_scalars`). M, N and K must be positive (empty problems are the
        caller's). Raises as :meth:`launch`; launches nothing."""
        m, n, k = self._checked(a, b, c, epilogue)
        if min(m, n, k) < 1:
            raise ValueError(f"M, N, K = {m}, {n}, {k}: an empty problem is not bound (launch handles it)")
        dtype = dtype_name(a.tensor.dtype)
        out_fp32 = c.dtype == torch.float32
        device = a.tensor.device
        source = epilogue.source() if epilogue is not None else None
        kernel = compile_with_epilogue(lambda: self.loaded(dtype, device, out_fp32=out_fp32, a_major=a.major,
                                                           b_major=b.major, epilogue_source=source), epilogue)
        if torch.cuda.is_current_stream_capturing():
            splits = 1
        index = device_index(device)

        def choose() -> StreamKTail:
            return self.schedule(m, n, k, self.ctas(m, n, k, kernel.max_active_clusters(device), splits))

        key = (m, n, k, splits, index, out_fp32, a.major, b.major, source)  # the build's occupancy
        sched = cached(self._launches, key, choose)
        stream = torch.cuda.current_stream(device)
        split_args = [ctypes.c_void_p(0), ctypes.c_void_p(0)]  # partials, counters: unused unless split
        ldc_m, ldc_n = c.stride()
        maps = [self._tensor_map("a", b, a, b, dtype), self._tensor_map("b", a, a, b, dtype)]  # plan's a = B
        args = [*maps, ctypes.c_void_p(c.data_ptr()), ctypes.c_longlong(ldc_m),
                ctypes.c_longlong(ldc_n), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
                ctypes.c_int(sched.max_contributors), *split_args]
        params = None
        if epilogue is not None:  # sm90_gemm_small_m.cu's GL_EPILOGUE_ARG: one more argument, last
            params = epilogue.params(pair_along_cols=self.pair_along_kernel_cols != epilogue.swap)
            args.append(params)
        # What each argument above is (BoundLaunch.roles; the compiled host path's template): the plan's
        # map "a" is over the kernel's B (the weight), its "b" over A.
        roles = [("map", "B", self._tensor_map_kwargs("a", b, a, b, dtype)),
                 ("map", "A", self._tensor_map_kwargs("b", a, a, b, dtype)), ("ptr", "C"),
                 *[("value",)] * 6, ("partials",), ("counters",)] + ([("epilogue",)] if epilogue is not None else [])
        prepared = kernel.prepare((sched.clusters, 1, 1), args, stream.cuda_stream)  # StreamKTail's clusters: CTAs
        if sched.max_contributors <= 1:
            return BoundLaunch(prepared, params=params, roles=roles)
        floats, counters = sched.workspace_floats(1, CONSUMERS, self.bn), sched.counters(1, CONSUMERS)

        fresh_counters = split_workspace_refresher(stream, floats, counters, split_args, _COUNTERS)
        return BoundLaunch(prepared, fresh_counters, params=params, roles=roles, workspace=(floats, counters))


@functools.lru_cache(maxsize=1024)
def _config(kernel: SmallMGemm, dtype: str, arch: str, out_fp32: bool, a_major: str, b_major: str) -> KernelConfig:
    extra = ((("GL_TIMELINE", 1),) if kernel.timeline else ()) + (
        (("GL_CTAS_PER_SM", kernel.ctas_per_sm),) if kernel.ctas_per_sm != 1 else ())
    return KernelConfig(FAMILY, dtype=dtype, out_dtype="fp32" if out_fp32 else dtype, arch=arch, a_major=a_major,
                        b_major=b_major, tile=kernel.tile, stages=kernel.ring_stages(dtype, arch), cluster=1,
                        consumers=CONSUMERS, producer_warpgroup=True, c_ring=0, store=STORE_REGISTERS,
                        schedule=SPLIT_K, swap_operands=True, extra=extra)


_INSTANCES: dict[int, SmallMGemm] = {}


def bucket(m: int) -> int:
    """The smallest BN in :data:`BUCKETS` that holds M rows; raises ValueError outside 0..256."""
    if not 0 <= m <= SMALL_M_MAX:
        raise ValueError(f"M = {m}: the small-M kernel takes 0 <= M <= {SMALL_M_MAX}")
    return next(bn for bn in BUCKETS if bn >= m)


def small_m_kernel(bn: int) -> SmallMGemm:
    """The cached :class:`SmallMGemm` of bucket ``bn``; raises ValueError when ``bn`` is not in :data:`BUCKETS`.

    A bucket smaller than M computes M in ceil(M / BN) tiles (the kernel's units are N tiles x M
    tiles); the dispatcher chooses how many (dispatch/small_m_tiles.py)."""
    inst = _INSTANCES.get(bn)
    if inst is None:
        inst = _INSTANCES[bn] = SmallMGemm(bn)
    return inst


def small_m_gemm(m: int) -> SmallMGemm:
    """The cached :class:`SmallMGemm` for M's bucket (:func:`bucket`: M in one tile); raises ValueError
    outside 0..256."""
    return small_m_kernel(bucket(m))


def kernel_for(config: KernelConfig) -> SmallMGemm:
    """The :class:`SmallMGemm` whose builds ``config`` describes (its bucket, ring depth and experiment
    switches); raises ValueError for a config of another family or one this family does not build."""
    if config.family != FAMILY:
        raise ValueError(f"config of family {config.family!r} given to {FAMILY}")
    extra = dict(config.extra)
    kernel = small_m_kernel(config.tile[1])
    if extra or config.stages != kernel.ring_stages(config.dtype, config.arch):
        kernel = _variant(config.tile[1], config.stages, bool(extra.get("GL_TIMELINE")), extra.get("GL_CTAS_PER_SM", 1))
    if kernel.config(config.dtype, config.arch, out_fp32=config.out_fp32, a_major=config.a_major,
                     b_major=config.b_major, epilogue_source=config.epilogue) != config:
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    return kernel


@functools.lru_cache(maxsize=64)
def _variant(bn: int, stages: int, timeline: bool, ctas_per_sm: int) -> SmallMGemm:
    return SmallMGemm(bn, stages=stages, timeline=timeline, ctas_per_sm=ctas_per_sm)


class Sm90GemmSmallM:
    """The small-M kernel family behind the :class:`~gemm_ladder.library.kernel.Kernel` protocol (the
    dispatcher's way in; :class:`SmallMGemm` is the per-bucket object the tests and benches hold). Its
    split is its own rule (:meth:`SmallMGemm.ctas`): no split policy to rank."""

    family = FAMILY
    splits: tuple[str, ...] = ()

    def config(self, bn: int, dtype: str, *, a_major: str = "k", b_major: str = "k",
               out_dtype: str | None = None) -> KernelConfig:
        """The build of bucket ``bn`` for ``dtype`` inputs, A ``a_major``, B ``b_major``, C in
        ``out_dtype`` (default the inputs'; or "fp32")."""
        return small_m_kernel(bn).config(dtype, out_fp32=out_dtype == "fp32", a_major=a_major, b_major=b_major)

    def supports(self, config: KernelConfig, problem: Operands, **rules) -> str | None:
        a = problem.a
        if a.tensor.dtype in DTYPES.values() and dtype_name(a.tensor.dtype) != config.dtype:
            return f"a has dtype {a.tensor.dtype}: this build ({config.dtype}) takes {config.dtype} inputs"
        if (a.major, problem.b.major) != (config.a_major, config.b_major):
            return (f"A is {a.major}-major and B {problem.b.major}-major: this build reads A {config.a_major}-major "
                    f"and B {config.b_major}-major")
        return kernel_for(config).supports(problem.a, problem.b, problem.c, **rules)

    def build(self, config: KernelConfig) -> CompiledKernel:
        kernel = kernel_for(config)
        return K.built(config, lambda: compile_kernel(kernel.translation_unit(config), KERNEL_NAME, arch=config.arch,
                                                      defines=config.defines()))

    def bind(self, config: KernelConfig, problem: Operands, *, splits: int | None = None) -> BoundLaunch:
        return kernel_for(config.with_epilogue(None)).bind(problem.a, problem.b, problem.c, splits=splits,
                                                            epilogue=problem.epilogue)

    def launch(self, bound: BoundLaunch, stream=None) -> None:
        bound()

    def loaded(self, config: KernelConfig, device: torch.device) -> LoadedKernel:
        return kernel_for(config.with_epilogue(None)).loaded(config.dtype, device, out_fp32=config.out_fp32,
                                                             a_major=config.a_major, b_major=config.b_major,
                                                             epilogue_source=config.epilogue)

    def describe(self, config: KernelConfig) -> dict:
        # The names explain has always printed (bench/small_m_timeline.py reads them).
        return {"name": f"SmallMGemm(bn={config.tile[1]})", "source": SOURCE, "tile": list(config.tile),
                "bn": config.tile[1]}


#: The small-M kernel family (library/kernel.py's Kernel protocol).
SMALL_M = Sm90GemmSmallM()
