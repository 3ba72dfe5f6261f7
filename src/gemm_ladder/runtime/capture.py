"""The CUDA-graph capture guard: work that cannot happen inside a capture is refused with the remedy.

A kernel build (nvcc, seconds) or a module load (``cuModuleLoadData``) during a stream capture either
fails deep inside the driver ("operation not permitted when stream is capturing") or, worse, stalls
the capture for seconds; a graph can hold neither. So the compiler and the loader ask
:func:`refuse_during_capture` first, and a call that would need either raises :class:`CaptureBuildError`
naming what was missing and how to build it ahead of time (``gemm_ladder.precompile`` or
``gemm-ladder precompile``, then one call of the same shape before capturing).
"""

from __future__ import annotations

import torch
from gemm_ladder.errors import CaptureBuildError  # noqa: F401 - the public classes (re-exported here)


def capturing() -> bool:
    """Whether the current thread's current CUDA stream is capturing a graph (False without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def refuse_during_capture(what: str) -> None:
    """Raise CaptureBuildError when the current stream is capturing; ``what`` names the missing work
    (e.g. "building kernel sm90_gemm_small_m (bf16)")."""
    if capturing():
        raise CaptureBuildError(
            f"{what} during CUDA graph capture: a graph cannot hold a kernel build or a module load. Build and "
            "load every kernel the calls can pick before capturing: gemm_ladder.precompile(dtypes=..., classes=...) "
            "on the GPU (or `gemm-ladder precompile` to fill the kernel cache, then one call of each shape), "
            "then capture")
