"""The gated-MLP library kernel: ``out (M, N) = silu(x @ w_gate^T) * (x @ w_up^T)`` in one kernel.

Kernel: ``kernels/library/sm90_swiglu.cu`` (its header comment gives the design). Level 9's kernel
with each 256-row B stage made of 128 rows of ``w_gate`` (loaded by CTA rank 0 of the 2-CTA cluster)
and the same 128 rows of ``w_up`` (rank 1), both multicast; each tile's fp32 accumulator thus holds the
gate and up projections of 128 output columns, and the epilogue writes ``silu(g) * u`` rounded once
to the inputs' dtype. Each x tile is read from global memory once for both products.

**The plan.** The kernel computes, before its epilogue, the GEMM ``x @ B'^T`` with the virtual weight
``B'`` of ``2 x ceil(N / 128) x 128`` rows that stacks, for each 128 output columns t, rows
[128 t, 128 t + 128) of w_gate and then the same rows of w_up. That GEMM, on level 9's configuration
(tile 128 x 256 x 64, 2-CTA cluster, two consumer warpgroups, producer warpgroup, a ring of two panel
buffers per consumer, stream-K tail), is what the designer plans (:func:`plan_gemm` on
(M, 2 x ceil(N / 128) x 128, K)): its stage ring, barriers, expect_tx bytes, shared-memory map,
stages, work units (ceil(M / 256) x ceil(N / 128)) and stream-K tail are this kernel's. What the kernel
changes is named in :class:`SwigluPlan`: the tensor maps are the real ones (x (M, K); w_gate and w_up
(N, K) each, box 64 x 128, so TMA zero-fills rows past N and K; out (M, N), box 64 x 64, whose store
clips past M and N), and the output tile is 128 columns: 2 panels per consumer, not 4
(``GL_C_PANELS`` = 2, the only ``-D`` constant that differs from the virtual plan's).

**Operands** (:meth:`SwigluKernel.supports`): x, w_gate and w_up K-major (row-major, ``nn.Linear``'s
weight layout) with any pitch that is a multiple of 16 bytes and 16-byte aligned bases; out row-major.
Other layouts are refused with the rule (:func:`gemm_ladder.swiglu` says what to pass instead); N
whose rows are not whole 16-byte chunks is written into a padded workspace and copied back (the TMA
store writes a row's last 16-byte chunk whole: ``library/gemm.py``'s ``supports``).

**The quantized kernel** (:func:`swiglu_kernel` ``(quantized=True)``, the kernel's GL_OUT_E4M3): the output
as e4m3 values with one fp32 scale per row and 128 columns (a tile's output columns are one scale block),
computed from the fp32 product in the epilogue and stored from registers (library/quantized.py's layouts:
the next fp8 GEMM reads them in place). Its plan stages no C, so its ring is as deep as shared memory allows
without the panel rings; no output tensor map; :meth:`SwigluKernel.launch` takes ``scales``.
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from gemm_ladder.contract import DTYPES, GemmInputError, dtype_name
from gemm_ladder.design.plan import Plan, plan_gemm
from gemm_ladder.design.problem import arch_info, ceil_div, dtype_info
from gemm_ladder.design.smem import max_stages
from gemm_ladder.design.stream_k import StreamKTail
from gemm_ladder.design.tensor_maps import TensorMapSpec, gemm_tensor_maps
from gemm_ladder.library import kernel as K
from gemm_ladder.library.kernel import STORE_REGISTERS, STORE_TMA, STREAM_K, KernelConfig, Operands, extents_refusal
from gemm_ladder.library.bound import BoundLaunch
from gemm_ladder.library.gemm import SPLITS, scales_refusal, split_schedule
from gemm_ladder.library.quantized import QUANT_OUT
from gemm_ladder.library.operand import TMA_ALIGN_BYTES, OperandView
from gemm_ladder.runtime.compiler import CompiledKernel, compile_kernel
from gemm_ladder.runtime.module import LaunchGeometry, LoadedKernel, device_index, load
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import WORKSPACES, split_workspace_refresher
from gemm_ladder.library.lru import cached

SOURCE = "library/sm90_swiglu.cu"
KERNEL_NAME = "sm90_swiglu"
#: The family's name in a KernelConfig.
FAMILY = KERNEL_NAME
#: The accumulator tile: 128 rows (two consumer warpgroups of 64), 128 gate + 128 up columns, BK 64.
TILE = (128, 256, 64)
#: Output columns per tile: half the accumulator's.
OUT_BN = TILE[1] // 2
CLUSTER = 2
CONSUMERS = 2
#: Panel buffers per consumer warpgroup: one per output panel (64 x 128 outputs = 2 panels of 64 x 64).
C_RING = 2
#: The kernel's parameters after the four tensor maps: M, N, K, then level 9's stream-K arguments (the
#: quantized kernel: three maps, then the values' and the scales' pointers and pitches).
MAP_NAMES = ("x", "w_gate", "w_up", "out")


def work_units(m: int, n: int) -> int:
    """The fused kernel's work units for an (M, N) output: ceil(M / 256) x ceil(N / 128), one output tile pair
    (a 2-CTA cluster's 256 rows by 128 columns) each."""
    return ceil_div(ceil_div(m, TILE[0]), CLUSTER) * ceil_div(n, OUT_BN)


def virtual_n(n: int) -> int:
    """Rows of the virtual weight B' the kernel multiplies by: 128 gate rows and 128 up rows per
    128 output columns, ``2 x ceil(N / 128) x 128``."""
    return 2 * ceil_div(n, OUT_BN) * OUT_BN


@dataclass(frozen=True)
class SwigluPlan:
    """The designer's plan of the swiglu kernel on one problem (M, N, K).

    ``gemm``: the plan of the GEMM the kernel computes before its epilogue, on (M, :func:`virtual_n`
    (N), K): ring, shared memory, stages, schedule and stream-K tail are the kernel's. ``tensor_maps``:
    the kernel's own maps (``x``, ``w_gate``, ``w_up``, ``out``), validated against the rules of
    cuTensorMapEncodeTiled. ``out_tile``: output rows x columns per tile. ``c_panels``: 64-column
    output panels each consumer stores per tile.
    """

    m: int
    n: int
    k: int
    dtype: str
    gemm: Plan
    tensor_maps: dict[str, TensorMapSpec]
    out_tile: tuple[int, int]
    c_panels: int

    def kernel_defines(self) -> dict[str, int]:
        """The kernel's ``-D`` constants: the GEMM plan's, with the output tile's panel count."""
        return {**self.gemm.kernel_defines(), "GL_C_PANELS": self.c_panels}

    @property
    def tiles(self) -> int:
        """Output tiles of 128 x 128."""
        return ceil_div(self.m, self.out_tile[0]) * ceil_div(self.n, self.out_tile[1])

    def to_json(self) -> dict:
        """The plan as JSON: the GEMM plan's numbers (``gemm``) and what the swiglu kernel changes."""
        return {
            "schema": "gemm-ladder/swiglu-plan/1",
            "problem": {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype,
                        "virtual_n": self.gemm.n, "out_tile": list(self.out_tile), "c_panels": self.c_panels},
            "tensor_maps": {k: v.to_json() for k, v in self.tensor_maps.items()},
            "kernel_defines": self.kernel_defines(),
            "gemm": self.gemm.to_json(),
        }

    def describe(self) -> str:
        """A few lines: the tile, the ring, shared memory, the maps and the schedule."""
        g, s = self.gemm, self.gemm.schedule
        lines = [
            f"swiglu (M, N, K) = ({self.m}, {self.n}, {self.k}) {self.dtype}: out = silu(x w_gate^T) * (x w_up^T)",
            f"accumulator tile {g.tile[0]} x {g.tile[1]} x {g.tile[2]} (128 gate + 128 up columns), output tile "
            f"{self.out_tile[0]} x {self.out_tile[1]}, {g.stages} stages of {g.load_protocol.expect_tx_bytes} bytes, "
            f"{g.smem.total_bytes} bytes of shared memory",
            f"2-CTA cluster: rank 0 loads w_gate's rows, rank 1 w_up's, each multicast into both CTAs' stage",
            f"{ceil_div(s.m_tiles, CLUSTER) * s.n_tiles} work units (ceil(M / 256) x ceil(N / 128) output tile pairs), "
            f"grid {s.grid[0]} CTAs (estimate), stream-K tail {s.stream_k}",
        ]
        lines += [f"map {name}: {spec.description}; globalDim {spec.global_dim}, box {spec.box_dim}"
                  for name, spec in self.tensor_maps.items()]
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class SwigluKernel:
    """The swiglu kernel for bf16 and fp16 (one build each). Use :func:`swiglu_kernel` for the shared
    instance, whose builds, loaded kernels, tensor maps and schedules are cached."""

    stream_k_min_idle: float | None = None  # None: level 9's threshold (design.stream_k.DEFAULT_MIN_IDLE)
    #: The output quantized: e4m3 values with 1 x 128 scales, from registers (GL_OUT_E4M3).
    quantized: bool = False
    _plans: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _maps: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _launches: OrderedDict = field(default_factory=OrderedDict, repr=False)

    @property
    def name(self) -> str:
        return KERNEL_NAME + ("_e4m3" if self.quantized else "")

    @property
    def out_e4m3(self) -> bool:
        """Whether the output is quantized (library/gemm.py's ``scales_refusal`` reads it)."""
        return self.quantized

    @property
    def c_ring(self) -> int:
        """Panel buffers per consumer: :data:`C_RING`, none for the quantized kernel (stored from registers)."""
        return 0 if self.quantized else C_RING

    def stages(self, dtype: str = "bf16", arch: str = "sm_90a") -> int:
        """The ring depth: the most stages that fit beside the panel rings (4 on sm_90a, level 9's; the
        quantized kernel, with none, as many as fit)."""
        return max_stages(bm=TILE[0], bn=TILE[1], bk=TILE[2], elem_bytes=DTYPES[dtype].itemsize,
                          arch=arch_info(arch), consumers=CONSUMERS, c_ring=self.c_ring,
                          c_from_registers=self.quantized)

    def out_panels(self, dtype: str) -> int:
        """64-column (128-byte) output panels per consumer per tile (none staged for the quantized output)."""
        return 0 if self.quantized else OUT_BN * DTYPES[dtype].itemsize // 128

    # --- building (no GPU needed) -----------------------------------------------------------------
    def config(self, dtype: str, arch: str = "sm_90a") -> KernelConfig:
        """The build for ``dtype`` ('bf16' or 'fp16'): level 9's configuration (the virtual GEMM's), with
        the output tile's panel count ``GL_C_PANELS`` as the family's own constant. Raises KeyError for a dtype."""
        return KernelConfig(FAMILY, dtype=dtype, out_dtype="e4m3" if self.quantized else dtype, arch=arch, tile=TILE,
                            stages=self.stages(dtype, arch), cluster=CLUSTER, consumers=CONSUMERS,
                            producer_warpgroup=True, c_ring=self.c_ring,
                            store=STORE_REGISTERS if self.quantized else STORE_TMA, schedule=STREAM_K,
                            extra=(("GL_C_PANELS", self.out_panels(dtype)),))

    def defines(self, dtype: str, arch: str = "sm_90a") -> dict[str, int]:
        """The kernel's ``-D`` constants for ``dtype`` ('bf16' or 'fp16'): the designer's for level 9's
        configuration, with ``GL_C_PANELS`` the output tile's (2). Raises PlanRefused, KeyError for a dtype."""
        config = self.config(dtype, arch)
        return {**config.plan_defines(), **dict(config.extra)}

    def geometry(self, dtype: str) -> LaunchGeometry:
        """384 threads (a producer and two consumer warpgroups), the planned shared memory, clusters of 2."""
        d = self.defines(dtype)
        return LaunchGeometry(threads=int(d["GL_THREADS"]), dynamic_smem=int(d["GL_SMEM_BYTES"]), cluster=CLUSTER)

    def build(self, dtype: str, arch: str = "sm_90a") -> CompiledKernel:
        """Compile (or fetch from the cache) the cubin for ``dtype``; needs nvcc, not a GPU.

        Raises CompilerNotFoundError without nvcc and CompileError with nvcc's message."""
        return SWIGLU.build(self.config(dtype, arch))

    def plan(self, m: int, n: int, k: int, dtype: str, *, ldx: int | None = None, ldw_gate: int | None = None,
             ldw_up: int | None = None, ldo: int | None = None) -> SwigluPlan:
        """The designer's plan on one problem (:class:`SwigluPlan`); leading dimensions in elements
        (default dense). Raises PlanRefused naming the rule (a pitch TMA cannot take, an empty extent)."""
        key = (m, n, k, dtype, ldx, ldw_gate, ldw_up, ldo)
        return cached(self._plans, key, lambda: self._plan(m, n, k, dtype, ldx, ldw_gate, ldw_up, ldo))

    def _plan(self, m, n, k, dtype, ldx, ldw_gate, ldw_up, ldo) -> SwigluPlan:
        kw = {} if self.stream_k_min_idle is None else {"stream_k_min_idle": self.stream_k_min_idle}
        if self.quantized:
            kw["c_from_registers"] = True
        gemm = plan_gemm(m, virtual_n(n), k, dtype, tile=TILE, stages=self.stages(dtype), cluster=CLUSTER,
                         consumers=CONSUMERS, persistent=True, producer_warpgroup=True, c_ring=self.c_ring,
                         stream_k=True, lda=ldx, **kw)
        dt = dtype_info(dtype)
        e = dt.elem_bytes

        def real_maps(ldw):  # the (M, K), (N, K), (M, N) maps of a GEMM on the real N: a, b and c
            return gemm_tensor_maps(m, n, k, data_type=dt.tensor_map_type, elem_bytes=e, bm=TILE[0], bn=TILE[1],
                                    bk=TILE[2], cluster=CLUSTER, c_box_rows=TILE[0] // CONSUMERS, lda=ldx, ldb=ldw,
                                    ldc=ldo)

        gate, up = real_maps(ldw_gate), real_maps(ldw_up)
        maps = {
            "x": replace(gate["a"], name="x", description=f"x (M, K) K-major (ld {gate['a'].global_strides[0] // e}), "
                                                           "one 128 x BK tile per stage"),
            "out": replace(gate["c"], name="out", description=gate["c"].description.replace("C (M, N)", "out (M, N)")),
        }
        for rank, (name, spec) in enumerate((("w_gate", gate["b"]), ("w_up", up["b"]))):
            maps[name] = replace(spec, name=name, description=(
                f"{name} (N, K) K-major (ld {spec.global_strides[0] // e}): CTA rank {rank} loads rows "
                f"[128 t, 128 t + 128) x BK per stage into half {rank} of the B stage and multicasts them"))
        maps = {name: maps[name] for name in self.map_names}
        for spec in maps.values():
            spec.validate()
        return SwigluPlan(m=m, n=n, k=k, dtype=dtype, gemm=gemm, tensor_maps=maps, out_tile=(TILE[0], OUT_BN),
                          c_panels=self.out_panels(dtype))

    @property
    def map_names(self) -> tuple[str, ...]:
        """The kernel's tensor maps, in its argument order: :data:`MAP_NAMES`, without ``out`` when quantized."""
        return MAP_NAMES[:3] if self.quantized else MAP_NAMES

    def ring_protocol(self, k_iters: int | None = None, tiles: int = 2, dtype: str = "bf16", **faults):
        """The kernel's stage ring and output rings as the auditor models them (gemm_ladder.audit).

        It is level 9's protocol (:func:`gemm_ladder.audit.protocol_for_level`) at this kernel's
        configuration, read from its ``-D`` constants: the stages, the 2-CTA cluster whose producers
        each multicast their half of B (which weight a half comes from is invisible to the ring),
        two consumer warpgroups, a ring of ``GL_C_RING`` panel buffers per consumer, ``GL_C_PANELS`` = 2
        panels per tile all stored at the tile's end (none deferred). ``k_iters`` defaults to
        stages / 2 + 1, so that ``tiles`` = 2 tiles wrap the ring: every stage is reused in a later
        round. ``faults`` go to :class:`gemm_ladder.audit.RingConfig` (to show the audit can fail).
        """
        from gemm_ladder.audit import protocol_for_level

        d = self.defines(dtype)
        stages, panels, ring = d["GL_STAGES"], d["GL_C_PANELS"], d["GL_C_RING"]
        k_iters = stages // 2 + 1 if k_iters is None else k_iters
        # The quantized output is stored from registers: modelled as one write per tile per consumer into a
        # private buffer, which adds no hazard the kernel has and hides none (library/gemm.py's register builds).
        overrides = (dict(c_ring=1, staging_buffers=1, panels_per_tile=1, deferred_panels=0) if self.quantized else
                     dict(staging_buffers=ring, panels_per_tile=panels, deferred_panels=0))
        overrides.update(faults)
        p = protocol_for_level(9, k_iters=k_iters, tiles=tiles, stages=stages, cluster=d["GL_CLUSTER"],
                               consumers=d["GL_CONSUMERS"], tile=(d["GL_BM"], d["GL_BN"], d["GL_BK"]), **overrides)
        p.name = p.name.replace("level9", KERNEL_NAME)
        return p

    # --- operands ---------------------------------------------------------------------------------
    def supports(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor, *,
                 out_padding_writable: bool = False) -> str | None:
        """None when this kernel computes ``out = silu(x w_gate^T) * (x w_up^T)`` for these operands,
        else the rule they break.

        x: (M, K), w_gate and w_up: (N, K) views; out: (M, N). The rules, in the order checked: bf16 or
        fp16, one dtype for x and the weights, and out in it (the quantized kernel: out e4m3); x, w_gate and
        w_up K-major; K equal and w_gate, w_up of one shape;
        M, N, K in 1..kernel.MAX_EXTENT; out of shape (M, N), row-major with pitch >= N; every base 16-byte
        aligned and every pitch a multiple of 16 bytes (out's too, except for the quantized kernel, which
        stores it from registers) (TMA: CUDA Driver API, cuTensorMapEncodeTiled
        globalAddress and globalStrides); N x element size a multiple of 16 bytes unless out's row
        padding is the caller's own workspace (``out_padding_writable``); one CUDA device.
        """
        dt = x.tensor.dtype
        if dt not in DTYPES.values():
            return f"x: dtype {dt} is not one of bf16, fp16"
        want_out = QUANT_OUT if self.quantized else dt
        if w_gate.tensor.dtype != dt or w_up.tensor.dtype != dt or out.dtype != want_out:
            return (f"x, w_gate and w_up must share one dtype and out must be {want_out}: got {dt}, "
                    f"{w_gate.tensor.dtype}, {w_up.tensor.dtype}, {out.dtype}")
        for name, v in (("x", x), ("w_gate", w_gate), ("w_up", w_up)):
            if v.major != "k":
                return f"{name} is MN-major (column-major); the swiglu kernel reads it K-major (row-major)"
        m, n, k = x.rows, w_gate.rows, x.k
        if (w_gate.rows, w_gate.k) != (w_up.rows, w_up.k):
            return f"w_gate is (N, K) = ({w_gate.rows}, {w_gate.k}) and w_up is ({w_up.rows}, {w_up.k}): they must match"
        if w_gate.k != k:
            return f"x has K = {k} but w_gate and w_up have K = {w_gate.k}"
        if refusal := extents_refusal({"M": m, "N": n, "K": k}):
            return refusal
        if out.dim() != 2 or tuple(out.shape) != (m, n):
            return f"out has shape {tuple(out.shape)}; the result is ({m}, {n})"
        if n > 1 and out.stride(1) != 1:
            return f"out has strides {tuple(out.stride())}: it must be row-major, stride (ldo, 1)"
        ldo = _ld_out(out)
        if ldo < n:
            return f"out: row pitch {ldo} < N = {n}: its rows would overlap"
        e = x.elem_bytes
        mapped = (("x", x.data_ptr, x.ld), ("w_gate", w_gate.data_ptr, w_gate.ld), ("w_up", w_up.data_ptr, w_up.ld))
        if not self.quantized:  # the quantized output is stored from registers: any pitch, no map
            mapped += (("out", out.data_ptr(), ldo),)
        for name, ptr, pitch in mapped:
            if ptr % TMA_ALIGN_BYTES or (pitch * e) % TMA_ALIGN_BYTES:
                return (f"{name}: base {ptr:#x} and pitch {pitch * e} bytes must both be multiples of "
                        f"{TMA_ALIGN_BYTES} (a TMA tensor map, cuTensorMapEncodeTiled globalAddress and globalStrides)")
        if not self.quantized and (n * e) % TMA_ALIGN_BYTES and not (out_padding_writable and (ldo * e) >= ceil_div(n * e, TMA_ALIGN_BYTES) * TMA_ALIGN_BYTES):
            return (f"out: N = {n} columns = {n * e} bytes, not a multiple of {TMA_ALIGN_BYTES}: the TMA store writes "
                    "the row's last 16-byte chunk whole; write into a padded workspace (out_padding_writable=True)")
        dev = x.tensor.device
        if dev.type != "cuda" or any(t.device != dev for t in (w_gate.tensor, w_up.tensor, out)):
            return (f"x, w_gate, w_up and out must be on one CUDA device: got {dev}, {w_gate.tensor.device}, "
                    f"{w_up.tensor.device}, {out.device}")
        return None

    # --- launching (GPU) --------------------------------------------------------------------------
    def loaded(self, dtype: str, device: torch.device) -> LoadedKernel:
        """The kernel for ``dtype`` loaded on ``device`` (compiled first if needed)."""
        config = self.config(dtype)

        def make():
            g = self.geometry(dtype)
            return load(SWIGLU.build(config), device, threads=g.threads, dynamic_smem=g.dynamic_smem, cluster=g.cluster)

        return K.loaded(config, device_index(device), make)

    def schedule(self, m: int, n: int, k: int, resident_clusters: int, split: str = "tail") -> StreamKTail:
        """The launch's clusters and stream-K split over ceil(M / 256) x ceil(N / 128) work units
        (:func:`gemm_ladder.library.gemm.split_schedule`)."""
        units = work_units(m, n)
        kw = {} if self.stream_k_min_idle is None else {"min_idle": self.stream_k_min_idle}
        return split_schedule(units, resident_clusters, ceil_div(k, TILE[2]), split, **kw)

    def launch(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor, *,
               split: str = "tail", out_padding_writable: bool = False, scales: torch.Tensor | None = None) -> None:
        """``out = silu(x w_gate^T) * (x w_up^T)`` on the current stream (see :meth:`supports`).

        ``split``: "tail" (level 9's rule), "all", "none" or "wave" (:func:`split_schedule`); a CUDA graph
        capture runs unsplit (a graph would keep the stream-K workspace's addresses). ``scales`` (the
        quantized kernel, and only it): where the output's scales go, (ceil(N / 128), R) float32 with
        R >= M and stride (ld, 1) (library/gemm.py's ``scales_refusal``; library/quantized.py's
        ``kernel_views`` gives it).
        Raises GemmInputError naming the rule and ValueError for an unknown ``split``, before any launch.
        """
        a = self.launch_args(x, w_gate, w_up, out, split=split, out_padding_writable=out_padding_writable,
                             scales=scales)
        if a.workspace:
            part, ctr = WORKSPACES.get(a.stream, *a.workspace)
            a.split_args[0].value, a.split_args[1].value = part.data_ptr(), ctr.data_ptr()
        a.kernel.launch(a.grid, a.args, a.stream)

    def bind(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor, *,
             split: str = "tail", out_padding_writable: bool = False, scales: torch.Tensor | None = None) -> BoundLaunch:
        """:meth:`launch`'s launch bound to these tensors on the current stream (library/bound.py): calling it
        points a split launch at the stream's partials and fresh zeroed counters, and launches. Its ``roles`` name
        x, w_gate, w_up, out (and scales) and the split workspace: the compiled host path's launch template is
        made from them (gemm_ladder/host/templates.py). Raises as :meth:`launch` does; launches nothing."""
        a = self.launch_args(x, w_gate, w_up, out, split=split, out_padding_writable=out_padding_writable,
                             scales=scales)
        prepared = a.kernel.prepare(a.grid, a.args, a.stream.cuda_stream)
        if not a.workspace:
            return BoundLaunch(prepared, roles=a.roles())
        fresh_workspace = split_workspace_refresher(a.stream, *a.workspace, a.split_args)
        return BoundLaunch(prepared, fresh_workspace, roles=a.roles(), workspace=a.workspace)

    def launch_args(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor, *,
                    split: str = "tail", out_padding_writable: bool = False,
                    scales: torch.Tensor | None = None) -> "SwigluArgs":
        """What :meth:`launch` and :meth:`bind` launch (:class:`SwigluArgs`), the split workspace's two
        arguments left 0. Raises as :meth:`launch` does."""
        reason = (self.supports(x, w_gate, w_up, out, out_padding_writable=out_padding_writable)
                  or scales_refusal(self, out, scales))
        if reason is not None:
            raise GemmInputError(reason)
        if split not in SPLITS:
            raise ValueError(f"split = {split!r}: use one of {', '.join(SPLITS)}")
        m, n, k = x.rows, w_gate.rows, x.k
        dtype = dtype_name(x.tensor.dtype)
        kernel = self.loaded(dtype, out.device)
        capturing = torch.cuda.is_current_stream_capturing()
        tail = cached(self._launches, (m, n, k, dtype, device_index(out.device), split, capturing),
                       lambda: self.schedule(m, n, k, kernel.max_active_clusters(out.device),
                                             "none" if capturing else split))
        stream = torch.cuda.current_stream(out.device)  # the workspace's stream and the launch's must be one
        args = [*self.maps(x, w_gate, w_up, out)]  # a copy: the maps' cached tuple must stay as it is
        if self.quantized:  # the entry point's QuantizedOut: values and scales, pointers and pitches
            args += [ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(_ld_out(out)), ctypes.c_void_p(scales.data_ptr()),
                     ctypes.c_longlong(scales.stride(0))]
        split_args = [ctypes.c_void_p(0), ctypes.c_void_p(0)]  # partials, counters: untouched for whole units
        args += [ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
                 ctypes.c_int(tail.first_unit if tail.tail_units else tail.units), ctypes.c_int(tail.max_contributors),
                 *split_args]
        workspace = ((tail.workspace_floats(CLUSTER, CONSUMERS, TILE[1]), tail.counters(CLUSTER, CONSUMERS))
                     if tail.tail_units else None)

        def roles():
            r = [("map", name, kw) for name, kw in self.map_kwargs(x, w_gate, w_up, out)]
            if self.quantized:
                r += [("ptr", "out"), ("value",), ("ptr", "scales"), ("value",)]
            return r + [("value",)] * 5 + [("partials",), ("counters",)]

        return SwigluArgs(kernel, (tail.clusters * CLUSTER, 1, 1), args, split_args, workspace, stream, roles)

    def map_kwargs(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor) -> list:
        """(name, cuTensorMapEncodeTiled keyword arguments) of each tensor map the kernel takes, in its order (x,
        w_gate, w_up, out; no out for the quantized kernel), for these tensors' addresses and pitches."""
        m, n, k = x.rows, w_gate.rows, x.k
        ldo = None if self.quantized else _ld_out(out)  # the quantized output has no map
        specs = self.plan(m, n, k, dtype_name(x.tensor.dtype), ldx=x.ld, ldw_gate=w_gate.ld, ldw_up=w_up.ld,
                          ldo=ldo).tensor_maps
        ptrs = (x.data_ptr, w_gate.data_ptr, w_up.data_ptr) + (() if self.quantized else (out.data_ptr(),))
        return [(name, specs[name].encode_kwargs(ptr)) for name, ptr in zip(self.map_names, ptrs)]

    def maps(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor) -> tuple:
        """The encoded tensor maps (:meth:`map_kwargs`'s), cached per pointers and shape: a tuple, so that no caller
        can append to the cached entry."""
        m, n, k = x.rows, w_gate.rows, x.k
        ldo = None if self.quantized else _ld_out(out)
        lds = (x.ld, w_gate.ld, w_up.ld, ldo)
        ptrs = (x.data_ptr, w_gate.data_ptr, w_up.data_ptr) + (() if self.quantized else (out.data_ptr(),))
        return cached(self._maps, (*ptrs, m, n, k, *lds, dtype_name(x.tensor.dtype)),
                      lambda: tuple(encode_tiled(kw) for _, kw in self.map_kwargs(x, w_gate, w_up, out)))


@dataclass
class SwigluArgs:
    """One swiglu launch, packed: the loaded ``kernel``, its ``grid``, the ``args`` (encoded maps and ctypes values,
    the kernel's parameter order), ``split_args`` (the two ctypes pointers among them that a split launch points at
    its workspace), ``workspace`` ((fp32 partials, int32 counters) a split launch needs, else None), the ``stream``
    launched on, and ``roles()`` (library/bound.py's BoundLaunch roles; tensors named x, w_gate, w_up, out, scales:
    made only when bound)."""

    kernel: LoadedKernel
    grid: tuple[int, int, int]
    args: list
    split_args: list
    workspace: tuple[int, int] | None
    stream: torch.cuda.Stream
    roles: Callable[[], list]


def _ld_out(out: torch.Tensor) -> int:
    """The output's row pitch in elements; one row has no pitch, so take N rounded up to 16 bytes."""
    if out.shape[0] > 1:
        return out.stride(0)
    per16 = TMA_ALIGN_BYTES // out.element_size()
    return ceil_div(max(out.shape[1], 1), per16) * per16


class Sm90Swiglu:
    """The swiglu kernel family behind the :class:`~gemm_ladder.library.kernel.Kernel` protocol: the
    problem's ``a`` is x, ``b`` w_gate, ``more`` = (w_up,) (the quantized kernel: (w_up, scales)), ``c``
    the output."""

    family = FAMILY
    splits = SPLITS

    def supports(self, config: KernelConfig, problem: Operands, **rules) -> str | None:
        if problem.a.tensor.dtype in DTYPES.values() and dtype_name(problem.a.tensor.dtype) != config.dtype:
            return f"x has dtype {problem.a.tensor.dtype}: this build ({config.dtype}) takes {config.dtype} inputs"
        kernel = kernel_for(config)
        return (kernel.supports(problem.a, problem.b, problem.more[0], problem.c, **rules)
                or scales_refusal(kernel, problem.c, problem.more[1] if len(problem.more) > 1 else None))

    def build(self, config: KernelConfig) -> CompiledKernel:
        kernel_for(config)  # raises ValueError for a configuration this family does not build
        # One translation unit for both outputs: the build's -D constants (GL_OUT_E4M3) tell them apart.
        unit = f'// gemm-ladder library: swiglu, {config.dtype}\n#include "{SOURCE}"\n'
        return K.built(config, lambda: compile_kernel(unit, KERNEL_NAME, arch=config.arch, defines=config.defines()))

    def bind(self, config: KernelConfig, problem: Operands, **options) -> BoundLaunch:
        """:meth:`SwigluKernel.bind` on the problem's operands (``options``: its ``split``, ``out_padding_writable``)."""
        kernel = kernel_for(config)
        scales = problem.more[1] if len(problem.more) > 1 else None
        return kernel.bind(problem.a, problem.b, problem.more[0], problem.c, scales=scales, **options)

    def launch(self, bound, stream=None) -> None:
        bound()

    def loaded(self, config: KernelConfig, device: torch.device) -> LoadedKernel:
        return kernel_for(config).loaded(config.dtype, device)

    def describe(self, config: KernelConfig) -> dict:
        return {"name": kernel_for(config).name, "source": SOURCE, "tile": list(config.tile), "stages": config.stages,
                "cluster": config.cluster}


#: The swiglu kernel family (library/kernel.py's Kernel protocol).
SWIGLU = Sm90Swiglu()


def swiglu_kernel(quantized: bool = False) -> SwigluKernel:
    """The shared :class:`SwigluKernel` (builds, loaded kernels and maps cached on it); ``quantized``: the
    kernel whose output is e4m3 values with 1 x 128 scales (the module docstring)."""
    return _swiglu_kernel(bool(quantized))


@functools.lru_cache(maxsize=None)
def _swiglu_kernel(quantized: bool) -> SwigluKernel:
    return SwigluKernel(quantized=quantized)


__all__ = ["C_RING", "FAMILY", "SWIGLU", "Sm90Swiglu", "work_units", "CLUSTER", "CONSUMERS", "KERNEL_NAME", "MAP_NAMES", "OUT_BN", "SOURCE", "TILE", "SwigluKernel",
           "SwigluPlan", "swiglu_kernel", "kernel_for", "virtual_n"]


def kernel_for(config: KernelConfig) -> SwigluKernel:
    """The shared :class:`SwigluKernel`, whose builds ``config`` describes; raises ValueError otherwise."""
    if config.family != FAMILY or config != swiglu_kernel(config.out_e4m3).config(config.dtype, config.arch):
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    return swiglu_kernel(config.out_e4m3)
