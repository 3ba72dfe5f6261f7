"""The public API: ``mm``, ``linear``, ``swiglu`` and ``explain``, on the library's own kernels (never cuBLAS).

Every call is checked in Python before anything is built or launched (dispatch.validate: each
exception names the argument and the rule); empty problems are decided next (an empty result, or
zeros for K = 0); then the dispatcher picks a route (dispatch.route, cached per layout) and runs it.
A call whose signature was seen before skips the checks and the decision and launches a bound
launch (dispatch.calls); ``linear`` with its built-in fused epilogue (bias, activation, residual,
alpha, beta) too. ``linear`` with a user :class:`Epilogue` is checked and decided on every call.

Four kinds of call go through the registered PyTorch ops instead (:mod:`gemm_ladder.ops`): under
``torch.compile`` (the ops have fake implementations, so the graph does not break), on tensor
subclasses (FakeTensor, functional tensors), on meta tensors (the fake gives the output's shape,
dtype and strides), and when autograd must record the call (an operand
requires grad with grad mode on: the ops' backward runs on gemm-ladder's kernels too). A plain
eager call skips the op boundary, which costs a few microseconds of dispatcher work per call.

A user :class:`Epilogue` (``linear(..., epilogue=ep, **inputs)``) is a Python object with CUDA
source, which no op schema can carry: such calls are eager only. Under ``torch.compile``, on tensor
subclasses or meta tensors, or with an input requiring grad under grad mode, they raise
NotSupportedError saying so (never a graph break into a silent second path).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from gemm_ladder.host.planned import PlannedSettings

from gemm_ladder.api_quantized import explain_quantized, linear_e4m3, refuse_grad, swiglu_e4m3
from gemm_ladder.dispatch import decide
from gemm_ladder.dispatch.calls import CALLS, fast_linear_key, fast_mm_key, linear_key, make_call, mm_key, rows
from gemm_ladder.dispatch.execute import run
from gemm_ladder.dispatch.explain import Explanation, explain_route, trivial_explanation
from gemm_ladder.dispatch.validate import (
    FLOAT_MAX,
    GemmInputError,
    GemmTypeError,
    MmShape,
    NotSupportedError,
    check_activation,
    check_domain,
    check_linear,
    check_mm,
    check_strided,
    check_swiglu,
    check_swiglu_layout,
    linear_call,
    may_overlap,
    result_dtype,
    trivial,
)
from gemm_ladder.library.epilogue import Epilogue, linear_epilogue
from gemm_ladder.library.quantized import QUANT_OUT as _QUANT_OUT
from gemm_ladder.runtime.module import elsewhere, on_device


def _dense(**named) -> None:
    """check_strided on each tensor given: before a call goes through the registered op, whose dispatcher
    would otherwise answer a sparse or nested tensor in torch's words (no kernel for its dispatch key)."""
    for name, t in named.items():
        if isinstance(t, torch.Tensor):
            check_strided(name, t)


def _through_op(*tensors) -> bool:
    """Whether a call must go through the registered op: compiling, a tensor subclass, meta, or autograd."""
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and isinstance(t, torch.Tensor) and (
                type(t) is not torch.Tensor or t.is_meta or (grad and t.requires_grad)):
            return True
    return _is_compiling()


_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_STRIDED = torch.strided
_grad_enabled = torch.is_grad_enabled
_FAST = CALLS.fast


def _as_float(v) -> bool:
    """A float, or an int with a float value (float() of a larger int raises OverflowError: the checked path
    refuses it by name)."""
    return type(v) is float or (type(v) is int and -FLOAT_MAX <= v <= FLOAT_MAX)


def _eager_plain(a, b) -> bool:
    """Whether a call on ``a`` and ``b`` may take the fast path: both plain tensors (not a subclass:
    FakeTensor, functional), not compiling, and no autograd to record. Meta tensors and any other
    operand (bias, residual) are the fast key's business: it has their devices and types."""
    return (type(a) is _Tensor and type(b) is _Tensor and not _is_compiling()
            and not ((a.requires_grad or b.requires_grad) and _grad_enabled()))


#: Once the compiled host module serves the ops' CUDA kernels (gemm_ladder.ops.use_host): its entries
#: ``mm(a, b, out_dtype)`` and ``linear(x, w, bias, residual, activation, alpha, beta, out_dtype)``
#: (positional: a typed dispatcher call of the registered ops, without the OpOverload's argument
#: parsing), then the OpOverloads (mm, linear) for tensor subclasses (a ``__torch_function__`` sees
#: those); else None. Every eager call of mm/linear on CUDA tensors goes through the op (one call into
#: C++), whatever the weight's type, the activation's address or grad mode; under torch.compile the
#: OpOverload is traced instead.
_HOST_OPS: tuple | None = None
_DTYPE = torch.dtype
#: Tensor types the host entries take directly (anything else is a subclass: the OpOverload).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def set_host_ops(ops: tuple | None) -> None:
    """Route mm, linear and swiglu through ``ops`` (the host module's mm and linear entries, the mm and linear
    OpOverloads, its swiglu entry, its ``clear``) or, with None, the Python path."""
    global _HOST_OPS
    _HOST_OPS = ops


#: The registered ops' entry points (gemm_ladder.ops's mm, linear, swiglu), handed over by gemm_ladder.ops
#: when it registers them: ops is the layer above this module (it imports this one, never the reverse).
_OPS: tuple | None = None


def set_registered_ops(ops: tuple) -> None:
    """Keep the registered ops' entry points (mm, linear, swiglu) for the calls that must go through
    them (autograd, torch.compile, meta and tensor subclasses); called by gemm_ladder.ops."""
    global _OPS
    _OPS = ops


def _registered_ops() -> tuple:
    """The registered ops' entry points. ``import gemm_ladder`` (with torch imported) and the package's
    ``gemm_ladder.mm``/``linear``/``swiglu`` register them first; a process that imported this module
    before torch asks the package here, once (the package, not this module, imports the ops)."""
    if _OPS is None:
        import gemm_ladder

        gemm_ladder.__getattr__("ops")  # registers them: gemm_ladder.ops calls set_registered_ops
    return _OPS


def _host_call(a, b, bias=None, residual=None) -> bool:
    """Whether a call may go straight to the op: CUDA tensors for the operands (anything else takes
    the checked path, whose errors name the rule), optional tensors None or tensors. Unrolled: it is
    on every eager call's path."""
    return (isinstance(a, _Tensor) and isinstance(b, _Tensor) and a.is_cuda and b.is_cuda
            and a.layout is _STRIDED and b.layout is _STRIDED  # sparse: the checked path names its layout
            and (bias is None or (isinstance(bias, _Tensor) and bias.layout is _STRIDED))
            and (residual is None or (isinstance(residual, _Tensor) and residual.layout is _STRIDED)))


def mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
       out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a @ b`` with ``torch.mm`` semantics on gemm-ladder's kernels.

    Args:
        a: (M, K) and b: (K, N), CUDA tensors of one dtype, torch.bfloat16 or torch.float16; each
            row-major or column-major with any leading dimension >= its extent (a padded pitch), any
            2-byte aligned base, or any other strided view (copied into an aligned workspace first).
        out: optional (M, N) result tensor (row-major, column-major, any pitch); it must not overlap
            a or b. Returned when given. An out= call has no backward (as torch's out= ops).
        out_dtype: None (the input dtype) or torch.float32. Accumulation is fp32 in every case. Or
            torch.float8_e4m3fn: the product quantized in the kernel's epilogue, returned as (values,
            scales) (:func:`linear`'s ``out_dtype`` says how); not with ``out``, no backward.

    Returns:
        The (M, N) product (``out`` if given, else a new contiguous tensor). Differentiable: with an
        operand requiring grad, the call goes through ``torch.ops.gemm_ladder.mm``, whose backward
        computes grad_a = grad @ b.T and grad_b = a.T @ grad with these kernels (transposed views,
        no copies).

    Raises (before any launch):
        GemmTypeError (a TypeError) for a non-tensor; GemmInputError (a ValueError) naming the
        argument and the rule (device, dtype, rank, K, out's shape/dtype/device/overlap);
        NotSupportedError (a NotImplementedError) for out= with an operand requiring grad, or an
        output dtype no kernel writes yet; OutsideDomainError for an extent past 2^31 - 1;
        CaptureBuildError when a CUDA graph is being captured and a kernel is not built and loaded.
    """
    if out is not None and not isinstance(out, _Tensor):  # before the op's schema answers in torch's words
        raise GemmTypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if type(out_dtype) is _DTYPE and out_dtype == _QUANT_OUT:
        return _mm_quantized(a, b, out)
    host = _HOST_OPS
    if (host is not None and out is None and (out_dtype is None or type(out_dtype) is _DTYPE) and _host_call(a, b)
            and not _is_compiling()):
        if type(a) in _PLAIN and type(b) in _PLAIN:
            return host[0](a, b, out_dtype)
        return host[2](a, b, out_dtype=out_dtype)  # a subclass: the OpOverload (its __torch_function__ too)
    index = elsewhere(a)
    if index is not None:  # run on a's device; the caller's current device is put back
        with on_device(index):
            return mm(a, b, out=out, out_dtype=out_dtype)
    key = None
    if out is None and _eager_plain(a, b):
        # The fast path (dispatch.calls, "The fast key"): one key, one lookup, the output, one launch.
        try:
            key = fast_mm_key(a, b, out_dtype)
        except RuntimeError:  # no storage or sizes (sparse, mkldnn, nested): the checks below name the layout
            key = None
        call = _FAST.get(key) if key is not None else None
        if call is not None:
            return _launch_mm(call, key, a, b)
    if _through_op(a, b, out):
        _dense(a=a, b=b, out=out)
        return _registered_ops()[0](a, b, out=out, out_dtype=out_dtype)
    return mm_direct(a, b, out, out_dtype, fast_key=key)


def _launch_mm(call, key, a, b) -> torch.Tensor:
    """The fast path's run of ``call`` (found under the fast key ``key`` of a and b): the output, then
    the bound launch for a's, b's and c's addresses and the stream, if one is bound, else ``call.run``."""
    c = torch.empty(call.out_shape, dtype=call.out_dtype, device=a.device)
    if call.kind != "bound" or not call.launch_bound((key[0], key[1], c.data_ptr(), key[-2])):
        call.run(a, b, c)
    return c


def _mm_quantized(a, b, out):
    """``mm(a, b, out_dtype=torch.float8_e4m3fn)``: mm's checks (naming a and b), then :func:`linear`'s
    quantized output of ``a @ b`` (``linear(a, b.T, ...)``); out= is refused."""
    if out is not None:
        raise NotSupportedError("out= with out_dtype=torch.float8_e4m3fn: the quantized output is returned as "
                                "(values, scales); drop out=")
    check_mm(a, b, None, None, device_types=("cuda", "meta"), check_grad=False)
    refuse_grad({"a": a, "b": b})
    return linear_e4m3(a, b.T)


def mm_op(a, b, *, out_dtype=None) -> torch.Tensor:
    """The ``gemm_ladder::mm`` op's CUDA kernel (registered by :mod:`gemm_ladder.ops`, also what its
    Autograd kernel calls directly when there is nothing to record): :func:`mm`'s fast path, then
    :func:`mm_direct`. The eager checks of :func:`mm` are the dispatcher's here: a CUDA kernel is
    only reached with tensors of a CUDA dispatch key (no FakeTensor, meta or functional wrapper:
    those stop at their own keys above) and below autograd (an input requiring grad is the
    Autograd kernel's, above; this functional op has no grad rule of its own). The fast entry is
    made by mm_direct only once the call's signature is checked, as for the eager call; the fast
    key reads the addresses, stream and capture state on every call. Raises as :func:`mm`."""
    index = elsewhere(a)
    if index is not None:
        with on_device(index):
            return mm_op(a, b, out_dtype=out_dtype)
    key = fast_mm_key(a, b, out_dtype)
    call = _FAST.get(key)
    if call is None:
        return mm_direct(a, b, None, out_dtype, fast_key=key)
    return _launch_mm(call, key, a, b)


def mm_direct(a, b, out=None, out_dtype=None, *, check_grad: bool = False, fast_key: tuple | None = None) -> torch.Tensor:
    """:func:`mm` without the op boundary (the ops' CUDA kernels and a plain eager call): the call
    cache's :class:`~gemm_ladder.dispatch.calls.Call` for this signature, checked and decided on its
    first call. ``check_grad``: refuse operands that require grad with grad mode on (the out= op: it
    has no backward); requires_grad is not part of the signature, so it is checked on every call.
    ``fast_key``: the call's fast key (:func:`~gemm_ladder.dispatch.calls.fast_mm_key`), kept for
    the Call once its signature is checked (``out`` must be None)."""
    index = elsewhere(a)
    if index is not None:
        with on_device(index):
            return mm_direct(a, b, out, out_dtype, check_grad=check_grad, fast_key=fast_key)
    key = mm_key(a, b, out, out_dtype)
    if check_grad and key is not None and torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        check_mm(a, b, out, out_dtype, check_grad=True)  # raises NotSupportedError naming the operand
    fresh: list[torch.Tensor] = []  # the output a first call's decision allocated: run into it
    call = CALLS.get_or_make(key, lambda: _mm_call(a, b, out, out_dtype, fresh))
    if key is not None:
        CALLS.put_fast(fast_key, call)
    c = out if out is not None else output_for(call, fresh, a.device)
    call.run(a, b, c)
    return c


def output_for(call, fresh: list, device) -> torch.Tensor:
    """The output of ``call`` (its ``out_shape`` and ``out_dtype``): the one its decision allocated, if
    it was decided just now (``fresh``, filled by :func:`_mm_call`), else a new one."""
    if fresh:
        return fresh[0].view(call.out_shape)
    return torch.empty(call.out_shape, dtype=call.out_dtype, device=device)


def _mm_call(a, b, out, out_dtype, fresh: list | None = None, activation: str | None = None):
    """The checked and decided :class:`~gemm_ladder.dispatch.calls.Call` of ``mm(a, b, out=out)``. The
    route is decided for an output like the one the call will write; where ``out`` is None that output
    is allocated here and appended to ``fresh`` (when given), so that the first call runs into it.
    ``activation``: the one a ``linear`` call fuses (the route may differ: dispatch.decide)."""
    shape = check_mm(a, b, out, out_dtype, check_grad=False)
    kind = trivial(shape)
    if kind is not None:
        return make_call(kind, (shape.m, shape.n), shape.out_dtype, shape.m, shape.n, shape.k)
    check_domain(shape)
    given = out is not None
    c = out if given else torch.empty((shape.m, shape.n), dtype=shape.out_dtype, device=a.device)
    if not given and fresh is not None:
        fresh.append(c)
    return make_call("route", (shape.m, shape.n), shape.out_dtype, shape.m, shape.n, shape.k,
                     route=decide(a, b, c, given=given, activation=activation))


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *, activation: str | None = None,
           residual: torch.Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
           out_dtype: torch.dtype | None = None, epilogue: Epilogue | None = None, **inputs) -> torch.Tensor:
    """``activation(alpha * x @ w.T + bias) + beta * residual``, fused into one GEMM kernel, with
    ``torch.nn.functional.linear`` semantics for x and w.

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
        out_dtype: None (x's dtype) or torch.float32; float32 output is written from registers (the
            small-M kernel, or the layouts kernel's register-store build past it), as for ``mm``. Or
            torch.float8_e4m3fn: the epilogue's fp32 result quantized in the kernel's epilogue with one
            scale per row and 128 columns, returned as ``(values, scales)`` (values (*, N) e4m3, scales
            (*, ceil(N / 128)) float32), what ``quantize_fp8(result, (1, 128))`` computes, in the
            layouts ``scaled_mm`` reads without a copy: two fp8 layers chain with no quantization kernel
            between them (api_quantized.py). No backward (an input requiring grad under grad mode is
            refused) and no user ``epilogue``.
        epilogue: your own :class:`gemm_ladder.Epilogue`, instead of bias/activation/residual/alpha/beta;
            its declared inputs are passed as keywords (``**inputs``): row vectors of the output's M
            rows (batch dimensions merged), column vectors of N, tiles of the output's shape (*, N)
            merged to (M, N), scalars. Eager only, without a backward (see the module docstring).

    Returns: (*, N) in ``out_dtype``, contiguous. Differentiable without ``epilogue`` (through
    ``torch.ops.gemm_ladder.linear``: grad_x = alpha * grad_z @ w, grad_w = alpha * grad_z^T @ x on
    these kernels, grad_z = grad * act'(z); grad_bias = sum of grad_z; grad_residual = beta * grad).

    K = 0: there is no product to run; the epilogue is applied to zeros by its PyTorch reference in
    float64 and rounded once (for the built-in epilogue that is the same formula).

    Raises (before any launch): GemmTypeError, GemmInputError naming the argument and the rule
    (:func:`gemm_ladder.dispatch.validate.check_linear`; EpilogueError for an epilogue's inputs),
    NotSupportedError (float32 output the kernels do not write; a user epilogue under torch.compile,
    on tensor subclasses or meta tensors, or with an input requiring grad), OutsideDomainError; and
    EpilogueCompileError with nvcc's message when a user epilogue's CUDA does not compile.
    """
    if type(out_dtype) is _DTYPE and out_dtype == _QUANT_OUT:
        if epilogue is not None or inputs:
            raise NotSupportedError("epilogue= with out_dtype=torch.float8_e4m3fn: the quantized output takes "
                                    "linear's built-in bias/activation/residual/alpha/beta only")
        return linear_e4m3(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta)
    if epilogue is not None or inputs:
        if epilogue is not None and not isinstance(epilogue, Epilogue):  # before the device rules answer
            raise GemmTypeError(f"epilogue must be a gemm_ladder.Epilogue, got {type(epilogue).__name__} (the "
                                "built-in activations are activation='relu', 'gelu', 'gelu_tanh' or 'silu')")
        index = elsewhere(x)
        if index is not None:  # run on x's device; the caller's current device is put back
            with on_device(index):
                return linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                              out_dtype=out_dtype, epilogue=epilogue, **inputs)
        return _linear_user(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                            out_dtype=out_dtype, epilogue=epilogue, inputs=inputs)
    host = _HOST_OPS
    if (host is not None and (out_dtype is None or type(out_dtype) is _DTYPE) and _as_float(alpha)
            and _as_float(beta) and (activation is None or type(activation) is str)
            and _host_call(x, w, bias, residual) and not _is_compiling()):
        if type(x) in _PLAIN and type(w) in _PLAIN and (bias is None or type(bias) in _PLAIN) and (
                residual is None or type(residual) in _PLAIN):
            return host[1](x, w, bias, residual, activation, float(alpha), float(beta), out_dtype)
        return host[3](x, w, bias, residual, activation=activation, alpha=float(alpha), beta=float(beta),
                       out_dtype=out_dtype)
    index = elsewhere(x)
    if index is not None:  # run on x's device; the caller's current device is put back
        with on_device(index):
            return linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                          out_dtype=out_dtype)
    key = None
    if _eager_plain(x, w) and not (_grad_enabled() and (_requires_grad(bias) or _requires_grad(residual))):
        try:
            key = fast_linear_key(x, w, bias, residual, activation, alpha, beta, out_dtype)  # see mm
        except RuntimeError:  # as mm's: a layout without storage, named by the checks below
            key = None
        call = _FAST.get(key) if key is not None else None
        if call is not None:
            return _launch_linear(call, key, x, w, bias, residual, alpha, beta)
    if _through_op(x, w, bias, residual):
        _dense(x=x, w=w, bias=bias, residual=residual)
        return _registered_ops()[1](x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                          out_dtype=out_dtype)
    return linear_direct(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                         out_dtype=out_dtype, fast_key=key)


def linear_op(x, w, bias=None, residual=None, *, activation=None, alpha=1.0, beta=1.0, out_dtype=None) -> torch.Tensor:
    """The ``gemm_ladder::linear`` op's CUDA kernel (see :func:`mm_op`: the dispatcher has made the
    eager checks): :func:`linear`'s fast path, then :func:`linear_direct`. Raises as :func:`linear`."""
    index = elsewhere(x)
    if index is not None:
        with on_device(index):
            return linear_op(x, w, bias, residual, activation=activation, alpha=alpha, beta=beta,
                             out_dtype=out_dtype)
    key = fast_linear_key(x, w, bias, residual, activation, alpha, beta, out_dtype)
    call = _FAST.get(key) if key is not None else None
    if call is None:
        return linear_direct(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                             out_dtype=out_dtype, fast_key=key)
    return _launch_linear(call, key, x, w, bias, residual, alpha, beta)


def _launch_linear(call, key, x, w, bias, residual, alpha, beta) -> torch.Tensor:
    """The fast path's run of ``call`` (found under the fast key ``key``): the output, then its bound
    launch if one is bound (:func:`_launch_linear_bound`), else :func:`_run_linear`."""
    c = torch.empty(call.out_shape, dtype=call.out_dtype, device=x.device)
    if not _launch_linear_bound(call, key, c, bias, residual, alpha, beta):
        _run_linear(call, x, w, c, bias, residual, alpha, beta)
    return c


def _requires_grad(t) -> bool:
    return type(t) is _Tensor and t.requires_grad  # anything else: the fast key is None (full checks)


def _launch_linear_bound(call, key, c, bias, residual, alpha, beta) -> bool:
    """The fast path's launch for ``linear``: the bound launch for x's, w's and c's addresses, the stream
    (from the fast key ``key``) and the epilogue inputs' addresses, if one is bound; else False. Only
    where x is used in place (``call.view``): a reshaped copy of x has another address than x."""
    if call.kind != "bound" or not call.view:
        return False
    bind_key = (key[0], key[1], c.data_ptr(), key[-2])
    if call.epilogue is None:
        return call.launch_bound(bind_key)
    tensors, scalars = _epilogue_args(call, bias, residual, alpha, beta)
    return call.launch_bound(bind_key + tuple(t.data_ptr() for t in tensors), scalars)


def _epilogue_args(call, bias, residual, alpha, beta) -> tuple[tuple, tuple]:
    """The built-in epilogue's inputs in its slot order (library.epilogue.linear_epilogue): tensors bias,
    residual (read only when beta != 0; 2-D (M, N)); scalars alpha (when != 1), beta (with the residual)."""
    read_residual = residual is not None and beta != 0
    tensors = (() if bias is None else (bias,)) + (
        (residual if residual.dim() == 2 else residual.reshape(call.m, call.n),) if read_residual else ())
    scalars = (() if alpha == 1 else (alpha,)) + ((beta,) if read_residual else ())
    return tensors, scalars


def _run_linear(call, x, w, c, bias, residual, alpha, beta) -> None:
    """``c = epilogue(x @ w.T)`` by ``call`` (its signature's): x viewed (or reshaped) to (M, K), c to (M, N)."""
    m, n = call.m, call.n
    x2 = x.view(m, call.k) if call.view else x.reshape(m, call.k)
    if call.epilogue is None:
        call.run(x2, w.T, c.view(m, n))
        return
    tensors, scalars = _epilogue_args(call, bias, residual, alpha, beta)
    call.run(x2, w.T, c.view(m, n), inputs=tensors, scalars=scalars)


def linear_direct(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0, out_dtype=None,
                  out=None, check_grad: bool = False, fast_key: tuple | None = None) -> torch.Tensor:
    """:func:`linear` with the built-in epilogue, without the op boundary (see :func:`mm_direct`): the
    call cache's :class:`~gemm_ladder.dispatch.calls.Call` for this signature (epilogue included),
    checked and decided on its first call. ``out``: the (*, N) result to write (the ``linear_out``
    op's), checked by validate.check_linear_out and mm's out rules; not cached. ``check_grad``: refuse
    tensors requiring grad with grad mode on (the out= op: it has no backward). ``fast_key``: the
    call's fast key (:func:`~gemm_ladder.dispatch.calls.fast_linear_key`), kept once checked."""
    index = elsewhere(x)
    if index is not None:
        with on_device(index):
            return linear_direct(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                                 out_dtype=out_dtype, out=out, check_grad=check_grad, fast_key=fast_key)
    if check_grad and torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                                      for t in (x, w, bias, residual)):
        check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                     out_dtype=out_dtype)  # raises NotSupportedError naming the tensor
    if out is not None:
        return _linear_out(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                           out_dtype=out_dtype, out=out)
    key = linear_key(x, w, out_dtype, bias, residual, activation, alpha, beta)
    fresh: list[torch.Tensor] = []  # see mm_direct
    call = CALLS.get_or_make(key, lambda: _linear_call(x, w, bias, activation, residual, alpha, beta, out_dtype,
                                                       fresh))
    if key is not None:
        CALLS.put_fast(fast_key, call)
    c = output_for(call, fresh, x.device)
    _run_linear(call, x, w, c, bias, residual, alpha, beta)
    return c


def _linear_call(x, w, bias, activation, residual, alpha, beta, out_dtype, fresh: list | None = None):
    k, n = check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                        out_dtype=out_dtype, check_grad=False)
    lead = tuple(x.shape[:-1])
    m = rows(lead)
    try:
        x2, view = x.view(m, k), True
    except RuntimeError:  # batch dimensions that do not merge: reshape copies on every call
        x2, view = x.reshape(m, k), False
    call = _mm_call(x2, w.T, None, out_dtype, fresh, activation)
    call.out_shape, call.view = (*lead, n), view
    call.epilogue = linear_epilogue(bias=bias is not None, activation=activation,
                                    residual=residual is not None and beta != 0, alpha=alpha != 1)
    return call


def _linear_out(x, w, bias, *, activation, residual, alpha, beta, out_dtype, out):
    """linear_out: mm_direct's out= path without an epilogue; with one, the uncached fused path into
    ``out``, which may not share memory with bias or residual (an in-place residual is not verified)."""
    from gemm_ladder.dispatch.validate import check_linear_out

    k, n = check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                        out_dtype=out_dtype, check_grad=False)
    out2 = check_linear_out(out, x, n, result_dtype(out_dtype, x.dtype))
    call = linear_call(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                       check_grad=False)
    x2 = x.reshape(rows(tuple(x.shape[:-1])), k)  # not reshape(-1, k): K = 0 leaves -1 undetermined
    if call is None:
        mm_direct(x2, w.T, out2, out_dtype)
        return out
    check_mm(x2, w.T, out2, out_dtype, check_grad=False)  # out's device and overlap rules
    refuse_out_overlap(out, bias, residual)
    _run_fused(x2, w, out2, call, activation)
    return out


def refuse_out_overlap(out, bias, residual) -> None:
    """linear's fused epilogue writes ``out`` while it reads ``bias`` and ``residual``: NotSupportedError where
    ``out`` may share memory with either (works on meta and fake tensors: the ops' fakes run it too)."""
    for name, t in (("bias", bias), ("residual", residual)):
        if t is not None and may_overlap(out, t):
            raise NotSupportedError(f"out shares memory with {name}: linear's fused epilogue writes out while it "
                                    f"reads {name}; pass a separate out")


def _run_fused(x2, w, c, call, activation: str | None = None) -> None:
    """``c = epilogue(x2 @ w.T)`` (c (M, N), checked) uncached: K = 0 by the epilogue's reference.
    ``activation``: the built-in one fused (the route may differ: dispatch.decide), None for a user's."""
    shape = MmShape(x2.shape[0], w.shape[0], x2.shape[1], c.dtype)
    kind = trivial(shape)
    if kind == "empty":
        return
    if kind == "zeros":
        c.copy_(call.reference(torch.zeros(c.shape, dtype=torch.float64, device=c.device)))
        return
    check_domain(shape)
    run(decide(x2, w.T, c, given=True, activation=activation), x2, w.T, c, epilogue=call)


def _linear_user(x, w, bias, *, activation, residual, alpha, beta, out_dtype, epilogue, inputs):
    """linear with a user Epilogue: eager only, checked, decided and built on every call (not cached).
    Keywords without an epilogue are a misspelled argument: GemmTypeError (a TypeError), as Python says it."""
    if epilogue is None:
        raise _unexpected_keywords("linear", inputs, _LINEAR_KEYWORDS)
    if isinstance(epilogue, Epilogue):
        values = [v for v in (x, w, bias, residual, *inputs.values()) if isinstance(v, torch.Tensor)]
        if _is_compiling() or any(type(t) is not torch.Tensor or t.is_meta for t in values):
            raise NotSupportedError(f"epilogue={epilogue!r}: a user Epilogue runs eagerly only (its CUDA source "
                                    "is not part of the gemm_ladder::linear op's schema, so torch.compile, "
                                    "FakeTensor and meta tensors cannot trace it); call it outside the compiled "
                                    "region, or use linear's built-in bias/activation/residual/alpha/beta")
        if torch.is_grad_enabled():
            for name, t in (("x", x), ("w", w), *inputs.items()):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    raise NotSupportedError(f"{name} requires grad: a user Epilogue has no backward; call it under "
                                            "torch.no_grad() / torch.inference_mode(), detach it, or use linear's "
                                            "built-in epilogue (differentiable)")
    k, n = check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                        out_dtype=out_dtype, epilogue=epilogue, inputs=inputs)
    call = linear_call(x, w, epilogue=epilogue, inputs=inputs)
    lead = tuple(x.shape[:-1])
    out = torch.empty((*lead, n), dtype=result_dtype(out_dtype, x.dtype), device=x.device)
    _run_fused(x.reshape(rows(lead), k), w, out.view(rows(lead), n), call)  # N = 0: view(-1, 0) is undetermined
    return out


_LINEAR_KEYWORDS = ("x", "w", "bias", "activation", "residual", "alpha", "beta", "out_dtype", "epilogue")


def _unexpected_keywords(function: str, given: dict, known: tuple[str, ...]) -> GemmTypeError:
    """The TypeError Python raises for an unknown keyword, with the closest known name, before any check."""
    import difflib

    name = next(iter(given))
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return GemmTypeError(f"{function}() got an unexpected keyword argument {name!r}{hint}; keyword inputs other "
                         f"than {', '.join(known[2:])} are a user Epilogue's, passed with epilogue=")


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, *, out_dtype: torch.dtype | None = None):
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

    Small M (M <= ``dispatch.swiglu_small_m.small_m_max`` of the device, where reading the weights is the cost), below
    ``FUSED_FILL_MIN_M`` rows or where the fused kernel's work units would leave its last wave part-empty
    (``FUSED_MIN_WAVE_FILL``): the small-M kernel instead, both products in one launch of its gated build up to
    ``ONE_LAUNCH_MAX_M`` rows (both weights streamed together, ``silu(gate) * up`` in registers), above that two
    launches, x @ w_up.T into float32 and x @ w_gate.T with ``silu(gate) * up`` fused in its epilogue (the same
    fp32 math and one rounding either way); :func:`explain_swiglu` says which path a call takes.

    Under ``torch.compile``, on tensor subclasses and on meta tensors the call goes through the
    registered op ``torch.ops.gemm_ladder.swiglu`` (its fake applies the same rules and gives the
    output's shape and dtype), checked here first.

    ``out_dtype``: None or x's dtype, or torch.float8_e4m3fn: the product quantized in the epilogue with one
    scale per row and 128 columns, returned as ``(values, scales)`` in the layouts ``scaled_mm`` reads
    in place, so an fp8 down projection follows with no quantization kernel (api_quantized.py
    ``swiglu_quantized``: always the fused kernel; the op ``torch.ops.gemm_ladder.swiglu_e4m3``).
    Another dtype raises GemmInputError.
    """
    if out_dtype is not None and not (isinstance(x, torch.Tensor) and out_dtype == x.dtype):
        if type(out_dtype) is _DTYPE and out_dtype == _QUANT_OUT:
            return swiglu_e4m3(x, w_gate, w_up)
        if not isinstance(out_dtype, torch.dtype):
            raise GemmTypeError(f"out_dtype must be a torch.dtype or None, got {type(out_dtype).__name__}")
        raise GemmInputError(f"out_dtype={out_dtype}: swiglu writes x's dtype (out_dtype=None or x.dtype) or "
                             "torch.float8_e4m3fn (quantized with 1 x 128 scales)")
    host = _HOST_OPS
    if host is not None and not _is_compiling():  # a compiled graph calls the op itself, never this path
        SWIGLU_PLANNED.fresh(host[5])
        if (out_dtype is None and _host_call(x, w_gate, w_up) and type(x) in _PLAIN and type(w_gate) in _PLAIN
                and type(w_up) in _PLAIN
                and not (torch.is_grad_enabled() and (x.requires_grad or w_gate.requires_grad or w_up.requires_grad))):
            return host[4](x, w_gate, w_up)  # the op's C++ kernel: planned (checked) once per signature
    if _through_op(x, w_gate, w_up):
        _dense(x=x, w_gate=w_gate, w_up=w_up)
        check_swiglu(x, w_gate, w_up, device_types=("cuda", "meta"))  # the library's errors, grad refused
        return _registered_ops()[2](x, w_gate, w_up)
    return swiglu_direct(x, w_gate, w_up)


_SWIGLU_SMALL_M: list = []


def swiglu_settings() -> tuple:
    """What swiglu's path decision reads beyond the call's tensors (dispatch/swiglu_small_m.py's thresholds and
    switches): a planned C++ template holds what they said when it was planned."""
    if not _SWIGLU_SMALL_M:  # imported once: this runs before every host call
        from gemm_ladder.dispatch import swiglu_small_m

        _SWIGLU_SMALL_M.append(swiglu_small_m)
    s = _SWIGLU_SMALL_M[0]
    return (s.ONE_LAUNCH, s.ONE_LAUNCH_MAX_M, s.SMALL_M_MAX, tuple(s.SMALL_M_MAX_BY_DEVICE.items()),
            tuple(s.PAIR_SMALL_M_MAX_BY_DEVICE.items()), s.FUSED_FILL_MIN_M, s.FUSED_MIN_WAVE_FILL, s.PAIR_ROUTE)


#: The settings swiglu's host templates were planned under (host/planner.py records them; gemm_ladder.swiglu and
#: ops.swiglu drop the templates when they changed).
SWIGLU_PLANNED = PlannedSettings(swiglu_settings)


def swiglu_direct(x, w_gate, w_up) -> torch.Tensor:
    """:func:`swiglu` without the op boundary (a plain eager call, and the op's Python CUDA kernel)."""
    from gemm_ladder.dispatch import swiglu_small_m

    index = elsewhere(x)
    if index is not None:
        with on_device(index):
            return swiglu_direct(x, w_gate, w_up)
    call = _swiglu_call(x, w_gate, w_up)
    if call.path == "empty":
        return torch.empty((*call.lead, call.n), dtype=x.dtype, device=x.device)
    if call.path == "zeros":
        return torch.zeros((*call.lead, call.n), dtype=x.dtype, device=x.device)  # silu(0) * 0
    if call.path == "small_m":
        out = torch.empty((*call.lead, call.n), dtype=x.dtype, device=x.device)
        swiglu_small_m.run(call.x2, w_gate, w_up, out.view(call.m, call.n))
        return out
    from gemm_ladder.library.swiglu import swiglu_kernel

    if call.path == "fused":
        out = torch.empty((*call.lead, call.n), dtype=x.dtype, device=x.device)
        swiglu_kernel().launch(*call.views, out.view(call.m, call.n))
        return out
    per16 = 16 // x.element_size()  # "fused_padded": N not whole 16-byte chunks of the TMA store
    padded = torch.empty((call.m, -(-call.n // per16) * per16), dtype=x.dtype, device=x.device)
    swiglu_kernel().launch(*call.views, padded[:, :call.n], out_padding_writable=True)
    return padded[:, :call.n].contiguous().view(*call.lead, call.n)


class _SwigluCall(NamedTuple):
    """What :func:`swiglu_direct` runs on checked tensors: ``path`` ('empty', 'zeros', 'small_m', 'fused' or
    'fused_padded'), the batch dimensions ``lead``, the extents, x as (M, K) (``x2``) and, for the fused kernel, the
    three operand views."""

    path: str
    lead: tuple
    m: int
    n: int
    k: int
    x2: torch.Tensor | None = None
    views: tuple = ()


def _swiglu_call(x, w_gate, w_up) -> _SwigluCall:
    """Check a swiglu call in full and decide its path (see :func:`swiglu`); raises what it raises."""
    from gemm_ladder.dispatch import swiglu_small_m
    from gemm_ladder.dispatch.route import device_facts
    from gemm_ladder.library.operand import operand_view

    k, n = check_swiglu(x, w_gate, w_up)
    lead = tuple(x.shape[:-1])
    m = math.prod(lead)
    if m == 0 or n == 0:
        return _SwigluCall("empty", lead, m, n, k)
    if k == 0:
        return _SwigluCall("zeros", lead, m, n, k)
    check_domain(MmShape(m, n, k, x.dtype))
    x2 = x.reshape(m, k)
    check_swiglu_layout(x2, w_gate, w_up)
    # small M where the fused kernel's waves are part-empty: the small-M kernel's gated build, or two GEMMs
    facts = device_facts(x.device)
    if swiglu_small_m.takes(m, n, k, facts.clusters, swiglu_small_m.small_m_max(facts.name)):
        return _SwigluCall("small_m", lead, m, n, k, x2)
    views = tuple(operand_view(t, k_dim=1) for t in (x2, w_gate, w_up))
    per16 = 16 // x.element_size()  # elements in the TMA store's 16-byte chunk
    return _SwigluCall("fused" if n % per16 == 0 else "fused_padded", lead, m, n, k, x2, views)


def bind_swiglu(x, w_gate, w_up):
    """(BoundLaunch, out) of ``swiglu(x, w_gate, w_up)``'s one kernel launch, bound to these tensors and a new
    output with its ``roles`` (what the compiled host path's launch template is made from: gemm_ladder/host), or
    None where the call is not one launch reading and writing in place: an empty problem or K = 0, the small-M
    pair of GEMMs (two launches and a float32 buffer), a padded output (N not whole 16-byte chunks: copied back), or
    an x whose batch dimensions do not merge into a view. Raises what :func:`swiglu` raises for bad input."""
    from gemm_ladder.dispatch import swiglu_small_m
    from gemm_ladder.library.swiglu import swiglu_kernel

    call = _swiglu_call(x, w_gate, w_up)
    if call.path not in ("small_m", "fused") or call.x2.data_ptr() != x.data_ptr():  # a reshape that copied
        return None
    out = torch.empty((*call.lead, call.n), dtype=x.dtype, device=x.device)
    out2 = out.view(call.m, call.n)
    if call.path == "fused":
        return swiglu_kernel().bind(*call.views, out2), out
    one = swiglu_small_m.one_launch(call.x2, w_gate, w_up, out2)
    if one is None:
        return None
    kernel, views = one
    return kernel.bind(*views, out2), out


def explain_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> dict:
    """What :func:`swiglu` would run on these tensors and why, without running it, as a dict: ``path``
    ('small_m_gated', 'small_m_pair' or 'fused'; 'empty' or 'zeros' where nothing is launched), ``reason``, ``threshold``,
    ``launches`` (for the small-M pair, each GEMM's :func:`explain` as a dict) and ``host`` (who launches it: "C++
    ..." where the compiled host module plans the signature once and launches each call, else "python (why)").
    CUDA or meta tensors; raises what :func:`swiglu` raises for bad input (dispatch/swiglu_small_m.py's
    ``explain``)."""
    from gemm_ladder.dispatch import swiglu_small_m

    info = swiglu_small_m.explain(x, w_gate, w_up)
    return info | {"host": _swiglu_host(info, x)}


def _swiglu_host(info: dict, x: torch.Tensor) -> str:
    """Who launches a swiglu call whose :func:`explain_swiglu` says ``info`` (bind_swiglu's rule, in words)."""
    if _HOST_OPS is None:
        from gemm_ladder import host

        return f"python (the host module is not in use: {host.describe()})"
    path, n = info["path"], info["n"]
    if path in ("empty", "zeros"):
        return "python (an empty problem or K = 0: no kernel launch, zeros or nothing written)"
    if path == "small_m_pair":
        return "python (the small-M pair: two launches and a float32 buffer between them)"
    if path == "fused" and n % (16 // x.element_size()):
        return "python (N is not whole 16-byte chunks: the output is written padded and copied back)"
    try:
        x.view(info["m"], info["k"])
    except RuntimeError:
        return "python (x's batch dimensions do not merge into a view: reshaped by a copy, a new address each call)"
    return ("C++ (planned once per signature; per call the compiled host module encodes the maps and launches; "
            "inputs requiring grad with grad mode on are refused)")


def explain(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
            out_dtype: torch.dtype | None = None, activation: str | None = None,
            scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
            bias: torch.Tensor | None = None) -> Explanation | dict:
    """What ``mm(a, b, out=out, out_dtype=out_dtype)`` would run and why, without running it.

    Takes CUDA tensors or meta tensors (shapes, strides and offsets are all it reads; on meta the GPU
    is assumed to be the H200, and the explanation says so). ``activation``: explain instead the GEMM
    of ``linear(a, b.T, ..., activation=activation)``, which fuses it (its route may be the ping-pong
    build: dispatch/pingpong.py; ``heuristic["consumer_schedule"]`` says why). ``bias`` (N,): explain the GEMM of
    ``linear(a, b.T, bias, activation=activation)``; the explanation's ``bias`` says whether the tensor cores add
    it (one more k16 step per tile) or the epilogue does, and why. Raises what :func:`mm`
    raises for bad input, and for an activation or a bias what :func:`linear` raises (naming ``bias``). ``out_dtype=torch.float8_e4m3fn``
    (without scales): the quantized output's route (api_quantized.py's ``explain_quantized``).

    ``scale_a`` and ``scale_b`` (fp8 ``a`` and ``b``): explain instead ``scaled_mm(a, b, scale_a, scale_b,
    out_dtype=out_dtype or torch.bfloat16, out=out)``, returning :func:`explain_scaled_mm`'s dict (the fp8
    kernel's build, tile, stages, promotion interval, split and store; a fused bias changes the build:
    ask explain_scaled_mm with ``bias``). Raises GemmInputError when only one scale is given or with an
    activation, and what scaled_mm raises for bad input.
    """
    if scale_a is None and scale_b is None and type(out_dtype) is _DTYPE and out_dtype == _QUANT_OUT:
        if out is not None:
            raise NotSupportedError("explain: out= with out_dtype=torch.float8_e4m3fn (the quantized output is "
                                    "returned as (values, scales)); drop out=")
        return explain_quantized(a, b, activation=activation)
    if scale_a is not None or scale_b is not None:
        if scale_a is None or scale_b is None:
            raise GemmInputError("explain of an fp8 product takes both scale_a and scale_b (torch._scaled_mm's)")
        if activation is not None:
            raise GemmInputError("explain: scaled_mm fuses no activation; drop activation= or the scales")
        from gemm_ladder.ops_fp8 import explain_scaled_mm

        return explain_scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16 if out_dtype is None else out_dtype,
                                 out=out)
    check_activation(activation)
    shape = check_mm(a, b, out, out_dtype, device_types=("cuda", "meta"), check_grad=False)
    if bias is not None:  # linear's own rules for its bias, in its words (a and b are checked: x = a, w = b.T)
        check_linear(a, b.T, bias, activation=activation, device_types=("cuda", "meta"), check_grad=False)
    device = str(a.device)
    kind = trivial(shape)
    if kind is not None:
        return trivial_explanation(kind, shape.m, shape.n, shape.k, a.dtype, shape.out_dtype, device)
    check_domain(shape)
    given = out is not None
    c = out if given else torch.empty((shape.m, shape.n), dtype=shape.out_dtype, device=a.device)
    from gemm_ladder.dispatch import cost_model

    route = decide(a, b, c, given=given, activation=activation, tune=False)  # explain launches nothing
    out = explain_route(route, shape.m, shape.n, shape.k, shape.out_dtype, cost_model(route.device))
    out.host = host_path(route, given)
    if bias is not None:
        out.bias = bias_path(route, a, b, bias, activation)
    return out


def bias_path(route, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, activation: str | None) -> str:
    """Where ``linear(a, b.T, bias, activation=activation)`` on ``route`` adds its bias (``explain``'s ``bias``):
    by the MMA where the route's build takes it (library.gemm.LibraryGemm.epilogue_call), else in the epilogue
    with the reason. Raises what :func:`linear` raises for a bad bias."""
    from gemm_ladder.library import gemm as G

    call = linear_call(a, b.T, bias, activation=activation, check_grad=False).oriented(route.c_path.transposed)
    if route.kind == "small_m":
        return "epilogue (the small-M kernel adds it there)"
    if route.config.family != G.FAMILY:
        return f"epilogue (the {route.config.family} kernel adds it there)"
    why = G.kernel_for(route.config).bias_refusal(call, a.dtype)
    return "MMA (one more k16 step per tile on the tensor cores: bias_stage.cuh)" if why is None else f"epilogue ({why})"


def host_path(route, given: bool) -> str:
    """Who launches a call of ``route`` (``explain``'s ``host``): the compiled host path when it is
    loaded and the route reads and writes everything in place, else Python, with the reason."""
    from gemm_ladder import host

    if _HOST_OPS is None:
        return f"python (host module not in use: {host.describe()})"
    if given:
        return "python (out= calls run the Python path)"
    paths = (route.a_path, route.b_path, route.c_path)
    if any(p.workspace is not None for p in paths):
        return "python (a repacked operand or an output workspace: the Python path runs this signature)"
    return "C++ (planned once per signature; per call the compiled host module encodes the maps and launches)"


__all__ = ["Epilogue", "Explanation", "NotSupportedError", "explain", "explain_swiglu", "linear", "mm", "swiglu"]
