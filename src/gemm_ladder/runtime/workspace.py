"""Global-memory scratch a kernel needs beside its operands: level 9's stream-K partials and counters.

Kept per (device, stream), at most MAX_STREAMS streams (least recently used dropped first), and
grown on demand, so a launch allocates nothing. Each buffer is allocated on the stream that uses it,
so torch's caching allocator hands its memory to another allocation only in that stream's order.
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


class StreamWorkspaces:
    """fp32 partials and int32 counters for each (device, stream) that asks."""

    def __init__(self) -> None:
        self._buffers: OrderedDict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, stream: torch.cuda.Stream, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(partials, counters) for a launch on ``stream``: at least ``floats`` fp32 and ``counters`` int32
        elements on the stream's device, the first ``counters`` counters zeroed on ``stream`` (queued
        before the kernel the caller launches next on it).

        Raises CudaError if the memset cannot be queued.
        """
        key = (stream.device_index, stream.cuda_stream)
        with self._lock:
            part, ctr = self._buffers.pop(key, (None, None))
            if part is None or part.numel() < floats or ctr.numel() < counters:
                with torch.cuda.stream(stream):  # allocated for this stream: reused only in its order
                    if part is None or part.numel() < floats:
                        part = torch.empty(max(floats, 1), dtype=torch.float32, device=stream.device)
                    if ctr is None or ctr.numel() < counters:
                        ctr = torch.empty(max(counters, 1), dtype=torch.int32, device=stream.device)
            self._buffers[key] = (part, ctr)
            while len(self._buffers) > MAX_STREAMS:
                self._buffers.popitem(last=False)
        if counters:
            drv = _driver()
            check(drv.cuMemsetD32Async(ctr.data_ptr(), 0, counters, drv.CUstream(stream.cuda_stream)),
                  "cuMemsetD32Async")
        return part, ctr

    def clear(self) -> None:
        """Drop every buffer (the memory returns to torch's caching allocator)."""
        with self._lock:
            self._buffers.clear()


#: The process's workspaces (levels share them: a stream runs one kernel at a time).
WORKSPACES = StreamWorkspaces()
