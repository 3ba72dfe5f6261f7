"""The fp8 API: :func:`scaled_mm` and :func:`quantize_fp8`, and their PyTorch ops with fake kernels; and the
op of the 16-bit GEMM's quantized output, ``torch.ops.gemm_ladder.linear_e4m3`` (what
``linear(..., out_dtype=torch.float8_e4m3fn)`` calls under torch.compile: api_quantized.py).

``torch.ops.gemm_ladder.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)`` (functional) and
``torch.ops.gemm_ladder.scaled_mm_out(a, b, scale_a, scale_b, bias, out_dtype, out)`` (writes ``out``)
are ``torch.library.custom_op`` ops whose fakes check the call as the real kernel does (so
``torch.compile`` sees the same errors) and return the output's shape and dtype. An eager call of
:func:`scaled_mm` goes straight to the launch, skipping the custom-op boundary's host time; under
``torch.compile`` it calls the op.

The launch of a functional call with a bf16, fp16 or fp32 output goes through the compiled host module
(gemm_ladder/host/launch.cpp ``scaled_mm``) where :func:`gemm_ladder.ops.use_host` switched to it: checked
and planned once per signature in Python (host/planner.py ``plan_scaled_mm``), then per call the tensor
maps encoded and the kernel launched from C++. ``out=``, the quantized output and the signatures the
planner leaves to Python (a scale or bias copied per call) run :func:`scaled_mm_launch`; both paths launch
the same build with the same arguments (library/fp8.py ``launch_args``).
"""

from __future__ import annotations

import contextlib
import math

import torch

from gemm_ladder.api_quantized import check_linear_quantized, linear_quantized, swiglu_quantized
from gemm_ladder.dispatch.validate import first_requiring_grad
from gemm_ladder.errors import GemmInputError, NotSupportedError
from gemm_ladder.library.quantized import quantized_buffers
from gemm_ladder.library.fp8 import QUANT_OUT, check_scaled_mm, describe, host_refusal, scaled_mm_launch, settings
from gemm_ladder.library.quantized import quantize_fp8

__all__ = ["explain_scaled_mm", "quantize_fp8", "scaled_mm"]

#: The compiled host module's scaled_mm entry, or None (the Python path): set by gemm_ladder.ops.use_host.
_HOST = None
#: The output dtypes the host entry takes (the quantized output returns two tensors: Python).
_HOST_OUT = (torch.bfloat16, torch.float16, torch.float32)
#: The tensor types the host entry takes: a wrapper subclass (DTensor, a torchao float8 tensor) or a sparse
#: or nested layout goes to the Python path, whose checks refuse it with the library's errors.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plain(t) -> bool:
    return type(t) in _PLAIN and t.layout is torch.strided


def set_host(entry) -> None:
    """Launch functional calls through ``entry`` (the host module's ``scaled_mm``), or with None in Python."""
    global _HOST
    _HOST = entry


@contextlib.contextmanager
def python_launch():
    """Within the block, functional calls take the Python launch (the host entry switched off, then put back):
    for the tests and benchmarks that compare the two paths."""
    entry = _HOST
    set_host(None)
    try:
        yield
    finally:
        set_host(entry)


#: The devices a fake kernel accepts: a launch's (CUDA) and meta; a CPU tensor is refused at trace time, with
#: the launch's message, rather than when the compiled graph runs.
_FAKE_DEVICES = ("cuda", "meta")


def _check_fake(a, b, scale_a, scale_b, bias, out_dtype, out=None):
    """check_scaled_mm as the fake kernels run it: every rule but the addresses (fake tensors have none), and
    the device rule for a fake's devices."""
    call = check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, out, device_type=None)
    if a.device.type not in _FAKE_DEVICES:
        raise GemmInputError(f"a must be on a cuda device, got {a.device}")
    return call


def _refuse_quantized(out_dtype) -> None:
    """The functional op returns one tensor: the quantized output's two are scaled_mm_fp8's."""
    if out_dtype == QUANT_OUT:
        raise NotSupportedError("gemm_ladder::scaled_mm returns one tensor: the float8_e4m3fn output is "
                                "(values, scales), gemm_ladder::scaled_mm_fp8's (gemm_ladder.scaled_mm calls it)")


def _functional(a, b, scale_a, scale_b, bias, out_dtype):
    """A functional call's output: through the host module where it is on, ``a`` is on a CUDA device and every
    tensor a plain strided one (the planner's checks, once per signature, refuse the rest of what is wrong:
    another device, a dtype, a shape); anything else is checked and launched here, with the API's errors."""
    host = _HOST
    if (host is not None and type(out_dtype) is torch.dtype and out_dtype in _HOST_OUT
            and _plain(a) and a.is_cuda and _plain(b) and _plain(scale_a) and _plain(scale_b)
            and (bias is None or _plain(bias))):
        return host(a, b, scale_a, scale_b, bias, out_dtype, settings())
    call = check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)
    return scaled_mm_launch(a, b, scale_a, scale_b, bias, call)


@torch.library.custom_op("gemm_ladder::scaled_mm", mutates_args=())
def _scaled_mm_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    _refuse_quantized(out_dtype)
    return _functional(a, b, scale_a, scale_b, bias, out_dtype)


@_scaled_mm_op.register_fake
def _scaled_mm_fake(a, b, scale_a, scale_b, bias, out_dtype):
    _refuse_quantized(out_dtype)
    call = _check_fake(a, b, scale_a, scale_b, bias, out_dtype)
    return a.new_empty((call.m, call.n), dtype=out_dtype)


@torch.library.custom_op("gemm_ladder::scaled_mm_out", mutates_args=("out",))
def _scaled_mm_out_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      bias: torch.Tensor | None, out_dtype: torch.dtype, out: torch.Tensor) -> None:
    call = check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, out)
    scaled_mm_launch(a, b, scale_a, scale_b, bias, call, out)


@_scaled_mm_out_op.register_fake
def _scaled_mm_out_fake(a, b, scale_a, scale_b, bias, out_dtype, out):
    _check_fake(a, b, scale_a, scale_b, bias, out_dtype, out)


@torch.library.custom_op("gemm_ladder::scaled_mm_fp8", mutates_args=())
def _scaled_mm_fp8_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    call = check_scaled_mm(a, b, scale_a, scale_b, bias, QUANT_OUT)
    # Tensors of their own in the documented layouts (library/quantized.py), as the fake makes them.
    return scaled_mm_launch(a, b, scale_a, scale_b, bias, call)


@_scaled_mm_fp8_op.register_fake
def _scaled_mm_fp8_fake(a, b, scale_a, scale_b, bias):
    call = _check_fake(a, b, scale_a, scale_b, bias, QUANT_OUT)
    return quantized_buffers((call.m,), call.n, a.device)  # a tuple: M may be a SymInt (dynamic shapes)


@torch.library.custom_op("gemm_ladder::linear_e4m3", mutates_args=())
def _linear_e4m3_op(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                    activation: str | None, alpha: float, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    # Tensors of their own in the documented layouts (library/quantized.py), as the fake makes them.
    return linear_quantized(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta)


@_linear_e4m3_op.register_fake
def _linear_e4m3_fake(x, w, bias, residual, activation, alpha, beta):
    from gemm_ladder.dispatch.validate import MmShape, check_domain

    m, n, k = check_linear_quantized(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                                     device_types=_FAKE_DEVICES)
    if m and n and k:  # the eager call's extent rule (linear_quantized runs it where a kernel launches)
        check_domain(MmShape(m, n, k, QUANT_OUT))
    return quantized_buffers(tuple(x.shape[:-1]), n, x.device)


@torch.library.custom_op("gemm_ladder::swiglu_e4m3", mutates_args=())
def _swiglu_e4m3_op(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return swiglu_quantized(x, w_gate, w_up)  # its own tensors, library/quantized.py's layouts, as the fake's


@_swiglu_e4m3_op.register_fake
def _swiglu_e4m3_fake(x, w_gate, w_up):
    from gemm_ladder.dispatch.validate import MmShape, check_domain, check_swiglu, check_swiglu_layout

    k, n = check_swiglu(x, w_gate, w_up, device_types=_FAKE_DEVICES, check_grad=False)
    m = math.prod(x.shape[:-1])
    if m and n and k:  # the eager call's layout and extent rules (gemm_ladder.ops' swiglu fake runs them too)
        check_domain(MmShape(m, n, k, QUANT_OUT))
        check_swiglu_layout(x.reshape(m, k), w_gate, w_up, addresses=False)
    return quantized_buffers(tuple(x.shape[:-1]), n, x.device)


_grad_enabled = torch.is_grad_enabled


def _refuse_grad(a, b, scale_a, scale_b, bias) -> None:
    """NotSupportedError naming the first tensor that requires grad under grad mode: scaled_mm has no backward."""
    name = first_requiring_grad({"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "bias": bias})
    if name is not None:
        raise NotSupportedError(f"{name} requires grad: scaled_mm has no backward; call it under torch.no_grad() / "
                                "torch.inference_mode(), or on inputs that do not require grad")


def _symbolic(*args) -> bool:
    """Whether a call has a meta tensor or a tensor subclass (a FakeTensor, a functional tensor) among its
    arguments: it goes through the registered op, whose fake answers, as ``mm``'s does."""
    return any(isinstance(t, torch.Tensor) and (t.is_meta or type(t) is not torch.Tensor) for t in args)


def scaled_mm(a, b, scale_a, scale_b, *, bias=None, out_dtype=torch.bfloat16, out=None):
    """``torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)`` on gemm-ladder's fp8 kernel.

    Args:
        a: (M, K) fp8 (``torch.float8_e4m3fn`` or ``torch.float8_e5m2``), row-major, row pitch a
            multiple of 16 elements; K a multiple of 16 (K not a multiple of 128 is handled).
        b: (K, N) fp8, column-major (``w.T`` of a row-major (N, K) weight ``w``), pitch a multiple of 16.
        scale_a, scale_b: fp32 dequantization scales (``x ~ values * scale``), one of
            tensorwise (one element each), rowwise ((M, 1) and (1, N)), or blockwise ((M, ceil(K/128))
            per row and 128-wide K block, and (ceil(K/128), ceil(N/128)) per 128 x 128 block of b).
        bias: optional (N,) vector (bf16, fp16 or fp32), added after the scales.
        out_dtype: torch.bfloat16 (default), torch.float16 or torch.float32; or torch.float8_e4m3fn:
            the product quantized in the kernel's epilogue with one scale per row and 128 columns.
        out: optional (M, N) tensor of out_dtype with unit column stride, written and returned (not
            with the float8 output).

    Returns the (M, N) product ``(a * scales_a) @ (b * scales_b) + bias``: fp32 accumulation, the
    wgmma partial sums promoted into an fp32 accumulator every 128 elements of K, rounded once. With
    ``out_dtype=torch.float8_e4m3fn``: ``(values, scales)`` as ``quantize_fp8(product, (1, 128))``
    computes them from the fp32 product (values (M, N) e4m3 with a row pitch that is a multiple of 16;
    scales (M, ceil(N/128)) fp32, column-major): the next layer's ``scaled_mm(values, w2.T, scales, ...)``
    takes them as they are.

    Raises (before any launch): GemmTypeError, GemmInputError (the rule broken),
    NotSupportedError (blockwise pairings other than 1 x 128 with 128 x 128; an input requiring grad under
    grad mode: scaled_mm has no backward). Only gemm-ladder's kernel runs: nothing falls back to cuBLAS.
    Kernel: kernels/library/sm90_fp8_gemm.cu (library/fp8.py).
    """
    if _grad_enabled():  # no backward: refused before the forward runs, not by autograd after it
        _refuse_grad(a, b, scale_a, scale_b, bias)
    if torch.compiler.is_compiling() or _symbolic(a, b, scale_a, scale_b, bias, out):
        if not torch.compiler.is_compiling():  # meta or a subclass: our errors first, then the op's fake
            check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, out, device_type=None)
        if out_dtype == QUANT_OUT and out is None:
            return torch.ops.gemm_ladder.scaled_mm_fp8(a, b, scale_a, scale_b, bias)
        if out is None:
            return torch.ops.gemm_ladder.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)
        torch.ops.gemm_ladder.scaled_mm_out(a, b, scale_a, scale_b, bias, out_dtype, out)
        return out
    if out is None and out_dtype is not QUANT_OUT:
        return _functional(a, b, scale_a, scale_b, bias, out_dtype)
    call = check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, out)
    return scaled_mm_launch(a, b, scale_a, scale_b, bias, call, out)


def explain_scaled_mm(a, b, scale_a, scale_b, *, bias=None, out_dtype=torch.bfloat16, out=None) -> dict:
    """What :func:`scaled_mm` would run for these arguments, as a dict (the kernel build and its defines,
    tile, ring stages, promotion interval, grid, shared memory, the split-K schedule (``split``, ``split_reason``,
    ``contributors``, ``workspace_bytes``), copies made first, and ``host``: who launches it, "C++ ..." (the
    compiled host module) or "python (why)"); builds and launches
    nothing, and takes meta and CPU tensors too. Raises what :func:`scaled_mm` raises for bad input."""
    call = check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, out, device_type=None)
    explained = describe(call, a, b, scale_a, bias, out=out, scale_b=scale_b)
    explained["host"] = _host_path(call, scale_a, scale_b, bias, out)
    return explained


def _host_path(call, scale_a, scale_b, bias, out) -> str:
    """Who launches the call (``explain_scaled_mm``'s ``host``): the compiled host module, or Python and why
    (library/fp8.py ``host_refusal``, what the planner answers by)."""
    if _HOST is None:
        return "python (the compiled host module is not in use: see gemm_ladder.host.describe())"
    if out is not None:
        return "python (out= calls run the Python launch)"
    why = host_refusal(call, scale_a, scale_b, bias, addresses=False)
    if why is not None:
        return f"python ({why})"
    return "C++ (planned once per signature; per call the compiled host module encodes the maps and launches)"


# Importing the ops switches to the compiled host path on a CUDA machine (use_host calls set_host above).
import gemm_ladder.ops  # noqa: E402,F401
