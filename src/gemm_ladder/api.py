"""The public API: ``mm``, ``linear``, ``swiglu`` and ``explain``, on the library's own kernels (never cuBLAS).

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
from gemm_ladder.dispatch.validate import (
    MmShape, check_domain, check_linear, check_mm, check_swiglu, check_swiglu_layout, trivial,
)


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


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ w.T`` with ``torch.nn.functional.linear`` semantics on gemm-ladder's kernels.

    Args:
        x: (*, K), any number of leading batch dimensions (a 1-D x gives a 1-D result); batch
            dimensions that cannot be merged into one view are copied by ``torch.reshape`` first.
        w: (N, K), same dtype (bf16 or fp16) and CUDA device as x; read in place (``w.T`` is a
            K-major operand: no copy).
        bias: must be None: the kernels have no bias epilogue yet (issue 13), and adding it in a
            second pass would be a composition the caller did not ask for.

    Returns: (*, N) in x's dtype, contiguous.

    Raises: as :func:`mm` (naming x and w); NotSupportedError for a bias.
    """
    k, n = check_linear(x, w, bias)
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(math.prod(lead), k)  # a view whenever the batch dimensions merge
    out = torch.empty((*lead, n), dtype=x.dtype, device=x.device)
    mm(x2, w.T, out=out.view(-1, n))
    return out


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """The gated MLP of Llama, ``silu(x @ w_gate.T) * (x @ w_up.T)``, in one kernel.

    ``F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)`` computed by ``kernels/library/sm90_swiglu.cu``:
    each x tile is read once for both products (a 2-CTA cluster multicasts 128 rows of w_gate and the
    same 128 rows of w_up into one shared-memory stage), both accumulate in fp32, and the epilogue
    computes ``silu(g) * u = g / (1 + exp(-g)) * u`` in fp32 and rounds once to the output dtype
    (torch's composition rounds g, u, silu(g) and the product: four roundings).

    Args:
        x: (*, K), any number of leading batch dimensions (a 1-D x gives a 1-D result); merged into
            (M, K) by ``torch.reshape`` (a copy only where the batch dimensions cannot be merged).
        w_gate, w_up: (N, K) each, nn.Linear's weight layout; same dtype (torch.bfloat16 or
            torch.float16) and CUDA device as x.

    Layouts (read in place, never repacked): x and both weights row-major (stride (ld, 1), ld >= K)
    with 16-byte aligned bases and pitches of a multiple of 16 bytes (K a multiple of 8 for dense
    operands): what a TMA tensor map describes (CUDA Driver API, cuTensorMapEncodeTiled). Any other
    layout raises NotSupportedError saying what to pass instead (``.contiguous()``, K padded with
    zero columns). M, N and K tails are computed (TMA zero-fills loads past the edges; the store clips).

    Returns: (*, N) in x's dtype, contiguous. N whose rows are not whole 16-byte chunks (N not a
    multiple of 8) is written into a padded workspace and copied into the result. M = 0 or N = 0 gives
    an empty result; K = 0 gives zeros (silu(0) * 0).

    Raises (before any launch): GemmTypeError (a TypeError) for a non-tensor; GemmInputError (a
    ValueError) naming the argument and the rule (device, dtype, rank, K, w_gate and w_up shapes);
    NotSupportedError (a NotImplementedError) for a layout TMA cannot describe, or inputs requiring
    grad (no backward); OutsideDomainError for an extent past 2^31 - 1.
    """
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.swiglu import swiglu_kernel

    k, n = check_swiglu(x, w_gate, w_up)
    lead = tuple(x.shape[:-1])
    m = math.prod(lead)
    if m == 0 or n == 0:
        return torch.empty((*lead, n), dtype=x.dtype, device=x.device)
    if k == 0:
        return torch.zeros((*lead, n), dtype=x.dtype, device=x.device)  # silu(0) * 0
    check_domain(MmShape(m, n, k, x.dtype))
    x2 = x.reshape(m, k)
    check_swiglu_layout(x2, w_gate, w_up)
    views = [operand_view(t, k_dim=1) for t in (x2, w_gate, w_up)]
    per16 = 16 // x.element_size()  # elements in the TMA store's 16-byte chunk
    if n % per16 == 0:
        out = torch.empty((*lead, n), dtype=x.dtype, device=x.device)
        swiglu_kernel().launch(*views, out.view(m, n))
        return out
    padded = torch.empty((m, -(-n // per16) * per16), dtype=x.dtype, device=x.device)
    swiglu_kernel().launch(*views, padded[:, :n], out_padding_writable=True)
    return padded[:, :n].contiguous().view(*lead, n)


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


__all__ = ["Explanation", "explain", "linear", "mm", "swiglu"]
