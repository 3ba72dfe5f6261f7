"""Load cubins and launch kernels through cuda-python (``cuda.bindings.driver``) on PyTorch's stream.

Kernel arguments are passed the way the driver expects them: an array of pointers, one to each
argument's bytes. Pointers and integers travel as ctypes values; a ``CUtensorMap`` (128 bytes,
passed by value as a ``__grid_constant__`` parameter) travels as the address of its storage.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import is_fake

from gemm_ladder.runtime.capture import refuse_during_capture
from gemm_ladder.runtime.compiler import CompiledKernel
from gemm_ladder.errors import CudaError  # noqa: F401 - the public classes (re-exported here)

#: Above this, a kernel must opt in to more dynamic shared memory (CUDA C Programming Guide,
#: "Shared Memory" for compute capability 9.0).
DEFAULT_DYNAMIC_SMEM_LIMIT = 48 * 1024

#: Launch configurations kept per kernel (one per grid and stream seen; cleared when full).
_CONFIG_CACHE_SIZE = 64


_drv = None


def _driver():
    global _drv
    if _drv is None:
        from cuda.bindings import driver  # imported lazily: importing is fine without a GPU, using is not

        _drv = driver
    return _drv


def check(result, what: str):
    """Unpack a cuda.bindings ``(CUresult, *values)`` tuple; raise CudaError unless CUDA_SUCCESS."""
    drv = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        raise CudaError(f"{what} failed: {name.decode() if name else err} ({text.decode() if text else ''})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _current_context() -> int:
    """The driver context current on this thread (0: none)."""
    drv = _driver()
    return int(check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent"))


def ensure_context(device: torch.device) -> None:
    """Make PyTorch's primary context for ``device`` current on this thread (the driver API needs one).

    This changes the caller's current device; :func:`on_device` is the form that restores it."""
    torch.cuda.set_device(device)
    torch.cuda.current_stream(device)  # forces PyTorch to create and bind its context
    drv = _driver()
    if _current_context() == 0:
        dev = check(drv.cuDeviceGet(device.index or 0), "cuDeviceGet")
        ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class on_device:
    """``with on_device(index):`` runs its body with CUDA device ``index`` current (PyTorch's current
    device and its primary context bound on this thread, what cuModuleLoadData and the other
    context-scoped driver calls use) and afterwards puts back the caller's current device and the
    driver context that was current (a context of the caller's own included). Nests."""

    __slots__ = ("index", "_device", "_context")

    def __init__(self, index: int) -> None:
        self.index = index

    def __enter__(self) -> "on_device":
        self._context = _current_context()
        self._device = torch.cuda.device(self.index)
        self._device.__enter__()
        ensure_context(torch.device("cuda", self.index))
        return self

    def __exit__(self, *exc) -> None:
        self._device.__exit__(*exc)
        if self._context and _current_context() != self._context:
            check(_driver().cuCtxSetCurrent(self._context), "cuCtxSetCurrent")


@dataclass(frozen=True)
class LaunchGeometry:
    """Threads per CTA, dynamic shared memory in bytes and cluster size of one launch (what :func:`load`
    takes; the ladder's levels and the library's kernels each derive theirs from their plan)."""

    threads: int
    dynamic_smem: int
    cluster: int = 1


@dataclass
class LoadedKernel:
    """A kernel function of a loaded cubin, ready to launch on one device."""

    function: object
    module: object
    dynamic_smem: int
    threads: int
    cluster: int
    _resident: int | None = None
    _configs: dict = field(default_factory=dict, repr=False)  # (grid, stream handle) -> CUlaunchConfig

    def prefer_shared_memory_carveout(self, percent: int) -> None:
        """Ask that ``percent`` (0-100) of each SM's unified L1/shared storage be shared memory when this
        kernel runs (CUDA Driver API, cuFuncSetAttribute: CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
        a hint the driver may round). Raises ValueError outside 0-100, CudaError from the driver."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent = {percent}: a shared-memory carveout is 0 to 100 percent")
        drv = _driver()
        check(drv.cuFuncSetAttribute(self.function,
                                     drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                     percent), "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)")

    def launch(self, grid: tuple[int, int, int], args: list, stream: torch.cuda.Stream | None = None) -> None:
        """Launch with ``grid`` CTAs on ``stream`` (default: PyTorch's current stream).

        ``args`` are ctypes values (``c_void_p``, ``c_int``, ...) or objects with ``getPtr()``
        (cuda.bindings ``CUtensorMap``), in the kernel's parameter order.
        """
        drv = _driver()
        pointers = (ctypes.c_void_p * len(args))(
            *[a.getPtr() if hasattr(a, "getPtr") else ctypes.addressof(a) for a in args]
        )
        stream = stream or torch.cuda.current_stream()
        key = (grid, stream.cuda_stream)
        config = self._configs.get(key)
        if config is None:  # building a CUlaunchConfig costs ~10 us of Python; a GEMM repeats its grid
            if len(self._configs) >= _CONFIG_CACHE_SIZE:
                self._configs.clear()
            config = self._configs[key] = self._config(grid, stream)
        check(drv.cuLaunchKernelEx(config, self.function, ctypes.addressof(pointers), 0), "cuLaunchKernelEx")

    def prepare(self, grid: tuple[int, int, int], args: list, stream_handle: int) -> "PreparedLaunch":
        """A launch of ``grid`` CTAs with ``args`` on the stream whose raw handle is ``stream_handle``,
        packed once (launch configuration, cluster attribute, argument pointer array) so that calling
        it costs one driver call. ``args`` are ctypes values (mutable in place between calls: the
        driver copies parameters at launch) or objects with ``getPtr()`` (``CUtensorMap``); they are
        kept alive by the result."""
        return PreparedLaunch(self, grid, list(args), stream_handle)

    def _config(self, grid: tuple[int, int, int], stream: torch.cuda.Stream | None):
        drv = _driver()
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self.threads, 1, 1
        config.sharedMemBytes = self.dynamic_smem
        if stream is not None:
            config.hStream = drv.CUstream(stream.cuda_stream)
        if self.cluster > 1:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = self.cluster, 1, 1
            config.attrs = [attr]
            config.numAttrs = 1
        return config

    def max_active_ctas_per_sm(self) -> int:
        """CTAs of this kernel that fit on one SM (cuOccupancyMaxActiveBlocksPerMultiprocessor)."""
        drv = _driver()
        return int(
            check(
                drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, self.threads, self.dynamic_smem),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
        )


    def max_active_clusters(self, device: torch.device) -> int:
        """Clusters (CTAs when cluster == 1) of this kernel resident on the whole GPU at once.

        CTAs per SM x SMs, from the occupancy API; for clusters, cuOccupancyMaxActiveClusters, which
        also knows that a cluster must fit inside one GPC.
        """
        if self._resident is None:
            if self.cluster == 1:
                sms = torch.cuda.get_device_properties(device).multi_processor_count
                self._resident = self.max_active_ctas_per_sm() * sms
            else:
                drv = _driver()
                config = self._config((self.cluster, 1, 1), None)
                self._resident = int(check(drv.cuOccupancyMaxActiveClusters(self.function, config),
                                           "cuOccupancyMaxActiveClusters"))
            if self._resident < 1:
                raise CudaError(f"no CTA of this kernel fits on an SM ({self.threads} threads, "
                                f"{self.dynamic_smem} bytes of dynamic shared memory)")
        return self._resident


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute`` (cuda.h): an id, 4 bytes of padding, a 64-byte value union; only the
    cluster dimension (3 unsigned ints) is written here."""

    _fields_ = [("id", ctypes.c_int), ("_pad", ctypes.c_int), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                ("z", ctypes.c_uint), ("_rest", ctypes.c_char * 52)]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h, CUDA 12+): grid and block dimensions, dynamic shared memory, stream,
    attributes. tests/test_ops.py compares its bytes with cuda.bindings' own struct."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_launch_fn = None


def _cu_launch_kernel_ex():
    """libcuda's ``cuLaunchKernelEx`` (CUDA 12.0+) as a ctypes function: one C call per launch, no
    wrapper objects. Taken from the driver library the process already loaded (``libcuda.so.1``,
    the one cuda-python uses), else asked of the driver through cuGetProcAddress."""
    global _launch_fn
    if _launch_fn is None:
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        try:
            address = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx, ctypes.c_void_p).value
        except (OSError, AttributeError):
            drv = _driver()
            flags = drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
            found = check(drv.cuGetProcAddress(b"cuLaunchKernelEx", 12000, flags), "cuGetProcAddress(cuLaunchKernelEx)")
            address = int(found[0] if isinstance(found, tuple) else found)
        _launch_fn = proto(address)
    return _launch_fn


def launch_config_struct(grid: tuple[int, int, int], threads: int, dynamic_smem: int, stream_handle: int,
                         cluster: int, cluster_attr_id: int) -> tuple[_LaunchConfig, object]:
    """The packed ``CUlaunchConfig`` (and the attribute array it points to, to keep alive); no GPU needed."""
    config = _LaunchConfig(grid[0], grid[1], grid[2], threads, 1, 1, dynamic_smem, stream_handle or None, None, 0)
    attrs = None
    if cluster > 1:
        attrs = (_LaunchAttribute * 1)()
        attrs[0].id, attrs[0].x, attrs[0].y, attrs[0].z = cluster_attr_id, cluster, 1, 1
        config.attrs = ctypes.cast(attrs, ctypes.POINTER(_LaunchAttribute))
        config.numAttrs = 1
    return config, attrs


class PreparedLaunch:
    """One kernel launch packed for repeated calls (:meth:`LoadedKernel.prepare`): calling it is one
    ``cuLaunchKernelEx`` through ctypes. Raises CudaError when the driver refuses the launch."""

    __slots__ = ("kernel", "args", "_pointers", "_config", "_attrs", "_fn", "_function", "_params", "_cfg")

    def __init__(self, kernel: LoadedKernel, grid: tuple[int, int, int], args: list, stream_handle: int):
        drv = _driver()
        self.kernel = kernel
        self.args = args  # kept alive: the pointer array holds their addresses
        self._pointers = (ctypes.c_void_p * max(1, len(args)))(
            *[a.getPtr() if hasattr(a, "getPtr") else ctypes.addressof(a) for a in args])
        cluster_id = int(drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        self._config, self._attrs = launch_config_struct(grid, kernel.threads, kernel.dynamic_smem, stream_handle,
                                                         kernel.cluster, cluster_id)
        self._fn = _cu_launch_kernel_ex()
        self._function = int(kernel.function)
        self._params = ctypes.addressof(self._pointers)
        self._cfg = ctypes.addressof(self._config)

    def __call__(self) -> None:
        err = self._fn(self._cfg, self._function, self._params, None)
        if err:
            drv = _driver()
            check(drv.CUresult(err), "cuLaunchKernelEx")


_loaded: dict[tuple, LoadedKernel] = {}
_lock = threading.Lock()


def _load_once(key: tuple, read_cubin, kernel_name: str, index: int, *, threads: int, dynamic_smem: int,
               cluster: int) -> LoadedKernel:
    with _lock:
        if key in _loaded:
            return _loaded[key]
        # cuModuleLoadData is not a stream operation a graph can hold; inside a capture it would fail
        # or invalidate the capture: refuse with the remedy instead.
        refuse_during_capture(f"loading kernel {kernel_name} on cuda:{index}")
        drv = _driver()
        # The module is loaded into device ``index``'s primary context (the one its tensors' streams
        # belong to); the caller's current device and context are put back.
        with on_device(index):
            module = check(drv.cuModuleLoadData(read_cubin()), "cuModuleLoadData")
            function = check(drv.cuModuleGetFunction(module, kernel_name.encode()),
                             f"cuModuleGetFunction({kernel_name})")
            if dynamic_smem > DEFAULT_DYNAMIC_SMEM_LIMIT:
                check(
                    drv.cuFuncSetAttribute(
                        function, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        dynamic_smem),
                    "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                )
        kernel = LoadedKernel(function, module, dynamic_smem, threads, cluster)
        _loaded[key] = kernel
        return kernel


def elsewhere(t) -> int | None:
    """The index of ``t``'s CUDA device when ``t`` is a CUDA tensor on a device other than the current
    one (the call must run under :func:`on_device`), else None (a CPU or meta tensor, a FakeTensor, whose
    call goes through the op and needs no CUDA runtime, or anything else: the checks say what is wrong
    with it). A few attribute reads."""
    if isinstance(t, torch.Tensor) and t.is_cuda and (type(t) is torch.Tensor or not is_fake(t)):
        index = t.get_device()
        if index != torch.cuda.current_device():
            return index
    return None


def device_index(device: torch.device) -> int:
    """The CUDA ordinal of ``device``; ``torch.device("cuda")`` (no index) means the current device."""
    return device.index if device.index is not None else torch.cuda.current_device()


def load(compiled: CompiledKernel, device: torch.device, *, threads: int, dynamic_smem: int, cluster: int = 1) -> LoadedKernel:
    """Load ``compiled`` on ``device`` once and return its kernel; raises CudaError on driver errors.

    Keyed by the build's cache key, which costs nothing per launch (this is on every launch's path).
    """
    index = device_index(device)
    return _load_once((compiled.key, index), compiled.cubin.read_bytes, compiled.kernel_name, index,
                      threads=threads, dynamic_smem=dynamic_smem, cluster=cluster)


def load_cubin(cubin: Path, kernel_name: str, device: torch.device, *, threads: int, dynamic_smem: int,
               cluster: int = 1) -> LoadedKernel:
    """Load any cubin file (a user's, for the resource gate) once per content, entry and geometry.

    Raises CudaError on driver errors (no such entry point, a cubin for another architecture).
    """
    data = Path(cubin).read_bytes()
    index = device_index(device)
    key = (hashlib.sha256(data).hexdigest(), kernel_name, threads, dynamic_smem, cluster, index)
    return _load_once(key, lambda: data, kernel_name, index, threads=threads, dynamic_smem=dynamic_smem,
                      cluster=cluster)
