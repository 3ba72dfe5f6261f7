"""The grouped GEMM as PyTorch ops: ``torch.ops.gemm_ladder.grouped_mm`` and ``grouped_linear``, with
fake implementations (``torch.compile(fullgraph=True)``, meta tensors) and autograd; and the public
:func:`grouped_mm` and :func:`grouped_linear` that call them.

Registered with ``torch.library.custom_op`` (schema inferred from the annotations). The ops take no
group size on the host, so a compiled graph or a CUDA graph holds for every routing.

Backward (autograd), for y = grouped_mm(x (R, K), b (E, K, N), offs):
* grad_x = grouped_mm(grad_y, b.transpose(-2, -1), offs): grouped along M, the weight read N-major
  (the library's kernel, its ``b_major="mn"`` build);
* grad_b[e] = x[rows_e].T @ grad_y[rows_e], grouped along K (the library's K-grouped build);
* grouped along K (y[e] = a[:, K_e] @ b[K_e]): grad_a and grad_b are each grouped along M over K's rows
  (grad_a's transpose is the rows a's stride(0) == 1 layout stores); grouped along N (y[:, N_e] = a[e] @
  b[:, N_e]): grad_a grouped along K, grad_b grouped along N; in both, K or N past offs[E-1] (read by no
  product) gets zeros;
* grouped_linear's grad_bias[e] = the sum of grad_y's rows of group e (index_add_ in fp32 on the device).

The backward's operands are laid out for the kernel's TMA rules (pitches and a batched call's contraction a
multiple of 16 bytes), which the forward's operands met but their transposes and grad_y need not (N = 12, or
3 rows per batch): a row-major operand whose pitch breaks the rule is copied into rows of a padded pitch (a
view: its extent is unchanged), and a batched call's contraction is padded with zeros (they add nothing to
the products), so every call the forward accepts can be differentiated.

The fake implementations run the real ops' checks (shapes, dtypes, offs, bias, devices), on no value of
offs: a traced call is refused as the eager call would be.
"""

from __future__ import annotations

import os

import torch

from gemm_ladder import ops as _ops  # the compiled host path's switch (on_host)
from gemm_ladder.api_grouped import (
    _ALIGN_ELEMS, PUBLIC_DEVICES, aligned_elems, bind_grouped, check_grouped_bias, check_grouped_mm, group_of_rows,
    grouped_mm_direct, grouped_mm_masked_direct, padded_pitch, weight_fits, with_aligned_pitch,
)
from gemm_ladder.api_grouped import explain_grouped_mm as _explain_grouped_mm
from gemm_ladder.api_quantized import through_op  # the eager-or-op rule of the calls without a backward
from gemm_ladder.dispatch.validate import check_activation, first_requiring_grad
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError
from gemm_ladder.host.planned import PlannedSettings
from gemm_ladder.library import grouped as _grouped_library  # the settings a plan reads (_settings)
from gemm_ladder.library.activations import activation as _activation

NAMESPACE = "gemm_ladder"

#: Whether grouped_linear fuses its activation into the kernel's epilogue where it can (:func:`why_unfused`): the
#: environment's GL_GROUPED_ACTIVATION_FUSED ("1" or "0") at import, else on. Measured on an H100 (b62ae8a,
#: bench/experiments/grouped_activation.py, bench/results/2026-12-07_grouped_activation_h100_b62ae8a.json): the
#: fused build 1.005-1.222x the unfused form at prefill (its GPU tests passed in the same call), 0.995-1.012x at
#: decode; a test or a benchmark sets this attribute.
ACTIVATION_FUSED = os.environ.get("GL_GROUPED_ACTIVATION_FUSED", "1") == "1"


def _batched_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """grouped_mm(a (E, M, K), b (E, K, N)) for the backward: K padded with zeros to a multiple of 8 where it
    is not (the kernel maps a's E x M rows with a pitch of K), and b copied to an aligned row pitch where its
    layout breaks the rule."""
    k = a.shape[2]
    if k % _ALIGN_ELEMS:
        pad = aligned_elems(k) - k
        a = torch.nn.functional.pad(a, (0, pad))  # zeros: they add nothing to the products
        b = torch.nn.functional.pad(b, (0, 0, 0, pad))
    return torch.ops.gemm_ladder.grouped_mm(a, b if weight_fits(b) else padded_pitch(b))


def _out_shape(a: torch.Tensor, b: torch.Tensor, offs) -> tuple[int, ...]:
    if a.dim() == 2 and b.dim() == 2:  # grouped along K: one (M, N) result per group
        return (offs.shape[0], a.shape[0], b.shape[1])
    return (a.shape[0], b.shape[-1]) if a.dim() == 2 else (a.shape[0], a.shape[1], b.shape[-1])


def _fake_out(a: torch.Tensor, b: torch.Tensor, offs, dtype: torch.dtype) -> torch.Tensor:
    """The op's result as the kernel makes it: contiguous, except grouped along N (3-D x 2-D), whose (M, total N)
    result is the transpose of the kernel's (total N, M) output (api_grouped.along_n_operands)."""
    if a.dim() == 3 and b.dim() == 2:
        return a.new_empty((b.shape[1], a.shape[1]), dtype=dtype).t()
    return a.new_empty(_out_shape(a, b, offs), dtype=dtype)


def _grouped_mm_kernel(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
                       out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The op's Python kernel (and the host module's for the signatures it leaves to Python)."""
    return grouped_mm_direct(a, b, offs, out_dtype=out_dtype)


_grouped_mm_op = torch.library.custom_op(f"{NAMESPACE}::grouped_mm", mutates_args=())(_grouped_mm_kernel)


@_grouped_mm_op.register_fake
def _grouped_mm_fake(a, b, offs=None, out_dtype=None):
    _, dtype = check_grouped_mm(a, b, offs, out_dtype, device_types=PUBLIC_DEVICES)
    return _fake_out(a, b, offs, dtype)


def _grouped_linear_kernel(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor,
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """The op's Python kernel (and the host module's for the signatures it leaves to Python)."""
    return grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=bias)


_grouped_linear_op = torch.library.custom_op(f"{NAMESPACE}::grouped_linear", mutates_args=())(_grouped_linear_kernel)


def check_grouped_linear(x, w, offs, bias=None) -> None:
    """grouped_linear's rules (its op's and its fake's): w (E, N, K) with stride(2) == 1, the grouped_mm
    of x and w's transpose, the bias. Raises GemmTypeError, GemmInputError, NotSupportedError, each naming x, w,
    offs or bias (w's transpose, ``w.transpose(-2, -1)``, where the rule is about its shape or strides)."""
    if not isinstance(w, torch.Tensor):
        raise GemmTypeError(f"w must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() != 3:
        raise GemmInputError(f"w must be (E, N, K), got {w.dim()}-D {tuple(w.shape)}")
    if w.shape[2] > 1 and w.stride(2) != 1:
        raise GemmInputError(f"w has strides {tuple(w.stride())}: (E, N, K) with stride(2) == 1 (nn.Linear's layout)")
    if isinstance(x, torch.Tensor) and x.dim() != 2:
        raise GemmInputError(f"x must be (R, K), rows grouped by offs, got {x.dim()}-D {tuple(x.shape)} (a batched "
                             "product: grouped_mm of (E, M, K) and (E, K, N))")
    check_grouped_mm(x, w.transpose(-2, -1), offs, device_types=PUBLIC_DEVICES,
                     names=("x", "w.transpose(-2, -1)"))  # the messages name grouped_linear's own arguments
    check_grouped_bias(bias, x, w.transpose(-2, -1), "2d3d")  # w is 3-D: grouped along M


@_grouped_linear_op.register_fake
def _grouped_linear_fake(x, w, offs, bias=None):
    check_grouped_linear(x, w, offs, bias)
    return x.new_empty((x.shape[0], w.shape[1]))


def _grouped_linear_act_kernel(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None,
                               activation: str) -> torch.Tensor:
    """The op's Python kernel (and the host module's for the signatures it leaves to Python)."""
    return grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=bias, activation=activation)


_grouped_linear_act_op = torch.library.custom_op(f"{NAMESPACE}::grouped_linear_act",
                                                 mutates_args=())(_grouped_linear_act_kernel)


@_grouped_linear_act_op.register_fake
def _grouped_linear_act_fake(x, w, offs, bias, activation):
    check_activation(activation)
    return _grouped_linear_fake(x, w, offs, bias)


def _refuse_act_grad(ctx, grad):
    raise NotSupportedError("grouped_linear_act has no backward: grouped_linear runs the unfused form when an input "
                            "requires grad")


_grouped_linear_act_op.register_autograd(_refuse_act_grad, setup_context=lambda ctx, inputs, output: None)


def why_unfused(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> str | None:
    """Why grouped_linear (a checked call with an activation) does not fuse it into the kernel's epilogue, from the
    tensors' metadata alone (what a traced call decides on), or None where it fuses: an input requiring grad under
    grad mode (the backward needs the pre-activation, which the fused build does not keep), or
    :data:`ACTIVATION_FUSED` off. A bias at BN 256 where the cluster rule takes a pair fuses on one CTA (the pair has
    no activation build: it spilled), measured 1.125-1.222x the unfused form on its pair (H100, b62ae8a)."""
    name = first_requiring_grad({"x": x, "w": w, "bias": bias})
    if name is not None:
        return f"{name} requires grad: the activation runs after the op (its backward needs the pre-activation)"
    if not ACTIVATION_FUSED:
        return "ops_grouped.ACTIVATION_FUSED is off (GL_GROUPED_ACTIVATION_FUSED=0 at import, or set so)"
    return None


def _grad_b_grouped_k(a: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """(E, K, N): per group a[rows_e].T @ grad[rows_e], the library's K-grouped build (a.t() is read
    MN-major; both row-major with aligned pitches: :func:`~gemm_ladder.api_grouped.with_aligned_pitch`)."""
    return torch.ops.gemm_ladder.grouped_mm(with_aligned_pitch(a).t(), with_aligned_pitch(grad), offs)


def _mm_setup(ctx, inputs, output):
    a, b, offs, out_dtype = inputs
    ctx.save_for_backward(a, b, offs)


def _zero_past(t: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``t`` (R, C) with rows at or past offs[E-1] zeroed: rows in no group, which a kernel grouped along them
    leaves unwritten, are a gradient of inputs no product read (offs stays on the device)."""
    if offs.numel() == 0:
        return torch.zeros_like(t)
    past = torch.arange(t.shape[0], device=t.device, dtype=offs.dtype) >= offs[-1]
    return torch.where(past[:, None], torch.zeros((), dtype=t.dtype, device=t.device), t)


def _columns(t: torch.Tensor) -> torch.Tensor:
    """``t`` (R, C) column-major with a 16-byte column pitch (stride(0) == 1): itself where it is, else a copy."""
    return with_aligned_pitch(t.t()).t()


def _grouped_k_backward(a, b, g, offs, needs):
    """y[e] = a[:, K_e] @ b[K_e] (2-D x 2-D): grad_a[:, K_e] = g[e] @ b[K_e].T and grad_b[K_e] = a[:, K_e].T @ g[e],
    each a call grouped along M over K's rows (the transposes of a and grad_a are the rows a (M, total K) with
    stride(0) == 1 is stored in); K past offs[E-1] gets zeros."""
    gp = with_aligned_pitch(g)  # (E, M, N) with a 16-byte row pitch (a copy only where g's is not)
    grad_a = grad_b = None
    if needs[0]:  # (total K, M) = b (total K, N) grouped @ g[e].T, transposed
        grad_a = _zero_past(torch.ops.gemm_ladder.grouped_mm(b, gp.transpose(-2, -1), offs), offs).t()
    if needs[1]:  # (total K, N) = a.t() (total K, M) grouped @ g[e]
        grad_b = _zero_past(torch.ops.gemm_ladder.grouped_mm(a.t(), gp, offs), offs)
    return grad_a, grad_b


def _grouped_n_backward(a, b, g, offs, needs):
    """y[:, N_e] = a[e] @ b[:, N_e] (3-D x 2-D): grad_a[e] = g[:, N_e] @ b[:, N_e].T, grouped along K over N
    (g and b column-major: copied where they are not); grad_b[:, N_e] = a[e].T @ g[:, N_e], grouped along N
    again; N past offs[E-1] gets zeros."""
    gc = _columns(g)
    grad_a = grad_b = None
    if needs[0]:  # (E, M, K)
        grad_a = torch.ops.gemm_ladder.grouped_mm(gc, _columns(b).t(), offs)
    if needs[1]:  # (K, total N), column-major: zeros past offs[E-1] in its rows' order
        grad_b = _zero_past(torch.ops.gemm_ladder.grouped_mm(a.transpose(-2, -1), gc, offs).t(), offs).t()
    return grad_a, grad_b


def _mm_backward(ctx, grad):
    a, b, offs = ctx.saved_tensors
    grad_a = grad_b = None
    g = grad.to(a.dtype)
    if a.dim() == 2 and b.dim() == 2:
        return (*_grouped_k_backward(a, b, g, offs, ctx.needs_input_grad), None, None)
    if a.dim() == 3 and b.dim() == 2:
        return (*_grouped_n_backward(a, b, g, offs, ctx.needs_input_grad), None, None)
    if a.dim() == 3:  # batched: a (E, M, K) @ b (E, K, N)
        if ctx.needs_input_grad[0]:
            grad_a = _batched_mm(g.contiguous(), b.transpose(-2, -1))
        if ctx.needs_input_grad[1]:
            grad_b = _batched_mm(a.transpose(-2, -1).contiguous(), g.contiguous())
        return grad_a, grad_b, None, None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.gemm_ladder.grouped_mm(with_aligned_pitch(g), b.transpose(-2, -1), offs)
    if ctx.needs_input_grad[1]:
        grad_b = _grad_b_grouped_k(a, g, offs)
    return grad_a, grad_b, None, None


_grouped_mm_op.register_autograd(_mm_backward, setup_context=_mm_setup)


def _linear_setup(ctx, inputs, output):
    x, w, offs, bias = inputs
    ctx.save_for_backward(x, w, offs)
    ctx.has_bias = bias is not None


def _linear_backward(ctx, grad):
    x, w, offs = ctx.saved_tensors
    g = grad.to(x.dtype)
    grad_x = grad_w = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_x = torch.ops.gemm_ladder.grouped_mm(with_aligned_pitch(g), w, offs)  # w (E, N, K): read N-major
    if ctx.needs_input_grad[1]:
        grad_w = _grad_b_grouped_k(g, x, offs)  # (E, N, K): g[rows_e].T @ x[rows_e]
    if ctx.has_bias and ctx.needs_input_grad[3]:
        groups, rows = w.shape[0], x.shape[0]
        sums = torch.zeros((groups + 1, w.shape[1]), dtype=torch.float32, device=g.device)
        sums.index_add_(0, group_of_rows(offs, rows), grad.float())  # rows past offs[E-1] land in row E
        grad_bias = sums[:groups].to(w.dtype)
    return grad_x, grad_w, None, grad_bias


_grouped_linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)


@torch.library.custom_op(f"{NAMESPACE}::grouped_mm_masked", mutates_args=())
def _grouped_mm_masked_op(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor,
                          out_dtype: torch.dtype | None = None) -> torch.Tensor:
    return grouped_mm_masked_direct(a, b, counts, out_dtype=out_dtype)


def check_grouped_mm_masked(a, b, counts, out_dtype=None) -> torch.dtype:
    """The masked layout's rules (its op's and its fake's); returns the result dtype. Raises GemmTypeError,
    GemmInputError, NotSupportedError."""
    if not isinstance(a, torch.Tensor) or a.dim() != 3:
        raise GemmInputError("a must be a 3-D (E, M_max, K) tensor for the masked layout")
    _, dtype = check_grouped_mm(a, b, None, out_dtype, device_types=PUBLIC_DEVICES)
    if not isinstance(counts, torch.Tensor):
        raise GemmTypeError(f"counts must be a torch.Tensor, got {type(counts).__name__}")
    if counts.dtype != torch.int32 or counts.dim() != 1 or counts.numel() != a.shape[0] or counts.device != a.device:
        raise GemmInputError(f"counts: int32 ({a.shape[0]},) on {a.device} expected, got {counts.dtype} "
                             f"{tuple(counts.shape)} on {counts.device}")
    return dtype


@_grouped_mm_masked_op.register_fake
def _grouped_mm_masked_fake(a, b, counts, out_dtype=None):
    dtype = check_grouped_mm_masked(a, b, counts, out_dtype)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]), dtype=dtype)


def _masked_backward(ctx, grad):
    raise NotSupportedError("grouped_mm_masked (the decode layout) has no backward")


_grouped_mm_masked_op.register_autograd(_masked_backward, setup_context=lambda ctx, inputs, output: None)


def _refuse_grad(what: str, *tensors: torch.Tensor) -> None:
    """NotSupportedError before the launch when a call with no backward (``what``) gets an input requiring
    grad under grad mode, rather than from its backward after the forward ran."""
    if first_requiring_grad(dict(enumerate(tensors))) is not None:
        raise NotSupportedError(f"{what} has no backward: call it under torch.no_grad(), or on inputs that do not "
                                "require grad")


def grouped_mm_masked(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor, *,
                      out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The masked layout of decode, as the op ``torch.ops.gemm_ladder.grouped_mm_masked``: a (E, M_max, K),
    b (E, K, N), counts (E,) int32 on a's device (valid rows per expert, never read on the host).
    Returns (E, M_max, N): out[e, :counts[e]] = a[e, :counts[e]] @ b[e]; rows past a count are not
    written. Experts with no rows cost nothing. Inference only (no backward: NotSupportedError).
    Raises GemmTypeError, GemmInputError, NotSupportedError before any launch."""
    check_grouped_mm_masked(a, b, counts, out_dtype)
    _refuse_grad("grouped_mm_masked (the decode layout)", a, b)
    return torch.ops.gemm_ladder.grouped_mm_masked(a, b, counts, out_dtype)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch._grouped_mm(a, b, offs, out_dtype=...)`` on the library's grouped kernel, as the op
    ``torch.ops.gemm_ladder.grouped_mm`` (autograd, fake kernel, torch.compile, CUDA graphs).

    Args:
        a: (R, K) bf16/fp16 with rows split into groups by ``offs`` (2-D x 3-D), or (E, M, K) (3-D x 3-D).
        b: (E, K, N), same dtype; each b[e] K-major (``w.transpose(-2, -1)`` of an (E, N, K) weight)
            or N-major (row-major (K, N)); strides multiples of 16 bytes.
        offs: int32 (E,) on a's device, cumulative row ends (group e: rows offs[e-1]..offs[e]); None
            for a 3-D a. Its values stay on the device; groups may be empty or of any size.
        out_dtype: None (a's dtype) or torch.float32.

    Returns (R, N) (rows past offs[E-1] not written, as torch's) or (E, M, N). On meta tensors the call is
    checked and a meta result of the right shape and dtype returned (the op's fake implementation), as for
    grouped_linear, grouped_mm_masked and grouped_swiglu.
    2-D x 2-D (grouped along K): a (M, total K) with stride(0) == 1, b (total K, N) row-major, offs (E,):
    returns (E, M, N), out[e] = a[:, offs[e-1]:offs[e]] @ b[offs[e-1]:offs[e]] (zeros for an empty group).
    3-D x 2-D (grouped along N): a (E, M, K), b (K, total N), offs (E,) cumulative ends along N: returns (M, total
    N), out[:, offs[e-1]:offs[e]] = a[e] @ b[:, offs[e-1]:offs[e]] (columns past offs[E-1] not written), a
    column-major view: the kernel computes its transpose (api_grouped.along_n_operands; b column-major, ``w.t()`` of
    a row-major (total N, K) weight, is read in place, a row-major b is copied first).
    Every case has a backward (module docstring).
    Raises GemmTypeError, GemmInputError, NotSupportedError (2-D x 2-D layouts other than the above; more than 1024
    groups) before any launch. Source: torch._grouped_mm's semantics (torch/_meta_registrations.py).
    """
    if not ((out_dtype is None or type(out_dtype) is torch.dtype) and host_call(a, b, offs)):
        check_grouped_mm(a, b, offs, out_dtype, device_types=PUBLIC_DEVICES)  # else the C++ kernel's planner, once
    return torch.ops.gemm_ladder.grouped_mm(a, b, offs, out_dtype)


def grouped_linear(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None = None, *,
                   activation: str | None = None) -> torch.Tensor:
    """The experts' linear layers: ``y[r] = act(x[r] @ w[e].T + bias[e])`` for each row r of group e.

    Args:
        x: (R, K) bf16/fp16, rows grouped by ``offs``; w: (E, N, K) (``nn.Linear``'s layout per expert,
            stride(2) == 1); offs: int32 (E,) cumulative row ends on x's device; bias: (E, N) or None,
            added in the kernel's epilogue; activation: None or a name of
            :data:`gemm_ladder.library.activations.ACTIVATIONS`. A call with no backward (no input requiring
            grad under grad mode: inference), where :data:`ACTIVATION_FUSED` is on, applies it in the kernel's epilogue, after the bias, in fp32,
            rounded once (the op ``torch.ops.gemm_ladder.grouped_linear_act``); a call with one runs the op
            ``grouped_linear`` then the activation's PyTorch reference on its output (autograd through both;
            :func:`why_unfused` says why).
    Returns (R, N) in x's dtype. Rows past offs[E-1] are in no group and not defined (as ``torch._grouped_mm``'s).
    Raises GemmTypeError (a non-tensor, a non-string activation), GemmInputError (an unknown activation among the
    rest), NotSupportedError, before any launch.
    """
    check_activation(activation)  # linear's rule and errors
    act = None if activation is None else _activation(activation)
    host = host_call(x, w, offs, bias)
    if not host:  # else the C++ kernel's planner checks, once per signature
        check_grouped_linear(x, w, offs, bias)
    if act is not None and why_unfused(x, w, bias) is None:
        if host or through_op(x, w, offs, bias):
            return torch.ops.gemm_ladder.grouped_linear_act(x, w, offs, bias, activation)
        return grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=bias, activation=activation)
    y = torch.ops.gemm_ladder.grouped_linear(x, w, offs, bias)
    return y if act is None else act.reference(y)


# --- the compiled host path: the ops' CUDA kernels in C++ (gemm_ladder/host/launch.cpp) ---------------------

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _settings() -> tuple:
    """The library/grouped.py module settings a plan reads beyond the call's tensors (the store switch
    STORE_DEFAULT, GL_GROUPED_STORE at import; the tail's idle rule, the cluster rule's K, the output ring): a
    signature's template holds what they said when it was planned."""
    g = _grouped_library
    return (g.STORE_DEFAULT, g.TAIL_MIN_IDLE, g.CLUSTER_MIN_K, g.C_RING)


#: The library/grouped.py settings the host module's grouped templates were planned under (:func:`_settings`;
#: :func:`template_of` records them). Whether its grouped kernels are registered is whether the host module is in use
#: (ops.host_module(): ops.on_host registers them then, and removes them when it is left).
_PLANNED = PlannedSettings(_settings)


def host_call(*tensors) -> bool:
    """Whether a public call goes straight to its op, leaving the checks to the C++ kernel's planner (once per
    signature: its key holds every shape, stride, dtype, device and base address residue the checks read): the
    host module's grouped kernels registered, not under torch.compile, every tensor given a plain CUDA tensor.
    Where library/grouped.py's settings changed since the templates were planned, they are dropped first (planned
    again at their next call)."""
    module = _ops.host_module()
    if module is None or torch.compiler.is_compiling() or not all(
            t is None or (type(t) in _PLAIN and t.is_cuda) for t in tensors):
        return False
    _PLANNED.fresh(module.clear)
    return True


def host_path(case: str, empty: bool, bias: torch.Tensor | None = None) -> str:
    """Who launches a grouped call (``explain``'s ``host``): C++ where the host module's grouped kernels are registered
    and the call is one plain launch, else Python and why. ``case``: the call's ('2d3d', '2d2d', '3d3d', '3d2d', 'masked',
    'swiglu_fused', 'swiglu_two_gemms'); ``empty``: an empty problem or K = 0 (nothing or zeros to write); ``bias``:
    the call's (one that is not contiguous is copied per call)."""
    if _ops.host_module() is None:
        from gemm_ladder import host

        return f"python (the host module's grouped kernels are not registered; the host path: {host.describe()})"
    if case in ("3d3d", "3d2d", "masked", "swiglu_two_gemms"):
        why = {"3d3d": "a batched call makes its offs per call", "masked": "the masked layout has no C++ kernel yet",
               "3d2d": "a call grouped along N launches its transpose (and copies an operand where it must)",
               "swiglu_two_gemms": "the two-GEMM forward launches from its Python op (its backward's GEMMs from C++)"}
        return f"python ({why[case]})"
    if empty:
        return "python (an empty problem or K = 0: no kernel launch, zeros or nothing written)"
    if bias is not None and not bias.is_contiguous():
        return "python (a bias that is not contiguous: copied per call, a new address each time)"
    return "C++ (planned once per signature; per call the compiled host module encodes the maps and launches)"


def explain_grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *, out_dtype=None,
                       bias: torch.Tensor | None = None, masked: bool = False, activation: str | None = None) -> dict:
    """What :func:`grouped_mm` (or :func:`grouped_linear`, :func:`grouped_mm_masked`) would run on these tensors and
    why, without running it. CUDA or meta tensors: shapes, strides and dtypes are all it reads.

    Args:
        a, b, offs: as :func:`grouped_mm` takes them: a (R, K) with rows grouped by offs (int32 (E,) cumulative row
            ends on a's device) and b (E, K, N), each b[e] K-major (``w.transpose(-2, -1)`` of an (E, N, K)
            weight: grouped_linear's call) or N-major; a (E, M, K) and b (E, K, N) batched, offs None; a
            (M, total K) with stride(0) == 1 and b (total K, N), offs (E,) cumulative ends along K (grouped along
            K); a (E, M, K) and b (K, total N), offs (E,) cumulative ends along N (grouped along N). bf16 or fp16.
        out_dtype: None (a's dtype) or torch.float32.
        bias: None or (E, N) in a's dtype (grouped_linear's, grouped along M only).
        masked: explain :func:`grouped_mm_masked` instead: a (E, M_max, K), b (E, K, N), ``offs`` its counts
            (int32 (E,)).
        activation: None or a name of library/activations.py ACTIVATIONS, fused after the bias (grouped_linear's
            inference call, grouped along M only).

    Returns:
        A dict (api_grouped.explain_grouped_mm's): ``case`` ('2d3d', '3d3d', '2d2d', '3d2d' or 'masked'),
        ``grouped_along`` ('M', 'K' or 'N'), ``copies`` (operands copied to an aligned pitch first), ``kernel``,
        ``source``, ``tile`` [BM, BN, BK], ``b_major``, ``out_dtype``, ``cluster`` and ``cluster_reason``,
        ``ring`` and ``ring_reason``, ``store`` and ``store_reason``, ``tail`` and ``tail_reason``,
        ``activation``; and ``host``: who launches it (:func:`host_path`: "C++ ..." or "python (why)"). An empty
        problem still names the build a non-empty one would run.

    Raises (launching nothing): what the call raises for bad input (GemmTypeError for a non-tensor, GemmInputError
    for a dtype, device, shape, stride, alignment or offs rule, NotSupportedError for more than 1024 groups or a
    layout the kernel does not read, OutsideDomainError for an extent past 2^31 - 1); GemmTypeError for a
    non-bool ``masked`` or a non-string activation; GemmInputError for a bias grouped along K or N, an activation
    grouped along K or N or on the masked layout, or an unknown activation.
    """
    info = _explain_grouped_mm(a, b, offs, out_dtype=out_dtype, bias=bias, masked=masked, activation=activation)
    if info["case"] == "2d2d":
        empty = min(a.shape[0], a.shape[1], b.shape[1], offs.numel()) == 0
    elif info["case"] == "3d2d":
        empty = min(*a.shape, b.shape[1]) == 0
    else:
        empty = min(a.shape[-2] if a.dim() == 2 else a.shape[0] * a.shape[1], *b.shape) == 0
    return info | {"host": host_path(info["case"], empty, bias)}


def template_of(made):
    """The launch template (gemm_ladder/host/templates.py) of ``made``, a (BoundLaunch, output) from
    api_grouped.bind_grouped or a binder like it, or None (the op's Python kernel runs that signature); every grouped
    planner answers through it, so it records the settings planned under (:data:`_PLANNED`)."""
    from gemm_ladder.host.templates import GROUPED_SOURCES, template_from_bound

    _PLANNED.planned()  # the settings the binder just read
    if made is None:
        return None
    bound, out = made
    return template_from_bound(bound, out_shape=tuple(out.shape), out_dtype=out.dtype, sources=GROUPED_SOURCES)


def _plan_grouped_linear(x, w, offs, bias=None):
    check_grouped_linear(x, w, offs, bias)
    return template_of(bind_grouped(x, w.transpose(-2, -1), offs, bias=bias))


def _plan_grouped_linear_act(x, w, offs, bias, activation):
    check_activation(activation)
    check_grouped_linear(x, w, offs, bias)
    return template_of(bind_grouped(x, w.transpose(-2, -1), offs, bias=bias, activation=activation))


#: Each op's (planner, Python kernel) as launch.cpp calls them, with the op's arguments.
HOST_CALLBACKS = {
    "grouped_mm": (lambda a, b, offs=None, out_dtype=None: template_of(bind_grouped(a, b, offs, out_dtype=out_dtype)),
                   _grouped_mm_kernel),
    "grouped_linear": (_plan_grouped_linear, _grouped_linear_kernel),
    "grouped_linear_act": (_plan_grouped_linear_act, _grouped_linear_act_kernel),
}


_ops.on_host(HOST_CALLBACKS)

__all__ = ["ACTIVATION_FUSED", "explain_grouped_mm", "grouped_linear", "grouped_mm", "grouped_mm_masked", "host_call", "why_unfused"]
