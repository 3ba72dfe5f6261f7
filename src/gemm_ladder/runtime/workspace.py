"""Global-memory scratch a kernel needs beside its operands: level 9's stream-K partials and counters.

Kept per (device, stream), at most MAX_STREAMS streams (least recently used dropped first), and
grown on demand, so a launch allocates nothing. Each buffer comes from the driver's stream-ordered
allocator (cuMemAllocAsync on the stream that uses it, freed by cuMemFreeAsync on it once no one
holds it: :func:`driver_empty`), never from torch's caching allocator: inside the warm-up run of a
CUDA-graph tree (``torch.compile(mode="reduce-overhead")``) torch's allocator hands out the graph's
pool, and a buffer this cache keeps from there is a tensor the tree does not track ("tensors in the
cudagraph pool not tracked as outputs").
The counters are zeroed on that stream before every launch (cuMemsetD32Async, a few hundred bytes):
no launch depends on how the one before it ended.

Not for CUDA graph capture: a graph would keep the buffers' addresses beyond this cache's control
(level 9 launches without a split tail while a capture is under way).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from gemm_ladder.runtime.module import _driver, check

#: Streams whose buffers are kept; a pipeline rarely uses more.
MAX_STREAMS = 8

_TYPESTR = {torch.float32: "<f4", torch.int32: "<i4"}


class _DriverMemory:
    """``count`` elements of device memory from cuMemAllocAsync on a stream, exposed to torch through
    ``__cuda_array_interface__``; freed on the same stream (cuMemFreeAsync: after the work queued
    there) when the last tensor over it is gone."""

    def __init__(self, count: int, dtype: torch.dtype, stream: torch.cuda.Stream):
        drv = _driver()
        self._drv = drv
        self._stream = drv.CUstream(stream.cuda_stream)
        size = torch.empty((), dtype=dtype).element_size()
        self.ptr = int(check(drv.cuMemAllocAsync(count * size, self._stream), "cuMemAllocAsync"))
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": _TYPESTR[dtype], "data": (self.ptr, False),
                                         "version": 3, "strides": None, "stream": None}

    def __del__(self) -> None:
        try:
            self._drv.cuMemFreeAsync(self.ptr, self._stream)
        except Exception:  # interpreter shutdown: the driver may be gone, and the process with it
            pass


def driver_empty(count: int, dtype: torch.dtype, stream: torch.cuda.Stream) -> torch.Tensor:
    """An uninitialised 1-D tensor of ``count`` float32 or int32 elements on ``stream``'s device, in
    memory of the driver's stream-ordered allocator (outside torch's caching allocator and any CUDA
    graph pool); ordered on ``stream``. Raises CudaError if the driver refuses."""
    return torch.as_tensor(_DriverMemory(max(count, 1), dtype, stream), device=stream.device)


class StreamWorkspaces:
    """fp32 partials and int32 counters for each (device, stream) that asks."""

    def __init__(self) -> None:
        # (device, stream handle) -> [partials, counters, partials' address]: a list, mutated in place
        # when it grows, so that a bound launch holding it (:meth:`partials`) reads the current address.
        self._buffers: OrderedDict[tuple[int, int], list] = OrderedDict()
        self._lock = threading.Lock()

    def _held(self, stream: torch.cuda.Stream, floats: int, counters: int) -> list:
        key = (stream.device_index, stream.cuda_stream)
        with self._lock:
            held = self._buffers.pop(key, None)
            if held is None:
                held = [None, None, 0]
            part, ctr = held[0], held[1]
            if part is None or part.numel() < floats or ctr.numel() < counters:
                if part is None or part.numel() < floats:
                    part = driver_empty(floats, torch.float32, stream)
                if ctr is None or ctr.numel() < counters:
                    ctr = driver_empty(counters, torch.int32, stream)
                held[:] = [part, ctr, part.data_ptr()]
            self._buffers[key] = held
            while len(self._buffers) > MAX_STREAMS:
                self._buffers.popitem(last=False)
        return held

    def get(self, stream: torch.cuda.Stream, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(partials, counters) for a launch on ``stream``: at least ``floats`` fp32 and ``counters`` int32
        elements on the stream's device, the first ``counters`` counters zeroed on ``stream`` (queued
        before the kernel the caller launches next on it).

        Raises CudaError if the memset cannot be queued.
        """
        part, ctr, _ = self._held(stream, floats, counters)
        if counters:
            drv = _driver()
            check(drv.cuMemsetD32Async(ctr.data_ptr(), 0, counters, drv.CUstream(stream.cuda_stream)),
                  "cuMemsetD32Async")
        return part, ctr

    def partials(self, stream: torch.cuda.Stream, floats: int) -> list:
        """The stream's partials holder, grown to at least ``floats`` fp32: a list whose item 2 is the
        partials' current device address. A bound launch keeps the list and reads that item per launch
        (O(1)): a later growth for a larger launch replaces the buffer in the same list, and buffers
        never shrink, so the address read is always one of at least ``floats`` floats. A holder dropped
        from this cache (more than MAX_STREAMS streams) stays valid for whoever holds it."""
        return self._held(stream, floats, 0)

    def clear(self) -> None:
        """Drop every buffer (the memory returns to torch's caching allocator once no bound launch holds it)."""
        with self._lock:
            self._buffers.clear()


#: The process's workspaces (levels share them: a stream runs one kernel at a time).
WORKSPACES = StreamWorkspaces()


#: int32 arrival counters per stream handed out between two clears (1 MiB): 585 launches of the largest
#: llm shape (28672 x 8192: 224 units x 2 consumers), 4096 of 4096 x 4096.
COUNTER_ARENA = 1 << 18


class CounterArena:
    """Zeroed int32 arrival counters for split launches, without a memset before every launch.

    Per (device, stream), a buffer of ``size`` counters is cleared once (cuMemsetD32Async on the
    stream) and then handed out front to back: each launch gets counters that no launch has used
    since the clear, so it starts from zeros however the launches before it ended (the rule level 9's
    workspace keeps by clearing before every launch). When the rest of the buffer is too short, it is
    cleared again on the stream, after every launch that used it. A memset per launch would cost the
    stream a small operation and its gap before each launch of a kernel that is itself short (a decode
    GEMM: docs/measured-choices.md); here it is one per thousands of launches. At most ``MAX_STREAMS``
    streams are kept, least recently used dropped first; buffers come from :func:`driver_empty` on their
    stream (never from a CUDA graph's pool). Not for CUDA graph capture (a graph would keep the addresses).

    A bound launch takes its stream's arena once (:meth:`held`) and its counters per launch with
    :meth:`take_from`: a few integer operations, no lookup.
    """

    def __init__(self, size: int = COUNTER_ARENA) -> None:
        self.size = size
        # key -> [buffer, next free, capacity, base address, CUstream]
        self._arenas: OrderedDict[tuple[int, int], list] = OrderedDict()
        self._lock = threading.Lock()

    def held(self, stream: torch.cuda.Stream, count: int) -> list:
        """The arena of ``stream`` (made, or remade larger, so that ``count`` counters fit): the list
        :meth:`take_from` takes from. Raises CudaError if a clear cannot be queued."""
        key = (stream.device_index, stream.cuda_stream)
        with self._lock:
            held = self._arenas.pop(key, None)
            if held is None or count > held[2]:
                buffer = driver_empty(max(self.size, count), torch.int32, stream)
                fresh = [buffer, buffer.numel(), buffer.numel(), buffer.data_ptr(), _driver().CUstream(stream.cuda_stream)]
                if held is None:
                    held = fresh
                else:
                    held[:] = fresh  # in place: bound launches holding this list see the new buffer
            self._arenas[key] = held
            while len(self._arenas) > MAX_STREAMS:
                self._arenas.popitem(last=False)
        return held

    def take_from(self, held: list, count: int) -> int:
        """The device address of ``count`` zeroed counters of the arena ``held`` (count <= its capacity:
        :meth:`held` made it so), clearing the whole buffer on its stream first when the rest is too short."""
        with self._lock:
            start = held[1]
            if start + count > held[2]:
                drv = _driver()
                check(drv.cuMemsetD32Async(held[3], 0, held[2], held[4]), "cuMemsetD32Async")
                start = 0
            held[1] = start + count
            return held[3] + 4 * start

    def take(self, stream: torch.cuda.Stream, count: int) -> int:
        """The device address of ``count`` zeroed int32 counters for the next launch on ``stream``.

        Raises CudaError if the clear cannot be queued.
        """
        return self.take_from(self.held(stream, count), count)


#: The process's counter arenas (the library kernels' split launches share them).
COUNTERS = CounterArena()


def split_workspace_refresher(stream: torch.cuda.Stream, floats: int, counters: int, split_args: list,
                              arena: CounterArena | None = None):
    """The per-launch step of a bound split launch: a function that points ``split_args`` (two ctypes.c_void_p,
    the kernel's partials and counters arguments) at the stream's partials (at least ``floats`` fp32) and at
    ``counters`` zeroed counters from ``arena`` (default :data:`COUNTERS`). The partials holder and the arena are
    taken at its first call and held from then on, so each call is O(1) (the counters come zeroed from the arena,
    cleared once per many launches on the stream: no memset before each launch)."""
    arena = COUNTERS if arena is None else arena
    held = []

    def refresh() -> None:
        if not held:
            held.extend((WORKSPACES.partials(stream, floats), arena.held(stream, counters)))
        split_args[0].value = held[0][2]
        split_args[1].value = arena.take_from(held[1], counters)

    return refresh
