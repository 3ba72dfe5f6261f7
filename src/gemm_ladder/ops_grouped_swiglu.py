"""The experts' gated MLP, ``gemm_ladder.grouped_swiglu(x, w_gate, w_up, offs)``: for each row r of group
e, ``silu(x[r] @ w_gate[e].T) * (x[r] @ w_up[e].T)``, as the op ``torch.ops.gemm_ladder.grouped_swiglu``
(fake implementation, autograd, ``torch.compile(fullgraph=True)``, CUDA graphs), and
:func:`explain_grouped_swiglu`, what a call runs, as data.

What runs (the library's grouped kernel for every product, never cuBLAS):

* forward: two grouped GEMMs (``kernels/library/sm90_grouped_gemm.cu``, weight K-major, fp32 output):
  gate = x @ w_gate[e].T and up = x @ w_up[e].T; then ``silu(gate) * up`` in fp32 by PyTorch's pointwise
  ops, rounded once to x's dtype. Not fused: the grouped kernel's epilogue adds a bias and nothing else,
  so the product runs after the second GEMM (one more read of gate and up, 8 bytes per output element).
* backward, from the saved fp32 gate and up (no recomputation): d_up = g * silu(gate),
  d_gate = g * up * s * (1 + gate * (1 - s)) with s = sigmoid(gate), in fp32, rounded to x's dtype;
  grad_x = d_gate @ w_gate[e] + d_up @ w_up[e] (two grouped GEMMs, weight N-major, fp32 outputs summed,
  rounded once); grad_w_gate[e] = d_gate[rows_e].T @ x[rows_e] and grad_w_up likewise (the grouped-along-K
  build). Deterministic: no atomics, every output element written by one CTA in one order.

The op returns (out, gate, up): gate and up (fp32, (T, N)) are what the backward reads, marked
non-differentiable; :func:`grouped_swiglu` returns out only. As ``torch._grouped_mm``, rows past
``offs[E-1]`` belong to no group: their output (and their grad_x) is not defined.

The fused forward (:data:`FUSED_DEFAULT`, on since every bench case was measured): a call that needs no backward
(no input requiring grad under grad mode) runs one launch of the grouped kernel's gated-MLP build
(``library/grouped.py`` ``grouped_gemm(256, "k", swiglu=True)``, sm90_grouped_gemm.cu's GL_SWIGLU): each
stage holds 128 rows of w_gate and the same 128 rows of w_up, so x is read once for both products and
``silu(gate) * up`` is computed from the fp32 accumulators and rounded once, with no gate or up in global
memory. Through the op ``torch.ops.gemm_ladder.grouped_swiglu_fused`` under torch.compile. A call the build
refuses (a base not 16-byte aligned, w_up's strides not w_gate's) runs the two-GEMM forward instead, and
:func:`explain_grouped_swiglu` says which runs and why.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from gemm_ladder.api_grouped import PUBLIC_DEVICES, check_grouped_mm, choose_bn, grouped_build, grouped_mm_direct
from gemm_ladder.api_quantized import through_op  # the eager-or-op rule of the calls without a backward
from gemm_ladder.errors import GemmInputError, GemmTypeError
from gemm_ladder.library.grouped import grad_w_bn, grouped_gemm
from gemm_ladder import ops as _ops  # the compiled host path's switch (on_host)
from gemm_ladder.api_grouped import with_aligned_pitch
from gemm_ladder.ops_grouped import NAMESPACE, _grad_b_grouped_k, host_call, host_path, template_of

F32 = torch.float32
#: Whether a call that needs no backward runs the fused gated-MLP build (module docstring): True unless the
#: environment's GL_GROUPED_SWIGLU_FUSED is 0 at import. Right on the H200 (its GPU tests, memcheck,
#: racecheck) and, over bench/grouped.py's eight swiglu cases (seven in one H100 run, decode_128 on the H200),
#: 0.99-1.84x the two-GEMM forward (``ratio_fused``, docs/grouped.md: DeepSeek-V3's gate+up 0.99x, every other
#: case 1.01-1.84x).
FUSED_DEFAULT = os.environ.get("GL_GROUPED_SWIGLU_FUSED", "1") != "0"
#: The fused build: BN 256 (128 gate and 128 up rows a stage), a K-major weight, one CTA.
FUSED_BN = 256


def check_grouped_swiglu(x, w_gate, w_up, offs) -> None:
    """Validate a grouped_swiglu call before any launch (no value of offs read on the host). Raises
    GemmTypeError (a non-tensor), GemmInputError (rank, shapes, dtype, device, strides, offs),
    NotSupportedError (more groups than the kernel takes); each names x, w_gate, w_up or offs."""
    for name, t in (("x", x), ("w_gate", w_gate), ("w_up", w_up), ("offs", offs)):
        if not isinstance(t, torch.Tensor):
            raise GemmTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 2:
        raise GemmInputError(f"x must be (T, K), rows grouped by offs; got {x.dim()}-D {tuple(x.shape)}")
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        if w.dim() != 3:
            raise GemmInputError(f"{name} must be (E, N, K) (nn.Linear's layout per expert), got {w.dim()}-D "
                                 f"{tuple(w.shape)}")
        if w.shape[2] > 1 and w.stride(2) != 1:
            raise GemmInputError(f"{name} has strides {tuple(w.stride())}: (E, N, K) with stride(2) == 1 "
                                 "(nn.Linear's layout)")
    if w_gate.shape != w_up.shape:
        raise GemmInputError(f"w_gate {tuple(w_gate.shape)} and w_up {tuple(w_up.shape)} must have one shape")
    if w_up.dtype != w_gate.dtype or w_up.device != w_gate.device:
        raise GemmInputError(f"w_gate and w_up must share one dtype and device: got {w_gate.dtype} on "
                             f"{w_gate.device}, {w_up.dtype} on {w_up.device}")
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):  # the messages name grouped_swiglu's own arguments
        check_grouped_mm(x, w.transpose(-2, -1), offs, device_types=PUBLIC_DEVICES,
                         names=("x", f"{name}.transpose(-2, -1)"))


def grouped_swiglu_direct(x, w_gate, w_up, offs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, gate, up) without the op boundary (no autograd): gate and up in fp32 from two grouped GEMMs,
    out = silu(gate) * up rounded once to x's dtype. Validates first (:func:`check_grouped_swiglu`)."""
    check_grouped_swiglu(x, w_gate, w_up, offs)
    gate = grouped_mm_direct(x, w_gate.transpose(-2, -1), offs, out_dtype=F32)
    up = grouped_mm_direct(x, w_up.transpose(-2, -1), offs, out_dtype=F32)
    return (F.silu(gate) * up).to(x.dtype), gate, up


def fused_kernel():
    """The grouped kernel's fused gated-MLP build (library/grouped.py, ``swiglu=True``)."""
    return grouped_gemm(FUSED_BN, "k", swiglu=True)


def fused_rule(x, w_gate, w_up, *, fused: bool | None = None) -> str | None:
    """Why a checked call does not take the fused forward, from its metadata alone (what a traced call
    decides on), or None: an input requiring grad under grad mode (the backward reads the fp32 gate and up
    the two-GEMM forward saves), :data:`FUSED_DEFAULT` off (``fused``: that switch's value instead), w_up's
    strides not w_gate's (one map layout for both)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w_gate, w_up)):
        return "an input requires grad: the backward reads the fp32 gate and up the two-GEMM forward writes"
    if not (FUSED_DEFAULT if fused is None else fused):
        return ("ops_grouped_swiglu.FUSED_DEFAULT is off (GL_GROUPED_SWIGLU_FUSED=0 at import, or set so): the "
                "two grouped GEMMs run")
    if w_up.stride() != w_gate.stride():
        return f"w_up's strides {tuple(w_up.stride())} are not w_gate's {tuple(w_gate.stride())} (one map layout for both)"
    return None


def grouped_swiglu_fused_direct(x, w_gate, w_up, offs) -> torch.Tensor:
    """out = silu(x @ w_gate[e].T) * (x @ w_up[e].T) by one launch of the fused build, without the op boundary
    (no autograd). Validates first (:func:`check_grouped_swiglu`); a call the build refuses on its tensors'
    addresses runs the two-GEMM forward (:func:`grouped_swiglu_direct`) instead: both are this library's."""
    check_grouped_swiglu(x, w_gate, w_up, offs)
    (t, k), n = x.shape, w_gate.shape[1]
    out = torch.empty((t, n), dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()  # silu(0) * 0
    kernel = fused_kernel()
    if kernel.supports_swiglu(x, w_gate, w_up, offs, out) is not None:
        return grouped_swiglu_direct(x, w_gate, w_up, offs)[0]
    kernel.launch_swiglu(x, w_gate, w_up, offs, out)
    return out


@torch.library.custom_op(f"{NAMESPACE}::grouped_swiglu_fused", mutates_args=())
def _grouped_swiglu_fused_op(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                             offs: torch.Tensor) -> torch.Tensor:
    return grouped_swiglu_fused_direct(x, w_gate, w_up, offs)


@_grouped_swiglu_fused_op.register_fake
def _grouped_swiglu_fused_fake(x, w_gate, w_up, offs):
    check_grouped_swiglu(x, w_gate, w_up, offs)
    return x.new_empty((x.shape[0], w_gate.shape[1]))


@torch.library.custom_op(f"{NAMESPACE}::grouped_swiglu", mutates_args=())
def _grouped_swiglu_op(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                       offs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return grouped_swiglu_direct(x, w_gate, w_up, offs)


@_grouped_swiglu_op.register_fake
def _grouped_swiglu_fake(x, w_gate, w_up, offs):
    check_grouped_swiglu(x, w_gate, w_up, offs)
    shape = (x.shape[0], w_gate.shape[1])
    return x.new_empty(shape), x.new_empty(shape, dtype=F32), x.new_empty(shape, dtype=F32)


def _setup(ctx, inputs, output):
    x, w_gate, w_up, offs = inputs
    _, gate, up = output
    ctx.mark_non_differentiable(gate, up)  # saved for the backward, not results of the function
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w_gate, w_up, offs, gate, up)


def swiglu_grads(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(d_gate, d_up) in fp32 of out = silu(gate) * up for the output's gradient ``grad``:
    d_up = grad * silu(gate), d_gate = grad * up * s * (1 + gate * (1 - s)), s = sigmoid(gate)."""
    g = grad.float()
    s = torch.sigmoid(gate)
    return g * up * s * (1 + gate * (1 - s)), g * gate * s


def _backward(ctx, grad, _grad_gate, _grad_up):
    x, w_gate, w_up, offs, gate, up = ctx.saved_tensors
    if grad is None:
        return None, None, None, None
    d_gate, d_up = (d.to(x.dtype) for d in swiglu_grads(grad, gate, up))
    grad_x = grad_gate_w = grad_up_w = None
    if ctx.needs_input_grad[0]:  # w (E, N, K) as b: read N-major; fp32 halves summed, rounded once
        grad_x = torch.ops.gemm_ladder.grouped_mm(with_aligned_pitch(d_gate), w_gate, offs, F32)
        grad_x = (grad_x + torch.ops.gemm_ladder.grouped_mm(with_aligned_pitch(d_up), w_up, offs, F32)).to(x.dtype)
    if ctx.needs_input_grad[1]:
        grad_gate_w = _grad_b_grouped_k(d_gate, x, offs)  # (E, N, K): d_gate[rows_e].T @ x[rows_e]
    if ctx.needs_input_grad[2]:
        grad_up_w = _grad_b_grouped_k(d_up, x, offs)
    return grad_x, grad_gate_w, grad_up_w, None


_grouped_swiglu_op.register_autograd(_backward, setup_context=_setup)


def grouped_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The experts' gated MLP: ``out[r] = silu(x[r] @ w_gate[e].T) * (x[r] @ w_up[e].T)`` for each row r
    of group e, on the library's grouped kernel (module docstring: what runs; :func:`explain_grouped_swiglu`).

    Args:
        x: (T, K) bf16/fp16, rows sorted by group; row pitch a multiple of 16 bytes, rows contiguous.
        w_gate, w_up: (E, N, K) each, ``nn.Linear``'s layout per expert (stride(2) == 1), x's dtype and
            device, strides multiples of 16 bytes (K a multiple of 8 for dense weights).
        offs: int32 (E,) on x's device, cumulative row ends (group e: rows offs[e-1]..offs[e]). Its
            values stay on the device: any group size, 0 and 1 included, no padding.

    Returns (T, N) in x's dtype: gate and up accumulated in fp32, the product in fp32, rounded once.
    Rows past offs[E-1] are in no group and not defined (as ``torch._grouped_mm``'s). Differentiable in
    x, w_gate and w_up (the op ``torch.ops.gemm_ladder.grouped_swiglu``; its fake for torch.compile). A
    call needing no backward takes the fused forward where :data:`FUSED_DEFAULT` is on (module docstring).
    Raises GemmTypeError, GemmInputError, NotSupportedError (more than 1024 groups) before any launch.
    """
    host = host_call(x, w_gate, w_up, offs)
    if not host:  # else the C++ kernel's planner checks, once per signature
        check_grouped_swiglu(x, w_gate, w_up, offs)
    if fused_rule(x, w_gate, w_up) is None:
        if host or through_op(x, w_gate, w_up, offs):
            return torch.ops.gemm_ladder.grouped_swiglu_fused(x, w_gate, w_up, offs)
        return grouped_swiglu_fused_direct(x, w_gate, w_up, offs)
    return torch.ops.gemm_ladder.grouped_swiglu(x, w_gate, w_up, offs)[0]


def _plan_fused(x, w_gate, w_up, offs):
    """The launch template of a fused call's signature (the compiled host path), or None where it is not one launch
    of the fused build (an empty problem, K = 0, the build's refusals: the op's Python kernel runs them)."""
    check_grouped_swiglu(x, w_gate, w_up, offs)
    (t, k), n = x.shape, w_gate.shape[1]
    if min(t, n, k) == 0:
        return None
    out = torch.empty((t, n), dtype=x.dtype, device=x.device)
    kernel = fused_kernel()
    if kernel.supports_swiglu(x, w_gate, w_up, offs, out) is not None:
        return None
    return template_of((kernel.swiglu_args(x, w_gate, w_up, offs, out).bound(), out))


_ops.on_host({"grouped_swiglu_fused": (_plan_fused, grouped_swiglu_fused_direct)})


def explain_grouped_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, offs: torch.Tensor) -> dict:
    """What :func:`grouped_swiglu` runs on these tensors, without running it, as a dict: ``path``
    ('fused' or 'two_grouped_gemms'), ``fused`` (True or False) and ``reason`` (for the two GEMMs, why not
    fused: :func:`fused_rule`; a fused call whose tensors' addresses the build refuses runs the two GEMMs,
    decided at the launch), ``t``, ``n``, ``k``, ``groups``,
    ``launches`` (forward, in order) and ``backward`` (each a dict: ``step``, ``kind`` ('grouped_gemm' or
    'pointwise'), and for a GEMM ``kernel``, ``source``, ``tile``, ``b_major``, ``out_dtype``, ``cluster`` and
    ``cluster_reason`` (library/grouped.py choose_cluster)), ``cublas``
    (False), ``host`` (who launches it: ops_grouped.host_path). CUDA or meta tensors (meta: checked as CUDA tensors of the same shapes and strides); raises
    what :func:`grouped_swiglu` raises for bad input."""
    from gemm_ladder.library.grouped import BK, BM, SOURCE
    from gemm_ladder.library.kernel import GROUP_K, GROUP_M

    if all(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in (x, w_gate, w_up, offs)):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():  # shapes and strides only: no GPU needed
            check_grouped_swiglu(*(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
                                   for t in (x, w_gate, w_up, offs)))
    else:
        check_grouped_swiglu(x, w_gate, w_up, offs)
    (t, k), (e, n, _) = x.shape, w_gate.shape
    dt = str(x.dtype).replace("torch.", "")

    def gemm(step, bn, major, out_dtype, k_grouped=False):
        # the contraction: x's K (gate, up), N (grad_x), the T rows (grad_w)
        red = t if k_grouped else k if major == "k" else n
        build, why = grouped_build(bn, major, red, GROUP_K if k_grouped else GROUP_M,
                                   out_dtype == "float32" and not k_grouped, False, None)
        return {"step": step, "kind": "grouped_gemm", "kernel": build.name, "source": SOURCE, "tile": [BM, bn, BK],
                "b_major": major, "out_dtype": out_dtype, "grouped_along": "K" if k_grouped else "M",
                "cluster": build.cluster, "cluster_reason": why}

    bn_fwd, bn_dx = choose_bn(n, t, e), choose_bn(k, t, e)
    not_fused = fused_rule(x, w_gate, w_up)
    if not_fused is None:
        build = fused_kernel()
        return {"path": "fused", "fused": True, "cublas": False, "t": t, "n": n, "k": k, "groups": e, "dtype": dt,
                "host": host_path("swiglu_fused", min(t, n, k) == 0),
                "reason": ("no backward to feed: one launch of the gated-MLP build, 128 rows of w_gate and of w_up a "
                           "stage, silu(gate) * up from the fp32 accumulators, rounded once"),
                "launches": [{"step": f"out = silu(x @ w_gate[e]^T) * (x @ w_up[e]^T), rounded to {dt}",
                              "kind": "grouped_gemm", "kernel": build.name, "source": SOURCE, "tile": [BM, FUSED_BN, BK],
                              "out_tile": [BM, build.out_bn], "b_major": "k", "out_dtype": dt, "grouped_along": "M",
                              "cluster": 1, "cluster_reason": "the fused build is one CTA per cluster"}],
                "backward": []}
    return {
        "path": "two_grouped_gemms", "fused": False, "cublas": False, "t": t, "n": n, "k": k, "groups": e,
        "dtype": dt, "host": host_path("swiglu_two_gemms", min(t, n, k) == 0),
        "reason": (f"not fused: {not_fused}; gate and up are written in fp32 by two grouped GEMMs and silu(gate) * up "
                   "runs after them (one rounding to the output dtype)"),
        "launches": [
            gemm("gate = x @ w_gate[e]^T (fp32)", bn_fwd, "k", "float32"),
            gemm("up = x @ w_up[e]^T (fp32)", bn_fwd, "k", "float32"),
            {"step": f"out = silu(gate) * up in fp32, rounded to {dt}", "kind": "pointwise"},
        ],
        "backward": [
            {"step": "d_gate, d_up from the saved fp32 gate and up", "kind": "pointwise"},
            gemm("grad_x = d_gate @ w_gate[e] (fp32)", bn_dx, "mn", "float32"),
            gemm("grad_x += d_up @ w_up[e] (fp32), rounded once", bn_dx, "mn", "float32"),
            gemm("grad_w_gate[e] = d_gate[rows_e]^T @ x[rows_e]", grad_w_bn(k), "mn", dt, k_grouped=True),
            gemm("grad_w_up[e] = d_up[rows_e]^T @ x[rows_e]", grad_w_bn(k), "mn", dt, k_grouped=True),
        ],
    }


__all__ = ["FUSED_DEFAULT", "check_grouped_swiglu", "explain_grouped_swiglu", "fused_rule", "grouped_swiglu",
           "grouped_swiglu_direct", "grouped_swiglu_fused_direct", "swiglu_grads"]
