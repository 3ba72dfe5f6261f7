"""``linear`` and ``mm`` with ``out_dtype=torch.float8_e4m3fn``: the 16-bit product quantized in the GEMM's
epilogue, so that the next fp8 layer (``scaled_mm``) reads it with no quantization kernel between them.

Returns ``(values, scales)``, what ``quantize_fp8(y, (1, 128))`` computes from the fp32 result ``y`` of
the fused epilogue (``activation(alpha * x @ w.T + bias) + beta * residual``), never rounded to bf16 first:
per row and 128 columns ``scale = max(amax / 448, FLT_MIN)`` and ``values = y / scale`` rounded to nearest
e4m3, saturated to +-448. One difference from ``quantize_fp8``: a NaN in the result leaves its block's
scale finite (the kernel's max ignores NaN) and is stored as an e4m3 NaN.

The kernel is the general (layouts) kernel's register-store build with the e4m3 output
(library/gemm.py ``out_e4m3``; kernels/include/gemm_ladder/quantized_store.cuh), chosen by the dispatcher
as for any call (dispatch/route.py: BN 128 or 256, the split the cost model ranks; never the small-M
kernel, never transposed). The call is checked, decided (routes cached per layout) and bound on every
call, in Python: no call cache and no compiled host path yet.
"""

from __future__ import annotations

import torch

from gemm_ladder.dispatch import decide
from gemm_ladder.dispatch.calls import rows
from gemm_ladder.dispatch.execute import run
from gemm_ladder.dispatch.validate import (MmShape, NotSupportedError, check_domain, check_linear, first_requiring_grad,
                                          linear_call)
from gemm_ladder.runtime.module import elsewhere, on_device
from gemm_ladder.library.quantized import QUANT_OUT, kernel_views, quantized_buffers


def refuse_grad(tensors: dict) -> None:
    """No backward: a tensor requiring grad under grad mode is refused, never silently detached."""
    if (name := first_requiring_grad(tensors)) is not None:
        raise NotSupportedError(f"{name} requires grad: the quantized (float8_e4m3fn) output has no backward; "
                                "call it under torch.no_grad() / torch.inference_mode(), or take a bf16 output "
                                "(out_dtype=None) to differentiate")


def check_linear_quantized(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0,
                           device_types: tuple[str, ...] = ("cuda",)) -> tuple[int, int, int]:
    """:func:`gemm_ladder.dispatch.validate.check_linear`'s rules for the quantized output, and no input
    requiring grad under grad mode; returns (M, N, K) (M: x's batch dimensions merged). Raises
    GemmTypeError, GemmInputError, NotSupportedError (grad)."""
    k, n = check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                        device_types=device_types, check_grad=False)
    refuse_grad({"x": x, "w": w, "bias": bias, "residual": residual})
    return rows(tuple(x.shape[:-1])), n, k


def linear_quantized(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
                     activation: str | None = None, residual: torch.Tensor | None = None, alpha: float = 1.0,
                     beta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``linear(x, w, bias, ..., out_dtype=torch.float8_e4m3fn)``: the fused epilogue's fp32 result
    quantized with 1 x 128 scales in the kernel's epilogue (module docstring).

    Args: as :func:`gemm_ladder.linear` (x (*, K) and w (N, K) bf16 or fp16 on one CUDA device; bias (N,),
    residual (*, N), activation, alpha, beta), without ``out`` or a user ``Epilogue``.

    Returns ``(values, scales)`` (library/quantized.py's ``quantized_buffers``): values (*, N)
    ``torch.float8_e4m3fn`` whose rows have a pitch that is a multiple of 16 elements; scales (*, ceil(N /
    128)) float32, column-major in the merged rows (element (r, b) at r + b x R, R = M rounded up to 4):
    the layouts ``scaled_mm(values, w2.T, scales, sw2.T)`` reads in place once the batch dimensions are
    merged to (M, ...) (a view). Both are tensors of their own, not views, in these layouts on every path
    (eager, the op under torch.compile, its fake). Empty M or N: empty tensors; K = 0: the epilogue applied
    to zeros, quantized as ``quantize_fp8`` does, in the same layouts.

    Raises (before any launch): GemmTypeError, GemmInputError (:func:`check_linear_quantized`),
    NotSupportedError (an input requiring grad under grad mode), OutsideDomainError.
    """
    m, n, k = check_linear_quantized(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta)
    index = elsewhere(x)
    if index is not None:  # run on x's device; the caller's current device is put back
        with on_device(index):
            return linear_quantized(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta)
    lead = tuple(x.shape[:-1])
    call = linear_call(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta, check_grad=False)
    values, scales = quantized_buffers(lead, n, x.device)
    if m == 0 or n == 0:
        return values, scales
    if k == 0:
        from gemm_ladder.library.quantized import quantize_fp8_into

        zeros = torch.zeros((m, n), dtype=torch.float64, device=x.device)
        return quantize_fp8_into((call.reference(zeros) if call is not None else zeros).float(), values, scales)
    values2, scale_rows = kernel_views(values, scales)
    check_domain(MmShape(m, n, k, QUANT_OUT))
    x2 = x.reshape(m, k)  # a view where the batch dimensions merge
    # A residual read, or a float32 bias, caps the tile at BN 128 (both spilled at 256: route.QUANTIZED_NARROW_MAX_BN).
    narrow = (residual is not None and beta != 0) or (bias is not None and bias.dtype == torch.float32)
    route = decide(x2, w.T, values2, given=False, activation=activation, narrow=narrow)
    run(route, x2, w.T, values2, epilogue=call, scales=scale_rows)
    return values, scales


def linear_e4m3(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0):
    """What ``linear(..., out_dtype=torch.float8_e4m3fn)`` runs: :func:`linear_quantized` directly for an eager
    call on plain tensors; under ``torch.compile``, on tensor subclasses or meta tensors, the op
    ``torch.ops.gemm_ladder.linear_e4m3(x, w, bias, residual, activation, alpha, beta)`` (registered with its
    fake by ops_fp8.py, the layer above; the same layouts), after the same checks, so the
    library's errors come before the dispatcher's. Returns and raises as :func:`linear_quantized`."""
    if through_op(x, w, bias, residual):
        check_linear_quantized(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                               device_types=("cuda", "meta"))
        return _op("linear_e4m3")(x, w, bias, residual, activation, float(alpha), float(beta))
    return linear_quantized(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta)


#: The tensor types an eager call runs on directly (anything else, a subclass, goes through the op).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def through_op(*tensors) -> bool:
    """Whether a call goes through its registered op rather than straight to the kernel: under
    ``torch.compile``, or with a tensor subclass or a meta tensor among ``tensors`` (None entries ignored).
    Grad is not a reason: these calls have no backward and refuse it on either path."""
    return torch.compiler.is_compiling() or any(
        isinstance(t, torch.Tensor) and (type(t) not in _PLAIN or t.is_meta) for t in tensors)


def _op(name: str):
    """``torch.ops.gemm_ladder.<name>``, registered by ``import gemm_ladder`` (gemm_ladder._register_ops);
    registered here first in a process that imported this module before the package registered its ops."""
    if not hasattr(torch.ops.gemm_ladder, name):
        import gemm_ladder

        gemm_ladder._register_ops()
    return getattr(torch.ops.gemm_ladder, name)


def swiglu_quantized(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``swiglu(x, w_gate, w_up, out_dtype=torch.float8_e4m3fn)``: ``silu(x @ w_gate.T) * (x @ w_up.T)``
    from the fp32 accumulators, quantized in the epilogue of the swiglu kernel's quantized build
    (library/swiglu.py ``swiglu_kernel(quantized=True)``): a tile's 128 output columns are one scale block.
    The gated MLP's output is the down projection's input: an fp8 down projection
    (``scaled_mm(values, w_down_q.T, scales, s_down.T)``) reads it with no quantization kernel between them.

    Args and layouts: as :func:`gemm_ladder.swiglu` (x (*, K); w_gate, w_up (N, K); bf16 or fp16; rows
    16-byte aligned with 16-byte pitches). Always the fused kernel (the small-M pair has no quantized
    output). Returns ``(values, scales)`` as :func:`linear_quantized` does (library/quantized.py's layouts).
    Raises what :func:`gemm_ladder.swiglu` raises, and NotSupportedError for an input requiring grad under
    grad mode (no backward), before any launch."""
    from gemm_ladder.dispatch.validate import check_swiglu, check_swiglu_layout
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.swiglu import swiglu_kernel

    k, n = check_swiglu(x, w_gate, w_up, check_grad=False)
    refuse_grad({"x": x, "w_gate": w_gate, "w_up": w_up})
    index = elsewhere(x)
    if index is not None:  # run on x's device; the caller's current device is put back
        with on_device(index):
            return swiglu_quantized(x, w_gate, w_up)
    lead = tuple(x.shape[:-1])
    m = rows(lead)
    values, scales = quantized_buffers(lead, n, x.device)
    if m == 0 or n == 0:
        return values, scales
    if k == 0:  # silu(0) * 0: zero values, each block's scale the floor
        from gemm_ladder.library.quantized import quantize_fp8_into

        return quantize_fp8_into(torch.zeros((m, n), dtype=torch.float32, device=x.device), values, scales)
    values2, scale_rows = kernel_views(values, scales)
    check_domain(MmShape(m, n, k, QUANT_OUT))
    x2 = x.reshape(m, k)
    check_swiglu_layout(x2, w_gate, w_up)
    views = [operand_view(t, k_dim=1) for t in (x2, w_gate, w_up)]
    swiglu_kernel(quantized=True).launch(*views, values2, scales=scale_rows)
    return values, scales


def swiglu_e4m3(x, w_gate, w_up):
    """What ``swiglu(..., out_dtype=torch.float8_e4m3fn)`` runs: :func:`swiglu_quantized` for an eager call on
    plain tensors; under ``torch.compile``, on subclasses or meta tensors the op
    ``torch.ops.gemm_ladder.swiglu_e4m3(x, w_gate, w_up)`` (ops_fp8.py; its fake makes the same layouts),
    after the same checks."""
    if through_op(x, w_gate, w_up):
        from gemm_ladder.dispatch.validate import check_swiglu

        check_swiglu(x, w_gate, w_up, device_types=("cuda", "meta"), check_grad=False)
        refuse_grad({"x": x, "w_gate": w_gate, "w_up": w_up})
        return _op("swiglu_e4m3")(x, w_gate, w_up)
    return swiglu_quantized(x, w_gate, w_up)


def explain_quantized(a: torch.Tensor, b: torch.Tensor, *, activation: str | None = None):
    """What ``mm(a, b, out_dtype=torch.float8_e4m3fn)`` (or, with ``activation``, the GEMM of
    ``linear(a, b.T, activation=..., out_dtype=torch.float8_e4m3fn)``) would run, as
    :func:`gemm_ladder.explain`'s Explanation; CUDA or meta tensors. The route of a call whose epilogue reads
    a residual or a float32 bias is at most 128 wide (dispatch/route.py QUANTIZED_NARROW_MAX_BN), which
    ``explain`` (no residual or bias argument) does not show."""
    from gemm_ladder.dispatch import cost_model
    from gemm_ladder.dispatch.explain import explain_route, trivial_explanation
    from gemm_ladder.dispatch.validate import check_activation, check_mm, trivial

    check_activation(activation)
    shape = check_mm(a, b, None, None, device_types=("cuda", "meta"), check_grad=False)
    kind = trivial(shape)
    if kind is not None:
        return trivial_explanation(kind, shape.m, shape.n, shape.k, a.dtype, QUANT_OUT, str(a.device))
    check_domain(shape)
    values = quantized_buffers(shape.m, shape.n, a.device)[0]
    route = decide(a, b, values, given=False, activation=activation)
    out = explain_route(route, shape.m, shape.n, shape.k, QUANT_OUT, cost_model(route.device))
    out.host = "python (the quantized output: the Python path checks, decides and binds every call)"
    return out


__all__ = ["check_linear_quantized", "explain_quantized", "linear_e4m3", "linear_quantized", "refuse_grad",
           "swiglu_e4m3", "swiglu_quantized", "through_op"]
