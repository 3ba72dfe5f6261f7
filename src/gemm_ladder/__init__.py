"""gemm-ladder: nine Hopper GEMM kernels from one correct tile to a cluster-multicast,
multi-consumer kernel, the gates that prove each one, and a TMA pipeline designer and auditor; and on
top of them a library: :func:`mm`, :func:`linear` (with fused epilogues, and your own :class:`Epilogue`),
:func:`swiglu` and :func:`explain` (:mod:`gemm_ladder.api`), registered as PyTorch ops (:mod:`gemm_ladder.ops`),
``nn.Linear`` and ``nn.replace_linear`` (:mod:`gemm_ladder.nn`), and :func:`precompile`
(:mod:`gemm_ladder.dispatch.precompile`); the exceptions they raise (:mod:`gemm_ladder.errors`:
``GemmInputError``, ``GemmTypeError``, ``NotSupportedError``, ``OutsideDomainError``, ``CaptureBuildError``,
``HostBuildError``, ...).

The ladder's contract: ``c = a @ b.T`` with ``a`` (M, K) and ``b`` (N, K) row-major, bf16 or fp16
(see :mod:`gemm_ladder.contract`).
"""

__version__ = "0.1.0"

# The exceptions live in a light module (no torch): importing them keeps ``import gemm_ladder.design`` light.
from gemm_ladder.errors import (  # noqa: E402
    CaptureBuildError,
    CompileError,
    CompilerNotFoundError,
    CudaError,
    EpilogueCompileError,
    EpilogueError,
    GemmInputError,
    GemmTypeError,
    HostBuildError,
    NotSupportedError,
    OutsideDomainError,
)

_ERRORS = ("CaptureBuildError", "CompileError", "CompilerNotFoundError", "CudaError", "EpilogueCompileError",
          "EpilogueError", "GemmInputError", "GemmTypeError", "HostBuildError", "NotSupportedError",
          "OutsideDomainError")

__all__ = ["Epilogue", "Explanation", "__version__", "explain", "explain_swiglu", "linear", "mm", "nn", "ops",
           "precompile", "swiglu", "scaled_mm", "quantize_fp8", "explain_scaled_mm", *_ERRORS]
__all__ += ["grouped_linear", "grouped_mm", "grouped_mm_masked", "explain_grouped_mm"]  # mixture-of-experts grouped GEMM (ops_grouped.py)
__all__ += ["grouped_swiglu", "explain_grouped_swiglu"]  # the experts' gated MLP (ops_grouped_swiglu.py)
__all__ += ["moe"]  # transformers' mixture-of-experts layers on the grouped kernel (moe.py)
__all__ += ["set_autotune"]  # measured choice among the cost model's leading builds (dispatch/autotune.py)

_API = ("Epilogue", "Explanation", "explain", "explain_swiglu", "linear", "mm", "swiglu")


def _register_ops() -> None:
    """``import gemm_ladder`` registers ``torch.ops.gemm_ladder.*`` (so that an exported program that
    calls them loads) when torch is already imported: the usual ``import torch, gemm_ladder``. Without
    torch imported first nothing is imported here, so ``import gemm_ladder.design`` (pure Python)
    stays free of torch; ``import gemm_ladder.ops`` registers them at any time."""
    import sys

    if "torch" in sys.modules:
        import importlib

        importlib.import_module("gemm_ladder.ops")
        importlib.import_module("gemm_ladder.ops_grouped")
        importlib.import_module("gemm_ladder.ops_grouped_swiglu")
        importlib.import_module("gemm_ladder.ops_fp8")  # fp8 scaled_mm


def __getattr__(name: str):
    # The API is imported on first use: ``import gemm_ladder.design`` (pure Python) stays light.
    if name in _API:
        import importlib

        importlib.import_module("gemm_ladder.ops")  # registers the ops (it imports the API: ops is above it)
        from gemm_ladder import api

        value = globals()[name] = getattr(api, name)  # kept: a per-call gemm_ladder.mm skips this hook
        return value
    if name in ("grouped_mm", "grouped_linear", "grouped_mm_masked", "explain_grouped_mm"):  # grouped GEMM (ops_grouped.py)
        return getattr(__import__("gemm_ladder.ops_grouped", fromlist=[name]), name)
    if name in ("grouped_swiglu", "explain_grouped_swiglu"):  # the experts' gated MLP (ops_grouped_swiglu.py)
        return getattr(__import__("gemm_ladder.ops_grouped_swiglu", fromlist=[name]), name)
    if name == "set_autotune":  # time the cost model's leading builds at a signature's first call (dispatch/autotune.py)
        from gemm_ladder.dispatch import set_autotune

        return set_autotune
    if name == "precompile":  # by dtype and shape class, or a model's own set (precompile(model, example_inputs))
        from gemm_ladder.model_precompile import precompile

        return precompile
    if name in ("scaled_mm", "quantize_fp8", "explain_scaled_mm"):  # fp8 (ops_fp8.py)
        import importlib

        return getattr(importlib.import_module("gemm_ladder.ops_fp8"), name)
    if name in ("nn", "ops", "moe"):  # moe: transformers' experts layers on the grouped kernel
        import importlib

        return importlib.import_module(f"gemm_ladder.{name}")
    raise AttributeError(f"module 'gemm_ladder' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API) | {"nn", "ops", "moe", "precompile", "grouped_mm", "grouped_linear",
                                                 "grouped_mm_masked", "explain_grouped_mm", "grouped_swiglu", "explain_grouped_swiglu", "scaled_mm", "quantize_fp8", "explain_scaled_mm",
                                                 "set_autotune"})


_register_ops()
