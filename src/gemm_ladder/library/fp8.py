"""The fp8 library kernel family: ``torch._scaled_mm``'s product on gemm-ladder's own kernel (``quantize_fp8``,
which makes its inputs, is library/quantized.py's).

The family ``sm90_fp8_gemm`` (:data:`FP8_GEMM`, the :class:`~gemm_ladder.library.kernel.Kernel`
protocol) takes a :class:`~gemm_ladder.library.kernel.KernelConfig` whose input dtypes are fp8
(``dtype`` A's, ``b_dtype`` B's where it differs: "e4m3" or "e5m2"), whose ``scale`` is the scale
granularity and whose ``out_dtype`` is "bf16", "fp16", "fp32" or "e4m3" (quantized). :class:`Fp8Kernel`
is the per-configuration object; its builds and loaded modules are the kernel module's, keyed by the
config (library/kernel.py ``built`` and ``loaded``).

Kernel: ``kernels/library/sm90_fp8_gemm.cu`` (its header comment gives the design): fp8 A (M, K)
row-major and B given as torch gives ``mat2`` to ``_scaled_mm``, (K, N) column-major, so that ``B.T`` is
the (N, K) K-major operand the fp8 wgmma reads; fp32 accumulation promoted into an fp32 main accumulator
every 128-wide K block; output bf16, fp16 or fp32 written from registers, or (``store="tma"``, bf16 and
fp16 only) staged in shared memory and written by TMA stores; an optional bias.

Split K (:attr:`Fp8Kernel.split`, :func:`split_plan`): where the tiles are fewer than the SMs (decode's
M <= 128) and each has at least :data:`MIN_SPLIT_TILE_K_BLOCKS` K blocks (K >= 6144), the launch builds
the kernel's stream-K variant and splits every tile's K blocks over up to
one CTA per SM (at least :data:`MIN_SPLIT_K_BLOCKS` K blocks each); where the tiles fill the SMs but
their last wave is short (whole-tile waves less efficient than :data:`MAX_WAVE_EFFICIENCY`), the last
partial wave and the one before it are split over the SMs and the tiles before them run whole. Each split
tile's last contributor adds the fp32 partials in K order (bitwise repeatable) and runs the epilogue. :data:`SPLIT_DEFAULT` (environment
GL_FP8_SPLIT at import: "auto" or "none") turns it off; a CUDA-graph capture runs unsplit.

The output store (:attr:`Fp8Kernel.store`): "registers" (plain global stores from the accumulators, any
pitch) or "tma" (each consumer's 64 rows staged in shared memory and stored by TMA, the consumers going
on to the next tile meanwhile; a ring of fewer stages where the staging buffers need the room:
:func:`stages_for`). The launch builds :data:`STORE_DEFAULT` where the output allows it
(:func:`store_for`: a bf16 or fp16 output with a 16-byte aligned base and row pitch), else the register
store; :func:`describe` (``explain_scaled_mm``) names the store a call uses and why.

Scale layouts (``torch._scaled_mm``'s, checked against torch/_meta_registrations.py):

* tensorwise: ``scale_a`` and ``scale_b`` one fp32 element each;
* rowwise: ``scale_a`` (M, 1), ``scale_b`` (1, N), fp32;
* blockwise 1 x 128 with 128 x 128: ``scale_a`` (M, ceil(K/128)) (one per row and K block) and
  ``scale_b`` (ceil(K/128), ceil(N/128)) (one per 128 x 128 block of mat2), fp32, any strides. The
  kernel reads ``scale_a`` K-block-major (torch's column-major layout, ``quantize_fp8``'s output): any
  other layout, or M not a multiple of 4 (the tensor map's 16-byte row pitch), is copied into that
  layout first (M x K/128 x 4 bytes).

K: a multiple of 16 (a TMA row pitch of 1-byte elements is a multiple of 16 bytes; torch asks the same).
K not a multiple of 128 is handled: TMA fills the last K block's missing columns of A and B with zeros.
M and N: any (torch asks N % 16 == 0; this kernel does not). Refused (GemmInputError, before any
launch): other dtypes, layouts or scale shapes; the other blockwise pairings torch knows (1 x 128 with
1 x 128, 128 x 128 with 1 x 128: NotSupportedError).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import os
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import is_fake

from gemm_ladder.design.problem import arch_info
from gemm_ladder.design.stream_k import INT32_LIMIT, SplitOverflowError, StreamKTail, plan_wave
from gemm_ladder.design.tensor_maps import TensorMapSpec
from gemm_ladder.contract import FP8_DTYPES
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError, OutsideDomainError
from gemm_ladder.library import kernel as K
from gemm_ladder.library.kernel import DATA_PARALLEL, STORE_REGISTERS, STORE_TMA, STREAM_K, KernelConfig, Operands
from gemm_ladder.library.lru import cached
from gemm_ladder.library.quantized import QUANT_OUT, SCALE_BLOCK, kernel_views, quantize_fp8_into, quantized_buffers
from gemm_ladder.runtime.compiler import compile_kernel
from gemm_ladder.runtime.module import device_index, load
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import COUNTERS, WORKSPACES

SOURCE = "library/sm90_fp8_gemm.cu"
FAMILY = "sm90_fp8_gemm"
KERNEL_NAME = "fp8_gemm_kernel"
BM = BK = 128
#: Tile heights: 128 (two consumer warpgroups of 64 rows) or 64 (one: decode's M <= 64, where half of a
#: 128-row tile is rows past M). The launch takes 64 where M <= 64 unless :data:`TILE_M_DEFAULT` says "128".
TILE_M = (128, 64)
#: The tile height the launch asks for (:func:`tile_m`): "128" always, or "auto" (64 where M <= 64). The
#: environment's GL_FP8_TILE_M at import, else "auto": on the H200 the 64-row build ran 1.05-1.49x faster
#: than the 128-row one at every decode shape timed, each scaling, M 1-64 (interleaved in one run:
#: bench/results/2026-12-04_fp8_tile_m_both_64162fa.json).
TILE_M_CHOICES = ("128", "auto")
TILE_M_DEFAULT = os.environ.get("GL_FP8_TILE_M", "auto")
#: Tile widths: 128, or 64 when 128-wide tiles would leave SMs idle (small M or N; not the quantized output).
TILE_N = (128, 64)
#: The wide tile width (:func:`wide_tile_rule` chooses it): 13% fewer shared-memory bytes (TMA writes and wgmma
#: reads) per flop than BN 128; its main accumulator and one temporary fill the registers, so it promotes serially
#: (``overlap=False``), unsplit, at 128 rows, its blockwise scale_b from the shared copy or read in the block (two
#: values a K block: a 192-wide tile spans two 128-column blocks of B); never for the quantized output.
WIDE_TILE_N = 192
#: The launch takes :data:`WIDE_TILE_N` where :func:`wide_tile_rule` predicts it faster: the environment's
#: GL_FP8_WIDE_TILE ("1" or "0") at import, else on; a benchmark sets this attribute to time both
#: (bench/fp8.py --alt WIDE_TILE=0).
WIDE_TILE = os.environ.get("GL_FP8_WIDE_TILE", "1") == "1"
#: A 192-wide tile's time over 1.5 times a 128-wide tile's (same K; the per-flop cost of its K loop and
#: epilogue): fitted to the wave counts of the eight 128-row shapes of the first measurement, where it was
#: 0.95-0.99 (H100, bench/experiments/fp8_variants.py, bench/results/2026-12-07_fp8_variants_bn192_*_5e4dda3.json;
#: docs/fp8.md "The 192-wide tile").
WIDE_TILE_COST = 0.97
#: Stages of the ring per tile width: 6 x (16 KiB of A + 16 KiB of B (+ 512 B of scale_a)), 8 x (16 + 8 KiB
#: (+ 512 B)), within the 227 KiB a block may have.
STAGES = {128: 6, 64: 8, 192: 5}
#: Stages of the 64-row tile's ring per tile width: 8 x (8 KiB of A + 16 KiB of B), 13 x (8 + 8 KiB), the
#: most that fit beside the one consumer's staging buffer.
STAGES_64_ROWS = {128: 8, 64: 13}
SCALE_MODES = ("tensorwise", "rowwise", "blockwise")
#: The promotion interval in K (elements): the kernel adds each 128-wide K block's wgmma result, scaled,
#: into its fp32 main accumulator.
PROMOTION_K = 128
OUT_DTYPES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
#: The launch's build: True overlaps each K block's promotion with the next block's wgmmas (two temporary
#: accumulators); False promotes after each block's wgmmas complete (one temporary; kept for comparison).
OVERLAP_PROMOTION = True
#: The launch's blockwise build loads each K block's scale_b one block ahead (Fp8Kernel.scale_b_ahead), so that
#: the next block's wgmmas do not wait on that global load: measured 1.03-1.06x faster than loading it in the
#: same block, bitwise equal, at the issue's five shapes (H100, bench/experiments/fp8_variants.py,
#: bench/results/2026-12-05_fp8_variants_h100_6d06324.json).
SCALE_B_AHEAD = True
#: The launch's blockwise build reads scale_b from a shared copy of the tile's column made at the start of
#: each K loop (Fp8Kernel.scale_b_shared): no global load in the K loop, whose release waited on the load
#: ahead. Where :func:`scale_b_source` takes it (K blocks in [MIN_SHARED_SCALE_B_BLOCKS,
#: MAX_SHARED_SCALE_B_BLOCKS], unsplit; else the load ahead), measured on an H100 against the load ahead, interleaved, bitwise
#: equal (bench/experiments/fp8_variants.py, bench/results/2026-12-05_fp8_shared_h100_599ff27.json): 1.005-1.085x
#: at K blocks 16-128; 0.966x at 12 (4096 x 24576 x 1536: the per-tile copy and its two barriers are not
#: paid back), 0.995x on a split (64 x 4096 x 14336). GL_FP8_SCALE_B_SHARED=0 in the environment at import: off.
SCALE_B_SHARED = os.environ.get("GL_FP8_SCALE_B_SHARED", "1") == "1"
#: The K blocks (of 128) a shared scale_b copy holds (the kernel's kSharedScaleBBlocks): K <= 16384, the
#: largest K measured with it (one global load per thread for the copy).
MAX_SHARED_SCALE_B_BLOCKS = 128
#: The fewest K blocks a tile has where the launch takes the shared copy (above: 12 blocks measured slower,
#: 16 not).
MIN_SHARED_SCALE_B_BLOCKS = 16
#: The output store the launch builds where the output allows it (:func:`store_for`): the TMA store, which
#: removes the register store's per-tile cost with bitwise-equal outputs (docs/fp8.md, "The output store").
STORE_DEFAULT = STORE_TMA
#: The output dtypes the TMA store writes (2-byte elements in 128-byte swizzled panels of 64 columns).
TMA_STORE_OUT = ("bf16", "fp16")
#: Dynamic shared memory a block may opt in to on sm_90 (the designer's arch table).
SMEM_LIMIT = arch_info("sm_90a").max_smem_per_block
#: The split-K choices (:func:`split_plan`): "auto" splits every tile's K over the grid when the tiles are
#: fewer than the SMs (and K has enough blocks), and a short last wave (MAX_WAVE_EFFICIENCY); "none" never splits.
SPLITS = ("auto", "none")
#: The split the launch asks for: the environment's GL_FP8_SPLIT ("auto" or "none") when the module is
#: imported, else "auto"; a benchmark sets this attribute to time both (bench/fp8.py --split both).
SPLIT_DEFAULT = os.environ.get("GL_FP8_SPLIT", "auto")
#: K blocks (of 128) each CTA of a split gets at least: fewer CTAs than that makes each tile's partials
#: (one 128 x BN fp32 slot per contributor, written and read back by the last) cost more than the
#: blocks' operand bytes they let more SMs stream.
MIN_SPLIT_K_BLOCKS = 4
#: A tile's K blocks below which "auto" does not split: measured on the H200 (bench/fp8.py --split both,
#: bench/results/2026-12-04_fp8_quick_2134406.json, M = 64 and 128), the split ran 1.01-1.55x faster than
#: the whole tiles at K = 7168 and 14336 (56 and 112 blocks; one row 0.98x in the re-check, ..._be836b8.json)
#: but 0.65-0.93x at K = 2048 and 4096 (16, 32). 33-55 blocks are not measured.
MIN_SPLIT_TILE_K_BLOCKS = 48
#: Where the tiles fill the SMs, "auto" splits the last partial wave and the whole wave before it by K
#: (design/stream_k.py ``plan_wave``: at most two contributors a tile) when the whole-tile waves' efficiency,
#: tiles / (ceil(tiles / SMs) x SMs), is below this. 0: never. Measured (H100, db5dcd9, docs/fp8.md "Split K
#: for a short last wave"): the split launch ran 0.61-1.00x the whole-tile one at 15 of 16 shapes with
#: 55-97% busy waves (1.01-1.04x at 8192^3 only, bf16 output): split K blocks cost more than the idle SMs do.
MAX_WAVE_EFFICIENCY = 0.0
#: Where the tiles are fewer than half the SMs, "auto" splits each tile's K over the same number of CTAs (a
#: grid that is a multiple of the tiles), so that no CTA's K range crosses from one tile into the next;
#: otherwise over up to one CTA per SM, ranges crossing tiles. Measured (H100, db5dcd9, docs/fp8.md): 5-12%
#: less time in every bf16-output row where it changes the grid (9 of 9: three shapes, three scalings); the
#: quantized output's launches it changes were not timed.
SPLIT_ALIGNED = True


def smem_bytes(scale_mode: str, stages: int, bn: int = 128, store: str = STORE_REGISTERS, bm: int = BM,
               scale_b_shared: bool = False) -> int:
    """Dynamic shared memory of one CTA: the ring, the TMA store's staging buffers (each consumer's 64 x bn
    2-byte outputs; a consumer per 64 rows of ``bm``), the blockwise scale_a ring, barriers, each consumer's
    scale_b copy (``scale_b_shared``), alignment slack."""
    sa = bm * 4 if scale_mode == "blockwise" else 0
    staging = (bm // 64) * 64 * bn * 2 if store == STORE_TMA else 0
    # each consumer's copy: one scale_b column per K block, two at BN 192 (its tiles span two 128-column blocks)
    sb = (bm // 64) * MAX_SHARED_SCALE_B_BLOCKS * 4 * (2 if bn > 128 else 1) if scale_b_shared else 0
    return stages * (bm * BK + bn * BK + sa) + staging + 2 * stages * 8 + sb + 1024


def stages_for(scale_mode: str, bn: int, store: str, bm: int = BM, scale_b_shared: bool = False) -> int:
    """The ring's stages: :data:`STAGES` [bn] (:data:`STAGES_64_ROWS` at ``bm`` 64), fewer where the TMA
    store's staging buffers would pass :data:`SMEM_LIMIT` (BN 128: 6 stages tensorwise and rowwise, 5
    blockwise)."""
    stages = (STAGES if bm == BM else STAGES_64_ROWS)[bn]
    while stages > 2 and smem_bytes(scale_mode, stages, bn, store, bm, scale_b_shared) > SMEM_LIMIT:
        stages -= 1
    return stages


def store_for(out_dtype: str, out: torch.Tensor | None, n: int, preferred: str | None = None) -> tuple[str, str]:
    """The output store a launch builds, and why: ``preferred`` (default :data:`STORE_DEFAULT`, read at
    the call) where the output allows it, else the register store. The TMA store needs a bf16 or fp16
    output (``out_dtype``: "bf16", "fp16", "fp32" or "fp8") whose rows are whole 16-byte chunks (N a
    multiple of 8: a TMA store was seen writing a row's last chunk whole, past N,
    bench/results/logs/2026-12-01_tma_store_edge_3419336.log) and whose base and row pitch are multiples
    of 16 bytes: ``out`` as given (meta and fake tensors: their pitch and storage offset), or a new
    contiguous (M, ``n``) output."""
    preferred = STORE_DEFAULT if preferred is None else preferred
    if preferred == STORE_REGISTERS:
        return STORE_REGISTERS, "the register store was asked for (fp8.STORE_DEFAULT or the build)"
    if out_dtype not in TMA_STORE_OUT:
        return STORE_REGISTERS, f"a {out_dtype} output: the TMA store writes bf16 and fp16 only"
    if n % 8:
        return STORE_REGISTERS, f"N = {n} is not a multiple of 8 (rows of whole 16-byte chunks)"
    pitch = out.stride(0) if out is not None else n
    if pitch * 2 % 16:
        return STORE_REGISTERS, f"the output's row pitch ({pitch} elements) is not a multiple of 16 bytes"
    if out is not None and out.numel():
        # Meta and fake tensors: the view's offset into its storage (allocations are aligned), as the
        # launch would see it; a fake tensor's data_ptr is deprecated.
        base = out.storage_offset() * out.element_size() if is_fake(out) or out.device.type == "meta" else out.data_ptr()
        if base % 16:
            return STORE_REGISTERS, f"the output's base address {base:#x} is not 16-byte aligned"
    return STORE_TMA, "the output's base and row pitch are 16-byte aligned"


def tma_store_refusal(kernel: Fp8Kernel, out: torch.Tensor | None, n: int) -> str | None:
    """Why a TMA-store ``kernel`` cannot write ``out`` (N = ``n``), or None: an explicit build is run as
    given or refused, never swapped for the register store."""
    store, why = store_for(kernel.out_dtype, out, n, STORE_TMA)
    return None if store == STORE_TMA else f"the fp8 build {kernel} stores C by TMA, but {why}"


@dataclass(frozen=True)
class Fp8Kernel:
    """One build of sm90_fp8_gemm.cu: scale mode, input fp8 kinds, output dtype, bias or not; ``split``:
    the stream-K split built in (GL_FP8_SPLIT; the launch's :func:`split_plan` says which tiles are split,
    possibly none). A build without the split runs every tile whole."""

    scale_mode: str = "tensorwise"
    a_dtype: str = "e4m3"
    b_dtype: str = "e4m3"
    out_dtype: str = "bf16"  # bf16, fp16, fp32, or fp8 (e4m3 values with 1 x 128 scales)
    bias: bool = False
    bn: int = 128
    stages: int = 0  # 0: STAGES[bn]
    overlap: bool = True  # the promotion of block kb overlapped with block kb + 1's wgmmas
    store: str = STORE_REGISTERS  # STORE_TMA: the output staged in shared memory and written by TMA stores
    split: bool = False  # the stream-K split built in (GL_FP8_SPLIT = 1)
    bm: int = BM  # tile rows: 128 (two consumer warpgroups) or 64 (one; GL_FP8_BM = 64)
    scale_b_ahead: bool = False  # blockwise: each K block's scale_b loaded one block ahead (GL_FP8_SB_AHEAD = 1)
    scale_b_shared: bool = False  # blockwise: scale_b read from a shared copy of the tile's column (GL_FP8_SB_SHARED = 1)

    def __repr__(self) -> str:
        # The dataclass's repr, ``split`` and ``bm`` named only when not their defaults: the repr heads the
        # translation unit and labels the build, so the builds without them keep the inputs they had
        # before they existed (tests/data/build_inputs_grouped_fp8.json).
        hidden = {"split": not self.split, "bm": self.bm == BM, "scale_b_ahead": not self.scale_b_ahead,
                  "scale_b_shared": not self.scale_b_shared}
        fields = [f for f in dataclasses.fields(self) if not hidden.get(f.name, False)]
        return f"Fp8Kernel({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in fields)})"

    @property
    def ring_stages(self) -> int:
        return self.stages or stages_for(self.scale_mode, self.bn, self.store, self.bm, self.scale_b_shared)

    @property
    def scale_b_read(self) -> str | None:
        """How this build reads blockwise scale_b: "shared", "ahead" or "in-block"; None for the other scalings."""
        if self.scale_mode != "blockwise":
            return None
        return "shared" if self.scale_b_shared else "ahead" if self.scale_b_ahead else "in-block"

    @property
    def consumers(self) -> int:
        """Consumer warpgroups: one per 64 rows of the tile."""
        return self.bm // 64

    @property
    def threads(self) -> int:
        """Threads per CTA: the producer warpgroup and the consumers (384 at 128 rows, 256 at 64)."""
        return 128 * (1 + self.consumers)

    def defines(self) -> dict[str, int]:
        """The ``-D`` constants of this build."""
        return {
            "GL_FP8_SCALE": SCALE_MODES.index(self.scale_mode),
            "GL_FP8_A_E5M2": int(self.a_dtype == "e5m2"),
            "GL_FP8_B_E5M2": int(self.b_dtype == "e5m2"),
            "GL_FP8_OUT": ("bf16", "fp16", "fp32", "fp8").index(self.out_dtype),
            "GL_FP8_BIAS": int(self.bias),
            "GL_FP8_STAGES": self.ring_stages,
            "GL_FP8_BN": self.bn,
            "GL_FP8_OVERLAP": int(self.overlap),
            "GL_FP8_TMA_STORE": int(self.store == STORE_TMA),
            **({"GL_FP8_SPLIT": 1} if self.split else {}),  # absent, not 0: the unsplit builds' inputs unchanged
            **({"GL_FP8_BM": self.bm} if self.bm != BM else {}),  # likewise
            **({"GL_FP8_SB_AHEAD": 1} if self.scale_b_ahead else {}),  # likewise
            **({"GL_FP8_SB_SHARED": 1} if self.scale_b_shared else {}),  # likewise
        }

    @property
    def dynamic_smem(self) -> int:
        return smem_bytes(self.scale_mode, self.ring_stages, self.bn, self.store, self.bm, self.scale_b_shared)

    @property
    def expect_tx_bytes(self) -> int:
        """The bytes a stage's full barrier waits for (the kernel's kExpectTx): A, B and, blockwise, scale_a."""
        return self.bm * BK + self.bn * BK + (self.bm * 4 if self.scale_mode == "blockwise" else 0)

    def ring_config(self, k_iters: int, tiles: int = 1, segments: tuple[int, ...] | None = None):
        """This kernel's stage ring as the auditor models it (:class:`gemm_ladder.audit.ring.RingConfig`):
        a producer thread, two consumer warpgroups each releasing a stage with one arrival per warp
        (4, after the warp's own reads) once its wgmma group completes (with ``overlap``, after the next
        block's group is issued: release lag 1), the blockwise scale_a box riding on A's barrier
        completion. The register store has no staging (no store steps); the TMA store gives each consumer
        one staging buffer holding its whole 64 x BN tile (one panel of the auditor's model, all BN / 64
        boxes in one bulk group): wait_group.read 0, write, store + commit at each tile's end, a final
        wait_group.read 0. A split build (``split``) runs the same ring: each segment is a tile of
        ``k_iters`` = its 1..K-blocks range, and a CTA's segments follow one another as tiles do (the
        hand-in of partials touches no stage). ``segments``: a CTA's tiles or segments of different
        lengths, back to back (their K blocks each, e.g. from :func:`split_plan`'s schedule); then
        ``k_iters`` and ``tiles`` are ignored."""
        from gemm_ladder.audit.ring import RingConfig

        staging = {"store_order": ()} if self.store == STORE_REGISTERS else {
            "staging_buffers": 1, "panels_per_tile": 1, "deferred_panels": 0, "staging_wait_pending": 0}
        if segments is not None:
            k_iters, tiles = max(segments), len(segments)
        return RingConfig(stages=self.ring_stages, k_iters=k_iters, tiles=tiles, tile_k_iters=segments,
                          release_lag=int(self.overlap), consumers=self.consumers,
                          warp_specialized=True, release_weight=4, bm=self.bm, bn=self.bn, bk=BK, elem_bytes=1,
                          a_load_bytes=self.expect_tx_bytes - self.bn * BK, expect_tx_bytes=self.expect_tx_bytes,
                          **staging)

    def config(self, arch: str = "sm_90a") -> KernelConfig:
        """This build as a :class:`KernelConfig` (its key; its ``-D`` constants are :meth:`defines`, in
        ``extra``). Raises ValueError for a field this family does not build."""
        return _config(self, arch)

    def translation_unit(self) -> str:
        """The source compiled: a comment naming the build, then the kernel."""
        return f'// gemm-ladder library fp8 {self}\n#include "{SOURCE}"\n'

    def build(self, arch: str = "sm_90a"):
        """Compile (or fetch from the kernel cache) this build's cubin; raises CompileError with nvcc's message."""
        config = self.config(arch)
        return K.built(config, lambda: _compile(self, config))

    def loaded(self, device: torch.device):
        """This build loaded on ``device`` (compiled first if needed)."""
        config = self.config()
        return K.loaded(config, device_index(device), lambda: load(
            self.build(), torch.device("cuda", device_index(device)), threads=self.threads,
            dynamic_smem=self.dynamic_smem))


#: The output dtype names of a KernelConfig for Fp8Kernel's (the quantized output is e4m3 values).
_CONFIG_OUT = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "e4m3"}


@functools.lru_cache(maxsize=1024)
def _config(kernel: Fp8Kernel, arch: str) -> KernelConfig:
    if (kernel.scale_mode not in SCALE_MODES or kernel.out_dtype not in _CONFIG_OUT
            or kernel.bn not in (*TILE_N, WIDE_TILE_N)
            or kernel.bn == WIDE_TILE_N and (kernel.overlap or kernel.split or kernel.bm != BM
                                                     or kernel.out_dtype == "fp8" or kernel.scale_b_ahead)
            or not {kernel.a_dtype, kernel.b_dtype} <= set(FP8_DTYPES.values())
            or kernel.store not in (STORE_REGISTERS, STORE_TMA)
            or kernel.store == STORE_TMA and kernel.out_dtype not in TMA_STORE_OUT or kernel.bm not in TILE_M
            or (kernel.scale_b_ahead or kernel.scale_b_shared) and kernel.scale_mode != "blockwise"
            or kernel.scale_b_ahead and kernel.scale_b_shared):
        raise ValueError(f"{FAMILY} builds no such configuration: {kernel}")
    if kernel.dynamic_smem > SMEM_LIMIT:  # stages given explicitly: refuse here, not at the driver's load
        raise ValueError(f"{FAMILY}: {kernel} needs {kernel.dynamic_smem} bytes of shared memory, more than the "
                         f"{SMEM_LIMIT} a CTA can have; use fewer stages")
    return KernelConfig(
        FAMILY, dtype=kernel.a_dtype, b_dtype=None if kernel.b_dtype == kernel.a_dtype else kernel.b_dtype,
        out_dtype=_CONFIG_OUT[kernel.out_dtype], arch=arch, tile=(kernel.bm, kernel.bn, BK), stages=kernel.ring_stages,
        cluster=1, consumers=kernel.consumers, producer_warpgroup=True, c_ring=int(kernel.store == STORE_TMA), store=kernel.store,
        schedule=STREAM_K if kernel.split else DATA_PARALLEL,
        scale=kernel.scale_mode, extra=tuple(kernel.defines().items()))


def kernel_for(config: KernelConfig) -> Fp8Kernel:
    """The :class:`Fp8Kernel` whose build ``config`` describes; raises ValueError for a config of another
    family or one this family does not build."""
    if config.family != FAMILY:
        raise ValueError(f"config of family {config.family!r} given to {FAMILY}")
    extra = dict(config.extra)
    out = {v: k for k, v in _CONFIG_OUT.items()}.get(config.out_dtype)
    try:
        kernel = Fp8Kernel(scale_mode=config.scale, a_dtype=config.dtype, b_dtype=config.b_dtype or config.dtype,
                           out_dtype=out, bias=bool(extra.get("GL_FP8_BIAS")), bn=config.tile[1],
                           stages=0, overlap=bool(extra.get("GL_FP8_OVERLAP", 1)), store=config.store,
                           split=bool(extra.get("GL_FP8_SPLIT", 0)), bm=config.tile[0],
                           scale_b_ahead=bool(extra.get("GL_FP8_SB_AHEAD", 0)),
                           scale_b_shared=bool(extra.get("GL_FP8_SB_SHARED", 0)))
        if config.stages != kernel.ring_stages:
            kernel = dataclasses.replace(kernel, stages=config.stages)
        same = kernel.config(config.arch) == config
    except (ValueError, KeyError):
        same = False
    if not same:
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    return kernel


def _compile(kernel: Fp8Kernel, config: KernelConfig):
    return compile_kernel(kernel.translation_unit(), KERNEL_NAME, arch=config.arch, defines=config.defines())


class Sm90Fp8Gemm:
    """The fp8 kernel family behind the :class:`~gemm_ladder.library.kernel.Kernel` protocol. A problem
    (:class:`~gemm_ladder.library.kernel.Operands`): ``a`` (M, K) and ``b`` (K, N) fp8 tensors as
    ``torch._scaled_mm`` takes them, ``c`` the output (M, N) or None (a new one; the quantized output is
    always new), ``more`` = (scale_a, scale_b, bias or None)."""

    family = FAMILY
    splits: tuple[str, ...] = ()

    def config(self, scale: str, a_dtype: str = "e4m3", b_dtype: str = "e4m3", out_dtype: str = "bf16", *,
               bias: bool = False, bn: int = 128, store: str | None = None, split: bool = False,
               bm: int = BM, k: int | None = None) -> KernelConfig:
        """The build for ``scale`` granularity, A and B fp8 dtypes, ``out_dtype`` ("bf16", "fp16", "fp32" or
        "e4m3": quantized), a bias, tile width ``bn``, the output ``store`` (default :data:`STORE_DEFAULT`
        where the dtype allows it), the stream-K ``split`` built in or not; the promotion as the launch
        builds it, and blockwise scale_b read as the launch reads it for a K of ``k`` (:func:`scale_b_source`;
        None: the shared copy's build, which serves K up to :data:`MAX_SHARED_SCALE_B_BLOCKS` blocks)."""
        out = {v: k for k, v in _CONFIG_OUT.items()}.get(out_dtype, out_dtype)
        if store is None:
            store = STORE_DEFAULT if out in TMA_STORE_OUT else STORE_REGISTERS
        return Fp8Kernel(scale_mode=scale, a_dtype=a_dtype, b_dtype=b_dtype, out_dtype=out, bias=bias, bn=bn,
                         overlap=OVERLAP_PROMOTION, store=store, split=split, bm=bm,
                         **scale_b_source(scale, k, split)).config()

    def _call(self, config: KernelConfig, problem: Operands) -> ScaledMmCall:
        scale_a, scale_b, bias = problem.more
        out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": QUANT_OUT}
        return check_scaled_mm(problem.a, problem.b, scale_a, scale_b, bias, out_dtype[config.out_dtype], problem.c)

    def supports(self, config: KernelConfig, problem: Operands, **rules) -> str | None:
        kernel = kernel_for(config)
        try:
            call = self._call(config, problem)
        except (GemmInputError, NotSupportedError) as exc:
            return str(exc)
        a, b, bias = problem.a, problem.b, problem.more[2]
        got = (call.scale_mode, FP8_DTYPES[a.dtype], FP8_DTYPES[b.dtype], bias is not None)
        want = (kernel.scale_mode, kernel.a_dtype, kernel.b_dtype, kernel.bias)
        if got != want:
            return f"(scale, a, b, bias) = {got}: this build takes {want}"
        if (refusal := shared_scale_b_refusal(kernel, call.k)):
            return refusal
        return tma_store_refusal(kernel, problem.c, call.n) if kernel.store == STORE_TMA else None

    def build(self, config: KernelConfig):
        kernel = kernel_for(config)
        return K.built(config, lambda: _compile(kernel, config))

    def bind(self, config: KernelConfig, problem: Operands, **options):
        """fp8 launches are not bound ahead: the result runs this build when called (checked now, by
        :meth:`supports`'s rules; raises GemmInputError naming the rule) and returns what
        :func:`scaled_mm_launch` returns."""
        if options:
            raise TypeError(f"{FAMILY} takes no launch options, got {sorted(options)}")
        reason = self.supports(config, problem)
        if reason is not None:
            raise GemmInputError(reason)
        kernel, call = kernel_for(config), self._call(config, problem)
        scale_a, scale_b, bias = problem.more
        return lambda: scaled_mm_launch(problem.a, problem.b, scale_a, scale_b, bias, call, problem.c, kernel=kernel)

    def launch(self, bound, stream=None):
        return bound()

    def loaded(self, config: KernelConfig, device: torch.device):
        return kernel_for(config).loaded(device)

    def describe(self, config: KernelConfig) -> dict:
        return {"name": f"sm90_fp8_gemm_{config.scale}_{config.tile[1]}", "source": SOURCE, "tile": list(config.tile),
                "stages": config.stages, "cluster": config.cluster, "store": config.store}


#: The fp8 kernel family (library/kernel.py's Kernel protocol).
FP8_GEMM = Sm90Fp8Gemm()


def _short_out(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", QUANT_OUT: "fp8"}[dtype]


@dataclass(frozen=True)
class ScaledMmCall:
    """A checked call: the extents, the scale mode and the output dtype."""

    m: int
    n: int
    k: int
    scale_mode: str
    out_dtype: torch.dtype


def _is_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise GemmTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def check_scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, out=None, *,
                    device_type: str | None = "cuda") -> ScaledMmCall:
    """Check a ``scaled_mm`` call before anything runs; return its :class:`ScaledMmCall`.

    Rules, in the order checked: tensors; fp8 inputs (e4m3fn or e5m2), 2-D, a (M, K) row-major with
    a row pitch that is a multiple of 16 bytes and a 16-byte aligned base, b (K, N) column-major likewise
    (b.T row-major); K a multiple of 16; fp32 scales of a tensorwise, rowwise or blockwise 1x128 / 128x128
    layout; bias (N,) in bf16, fp16 or fp32; out_dtype bf16, fp16 or fp32; ``out`` (M, N) of out_dtype
    with unit column stride, not overlapping the inputs; every tensor on one device (``device_type``:
    'cuda' for a launch, None for the fake kernels, which also see meta tensors).

    Raises GemmTypeError (non-tensors, a non-dtype out_dtype), GemmInputError (the rule broken),
    NotSupportedError (blockwise pairings other than 1x128 with 128x128), OutsideDomainError (a GemmInputError:
    an extent past the kernels' 32-bit coordinates).
    """
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        _is_tensor(name, t)
    if bias is not None:
        _is_tensor("bias", bias)
    if out is not None:
        _is_tensor("out", out)
    if not isinstance(out_dtype, torch.dtype):
        raise GemmTypeError(f"out_dtype must be a torch.dtype, got {type(out_dtype).__name__}")
    if out_dtype not in OUT_DTYPES and out_dtype != QUANT_OUT:
        raise GemmInputError(f"out_dtype = {out_dtype}: use torch.bfloat16, torch.float16, torch.float32 or "
                             "torch.float8_e4m3fn (quantized with 1 x 128 scales)")
    if out_dtype == QUANT_OUT and out is not None:
        raise NotSupportedError("out= with out_dtype=torch.float8_e4m3fn: the quantized output is returned as "
                                "(values, scales), allocated by the call")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in FP8_DTYPES:
            raise GemmInputError(f"{name} has dtype {t.dtype}; scaled_mm takes torch.float8_e4m3fn or torch.float8_e5m2")
        if t.dim() != 2:
            raise GemmInputError(f"{name} must be 2-D, got {t.dim()} dimensions")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise GemmInputError(f"a is (M, K) = {tuple(a.shape)} and b is (K, N) = {tuple(b.shape)}: K differs")
    if refusal := K.extents_refusal({"M": m, "N": n, "K": k}, empty_ok=True):
        raise OutsideDomainError(refusal)  # empty_ok: only an extent past the 32-bit limit
    if k % 16:
        raise GemmInputError(f"K = {k} must be a multiple of 16 (a TMA row of 1-byte elements is a multiple of 16 bytes)")
    if m and k and (a.stride(1) != 1 or a.stride(0) % 16 or a.stride(0) < k):
        raise GemmInputError(f"a must be row-major with a row pitch that is a multiple of 16 elements, got stride {a.stride()}")
    if n and k and (b.stride(0) != 1 or b.stride(1) % 16 or b.stride(1) < k):
        raise GemmInputError(
            f"b must be column-major (b.T row-major, as torch._scaled_mm takes mat2) with a pitch that is a "
            f"multiple of 16 elements, got stride {b.stride()}")
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if t.dtype != torch.float32:
            raise GemmInputError(f"{name} has dtype {t.dtype}; the fp8 scales are torch.float32")
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    if scale_a.numel() == 1 and scale_b.numel() == 1 and scale_a.dim() <= 2 and scale_b.dim() <= 2:
        mode = "tensorwise"
    elif scale_a.dim() != 2 or scale_b.dim() != 2:
        raise GemmInputError(f"scale_a and scale_b: one element each (tensorwise) or 2-D, got shapes "
                             f"{tuple(scale_a.shape)} and {tuple(scale_b.shape)}")
    elif tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        mode = "rowwise"
    elif tuple(scale_a.shape) == (m, kb) and tuple(scale_b.shape) == (kb, nb):
        mode = "blockwise"
    elif tuple(scale_a.shape) == (m, kb) and tuple(scale_b.shape) == (kb, n) or \
            tuple(scale_a.shape) == (math.ceil(m / 128), kb) and tuple(scale_b.shape) == (kb, n):
        raise NotSupportedError("blockwise 1x128 x 1x128 and 128x128 x 1x128 scales are not built yet (issue 25): "
                                "use scale_a (M, K/128) with scale_b (K/128, N/128)")
    else:
        raise GemmInputError(
            f"scale_a {tuple(scale_a.shape)} and scale_b {tuple(scale_b.shape)} match no scaling: tensorwise one "
            f"element each; rowwise ({m}, 1) and (1, {n}); blockwise ({m}, {kb}) and ({kb}, {nb})")
    if bias is not None:
        if bias.dtype not in OUT_DTYPES:
            raise GemmInputError(f"bias has dtype {bias.dtype}; use bfloat16, float16 or float32")
        if tuple(bias.shape) != (n,):
            raise GemmInputError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
    if out is not None:
        if out.dtype != out_dtype:
            raise GemmInputError(f"out has dtype {out.dtype}, out_dtype is {out_dtype}")
        if tuple(out.shape) != (m, n):
            raise GemmInputError(f"out must have shape ({m}, {n}), got {tuple(out.shape)}")
        if m and n and (out.stride(1) != 1 or out.stride(0) < n):
            raise GemmInputError(f"out must be row-major (unit column stride, row pitch >= N), got stride {out.stride()}")
    tensors = [("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias), ("out", out)]
    devices = {t.device for _, t in tensors if t is not None}
    if len(devices) > 1:
        raise GemmInputError(f"every tensor must be on one device, got {sorted(str(d) for d in devices)}")
    if device_type is None:  # the fake kernels: no addresses to check (meta and fake tensors have none)
        return ScaledMmCall(m, n, k, mode, out_dtype)
    if a.device.type != device_type:
        raise GemmInputError(f"a must be on a {device_type} device, got {a.device}")
    for name, t in (("a", a), ("b", b)):
        if t.numel() and t.data_ptr() % 16:
            raise GemmInputError(f"{name}'s base address must be 16-byte aligned (a TMA tensor map's), got {t.data_ptr():#x}")
    if out is not None:
        for name, t in (("a", a), ("b", b)):
            if t.numel() and out.numel() and _overlaps(out, t):
                raise GemmInputError(f"out overlaps {name}: the kernel would read what it writes")
    return ScaledMmCall(m, n, k, mode, out_dtype)


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    xs, ys = x.data_ptr(), y.data_ptr()
    xe = xs + sum((d - 1) * s for d, s in zip(x.shape, x.stride())) * x.element_size() + x.element_size()
    ye = ys + sum((d - 1) * s for d, s in zip(y.shape, y.stride())) * y.element_size() + y.element_size()
    return xs < ye and ys < xe


#: Encoded tensor maps, per everything a map encodes (the address, dtype, extents, pitch, box, swizzle):
#: a weight's maps are encoded once, an activation's again only when its address is new. The host's
#: share of a decode call is most of its time (bench/results/logs/2026-12-04_fp8_small_m_floor_20a70b3.json:
#: do_bench 141-293 us a call against 6-37 us of kernel), and each map was validated and encoded per call.
#: Large enough that a decode step's cycle of maps (a 70B model's weights alone are 320 and more) stays
#: in it: an LRU smaller than the cycle would evict every weight's map before its next use. A map is 128
#: bytes.
MAP_CACHE_SIZE = 8192
_MAPS: dict = {}


def _map_spec(name: str, data_type: str, elem_bytes: int, dims: tuple[int, int], pitch_bytes: int,
              box: tuple[int, int], swizzle: str) -> TensorMapSpec:
    """The rank-2 tensor map of operand ``name``: ``dims`` (inner, outer) elements, ``pitch_bytes`` per outer
    step, one ``box`` per TMA copy."""
    return TensorMapSpec(name=name, description=f"fp8 GEMM {name}", data_type=data_type, elem_bytes=elem_bytes,
                         rank=2, global_dim=dims, global_strides=(pitch_bytes,), box_dim=box, element_strides=(1, 1),
                         swizzle=swizzle)


def _map(name: str, ptr: int, data_type: str, elem_bytes: int, dims: tuple[int, int], pitch_bytes: int,
         box: tuple[int, int], swizzle: str):
    """The encoded rank-2 tensor map of ``name`` at ``ptr`` (:func:`_map_spec`), from :data:`_MAPS` when encoded
    before (the key is every input of the encoding, so a hit is the same map)."""
    def make():
        return encode_tiled(_map_spec(name, data_type, elem_bytes, dims, pitch_bytes, box, swizzle).encode_kwargs(ptr))
    key = (name, ptr, data_type, elem_bytes, tuple(dims), pitch_bytes, tuple(box), swizzle)
    return cached(_MAPS, key, make, MAP_CACHE_SIZE)


def settings() -> int:
    """One number for the module defaults a launch reads at the call (:data:`TILE_M_DEFAULT`,
    :data:`STORE_DEFAULT`, :data:`TMA_STORE_OUT`, :data:`SPLIT_DEFAULT`, :data:`OVERLAP_PROMOTION`,
    :data:`SCALE_B_AHEAD`, :data:`SCALE_B_SHARED`, :data:`MIN_SHARED_SCALE_B_BLOCKS`,
    :data:`MAX_SHARED_SCALE_B_BLOCKS`, :data:`MIN_SPLIT_K_BLOCKS`, :data:`MIN_SPLIT_TILE_K_BLOCKS`,
    :data:`MAX_WAVE_EFFICIENCY`, :data:`SPLIT_ALIGNED`, :data:`WIDE_TILE`, :data:`WIDE_TILE_COST`), equal for equal
    defaults within a process: the compiled host path keys its plans with it, so a default changed between
    calls is planned anew."""
    return hash((TILE_M_DEFAULT, STORE_DEFAULT, tuple(TMA_STORE_OUT), SPLIT_DEFAULT, OVERLAP_PROMOTION,
                 SCALE_B_AHEAD, SCALE_B_SHARED, MIN_SHARED_SCALE_B_BLOCKS, MAX_SHARED_SCALE_B_BLOCKS,
                 MIN_SPLIT_K_BLOCKS, MIN_SPLIT_TILE_K_BLOCKS, MAX_WAVE_EFFICIENCY, SPLIT_ALIGNED, WIDE_TILE, WIDE_TILE_COST))


def tile_m(m: int, preferred: str | None = None) -> tuple[int, str]:
    """The tile height a launch of M rows builds, and why: 128, or (``preferred`` "auto") 64 where M <= 64
    (one 64-row tile holds M; a 128-row tile's second half would be rows past M). ``preferred``: "128" or
    "auto" (:data:`TILE_M_CHOICES`; default :data:`TILE_M_DEFAULT`, read at the call). Raises ValueError
    for an unknown ``preferred``."""
    preferred = TILE_M_DEFAULT if preferred is None else preferred
    if preferred not in TILE_M_CHOICES:
        raise ValueError(f"tile_m = {preferred!r}: use one of {', '.join(TILE_M_CHOICES)}")
    if preferred == "128":
        return BM, "128-row tiles (asked: fp8.TILE_M_DEFAULT or GL_FP8_TILE_M = '128')"
    if m <= 64:
        return 64, f"M = {m} <= 64: one 64-row tile holds it (a 128-row tile would be half rows past M)"
    return BM, f"M = {m} > 64: 128-row tiles"


def tile_n(m: int, n: int, sms: int, quantized: bool = False, bm: int = BM) -> int:
    """The tile width: 128, or 64 when 128-wide tiles (``bm`` rows high) are fewer than the SMs (twice the
    tiles to spread); always 128 for the quantized output (its 1 x 128 scale blocks are whole tiles)."""
    if quantized:
        return 128
    return 64 if math.ceil(m / bm) * math.ceil(n / 128) < sms else 128


def wide_tile_rule(m: int, n: int, sms: int, enabled: bool | None = None) -> tuple[bool, str]:
    """Whether a call whose launch would run 128 x 128 tiles whole (128 rows, unsplit, not the quantized output)
    runs 128 x 192 tiles instead, and why. The persistent grid runs ceil(tiles / SMs) waves of one tile per SM,
    so the time goes as waves x a tile's time; a 192-wide tile holds 1.5 times the 128-wide one's work at
    :data:`WIDE_TILE_COST` of its per-flop time: the wide tile is taken where
    waves(128) >= waves(192) x 1.5 x WIDE_TILE_COST (a short last wave of 128-wide tiles, e.g. N = 576: 160
    tiles in 2 waves against 96 in 1). ``enabled``: default :data:`WIDE_TILE`, read at the call."""
    if not (WIDE_TILE if enabled is None else enabled):
        return False, "the wide tile is turned off (fp8.WIDE_TILE, GL_FP8_WIDE_TILE=0)"
    rows = math.ceil(m / BM)
    tiles = {bn: rows * math.ceil(n / bn) for bn in (128, WIDE_TILE_N)}
    waves = {bn: math.ceil(t / sms) for bn, t in tiles.items()}
    gain = waves[128] / (waves[WIDE_TILE_N] * WIDE_TILE_N / 128 * WIDE_TILE_COST)
    counts = (f"{tiles[128]} tiles of 128 columns in {waves[128]} waves, {tiles[WIDE_TILE_N]} of {WIDE_TILE_N} in "
              f"{waves[WIDE_TILE_N]} on {sms} SMs: predicted {gain:.2f}x (fp8.WIDE_TILE_COST {WIDE_TILE_COST})")
    return gain >= 1.0, counts


def split_plan(m: int, n: int, k: int, bn: int, sms: int, split: str = "auto", bm: int = BM) -> tuple[StreamKTail, str]:
    """The stream-K schedule of an (``m``, ``n``, ``k``) problem on tiles ``bm`` x ``bn`` and ``sms`` SMs, and why.

    The result's ``clusters`` is the grid (CTAs), ``first_unit`` the kernel's tail_first_unit: 0 when every
    tile's K is split over the grid ("all"), the tile count when none is. ``split`` ("auto" or "none",
    :data:`SPLITS`): "auto" splits when the tiles are fewer than ``sms`` (their whole-tile grid would leave
    SMs with no weight bytes to stream: decode's M <= 128) over min(``sms``, tiles x K blocks //
    :data:`MIN_SPLIT_K_BLOCKS`) CTAs, so that each CTA gets at least MIN_SPLIT_K_BLOCKS K blocks and a tile
    never has more contributors than K blocks (with :data:`SPLIT_ALIGNED`, that grid rounded down to a
    multiple of the tiles where it holds two per tile: no CTA's range crosses tiles); not when a tile has
    fewer than :data:`MIN_SPLIT_TILE_K_BLOCKS` K blocks (measured slower there), when that grid is no larger
    than the tiles, when no tile would get two contributors, or past the kernel's 32-bit tail arithmetic.
    Tiles that fill the SMs: the last partial wave split (``plan_wave``) where the whole-tile waves are less
    efficient than :data:`MAX_WAVE_EFFICIENCY`, else whole. Empty problems: no split.

    Raises ValueError for an unknown ``split``.
    """
    if split not in SPLITS:
        raise ValueError(f"split = {split!r}: use one of {', '.join(SPLITS)}")
    # the constants read per call (tests set them)
    return _split_plan(m, n, k, bn, sms, split, MIN_SPLIT_K_BLOCKS, MIN_SPLIT_TILE_K_BLOCKS, bm,
                       MAX_WAVE_EFFICIENCY, SPLIT_ALIGNED)


@functools.lru_cache(maxsize=4096)  # a launch asks per call: the contributor count walks the tiles
def _split_plan(m: int, n: int, k: int, bn: int, sms: int, split: str, min_k_blocks: int,
                min_tile_k_blocks: int, bm: int = BM, max_wave_efficiency: float = 0.0,
                aligned: bool = False) -> tuple[StreamKTail, str]:
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    k_blocks = math.ceil(k / BK)
    whole = StreamKTail(units=tiles, clusters=min(tiles, sms), k_tiles=k_blocks, first_unit=tiles)
    if tiles == 0 or k_blocks == 0:
        return whole, "an empty problem: no launch"
    if split == "none":
        return whole, "the split was turned off (fp8.SPLIT_DEFAULT, GL_FP8_SPLIT, or an unsplit build)"
    if tiles >= sms:
        return _wave_plan(tiles, k_blocks, sms, max_wave_efficiency, whole)
    if k_blocks < min_tile_k_blocks:
        return whole, (f"{k_blocks} K blocks a tile, fewer than {min_tile_k_blocks}: the split measured slower "
                       "than whole tiles there (fp8.MIN_SPLIT_TILE_K_BLOCKS)")
    grid = min(sms, tiles * k_blocks // min_k_blocks)
    if aligned and grid // tiles >= 2:
        # CTA c's range starts at K block floor(c x k_blocks / s) of the tiles: a tile boundary every s CTAs.
        grid = tiles * (grid // tiles)
    if grid <= tiles:
        return whole, (f"{tiles} tiles x {k_blocks} K blocks: splitting with at least {min_k_blocks} K blocks "
                       f"per CTA would use no more CTAs than tiles")
    if (grid + 1) * tiles * k_blocks >= INT32_LIMIT:
        return whole, "a split this long passes the kernel's 32-bit stream-K arithmetic"
    plan = StreamKTail(units=tiles, clusters=grid, k_tiles=k_blocks, first_unit=0)
    if plan.max_contributors < 2:
        return whole, "no tile would have two contributors"
    return plan, (f"{tiles} tiles on {sms} SMs: every tile's {k_blocks} K blocks split over {grid} CTAs "
                  f"({tiles * k_blocks / grid:.1f} K blocks each, at most {plan.max_contributors} per tile)")


def _wave_plan(tiles: int, k_blocks: int, sms: int, max_efficiency: float,
               whole: StreamKTail) -> tuple[StreamKTail, str]:
    """Tiles that fill the SMs: whole, or (whole-tile waves less efficient than ``max_efficiency``) the last
    partial wave and the one before it split by K over the SMs (``plan_wave``)."""
    waves = math.ceil(tiles / sms)
    efficiency = tiles / (waves * sms)
    if efficiency >= max_efficiency:
        return whole, (f"{tiles} tiles fill the {sms} SMs in {waves} waves at {efficiency:.0%} "
                       f"(split below {max_efficiency:.0%}: fp8.MAX_WAVE_EFFICIENCY)")
    try:
        plan = plan_wave(tiles, sms, k_blocks)
    except SplitOverflowError:
        return whole, "a split this long passes the kernel's 32-bit stream-K arithmetic"
    if plan.tail_units == 0 or plan.max_contributors < 2:  # full waves, or K too short to share a tile
        return whole, f"{tiles} tiles in {waves} waves on {sms} SMs: no tile would have two contributors"
    return plan, (f"{tiles} tiles on {sms} SMs are {waves} waves at {efficiency:.0%} (below "
                  f"{max_efficiency:.0%}, fp8.MAX_WAVE_EFFICIENCY): tiles [{plan.first_unit}, {tiles}) split by K "
                  f"over the {sms} SMs ({plan.total / sms:.1f} K blocks each, at most {plan.max_contributors} per tile)")


def _stream(device: torch.device):
    return torch.cuda.current_stream(device)


def _capturing(device: torch.device) -> bool:
    """Whether the current stream of ``device`` is capturing a CUDA graph: the split's workspace comes from
    per-stream arenas a graph would keep the addresses of (runtime/workspace.py), so a capture runs unsplit."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _workspace_sizes(plan: StreamKTail, bn: int, consumers: int = 2) -> tuple[int, int]:
    """A split launch's partials (fp32 elements) and counters (int32): ``consumers`` x max_contributors
    slots of 64 x ``bn`` fp32 per split tile, one counter per split tile and consumer (one CTA a cluster)."""
    return plan.workspace_floats(1, consumers, bn), plan.counters(1, consumers)


def _workspace(stream, plan: StreamKTail, bn: int, consumers: int = 2) -> tuple[int, int]:
    """Device addresses of a split launch's partials and zeroed counters (:func:`_workspace_sizes`) on
    ``stream``: the stream's arenas, as library/gemm.py's launches take them."""
    floats, counters = _workspace_sizes(plan, bn, consumers)
    return WORKSPACES.partials(stream, floats)[2], COUNTERS.take(stream, counters)


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def shared_scale_b_refusal(kernel: Fp8Kernel, k: int) -> str | None:
    """Why ``kernel`` cannot run a K of ``k``, or None: a shared scale_b copy holds
    :data:`MAX_SHARED_SCALE_B_BLOCKS` K blocks."""
    if kernel.scale_b_shared and -(-k // BK) > MAX_SHARED_SCALE_B_BLOCKS:
        return (f"the fp8 build {kernel} copies scale_b's column into shared memory, which holds "
                f"{MAX_SHARED_SCALE_B_BLOCKS} K blocks (K <= {MAX_SHARED_SCALE_B_BLOCKS * BK}); K = {k}: "
                "run a build without scale_b_shared")
    return None


def scale_b_rule(scale_mode: str, k: int | None, split: bool = False) -> tuple[str | None, str | None]:
    """How the launch's build reads blockwise scale_b for a K of ``k`` (None: any K the family serves, as its
    config() builds), ``split`` along K at decode (tiles fewer than the SMs) or not, and why: "shared", from a shared copy of the tile's column
    (:data:`SCALE_B_SHARED`, unsplit, where K has :data:`MIN_SHARED_SCALE_B_BLOCKS` to
    :data:`MAX_SHARED_SCALE_B_BLOCKS` blocks), else "ahead", loaded one block ahead (:data:`SCALE_B_AHEAD`),
    else "in-block"; (None, None) for the other scalings."""
    if scale_mode != "blockwise":
        return None, None
    blocks = None if k is None else -(-k // BK)
    if not SCALE_B_SHARED:
        why = "the shared copy is turned off (fp8.SCALE_B_SHARED)"
    elif split:
        why = "a decode split (the copy per segment measured no faster there)"
    elif blocks is not None and blocks < MIN_SHARED_SCALE_B_BLOCKS:
        why = f"{blocks} K blocks: fewer than {MIN_SHARED_SCALE_B_BLOCKS}, where the per-tile copy measured slower"
    elif blocks is not None and blocks > MAX_SHARED_SCALE_B_BLOCKS:
        why = f"{blocks} K blocks: more than the copy holds ({MAX_SHARED_SCALE_B_BLOCKS})"
    else:
        return "shared", (f"{blocks if blocks is not None else 'up to ' + str(MAX_SHARED_SCALE_B_BLOCKS)} K blocks, "
                          "unsplit: a shared copy of the tile's column, no global load in the K loop (taken at "
                          f"{MIN_SHARED_SCALE_B_BLOCKS}-{MAX_SHARED_SCALE_B_BLOCKS} blocks)")
    return ("ahead", f"loaded one K block ahead: {why}") if SCALE_B_AHEAD else ("in-block", why)


def scale_b_source(scale_mode: str, k: int | None, split: bool = False) -> dict[str, bool]:
    """:func:`scale_b_rule`'s choice as the Fp8Kernel fields (none for the other scalings)."""
    return _scale_b_fields(scale_b_rule(scale_mode, k, split)[0])


def _scale_b_fields(read: str | None) -> dict[str, bool]:
    """The Fp8Kernel fields of a scale_b read ("shared", "ahead", "in-block"; None: none)."""
    return {} if read is None else {"scale_b_shared": read == "shared", "scale_b_ahead": read == "ahead"}


def default_build(call: ScaledMmCall, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                  out: torch.Tensor | None, sms: int) -> tuple[Fp8Kernel, StreamKTail, dict[str, str]]:
    """The build a checked call runs when none is given, its split schedule, and why each choice was made
    (``{"tile_m", "tile_n", "store", "split", "scale_b"}``): the tile height (:func:`tile_m`), width (:func:`tile_n`,
    then :data:`WIDE_TILE_N` where :func:`wide_tile_rule` takes it: serial promotion, scale_b not loaded ahead), output
    store (:func:`store_for`, for ``out`` as given or a new output) and split (:func:`split_plan`), from the
    module's defaults read at the call; and, blockwise, how scale_b is read (``"scale_b"``: :func:`scale_b_rule`'s
    reason, None for the other scalings). What :func:`scaled_mm_launch` runs and :func:`describe` reports."""
    quantized = call.out_dtype == QUANT_OUT
    bm, tile_m_reason = tile_m(call.m)
    bn = tile_n(call.m, call.n, sms, quantized, bm)
    store, store_reason = store_for(_short_out(call.out_dtype), None if quantized else out, call.n)
    plan, split_reason = split_plan(call.m, call.n, call.k, bn, sms, SPLIT_DEFAULT, bm)
    # The shared copy was measured no faster on decode's splits; a split short wave keeps it (its whole tiles
    # are the unsplit launch's, and the copy serves a segment as it serves a tile).
    scale_b_read, scale_b_reason = scale_b_rule(call.scale_mode, call.k, plan.tail_units > 0 and plan.units < sms)
    overlap = OVERLAP_PROMOTION
    if bn == 64:
        tile_n_reason = f"64 columns: {math.ceil(call.m / bm) * math.ceil(call.n / 128)} tiles of 128 are fewer than the {sms} SMs"
    elif quantized:
        tile_n_reason = "128 columns: the quantized output's 1 x 128 scale blocks are whole tiles"
    elif bm != BM or plan.tail_units:
        tile_n_reason = f"128 columns: the {WIDE_TILE_N}-wide tile is built for whole 128-row tiles only"
    else:
        wide, tile_n_reason = wide_tile_rule(call.m, call.n, sms)
        tile_n_reason = f"{WIDE_TILE_N if wide else 128} columns: {tile_n_reason}"
        if wide:  # the wide tile's limits (WIDE_TILE_N): promoted serially, scale_b never loaded ahead
            bn, overlap = WIDE_TILE_N, False
            if scale_b_read == "ahead":
                scale_b_read, scale_b_reason = "in-block", f"{scale_b_reason}; the {WIDE_TILE_N}-wide tile reads it in the block"
    kernel = Fp8Kernel(scale_mode=call.scale_mode, a_dtype=FP8_DTYPES[a.dtype], b_dtype=FP8_DTYPES[b.dtype],
                       out_dtype=_short_out(call.out_dtype), bias=bias is not None, bn=bn, overlap=overlap,
                       store=store, split=plan.tail_units > 0, bm=bm, **_scale_b_fields(scale_b_read))
    return kernel, plan, {"tile_m": tile_m_reason, "tile_n": tile_n_reason, "store": store_reason,
                          "split": split_reason, "scale_b": scale_b_reason}


def scaled_mm_launch(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     bias: torch.Tensor | None, call: ScaledMmCall, out: torch.Tensor | None = None, *,
                     kernel: Fp8Kernel | None = None) -> torch.Tensor:
    """Run the fp8 kernel on a checked call (:func:`check_scaled_mm`) on torch's current stream; return out,
    or for ``out_dtype=torch.float8_e4m3fn`` the tuple (values (M, N) e4m3, scales (M, ceil(N/128)) fp32
    column-major), what ``quantize_fp8(result, (1, 128))`` computes, in library/quantized.py's layouts (the
    values' pitch and the scales' rounded up, so the next scaled_mm reads both in place). ``kernel``: the build to run (the
    family's bind passes its config's); default the one this call's scales, dtypes, bias and tile width
    (:func:`tile_n`) and output (:func:`store_for`, from :data:`STORE_DEFAULT`) pick. A ``kernel`` whose
    store is "tma" needs an output :func:`store_for` gives the TMA store: otherwise GemmInputError (never
    another build in its place).

    Empty M or N: the empty output, no launch. K = 0: zeros (plus the bias), no launch.
    """
    m, n, k = call.m, call.n, call.k
    if kernel is not None and (refusal := shared_scale_b_refusal(kernel, k)):  # before anything runs
        raise GemmInputError(refusal)
    quantized = call.out_dtype == QUANT_OUT
    if quantized:
        # The next scaled_mm takes both without a copy (library/quantized.py), whatever the shape.
        values, scales = quantized_buffers(m, n, a.device)
        if m == 0 or n == 0 or k == 0:
            full = torch.zeros((m, n), dtype=torch.float32, device=a.device)
            if bias is not None:
                full += bias.float()
            return quantize_fp8_into(full, values, scales)
        out, scale_buf = kernel_views(values, scales)
    elif out is None:
        out = torch.empty((m, n), dtype=call.out_dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        out.zero_()
        if bias is not None:
            out += bias.to(out.dtype)
        return out
    sms = _sm_count(a.device)
    capturing = _capturing(a.device)
    if kernel is None:
        # The build is the one an eager call of this shape loads (so that a capture after one warm-up call
        # needs no module load); under capture it runs unsplit (its workspace arguments null).
        kernel, plan, _ = default_build(call, a, b, bias, out, sms)
        if capturing:
            plan = split_plan(m, n, k, kernel.bn, sms, "none", kernel.bm)[0]
    else:
        if kernel.out_dtype != _short_out(out.dtype):  # an explicit build must write the output's own dtype
            raise GemmInputError(f"the output is {out.dtype}; the fp8 build {kernel} writes {kernel.out_dtype}")
        if kernel.store == STORE_TMA and (refusal := tma_store_refusal(kernel, out, n)):
            raise GemmInputError(f"{refusal}: run the register-store build")
        # Split by the rule where the build has the split built in, else never.
        plan = split_plan(m, n, k, kernel.bn, sms, "auto" if kernel.split and not capturing else "none", kernel.bm)[0]
    partials = counters = 0  # the unsplit launch's: the kernel runs every tile whole
    if plan.tail_units:
        partials, counters = _workspace(_stream(a.device), plan, kernel.bn, kernel.consumers)
    args = launch_args(kernel, call, plan, a, b, scale_a, scale_b, bias, out, scale_buf if quantized else None,
                       (partials, counters))
    # Tensors made here (args.made) are freed after the launch is queued on this stream, the stream they
    # were made on: the caching allocator reuses their memory only in that stream's order.
    kernel.loaded(a.device).launch((plan.clusters, 1, 1), args.args, _stream(a.device))
    del args
    if quantized:
        return values, scales
    return out


def _scale_a_pitch(scale_a: torch.Tensor, m: int, kb: int, addresses: bool = True) -> int | None:
    """The row pitch (fp32 elements) of blockwise scale_a's K-block-major view (K/128, M) that its tensor map
    reads in place, or None where it is copied into a zeroed (K/128, ceil(M/4)*4) buffer first: the pitch
    must be a multiple of 16 bytes and the base 16-byte aligned (``addresses``: check the base; meta and
    fake tensors have none); with one K block the pitch is never used, so any multiple of 16 bytes >= 4M serves."""
    sa_t = scale_a.t()
    pitch = sa_t.stride(0) if kb > 1 else -(-m // 4) * 4
    if (sa_t.stride(1) == 1 or m == 1) and pitch % 4 == 0 and pitch >= m and (
            not addresses or sa_t.data_ptr() % 16 == 0):
        return pitch
    return None


def _bias_copied(bias: torch.Tensor | None) -> bool:
    """Whether the launch reads a float32 copy of ``bias`` (the kernel reads a contiguous fp32 vector)."""
    return bias is not None and (bias.dtype != torch.float32 or not bias.is_contiguous())


def copies(call: ScaledMmCall, scale_a: torch.Tensor, scale_b: torch.Tensor | None, bias: torch.Tensor | None, *,
           addresses: bool = True) -> list[tuple[str, bool]]:
    """The tensors a launch of this checked call makes before the kernel, each as (what, whether the compiled
    host path makes it too: otherwise the signature takes the Python launch). ``addresses``: check base
    alignments (False for meta and fake tensors); ``scale_b`` None: not looked at."""
    out = []
    if call.scale_mode == "blockwise" and call.m and call.k:
        kb = math.ceil(call.k / BK)
        if _scale_a_pitch(scale_a, call.m, kb, addresses) is None:
            out.append((f"scale_a into a K-block-major ({kb}, {-(-call.m // 4) * 4}) fp32 buffer", True))
    if call.scale_mode == "rowwise":
        out += [(f"{name} made contiguous", False) for name, t in (("scale_a", scale_a), ("scale_b", scale_b))
                if t is not None and not t.is_contiguous()]
    if _bias_copied(bias):
        out.append(("bias to float32", False))
    return out


def host_refusal(call: ScaledMmCall, scale_a: torch.Tensor, scale_b: torch.Tensor | None,
                 bias: torch.Tensor | None, *, addresses: bool = True) -> str | None:
    """Why the compiled host path cannot replay a checked functional call's launch with only its addresses
    changed (it then runs :func:`scaled_mm_launch` for the signature), or None: the quantized output, an
    empty problem or K = 0 (no launch), a copy it does not make itself (:func:`copies`). What
    :func:`bind_scaled_mm` and ``explain_scaled_mm``'s ``host`` both answer by."""
    if call.out_dtype == QUANT_OUT:
        return "the quantized output: two tensors, run by the Python launch"
    if not (call.m and call.n and call.k):
        return "an empty problem or K = 0: no kernel launch"
    redone = [what for what, by_host in copies(call, scale_a, scale_b, bias, addresses=addresses) if not by_host]
    if redone:
        return f"{', '.join(redone)} per call: a new address each time"
    return None


@dataclass
class LaunchArgs:
    """One launch's kernel arguments in the kernel's order (``args``: CUtensorMaps and ctypes values), what
    each is (``roles``, as library/bound.py's BoundLaunch names them, over the op's tensors "a", "b", "out",
    "bias", "scale_a", "scale_b": what the compiled host path's template is made from), and the tensors made
    for this launch (``made``: a padded scale, a float32 bias; kept alive until the launch is queued). A role
    over "made" is a copy the compiled host path cannot redo; "scale_a_padded" is blockwise scale_a copied
    into a zeroed K-block-major (K/128, ``pad_scale_a``[1]) buffer, which it redoes per call.
    ``pad_scale_a``: that buffer's (rows, pitch) in fp32 elements, or None."""

    args: list
    roles: list
    made: list
    pad_scale_a: tuple[int, int] | None = None


def launch_args(kernel: Fp8Kernel, call: ScaledMmCall, plan: StreamKTail, a: torch.Tensor, b: torch.Tensor,
                scale_a: torch.Tensor, scale_b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                scale_buf: torch.Tensor | None, workspace: tuple[int, int], *, roles: bool = False) -> LaunchArgs:
    """The arguments of one launch of ``kernel`` (sm90_fp8_gemm.cu's parameter order) for a checked call, its
    split ``plan`` and output ``out`` (the values, for the quantized output, with ``scale_buf`` its scales);
    ``workspace``: the split's (partials, counters) addresses, 0 unsplit. ``roles``: also say what each
    argument is (the maps' encode arguments are validated again: the planner's cost, not a launch's)."""
    m, n, k = call.m, call.n, call.k
    bn = kernel.bn
    u8 = "CU_TENSOR_MAP_DATA_TYPE_UINT8"
    sw = "CU_TENSOR_MAP_SWIZZLE_128B"
    maps = {}  # argument name -> (source, _map arguments after the address)

    def tmap(arg: str, source: str, ptr: int, *spec):
        maps[arg] = (source, ptr, spec)
        return _map(arg, ptr, *spec)

    made = []
    pad_scale_a = None
    map_a = tmap("a", "a", a.data_ptr(), u8, 1, (k, m), a.stride(0), (BK, kernel.bm), sw)
    map_b = tmap("b", "b", b.data_ptr(), u8, 1, (k, n), b.stride(1), (BK, bn), sw)
    sb_k = sb_n = 0
    map_sa, sa_map_source = map_a, "a"  # not read unless blockwise: any valid map serves
    sa_ptr, sb_ptr = scale_a.data_ptr(), scale_b.data_ptr()
    sa_source, sb_source = "scale_a", "scale_b"
    if call.scale_mode == "blockwise":
        kb = math.ceil(k / BK)
        sa_t = scale_a.t()  # (K/128, M): one row of M scales per K block
        pitch = _scale_a_pitch(scale_a, m, kb)
        source = "scale_a"
        if pitch is None:
            padded = torch.zeros((kb, -(-m // 4) * 4), dtype=torch.float32, device=a.device)
            padded[:, :m].copy_(sa_t)
            made.append(padded)
            sa_t, pitch, source = padded, padded.stride(0), "scale_a_padded"
            pad_scale_a = tuple(padded.shape)
        map_sa = tmap("scale_a", source, sa_t.data_ptr(), "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4, (m, kb), pitch * 4,
                      (kernel.bm, 1), "CU_TENSOR_MAP_SWIZZLE_NONE")
        sa_map_source = "scale_a"
        sb_k, sb_n = scale_b.stride(0), scale_b.stride(1)
    elif call.scale_mode == "rowwise":
        if not scale_a.is_contiguous():
            scale_a = scale_a.contiguous()
            made.append(scale_a)
            sa_source = "made"
        if not scale_b.is_contiguous():
            scale_b = scale_b.contiguous()
            made.append(scale_b)
            sb_source = "made"
        sa_ptr, sb_ptr = scale_a.data_ptr(), scale_b.data_ptr()
    bias_ptr, bias_source = 0, None
    if bias is not None:
        bias_source = "bias"
        if _bias_copied(bias):
            bias = bias.float().contiguous()
            made.append(bias)
            bias_source = "made"
        bias_ptr = bias.data_ptr()
    map_c, c_map = map_a, "a"  # the register store never reads it
    if kernel.store == STORE_TMA:  # C (M rows, N inner), one 64 x 64 box per 128-byte swizzled staging panel
        c_type = {torch.bfloat16: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", torch.float16: "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"}
        map_c = tmap("c", "out", out.data_ptr(), c_type[out.dtype], 2, (n, m), out.stride(0) * 2, (64, 64), sw)
        c_map = "c"
    partials, counters = workspace
    args = [map_a, map_b, map_sa, map_c, ctypes.c_void_p(sa_ptr), ctypes.c_void_p(sb_ptr), ctypes.c_longlong(sb_k),
            ctypes.c_longlong(sb_n), ctypes.c_void_p(bias_ptr), ctypes.c_void_p(out.data_ptr()),
            ctypes.c_longlong(out.stride(0)), ctypes.c_void_p(scale_buf.data_ptr() if scale_buf is not None else 0),
            ctypes.c_longlong(scale_buf.stride(0) if scale_buf is not None else 0), ctypes.c_int(m), ctypes.c_int(n),
            ctypes.c_int(k), ctypes.c_int(plan.first_unit), ctypes.c_int(plan.max_contributors),
            ctypes.c_void_p(partials), ctypes.c_void_p(counters)]
    if not roles:
        return LaunchArgs(args, [], made, pad_scale_a)

    def map_role(arg: str):
        source, ptr, spec = maps[arg]
        return ("map", source, _map_spec(arg, *spec).encode_kwargs(ptr))

    split = bool(plan.tail_units)
    arg_roles = [map_role("a"), map_role("b"), map_role(sa_map_source), map_role(c_map), ("ptr", sa_source),
                 ("ptr", sb_source), ("value",), ("value",), ("ptr", bias_source) if bias_source else ("value",),
                 ("ptr", "out"), ("value",), ("made",) if scale_buf is not None else ("value",)] + [("value",)] * 6 + \
                [("partials",) if split else ("value",), ("counters",) if split else ("value",)]
    return LaunchArgs(args, arg_roles, made, pad_scale_a)


def bind_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   bias: torch.Tensor | None, call: ScaledMmCall):
    """The launch :func:`scaled_mm_launch` makes for a checked call of this signature (shapes, strides, dtypes,
    the module's defaults, whether the stream is capturing), bound for these tensors and a new output, as a
    (:class:`~gemm_ladder.library.bound.BoundLaunch` with roles, :attr:`LaunchArgs.pad_scale_a`), or a string
    saying why it cannot be replayed
    per call with only addresses changed (:func:`host_refusal`; the compiled host path then runs
    :func:`scaled_mm_launch`). Blockwise scale_a's padded copy the host path makes itself (the result's
    ``pad_scale_a``)."""
    from gemm_ladder.library.bound import BoundLaunch

    why = host_refusal(call, scale_a, scale_b, bias)
    if why is not None:
        return why
    m, n, k = call.m, call.n, call.k
    out = torch.empty((m, n), dtype=call.out_dtype, device=a.device)  # stands for each call's output
    sms = _sm_count(a.device)
    kernel, plan, _ = default_build(call, a, b, bias, out, sms)
    if _capturing(a.device):
        plan = split_plan(m, n, k, kernel.bn, sms, "none", kernel.bm)[0]
    # A copy made here that host_refusal let through would be a role over "made", which the template
    # refuses (TemplateError): loudly, never a stale address replayed.
    launch = launch_args(kernel, call, plan, a, b, scale_a, scale_b, bias, out, None, (0, 0), roles=True)
    loaded = kernel.loaded(a.device)
    prepared = loaded.prepare((plan.clusters, 1, 1), launch.args, _stream(a.device).cuda_stream)
    workspace = _workspace_sizes(plan, kernel.bn, kernel.consumers) if plan.tail_units else None
    bound = BoundLaunch(prepared, roles=launch.roles, workspace=workspace)
    return bound, launch.pad_scale_a


def describe(call: ScaledMmCall, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, bias: torch.Tensor | None,
             sms: int | None = None, out: torch.Tensor | None = None, *, scale_b: torch.Tensor | None = None) -> dict:
    """What :func:`scaled_mm_launch` runs for a checked call, as data (no build, no launch; any device):
    the kernel build, tile, ring, promotion interval, grid, shared memory, the output store and why
    (``store``, ``store_reason``), the split-K schedule and why (``split``: "all" when every tile's K is
    split over the grid, "wave" when the first tiles run whole and the rest are split, else "none"; ``split_reason``; ``contributors``: the most CTAs adding into one
    tile; ``workspace_bytes``: its partials and counters; :func:`split_plan`, from :data:`SPLIT_DEFAULT`;
    a launch under CUDA-graph capture runs unsplit), how blockwise scale_b is read and why
    (``scale_b_read``: "shared", "ahead" or "in-block", None for the other scalings; ``scale_b_read_reason``;
    :func:`scale_b_rule`), the tile height and why (``tile_m_reason``:
    :func:`tile_m`, from :data:`TILE_M_DEFAULT`), the tile width's (``tile_n_reason``: :func:`tile_n`,
    :func:`wide_tile_rule`), and the copies made first (:func:`copies`; ``scale_b``'s only
    when given). ``sms``: the SM count (default: the tensors' GPU, else the H200's 132 from the designer's arch
    table); ``out``: the output given, if any."""
    if sms is None:
        if a.device.type == "cuda":
            sms = _sm_count(a.device)
        else:
            sms = arch_info("sm_90a").sm_count
    quantized = call.out_dtype == QUANT_OUT
    kernel, plan, why = default_build(call, a, b, bias, out, sms)
    bm, bn, store = kernel.bm, kernel.bn, kernel.store
    tiles = math.ceil(call.m / bm) * math.ceil(call.n / bn) if call.m and call.n else 0
    made = copies(call, scale_a, scale_b, bias, addresses=False)
    return {
        "kernel": SOURCE, "entry": KERNEL_NAME, "defines": kernel.defines(),
        "problem": {"M": call.m, "N": call.n, "K": call.k}, "scale_mode": call.scale_mode,
        "inputs": {"a": FP8_DTYPES[a.dtype], "b": FP8_DTYPES[b.dtype]},
        "output": "e4m3 values + 1x128 fp32 scales" if quantized else str(call.out_dtype).replace("torch.", ""),
        "tile": {"BM": bm, "BN": bn, "BK": BK}, "tile_m_reason": why["tile_m"], "tile_n_reason": why["tile_n"],
        "stages": kernel.ring_stages,
        "threads": kernel.threads,
        "dynamic_smem_bytes": kernel.dynamic_smem, "expect_tx_bytes": kernel.expect_tx_bytes,
        "promotion_interval_k": PROMOTION_K, "promotion_overlapped": kernel.overlap,
        "scale_b_read": kernel.scale_b_read, "scale_b_read_reason": why["scale_b"],
        "store": store, "store_reason": why["store"],
        "k_tail": (f"K % 128 = {call.k % 128}: the last K block zero-filled by TMA" if call.k % 128 else None),
        "tiles": tiles, "grid": plan.clusters, "sms": sms, "copies": [what for what, _ in made],
        "split": ("all" if plan.first_unit == 0 else "wave") if plan.tail_units else "none", "split_reason": why["split"],
        "k_blocks": math.ceil(call.k / BK), "contributors": plan.max_contributors if plan.tail_units else 1,
        "workspace_bytes": 4 * sum(_workspace_sizes(plan, bn, kernel.consumers)) if plan.tail_units else 0,
        "no_launch": ("empty output" if not (call.m and call.n) else "K = 0: zeros plus bias" if not call.k else None),
    }
