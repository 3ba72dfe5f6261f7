"""The library's public exceptions, in one light module (no torch): ``gemm_ladder.GemmInputError`` and
the rest are these classes, also importable from the modules that raise them.

Bad input (raised before any build or launch, naming the argument and the rule):
  GemmInputError (a ValueError); GemmTypeError (also a TypeError: a non-tensor, a non-dtype);
  OutsideDomainError (valid, but outside the shapes a kernel handles: an extent past 2^31 - 1);
  EpilogueError (an Epilogue's declaration or one call's inputs).
Not done by the kernels yet: NotSupportedError (a NotImplementedError).
Building and running: EpilogueCompileError and CompileError (the compiler's message in ``log``),
CompilerNotFoundError (no nvcc and no NVRTC), CaptureBuildError (a build needed during CUDA-graph capture:
precompile), CudaError (a CUDA driver call failed), HostBuildError (the compiled host module did not build or
load under ``GEMM_LADDER_HOST=require``).
"""

from __future__ import annotations


class GemmInputError(ValueError):
    """An operand breaks the contract (device, dtype, rank, shape, stride or alignment).

    The message names the argument and the rule it breaks.
    """


class OutsideDomainError(GemmInputError):
    """The operands are valid for the contract but outside the shapes a kernel declares it handles."""


class GemmTypeError(GemmInputError, TypeError):
    """An argument that must be a tensor (or a dtype) is something else."""


class NotSupportedError(NotImplementedError):
    """A valid request the library's kernels do not compute yet; the message says which issue brings it."""


class EpilogueError(GemmInputError):
    """An epilogue's declaration, or the inputs of one call, break a rule (the message names it)."""


class EpilogueCompileError(EpilogueError):
    """The compiler rejected an epilogue's CUDA; ``log`` holds its message."""

    def __init__(self, message: str, log: str):
        super().__init__(f"{message}\n{log}")
        self.log = log


class CaptureBuildError(RuntimeError):
    """A kernel had to be built or loaded while a CUDA graph was being captured."""


class CompilerNotFoundError(RuntimeError):
    """No compiler (nvcc or NVRTC), or no cuobjdump, could be found."""


class CompileError(RuntimeError):
    """The compiler (nvcc or NVRTC) rejected a kernel; ``log`` holds its own message."""

    def __init__(self, message: str, log: str):
        super().__init__(f"{message}\n{log}")
        self.log = log


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class HostBuildError(RuntimeError):
    """The compiled host module could not be built or loaded; the message has the compiler's output.

    Raised under ``GEMM_LADDER_HOST=require`` (by default a failed build warns and the Python path runs);
    :mod:`gemm_ladder.host` raises it, and re-exports it.
    """


__all__ = ["CaptureBuildError", "CompileError", "CompilerNotFoundError", "CudaError", "EpilogueCompileError",
           "EpilogueError", "GemmInputError", "GemmTypeError", "HostBuildError", "NotSupportedError",
           "OutsideDomainError"]
