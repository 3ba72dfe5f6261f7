"""One library kernel build as data (:class:`KernelConfig`), the protocol every kernel family's host
module implements (:class:`Kernel`), and the caches keyed by a config (builds, loaded modules, bound
launches).

A :class:`KernelConfig` is the key of a build: two equal configs compile the same translation unit with
the same ``-D`` constants (:meth:`KernelConfig.defines`), so one cubin. It names the family (the host
module and ``.cu`` file), the architecture, the input, output and accumulator dtypes, each operand's
major, the tile, the ring's stages, the cluster, the consumers, how C is stored, the schedule and the
fused epilogue built in. The dispatcher's route holds one (dispatch/route.py); ``precompile`` lists
them (dispatch/precompile.py); each family turns one into a build, a bound launch and a launch.

A new family is a new ``family`` value and host module; a new schedule is a new ``schedule`` value
that the family's plan and ``-D`` constants read; a new input dtype is a new :data:`INPUT_DTYPES`
value. The grouped GEMM is the :data:`GROUPED` schedule with a ``grouping`` (library/grouped.py), fp8
the ``e4m3``/``e5m2`` input dtypes with a ``scale`` granularity (library/fp8.py); docs/architecture.md
says which files each touches.
"""

from __future__ import annotations

import functools
import hashlib
import numbers
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from gemm_ladder.design.plan import kernel_defines_for

#: How C is stored: through shared memory by TMA stores, or by the consumers from their registers.
STORE_TMA = "tma"
STORE_REGISTERS = "registers"
STORES = (STORE_TMA, STORE_REGISTERS)
#: The schedules: one CTA (or cluster) per output tile; each tile's K split in even ranges reduced
#: through a workspace; persistent clusters whose last wave is split by K iterations (level 9's);
#: several problems in one launch (the grouped GEMM, library/grouped.py: its tile scheduler maps a
#: tile to its problem, grouped_scheduler.cuh).
DATA_PARALLEL = "data_parallel"
SPLIT_K = "split_k"
STREAM_K = "stream_k"
GROUPED = "grouped"
SCHEDULES = (DATA_PARALLEL, SPLIT_K, STREAM_K, GROUPED)
#: The kernels' coordinates are 32-bit ints and reach one tile past the last row or column.
MAX_EXTENT = 2**31 - 1 - 256


def extents_refusal(extents: dict[str, Any], *, empty_ok: bool = False) -> str | None:
    """Why a problem of these extents ({"M": m, "N": n, "K": k}, named as the message names them) is not
    launched, or None: an extent below 1 (an empty problem, whose result the caller makes without a launch;
    not a refusal with ``empty_ok``) or above :data:`MAX_EXTENT`. Only concrete integers (int, numpy's) are
    compared: a symbolic extent (torch.SymInt, torch.compile's or torch.export's dynamic dimension) would get a
    guard bounding it, which torch.export refuses for a Dim without a max; the launch compares the concrete value."""
    concrete = [v for v in extents.values() if isinstance(v, numbers.Integral)]  # not a SymInt
    if not empty_ok and any(v < 1 for v in concrete):
        rule = "an empty problem is not launched (the caller returns it)"
    elif any(v > MAX_EXTENT for v in concrete):
        rule = f"each must be at most {MAX_EXTENT} (the kernels' 32-bit coordinates)"
    else:
        return None  # nothing formatted: torch.compile traces this, and str() of a SymInt breaks its graph
    return f"{', '.join(extents)} = {', '.join(str(v) for v in extents.values())}: {rule}"
#: How a grouped schedule splits its problems: along M by cumulative row ends (torch._grouped_mm's
#: contiguous layout), along M in the masked layout (E x M_max rows, a count of valid rows per group), or
#: along K (the weight gradient).
GROUP_M = "m"
GROUP_M_MASKED = "m_masked"
GROUP_K = "k"
GROUPINGS = (GROUP_M, GROUP_M_MASKED, GROUP_K)
#: The 16-bit input dtypes (the designer's names; the ``-D`` switch GL_DTYPE_<NAME>) and the fp8 ones.
HALF_DTYPES = ("bf16", "fp16")
FP8_DTYPES = ("e4m3", "e5m2")
#: Input dtypes; "fp32" is an output dtype only, "e4m3" a quantized output (e4m3 values with 1 x 128 scales
#: computed in the epilogue: the fp8 kernel's, and the 16-bit kernels' register-store build's).
INPUT_DTYPES = HALF_DTYPES + FP8_DTYPES
OUTPUT_DTYPES = ("bf16", "fp16", "fp32", "e4m3")
#: How an fp8 build's scales are laid out (torch._scaled_mm's): one per tensor, one per row of A and
#: column of B, or per 1 x 128 block of A and 128 x 128 block of B.
SCALES = ("tensorwise", "rowwise", "blockwise")


@dataclass(frozen=True)
class KernelConfig:
    """One build of a library kernel family. Frozen and hashable: it is the build's key.

    ``family``: the host module's family name (dispatch/kernels.py FAMILIES). ``dtype``: the inputs'
    dtype ("bf16", "fp16", or fp8 "e4m3"/"e5m2": then A's); ``b_dtype``: B's where it differs (fp8 only;
    None: ``dtype``); ``out_dtype``: the output's (the inputs', "fp32", "e4m3" from registers (quantized: values
    with 1 x 128 scales), or for fp8 inputs "bf16", "fp16", "fp32" or "e4m3"); ``acc_dtype``: the accumulator's ("fp32"). ``scale``: an fp8 build's scale
    granularity (one of :data:`SCALES`; None for 16-bit inputs). ``a_major``/``b_major``: A's and B's order
    ("k" or "mn") of ``D (M, N) = A (M, K) @ B (N, K)^T`` as the caller sees it. ``tile``: (BM, BN, BK)
    of the kernel's own problem; ``stages``: the operand ring's depth; ``cluster``: CTAs per cluster;
    ``consumers``: consumer warpgroups; ``producer_warpgroup``: a warpgroup that only issues loads;
    ``c_ring``: output panel buffers per consumer (TMA store). ``store``: :data:`STORE_TMA` or
    :data:`STORE_REGISTERS`. ``schedule``: one of :data:`SCHEDULES`; ``grouping``: how a
    :data:`GROUPED` schedule splits its problems (one of :data:`GROUPINGS`; None for the others).
    ``swap_operands``: the kernel
    computes ``C^T = B A^T`` (its plan's first operand is B: the small-M kernel). ``epilogue``: the
    generated source of the fused epilogue built in (library/epilogue.py), or None. ``extra``: the
    family's own ``-D`` constants beyond the plan's, as (name, value) pairs in a fixed order (an fp8
    build has no designer plan: its constants are all its family's).
    """

    family: str
    dtype: str = "bf16"
    out_dtype: str = "bf16"
    acc_dtype: str = "fp32"
    arch: str = "sm_90a"
    a_major: str = "k"
    b_major: str = "k"
    tile: tuple[int, int, int] = (128, 256, 64)
    stages: int = 4
    cluster: int = 1
    consumers: int = 2
    producer_warpgroup: bool = True
    c_ring: int = 0
    store: str = STORE_TMA
    schedule: str = STREAM_K
    swap_operands: bool = False
    epilogue: str | None = field(default=None, repr=False)
    extra: tuple[tuple[str, int], ...] = ()
    # Added after the fields above, so that the configs made before them stay equal and positional.
    b_dtype: str | None = None
    scale: str | None = None
    grouping: str | None = None
    #: The consumers take tiles in turn, each a whole tile, one storing while another computes (the
    #: designer's "pingpong" schedule, design/plan.py SCHEDULES); False: level 9's cooperative consumers.
    pingpong: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in INPUT_DTYPES or self.out_dtype not in OUTPUT_DTYPES or self.acc_dtype != "fp32":
            raise ValueError(f"dtypes {self.dtype} -> {self.out_dtype} (acc {self.acc_dtype}): the library builds "
                             f"{'/'.join(INPUT_DTYPES)} inputs, {'/'.join(OUTPUT_DTYPES)} outputs, fp32 accumulators")
        if self.is_fp8:
            if self.b_dtype is not None and self.b_dtype not in FP8_DTYPES:
                raise ValueError(f"b_dtype = {self.b_dtype!r}: an fp8 build's B is one of {', '.join(FP8_DTYPES)}")
            if self.scale not in SCALES:
                raise ValueError(f"scale = {self.scale!r}: an fp8 build names its scales, one of {', '.join(SCALES)}")
        else:
            if self.b_dtype not in (None, self.dtype):
                raise ValueError(f"b_dtype = {self.b_dtype!r}: a {self.dtype} build reads A and B in one dtype")
            if self.scale is not None:
                raise ValueError(f"scale = {self.scale!r}: scales are an fp8 build's ({'/'.join(FP8_DTYPES)} inputs)")
            if self.out_dtype == "e4m3" and self.store != STORE_REGISTERS:
                raise ValueError(f"out_dtype = 'e4m3' with store = {self.store!r}: a 16-bit build writes the "
                                 f"quantized output from registers ({STORE_REGISTERS!r})")
        if self.store not in STORES:
            raise ValueError(f"store = {self.store!r}: one of {', '.join(STORES)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule = {self.schedule!r}: one of {', '.join(SCHEDULES)}")
        if (self.schedule == GROUPED) != (self.grouping is not None) or self.grouping not in (None, *GROUPINGS):
            raise ValueError(f"schedule = {self.schedule!r}, grouping = {self.grouping!r}: a {GROUPED} schedule "
                             f"names its grouping (one of {', '.join(GROUPINGS)}), the others none")
        if self.a_major not in ("k", "mn") or self.b_major not in ("k", "mn"):
            raise ValueError(f"a_major = {self.a_major!r}, b_major = {self.b_major!r}: each 'k' or 'mn'")
        if self.pingpong and (self.consumers < 2 or self.schedule != DATA_PARALLEL):
            raise ValueError(f"pingpong with consumers = {self.consumers}, schedule = {self.schedule!r}: ping-pong "
                             f"consumers (two or more) take whole tiles in turn, a {DATA_PARALLEL} schedule")

    @property
    def is_fp8(self) -> bool:
        """Whether the inputs are fp8 (e4m3 or e5m2)."""
        return self.dtype in FP8_DTYPES

    @property
    def out_fp32(self) -> bool:
        return self.out_dtype == "fp32"

    @property
    def out_e4m3(self) -> bool:
        """Whether the output is quantized: e4m3 values with one fp32 scale per row and 128 columns."""
        return self.out_dtype == "e4m3"

    @property
    def c_from_registers(self) -> bool:
        return self.store == STORE_REGISTERS

    @property
    def epilogue_id(self) -> str | None:
        """A short digest of the epilogue source (labels and logs), or None."""
        return None if self.epilogue is None else hashlib.sha256(self.epilogue.encode()).hexdigest()[:8]

    def plan_majors(self) -> dict[str, str]:
        """The operand majors as the designer plans the kernel's own problem (swapped for a kernel
        that computes ``C^T = B A^T``)."""
        if self.swap_operands:
            return {"a_major": self.b_major, "b_major": self.a_major}
        return {"a_major": self.a_major, "b_major": self.b_major}

    def plan_defines(self) -> dict[str, int]:
        """The designer's constants for this configuration (design.plan.kernel_defines_for), cached."""
        return _plan_defines(self.dtype, self.tile, self.stages, self.cluster, self.consumers, self.arch,
                             self.producer_warpgroup, self.c_ring, self.c_from_registers,
                             *self.plan_majors().values(), self.pingpong)

    def defines(self) -> dict[str, int | str]:
        """Every ``-D`` constant of the build: the dtype switch, the plan's constants, the float32 or
        e4m3 output switch, then the family's own (``extra``); an fp8 build's are its family's alone (the fp8
        kernel is not planned by the designer). A new dict on every call."""
        if self.is_fp8:
            return dict(self.extra)
        out: dict[str, int | str] = {"GL_DTYPE_" + self.dtype.upper(): 1, **self.plan_defines()}
        if self.out_fp32:
            out["GL_OUT_FP32"] = 1
        if self.out_e4m3:
            out["GL_OUT_E4M3"] = 1
        out.update(self.extra)
        return out

    def with_epilogue(self, source: str | None) -> "KernelConfig":
        """This config with the fused epilogue ``source`` built in (None: without one)."""
        return self if source == self.epilogue else replace(self, epilogue=source)

    def describe(self) -> dict[str, Any]:
        """The config as JSON-able data (explain, precompile's reports)."""
        return {"family": self.family, "arch": self.arch, "dtype": self.dtype, "out_dtype": self.out_dtype,
                "acc_dtype": self.acc_dtype, "a_major": self.a_major, "b_major": self.b_major,
                "tile": list(self.tile), "stages": self.stages, "cluster": self.cluster, "consumers": self.consumers,
                "store": self.store, "schedule": self.schedule, "epilogue": self.epilogue_id,
                **{k: v for k, v in (("b_dtype", self.b_dtype), ("scale", self.scale), ("grouping", self.grouping))
                   if v is not None},
                **({"consumer_schedule": "pingpong"} if self.pingpong else {})}


@functools.lru_cache(maxsize=None)
def _plan_defines(dtype, tile, stages, cluster, consumers, arch, producer_warpgroup, c_ring, c_from_registers,
                  a_major, b_major, pingpong=False) -> dict[str, int]:
    return kernel_defines_for(dtype, tile, stages, cluster, consumers, arch, producer_warpgroup=producer_warpgroup,
                              c_ring=c_ring, c_from_registers=c_from_registers, a_major=a_major, b_major=b_major,
                              pingpong=pingpong)


@dataclass(frozen=True)
class Operands:
    """What one launch computes on: ``D = A @ B^T`` into ``c`` (the kernel's own orientation), A and B
    as :class:`~gemm_ladder.library.operand.OperandView`, and a fused epilogue bound to its inputs and
    oriented (an :class:`~gemm_ladder.library.epilogue.EpilogueCall`), or None. A family with more
    operands (swiglu's two weights) takes them in ``more``."""

    a: Any
    b: Any
    c: Any
    epilogue: Any = None
    more: tuple = ()


@runtime_checkable
class Kernel(Protocol):
    """A library kernel family's host side, reached through its configs.

    ``family``: the name :attr:`KernelConfig.family` holds. ``splits``: the launch's split policies the
    dispatcher may rank (the ``split`` option of :meth:`bind`), or () where the family chooses.
    """

    family: str
    splits: tuple[str, ...]

    def supports(self, config: KernelConfig, problem: Operands, **rules) -> str | None:
        """None when the build ``config`` computes ``problem``; else the rule broken, in words."""

    def build(self, config: KernelConfig):
        """The compiled build (runtime.compiler.CompiledKernel), from the kernel cache or nvcc."""

    def bind(self, config: KernelConfig, problem: Operands, **options):
        """The launch bound to ``problem``'s addresses and the current stream (library.bound.BoundLaunch):
        checked, scheduled, tensor maps encoded, arguments packed; nothing launched."""

    def launch(self, bound, stream=None) -> None:
        """Launch ``bound`` (made on ``stream``, the current stream when it was bound)."""

    def loaded(self, config: KernelConfig, device):
        """The build loaded on a CUDA ``device`` (runtime.module.LoadedKernel), built first if needed."""


class BindCache:
    """Bound launches kept by (config, what a call changes): the launch options, each operand's
    address, extents, pitch, major, dtype and device, c's address, shape and strides, the epilogue
    inputs' addresses and the stream. Bounded: past ``size`` entries the least recently used goes.
    Safe from several threads (two that miss one key at once may both bind; the last kept)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._entries: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(config: KernelConfig, problem: Operands, options: tuple, stream: int) -> tuple | None:
        """The key of a bind, or None where one is not kept (an epilogue: its inputs are bound per call
        by the call cache, dispatch/calls.py)."""
        if problem.epilogue is not None or problem.more:
            return None
        a, b, c = problem.a, problem.b, problem.c
        return (config, options, _view_key(a), _view_key(b),
                (c.data_ptr(), tuple(c.shape), tuple(c.stride()), c.dtype, c.device), stream)

    def get_or_bind(self, key: tuple | None, make):
        if key is None:
            return make()
        with self._lock:
            bound = self._entries.pop(key, None)
            if bound is not None:
                self._entries[key] = bound
                return bound
        bound = make()
        with self._lock:
            self._entries[key] = bound
            while len(self._entries) > self.size:
                del self._entries[next(iter(self._entries))]
        return bound

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _view_key(v) -> tuple:
    return (v.data_ptr, v.rows, v.k, v.ld, v.major, v.tensor.dtype, v.tensor.device)


#: The process's bound launches (every family's ``launch`` of views, outside the call cache).
BINDS = BindCache()

_builds: dict = {}
_loaded: dict = {}
_lock = threading.Lock()


def built(config: KernelConfig, make):
    """The build of ``config``: ``make()`` (the family's compile) once per config, then kept."""
    return _kept(_builds, config, make)


def loaded(config: KernelConfig, device_index: int, make):
    """The build of ``config`` loaded on device ``device_index``: ``make()`` once, then kept."""
    return _kept(_loaded, (config, device_index), make)


def _kept(cache: dict, key, make):
    entry = cache.get(key)
    if entry is None:  # two threads may both make it: the first one kept is the one every caller gets
        entry = make()
        with _lock:
            entry = cache.setdefault(key, entry)
    return entry


def clear() -> None:
    """Forget every build, loaded module and bound launch kept here (tests that swap the compiler)."""
    with _lock:
        _builds.clear()
        _loaded.clear()
    BINDS.clear()


__all__ = ["BINDS", "BindCache", "DATA_PARALLEL", "FP8_DTYPES", "GROUPED", "GROUPINGS", "GROUP_K", "GROUP_M",
           "GROUP_M_MASKED", "HALF_DTYPES", "INPUT_DTYPES", "Kernel", "KernelConfig", "OUTPUT_DTYPES", "Operands",
           "SCALES", "SCHEDULES", "SPLIT_K", "STORES", "STORE_REGISTERS", "STORE_TMA", "STREAM_K", "built", "clear",
           "loaded"]
