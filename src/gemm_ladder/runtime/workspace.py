"""Global-memory scratch a kernel needs beside its operands: level 9's stream-K partials and counters.

Kept per (device, stream) and grown on demand, so a launch costs no allocation and no memset: the
kernel leaves its counters at zero when it finishes (design/stream_k.py), and kernels on one
stream run one after another. Two streams never share a buffer.
"""

from __future__ import annotations

import threading

import torch


class StreamWorkspaces:
    """fp32 partials and zero-initialised int32 counters for each (device, stream) that asks."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()

    def get(self, device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(partials, counters) on ``device`` for its current stream, at least ``floats`` fp32 and
        ``counters`` int32 elements; the counters are zero unless a kernel still running holds them.

        A grown buffer is a fresh allocation on the current stream (torch's caching allocator keeps the
        old one alive until the kernels queued before it have run); new counters are zeroed by a fill
        on that stream, which runs before the kernel about to be launched.
        """
        stream = torch.cuda.current_stream(device)
        key = (stream.device_index, stream.cuda_stream)
        with self._lock:
            part, ctr = self._buffers.get(key, (None, None))
            if part is None or part.numel() < floats:
                part = torch.empty(max(floats, 1), dtype=torch.float32, device=device)
            if ctr is None or ctr.numel() < counters:
                ctr = torch.zeros(max(counters, 1), dtype=torch.int32, device=device)
            self._buffers[key] = (part, ctr)
        return part, ctr

    def clear(self) -> None:
        """Drop every buffer (the memory returns to torch's caching allocator)."""
        with self._lock:
            self._buffers.clear()


#: The process's workspaces (levels share them: a stream runs one kernel at a time).
WORKSPACES = StreamWorkspaces()
