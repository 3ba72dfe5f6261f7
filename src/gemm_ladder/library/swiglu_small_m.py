"""The gated MLP at small M in one launch: ``out (M, N) = silu(x @ w_gate^T) * (x @ w_up^T)``, the small-M
kernel's gated build.

Kernel: ``kernels/library/sm90_gemm_small_m.cu`` built with ``GL_SWIGLU`` (its header comment gives the
design). As the plain small-M kernel it computes the transposed problem (the weights' N on wgmma's M, x's
M on wgmma's N: BN = the M bucket) and splits every unit's K iterations over the CTAs with the deterministic
fp32 reduction; a unit is 128 output columns and each stage holds their 128 rows of w_gate and of w_up
(256 weight rows, two TMA loads), so each weight is read once and gate and up of an output meet in one
thread's registers. The two fragments need BN accumulators per consumer thread, so the buckets stop at
BN = 128 (:data:`BUCKETS`); M up to 256 runs in ceil(M / BN) tiles.

Against the two-launch path it replaces (dispatch/swiglu_small_m.py: ``up`` into a float32 (M, N) buffer,
then the gate GEMM with ``silu(gate) * up`` fused in its epilogue): one launch's fixed cost instead of two,
and no float32 ``up`` written and read back. The math is the same: both products accumulated in fp32 (the
split's partials added in K order), silu in fp32 (gated_epilogue.cuh's Silu), one rounding.

The designer plans it (:meth:`SwigluSmallM.plan`) as the GEMM of x with a virtual weight of 2 x 128 rows
per unit (the stage's rows): tile (256, BN, 64), two consumer warpgroups of 128 weight rows each, a
producer warpgroup, C from registers; its ring and shared memory are the kernel's. The tensor maps are the
real w_gate and w_up (N rows each, box 128 rows x 64 K: TMA zero-fills rows past N) and x's as planned.
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
from gemm_ladder.design.stream_k import INT32_LIMIT
from gemm_ladder.library import kernel as K
from gemm_ladder.library.bound import BoundLaunch
from gemm_ladder.library.kernel import SPLIT_K, STORE_REGISTERS, KernelConfig
from gemm_ladder.library.lru import cached
from gemm_ladder.library.operand import OperandView
from gemm_ladder.library.small_m import BK, SMALL_M_MAX, SOURCE, TILE_ROWS as UNIT_COLUMNS, small_m_kernel
from gemm_ladder.runtime.compiler import CompiledKernel, compile_kernel
from gemm_ladder.runtime.module import LaunchGeometry, LoadedKernel, device_index, load
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import split_workspace_refresher

FAMILY = "sm90_swiglu_small_m"
KERNEL_NAME = "sm90_gemm_small_m"
#: The M buckets of the gated build: the small-M kernel's up to 128 (two 64 x BN fp32 fragments per consumer
#: thread are BN registers; at BN 192 and 256 they pass the consumers' 232).
BUCKETS = (8, 16, 32, 64, 128)
#: Weight rows per stage: 128 of w_gate, then the same 128 of w_up (UNIT_COLUMNS output columns).
STAGE_ROWS = 2 * UNIT_COLUMNS
CONSUMERS = 2


@dataclass(frozen=True, eq=False)
class SwigluSmallM:
    """One M bucket of the gated small-M build: ``bn`` rows of out per tile (ceil(M / bn) tiles)."""

    bn: int
    _maps: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _specs: dict = field(default_factory=dict, repr=False)
    _launches: OrderedDict = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        if self.bn not in BUCKETS:
            raise ValueError(f"bn = {self.bn}: the gated small-M build is made for BN in {BUCKETS}")

    @property
    def tile(self) -> tuple[int, int, int]:
        """(weight rows per stage, rows of x, K) per tile: (256, BN, 64)."""
        return (STAGE_ROWS, self.bn, BK)

    def ring_stages(self, dtype: str, arch: str = "sm_90a") -> int:
        """The deepest ring that fits with no output staging."""
        return max_stages(bm=STAGE_ROWS, bn=self.bn, bk=BK, elem_bytes=DTYPES[dtype].itemsize, arch=arch_info(arch),
                          c_from_registers=True)

    def config(self, dtype: str, arch: str = "sm_90a") -> KernelConfig:
        """The build for ``dtype`` ('bf16' or 'fp16') inputs and output: its key and ``-D`` constants."""
        return _config(self, dtype, arch)

    def translation_unit(self, config: KernelConfig) -> str:
        return f'// gemm-ladder library: swiglu at small M, BN = {self.bn}, {config.dtype}\n#include "{SOURCE}"\n'

    def build(self, dtype: str, arch: str = "sm_90a") -> CompiledKernel:
        """Compile (or fetch from the cache) the cubin; needs a compiler (nvcc or NVRTC), not a GPU.
        Raises CompilerNotFoundError without one, CompileError with its message."""
        return SWIGLU_SMALL_M.build(self.config(dtype, arch))

    def geometry(self, dtype: str) -> LaunchGeometry:
        d = self.config(dtype).plan_defines()
        return LaunchGeometry(threads=int(d["GL_THREADS"]), dynamic_smem=int(d["GL_SMEM_BYTES"]), cluster=1)

    def plan(self, m: int, n: int, k: int, dtype: str, *, ldx: int | None = None, ldw: int | None = None) -> Plan:
        """The designer's plan on out (M, N) from x (M, K) and two (N, K) weights: the transposed GEMM of a
        virtual weight of 2 x ceil(N / 128) x 128 rows (each unit's 128 gate rows, then its 128 up rows) with
        x; its ``a`` map is replaced by the real weights' (:meth:`weight_map_spec`). Raises PlanRefused."""
        return plan_gemm(2 * ceil_div(n, UNIT_COLUMNS) * UNIT_COLUMNS, m, k, dtype, tile=self.tile,
                         stages=self.ring_stages(dtype), cluster=1, consumers=CONSUMERS, persistent=True,
                         producer_warpgroup=True, c_from_registers=True, lda=ldw, ldb=ldx)

    def weight_map_spec(self, plan: Plan, n: int, k: int, ldw: int):
        """One weight's map: the plan's ``a`` map over (N, K) with pitch ``ldw`` elements and a box of 128 rows
        (half the stage)."""
        spec = plan.tensor_maps["a"]
        return replace(spec, global_dim=(k, n), global_strides=(ldw * spec.elem_bytes,),
                       box_dim=(spec.box_dim[0], UNIT_COLUMNS))

    # --- operands ----------------------------------------------------------------------------------
    def supports(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor) -> str | None:
        """None when this build computes ``out`` for these operands, else the rule broken.

        x (M, K), w_gate and w_up (N, K), all K-major, one dtype (bf16 or fp16), 16-byte aligned bases and
        pitches (TMA: cuTensorMapEncodeTiled); out (M, N) of that dtype, row-major with any pitch >= N (one row:
        any column stride, passed to the kernel); 1 <= M <= 256, N and K below 2^31; one CUDA device (or meta tensors, for ``explain``: nothing is launched on them)."""
        dtype = x.tensor.dtype
        if dtype not in DTYPES.values():
            return f"x has dtype {dtype}: the gated small-M build takes bfloat16 or float16"
        for name, t in (("w_gate", w_gate.tensor), ("w_up", w_up.tensor), ("out", out)):
            if t.dtype != dtype:
                return f"{name} has dtype {t.dtype}: every operand must be x's ({dtype})"
        m, n, k = x.rows, w_gate.rows, x.k
        if (w_gate.k, w_up.rows, w_up.k) != (k, n, k):
            return f"w_gate {(w_gate.rows, w_gate.k)} and w_up {(w_up.rows, w_up.k)} must both be (N, K) with K = {k}"
        if not 1 <= m <= SMALL_M_MAX or n < 1 or k < 1:
            return f"M, N, K = {m}, {n}, {k}: 1 <= M <= {SMALL_M_MAX} and N, K >= 1"
        if max(n, k) >= INT32_LIMIT:
            return f"N = {n}, K = {k}: TMA coordinates are 32-bit, N and K must be below 2^31"
        if tuple(out.shape) != (m, n) or (m > 1 and (out.stride(1) != 1 or out.stride(0) < n)):
            return f"out has shape {tuple(out.shape)} and strides {out.stride()}: (M, N) = ({m}, {n}) row-major"
        for name, v in (("x", x), ("w_gate", w_gate), ("w_up", w_up)):
            if v.major != "k":
                return f"{name} is MN-major: the gated small-M build reads every operand K-major"
            if not v.tma_ok:
                return (f"{name} (base {v.data_ptr:#x}, ld {v.ld}) is not 16-byte aligned in base and pitch: a TMA "
                        "tensor map cannot describe it")
        devices = {t.device for t in (x.tensor, w_gate.tensor, w_up.tensor, out)}
        if len(devices) != 1 or next(iter(devices)).type not in ("cuda", "meta"):
            return f"the operands must be on one CUDA device, got {sorted(map(str, devices))}"
        return None

    # --- launching (GPU) ---------------------------------------------------------------------------
    def loaded(self, dtype: str, device: torch.device) -> LoadedKernel:
        config = self.config(dtype)

        def make():
            g = self.geometry(dtype)
            return load(SWIGLU_SMALL_M.build(config), device, threads=g.threads, dynamic_smem=g.dynamic_smem,
                        cluster=1)

        return K.loaded(config, device_index(device), make)

    def _map_specs(self, x: OperandView, weights: tuple, dtype: str) -> tuple:
        """(x's map spec, then each weight's in ``weights``' order) for these operands' extents and pitches (each
        weight's map its own pitch)."""
        m, n, k = x.rows, weights[0].rows, x.k
        plan = cached(self._specs, (m, n, k, dtype, x.ld, weights[0].ld),
                      lambda: self.plan(m, n, k, dtype, ldx=x.ld, ldw=weights[0].ld))
        return (replace(plan.tensor_maps["b"], global_strides=(x.ld * x.elem_bytes,)),
                *(self.weight_map_spec(plan, n, k, w.ld) for w in weights))

    def _maps_for(self, x: OperandView, w_gate: OperandView, w_up: OperandView, dtype: str) -> list:
        m, n, k = x.rows, w_gate.rows, x.k

        def weight(view: OperandView):
            key = ("w", view.data_ptr, view.ld, n, k, dtype)
            return cached(self._maps, key, lambda: encode_tiled(
                self._map_specs(x, (view,), dtype)[1].encode_kwargs(view.data_ptr)))

        x_key = ("x", x.data_ptr, x.ld, m, k, dtype)
        x_map = cached(self._maps, x_key, lambda: encode_tiled(self._map_specs(x, (w_gate,), dtype)[0].encode_kwargs(
            x.data_ptr)))
        return [weight(w_gate), x_map, weight(w_up)]

    def roles(self, x: OperandView, w_gate: OperandView, w_up: OperandView) -> list:
        """What each argument :meth:`bind` packs is, in its order (library/bound.py's BoundLaunch roles; tensors named
        x, w_gate, w_up, out): the compiled host path's launch template is made from them."""
        x_spec, g_spec, u_spec = self._map_specs(x, (w_gate, w_up), dtype_name(x.tensor.dtype))
        return [("map", "w_gate", g_spec.encode_kwargs(w_gate.data_ptr)), ("map", "x", x_spec.encode_kwargs(x.data_ptr)),
                ("ptr", "out"), *[("value",)] * 6, ("partials",), ("counters",),
                ("map", "w_up", u_spec.encode_kwargs(w_up.data_ptr))]

    def bind(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor, *,
             splits: int | None = None, roles: bool = True) -> BoundLaunch:
        """The launch for these operands on the current stream, bound (library/bound.py): calling it takes fresh
        zeroed counters for a split launch and launches. ``splits``: the small-M grid rule's (SmallMGemm.ctas;
        None: the rule). Under CUDA graph capture nothing is split. ``roles``: record the arguments' roles
        (:meth:`roles`; what a launch template needs, left out by :meth:`launch`). Raises ValueError with the rule
        when :meth:`supports` refuses; launches nothing."""
        reason = self.supports(x, w_gate, w_up, out)
        if reason is not None:
            raise ValueError(reason)
        m, n, k = x.rows, w_gate.rows, x.k
        dtype = dtype_name(x.tensor.dtype)
        device = x.tensor.device
        kernel = self.loaded(dtype, device)
        if torch.cuda.is_current_stream_capturing():
            splits = 1
        grid_rule = small_m_kernel(self.bn)  # the same units (128 output columns x M tiles) and grid rule

        def choose():
            return grid_rule.schedule(m, n, k, grid_rule.ctas(m, n, k, kernel.max_active_clusters(device), splits))

        sched = cached(self._launches, (m, n, k, splits, device_index(device)), choose)
        stream = torch.cuda.current_stream(device)
        split_args = [ctypes.c_void_p(0), ctypes.c_void_p(0)]
        map_gate, map_x, map_up = self._maps_for(x, w_gate, w_up, dtype)
        args = [map_gate, map_x, ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(out.stride(0)),
                ctypes.c_longlong(out.stride(1)), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
                ctypes.c_int(sched.max_contributors), *split_args, map_up]
        prepared = kernel.prepare((sched.clusters, 1, 1), args, stream.cuda_stream)
        roles = self.roles(x, w_gate, w_up) if roles else None
        if sched.max_contributors <= 1:
            return BoundLaunch(prepared, roles=roles)
        # Each slot holds both fragments' partials (the kernel: gate's, then up's).
        floats, counters = sched.workspace_floats(1, CONSUMERS, 2 * self.bn), sched.counters(1, CONSUMERS)
        fresh_counters = split_workspace_refresher(stream, floats, counters, split_args)
        return BoundLaunch(prepared, fresh_counters, roles=roles, workspace=(floats, counters))

    def launch(self, x: OperandView, w_gate: OperandView, w_up: OperandView, out: torch.Tensor, *,
               splits: int | None = None) -> None:
        """out = silu(x w_gate^T) * (x w_up^T) on the current stream (see :meth:`bind`)."""
        self.bind(x, w_gate, w_up, out, splits=splits, roles=False)()


@functools.lru_cache(maxsize=64)
def _config(kernel: SwigluSmallM, dtype: str, arch: str) -> KernelConfig:
    return KernelConfig(FAMILY, dtype=dtype, out_dtype=dtype, arch=arch, tile=kernel.tile,
                        stages=kernel.ring_stages(dtype, arch), cluster=1, consumers=CONSUMERS, producer_warpgroup=True,
                        c_ring=0, store=STORE_REGISTERS, schedule=SPLIT_K, swap_operands=True,
                        extra=(("GL_SWIGLU", 1),))


@functools.lru_cache(maxsize=None)
def swiglu_small_m_kernel(bn: int) -> SwigluSmallM:
    """The cached :class:`SwigluSmallM` of bucket ``bn``; raises ValueError when ``bn`` is not in :data:`BUCKETS`."""
    return SwigluSmallM(bn)


def kernel_for(config: KernelConfig) -> SwigluSmallM:
    """The :class:`SwigluSmallM` whose build ``config`` is; raises ValueError for any other config."""
    if config.family != FAMILY or config.tile[1] not in BUCKETS:
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    kernel = swiglu_small_m_kernel(config.tile[1])
    if kernel.config(config.dtype, config.arch) != config:
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    return kernel


class Sm90SwigluSmallM:
    """The gated small-M build behind the :class:`~gemm_ladder.library.kernel.Kernel` protocol: the problem's
    ``a`` is x, ``b`` w_gate, ``more`` = (w_up,), ``c`` the output."""

    family = FAMILY
    splits: tuple[str, ...] = ()

    def supports(self, config: KernelConfig, problem, **rules) -> str | None:
        x = problem.a.tensor
        if x.dtype in DTYPES.values() and dtype_name(x.dtype) != config.dtype:
            return f"x has dtype {x.dtype}: this build ({config.dtype}) takes {config.dtype} inputs"
        return kernel_for(config).supports(problem.a, problem.b, problem.more[0], problem.c)

    def build(self, config: KernelConfig) -> CompiledKernel:
        kernel = kernel_for(config)
        return K.built(config, lambda: compile_kernel(kernel.translation_unit(config), KERNEL_NAME, arch=config.arch,
                                                      defines=config.defines()))

    def bind(self, config: KernelConfig, problem, *, splits: int | None = None) -> BoundLaunch:
        return kernel_for(config).bind(problem.a, problem.b, problem.more[0], problem.c, splits=splits)

    def launch(self, bound: BoundLaunch, stream=None) -> None:
        bound()

    def loaded(self, config: KernelConfig, device: torch.device) -> LoadedKernel:
        return kernel_for(config).loaded(config.dtype, device)

    def describe(self, config: KernelConfig) -> dict:
        return {"name": f"SwigluSmallM(bn={config.tile[1]})", "source": SOURCE, "tile": list(config.tile),
                "bn": config.tile[1], "stages": config.stages}


#: The gated small-M build as a kernel family (library/kernel.py's Kernel protocol).
SWIGLU_SMALL_M = Sm90SwigluSmallM()

__all__ = ["BUCKETS", "CONSUMERS", "FAMILY", "KERNEL_NAME", "STAGE_ROWS", "SWIGLU_SMALL_M", "Sm90SwigluSmallM",
           "SwigluSmallM", "kernel_for", "swiglu_small_m_kernel"]
