"""The Python side of the compiled host path: plans a signature once, and runs the calls C++ leaves.

``launch.cpp`` calls :func:`plan_mm` / :func:`plan_linear` (with the GIL) on the first call of a
signature. They check the call in full (:mod:`gemm_ladder.dispatch.validate`, through the API's
checked call cache: the library's errors are raised to the caller, and nothing is kept for a refused
call), decide its route, and answer with a :class:`~gemm_ladder.host.templates.LaunchTemplate` when
the route reads and writes everything in place (one kernel launch, addresses patched per call), or
None for what C++ does not launch: repacked operands, an output workspace, a reshape that copies,
K = 0 and empty problems. C++ then calls :func:`run_mm` / :func:`run_linear` (the Python path, the
same kernels) for that signature on every call.

The same for ``scaled_mm`` (:func:`plan_scaled_mm`, :func:`run_scaled_mm`): the fp8 kernel's launch
(library/fp8.py ``bind_scaled_mm``) as a template, or None where a call copies a scale or the bias,
returns the quantized output, or launches nothing; and for ``swiglu`` (:func:`plan_swiglu`, :func:`run_swiglu`,
registered by gemm_ladder.ops as a planned op): its one launch (``api.bind_swiglu``), or None for the small-M
pair, a padded output, a copied x, or nothing to launch.

:func:`register` hands these six functions to the module (:func:`gemm_ladder.ops` does at import).
"""

from __future__ import annotations

import torch

from gemm_ladder.api import (_epilogue_args, _linear_call, _mm_call, bind_swiglu, linear_direct, mm_direct, output_for,
                             swiglu_direct, SWIGLU_PLANNED)
from gemm_ladder.dispatch.autotune import transient
from gemm_ladder.dispatch.calls import CALLS, bind_route, linear_key, mm_key
from gemm_ladder.dispatch.validate import check_swiglu
from gemm_ladder.host.templates import FP8_SOURCES, SWIGLU_SOURCES, LaunchTemplate, template_from_bound
from gemm_ladder.library import fp8


def _plain(t):
    """``t`` as a plain tensor (an nn.Parameter's data, without autograd history): the checked call
    cache keys plain tensors only, and below autograd nothing is recorded."""
    return t if t is None or type(t) is torch.Tensor else t.detach()


def plan_mm(a, b, out_dtype) -> LaunchTemplate | None:
    """The template of ``mm(a, b, out_dtype=out_dtype)``'s signature, or None (the Python path).
    Raises what :func:`gemm_ladder.mm` raises for bad input."""
    a, b = _plain(a), _plain(b)
    key = mm_key(a, b, None, out_dtype)
    fresh: list[torch.Tensor] = []  # the output the decision allocated, if it decided here
    call = CALLS.get_or_make(key, lambda: _mm_call(a, b, None, out_dtype, fresh))
    if call.kind != "bound" or transient(call.route):  # an untimed autotune stand-in: never a template
        return None
    # stands for each call's output
    c = output_for(call, fresh, a.device)
    bound = bind_route(call.route, a, b, c)
    return template_from_bound(bound, transposed=call.route.c_path.transposed, out_shape=call.out_shape,
                               out_dtype=call.out_dtype)


def plan_linear(x, w, bias, residual, activation, alpha, beta, out_dtype) -> LaunchTemplate | None:
    """The template of ``linear(...)``'s signature with the built-in epilogue, or None (the Python
    path: also where x's batch dimensions or a read residual's do not merge into a view, since a copy
    has another address). Raises what :func:`gemm_ladder.linear` raises for bad input."""
    x, w, bias, residual = _plain(x), _plain(w), _plain(bias), _plain(residual)
    key = linear_key(x, w, out_dtype, bias, residual, activation, alpha, beta)
    fresh: list[torch.Tensor] = []  # see plan_mm
    call = CALLS.get_or_make(key, lambda: _linear_call(x, w, bias, activation, residual, alpha, beta, out_dtype,
                                                       fresh))
    if call.kind != "bound" or not call.view or transient(call.route):
        return None
    m, n, k = call.m, call.n, call.k
    if residual is not None and beta != 0 and residual.dim() != 2:
        try:
            residual.view(m, n)
        except RuntimeError:
            return None  # reshape would copy: a new address every call
    c = output_for(call, fresh, x.device)
    tensors, scalars = _epilogue_args(call, bias, residual, alpha, beta)
    epilogue = call.epilogue_call(tensors, scalars, x.device)
    bound = bind_route(call.route, x.view(m, k), w.T, c.view(m, n), epilogue)
    return template_from_bound(bound, transposed=call.route.c_path.transposed, epilogue=call.epilogue,
                               out_shape=call.out_shape, out_dtype=call.out_dtype)


def run_mm(a, b, out_dtype) -> torch.Tensor:
    """The Python path of an mm signature C++ does not launch."""
    return mm_direct(_plain(a), _plain(b), None, out_dtype)


def run_linear(x, w, bias, residual, activation, alpha, beta, out_dtype) -> torch.Tensor:
    """The Python path of a linear signature C++ does not launch."""
    return linear_direct(_plain(x), _plain(w), _plain(bias), activation=activation, residual=_plain(residual),
                         alpha=alpha, beta=beta, out_dtype=out_dtype)


def plan_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype) -> LaunchTemplate | None:
    """The template of ``scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)``'s signature
    (with the fp8 module's defaults as they are now: the key holds :func:`gemm_ladder.library.fp8.settings`),
    or None (the Python path: library/fp8.py ``bind_scaled_mm`` says why). Raises what
    :func:`gemm_ladder.scaled_mm` raises for bad input."""
    call = fp8.check_scaled_mm(a, b, scale_a, scale_b, _plain(bias), out_dtype)
    bound = fp8.bind_scaled_mm(a, b, scale_a, scale_b, _plain(bias), call)
    if isinstance(bound, str):
        return None
    bound, pad = bound
    t = template_from_bound(bound, out_shape=(call.m, call.n), out_dtype=call.out_dtype, sources=FP8_SOURCES)
    t.pad_scale_a = pad
    return t


def run_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype) -> torch.Tensor:
    """The Python path of a scaled_mm signature C++ does not launch."""
    call = fp8.check_scaled_mm(a, b, scale_a, scale_b, _plain(bias), out_dtype)
    return fp8.scaled_mm_launch(a, b, scale_a, scale_b, _plain(bias), call)


def plan_swiglu(x, w_gate, w_up) -> LaunchTemplate | None:
    """The template of ``swiglu(x, w_gate, w_up)``'s signature, or None (the Python path: :func:`api.bind_swiglu
    <gemm_ladder.api.bind_swiglu>` says where). Raises what :func:`gemm_ladder.swiglu` raises for bad input; inputs
    requiring grad with grad mode on are refused here (launch.cpp keys that flag, so no template is kept for it).
    Records the settings it planned under (``api.SWIGLU_PLANNED``): a later call through gemm_ladder.swiglu or
    ops.swiglu after they change drops the templates first."""
    check_swiglu(x, w_gate, w_up)  # before _plain, which drops requires_grad
    SWIGLU_PLANNED.planned()
    made = bind_swiglu(_plain(x), _plain(w_gate), _plain(w_up))
    if made is None:
        return None
    bound, out = made
    return template_from_bound(bound, out_shape=tuple(out.shape), out_dtype=out.dtype, sources=SWIGLU_SOURCES)


def run_swiglu(x, w_gate, w_up) -> torch.Tensor:
    """The Python path of a swiglu signature C++ does not launch (its checks refuse inputs requiring grad)."""
    return swiglu_direct(x, w_gate, w_up)


def register(module) -> None:
    """Give the host module its planners and Python paths."""
    module.set_callbacks(plan_mm, plan_linear, run_mm, run_linear, plan_scaled_mm, run_scaled_mm)


__all__ = ["plan_linear", "plan_mm", "plan_scaled_mm", "plan_swiglu", "register", "run_linear", "run_mm",
           "run_scaled_mm", "run_swiglu"]
