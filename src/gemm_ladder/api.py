"""The public API: ``mm``, ``linear`` and ``explain``, on the library's own kernels (never cuBLAS).

Every call is checked in Python before anything is built or launched (dispatch.validate: each
exception names the argument and the rule); empty problems are decided next (an empty result, or
zeros for K = 0); then the dispatcher picks a route (dispatch.route, cached per layout) and runs it.
"""

from __future__ import annotations

import math

import torch

from gemm_ladder.dispatch import decide
from gemm_ladder.dispatch.execute import run
from gemm_ladder.dispatch.explain import Explanation, explain_route, trivial_explanation
from gemm_ladder.dispatch.validate import MmShape, check_domain, check_linear, check_mm, linear_call, trivial
from gemm_ladder.library.epilogue import Epilogue


def mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
       out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a @ b`` with ``torch.mm`` semantics on gemm-ladder's kernels.

    Args:
        a: (M, K) and b: (K, N), CUDA tensors of one dtype, torch.bfloat16 or torch.float16; each
            row-major or column-major with any leading dimension >= its extent (a padded pitch), any
            2-byte aligned base, or any other strided view (copied into an aligned workspace first).
        out: optional (M, N) result tensor (row-major, column-major, any pitch); it must not overlap
            a or b. Returned when given.
        out_dtype: None (the input dtype) or torch.float32. Accumulation is fp32 in every case.

    Returns:
        The (M, N) product (``out`` if given, else a new contiguous tensor).

    Raises (before any launch):
        GemmTypeError (a TypeError) for a non-tensor; GemmInputError (a ValueError) naming the
        argument and the rule (device, dtype, rank, K, out's shape/dtype/device/overlap);
        NotSupportedError (a NotImplementedError) for inputs requiring grad, or an output dtype no
        kernel writes yet; OutsideDomainError for an extent past 2^31 - 1.
    """
    shape = check_mm(a, b, out, out_dtype)
    c = _trivial_result(shape, a, out)
    if c is not None:
        return c
    check_domain(shape)
    given = out is not None
    c = out if given else torch.empty((shape.m, shape.n), dtype=shape.out_dtype, device=a.device)
    run(decide(a, b, c, given=given), a, b, c)
    return c


def _trivial_result(shape: MmShape, a: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor | None:
    kind = trivial(shape)
    if kind is None:
        return None
    c = out if out is not None else torch.empty((shape.m, shape.n), dtype=shape.out_dtype, device=a.device)
    if kind == "zeros":
        c.zero_()  # the empty sum
    return c


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *, activation: str | None = None,
           residual: torch.Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
           out_dtype: torch.dtype | None = None, epilogue: Epilogue | None = None, **inputs) -> torch.Tensor:
    """``activation(alpha * x @ w.T + bias) + beta * residual``, fused into one GEMM kernel.

    The epilogue runs in fp32 on the accumulators, in exactly that order (scale, bias, activation,
    residual), and the result is rounded once to the output dtype: no extra pass over the output.

    Args:
        x: (*, K), any number of leading batch dimensions (a 1-D x gives a 1-D result); batch
            dimensions that cannot be merged into one view are copied by ``torch.reshape`` first.
        w: (N, K), same dtype (bf16 or fp16) and CUDA device as x; read in place (``w.T`` is a
            K-major operand: no copy).
        bias: None or (N,), one value per output column, in x's dtype or torch.float32 (a float32 bias
            is added at full precision, never rounded to x's dtype first); any stride.
        activation: None, "relu", "gelu" (erf, ``F.gelu``), "gelu_tanh" (``F.gelu(approximate="tanh")``)
            or "silu".
        residual: None or a tensor of the output's shape (*, N), in x's dtype or torch.float32, any
            layout (row- or column-major, padded pitch, any strides; read in place).
        alpha, beta: Python numbers, used as fp32, with ``torch.addmm``'s meaning: the product is
            scaled by alpha, the residual by beta; beta = 0 ignores the residual (it is not read: NaN
            and Inf in it are not propagated). alpha = 1 costs no multiply.
        out_dtype: None (x's dtype) or torch.float32; float32 output is written by the small-M kernel
            only (M <= 256, as for ``mm``), NotSupportedError otherwise.
        epilogue: your own :class:`gemm_ladder.Epilogue`, instead of bias/activation/residual/alpha/beta;
            its declared inputs are passed as keywords (``**inputs``): row vectors of the output's M
            rows (batch dimensions merged), column vectors of N, tiles of the output's shape (*, N)
            merged to (M, N), scalars.

    Returns: (*, N) in ``out_dtype``, contiguous.

    K = 0: there is no product to run; the epilogue is applied to zeros by its PyTorch reference in
    float64 and rounded once (for the built-in epilogue that is the same formula).

    Raises (before any launch): GemmTypeError, GemmInputError naming the argument and the rule
    (:func:`gemm_ladder.dispatch.validate.check_linear`; EpilogueError for an epilogue's inputs),
    NotSupportedError (grad; float32 output the kernels do not write), OutsideDomainError; and
    EpilogueCompileError with nvcc's message when a user epilogue's CUDA does not compile.
    """
    k, n = check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                        out_dtype=out_dtype, epilogue=epilogue, inputs=inputs)
    call = linear_call(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                       epilogue=epilogue, inputs=inputs)
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(math.prod(lead), k)  # a view whenever the batch dimensions merge
    out = torch.empty((*lead, n), dtype=out_dtype or x.dtype, device=x.device)
    c = out.view(-1, n)
    if call is None:
        mm(x2, w.T, out=c, out_dtype=out_dtype)
        return out
    shape = MmShape(x2.shape[0], n, k, c.dtype)
    if trivial(shape) == "empty":
        return out
    if trivial(shape) == "zeros":
        c.copy_(call.reference(torch.zeros(c.shape, dtype=torch.float64, device=c.device)))
        return out
    check_domain(shape)
    run(decide(x2, w.T, c, given=True), x2, w.T, c, epilogue=call)
    return out


def explain(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
            out_dtype: torch.dtype | None = None) -> Explanation:
    """What ``mm(a, b, out=out, out_dtype=out_dtype)`` would run and why, without running it.

    Takes CUDA tensors or meta tensors (shapes, strides and offsets are all it reads; on meta the GPU
    is assumed to be the H200, and the explanation says so). Raises what :func:`mm` raises for bad input.
    """
    shape = check_mm(a, b, out, out_dtype, device_types=("cuda", "meta"))
    device = str(a.device)
    kind = trivial(shape)
    if kind is not None:
        return trivial_explanation(kind, shape.m, shape.n, shape.k, a.dtype, shape.out_dtype, device)
    check_domain(shape)
    given = out is not None
    c = out if given else torch.empty((shape.m, shape.n), dtype=shape.out_dtype, device=a.device)
    from gemm_ladder.dispatch import cost_model

    route = decide(a, b, c, given=given)
    return explain_route(route, shape.m, shape.n, shape.k, shape.out_dtype, cost_model())


__all__ = ["Epilogue", "Explanation", "explain", "linear", "mm"]
