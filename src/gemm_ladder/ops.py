"""gemm-ladder's kernels as PyTorch operators: ``torch.ops.gemm_ladder.{mm, mm_out, linear, linear_out, swiglu}``.

Importing this module registers them (``import gemm_ladder.ops``; any call of ``gemm_ladder.mm`` or
``linear`` that needs them imports it too). Schemas::

    gemm_ladder::mm(Tensor a, Tensor b, *, ScalarType? out_dtype=None) -> Tensor
    gemm_ladder::mm_out(Tensor a, Tensor b, *, Tensor(a!) out, ScalarType? out_dtype=None) -> ()
    gemm_ladder::linear(Tensor x, Tensor w, Tensor? bias=None, Tensor? residual=None, *, str? activation=None,
                        float alpha=1., float beta=1., ScalarType? out_dtype=None) -> Tensor
    gemm_ladder::linear_out(Tensor x, Tensor w, Tensor? bias=None, Tensor? residual=None, *, Tensor(a!) out,
                            str? activation=None, float alpha=1., float beta=1., ScalarType? out_dtype=None) -> ()
    gemm_ladder::swiglu(Tensor x, Tensor w_gate, Tensor w_up) -> Tensor     (no backward)

``linear`` computes ``activation(alpha * x @ w.T + bias) + beta * residual``, fused into the GEMM
kernel (issue 13's built-in epilogue). ``residual`` is positional in the schema because
``torch.library.register_autograd`` takes no keyword-only tensor; the Python API
(``gemm_ladder.linear``) takes it by keyword. A user ``gemm_ladder.Epilogue`` (CUDA source in a
Python object) has no place in a schema: ``gemm_ladder.linear(..., epilogue=...)`` runs eagerly only
and never goes through these ops (it raises NotSupportedError under compile or autograd).

Each op has: a CUDA kernel (the API's path: the fast key, then the checked call cache of
dispatch.calls; gemm-ladder's kernels only), a
fake implementation (also the Meta kernel) that applies the same input rules to metadata and returns
an output of the real one's shape, dtype and strides (contiguous), so ``torch.compile(fullgraph=True)``
traces through it, with dynamic shapes too; and, for the functional ops, a backward on gemm-ladder's
kernels (:func:`_mm_backward`, :func:`_linear_backward`). The out= ops have no backward, as torch's
out= ops have none: an operand that requires grad is refused with grad mode on.

The ops are defined with ``torch.library.Library`` rather than ``torch.library.custom_op``: on the
development machine an op call through ``custom_op``'s wrapper cost ~31 us of host time against ~2.5
us through ``Library.define`` (bench/host_overhead.py measures both paths on the GPU).
"""

from __future__ import annotations

import math

import torch

from gemm_ladder import api as _api
from gemm_ladder.api import linear_direct, linear_op, mm_direct, mm_op, refuse_out_overlap, swiglu_direct
# The derivative of each activation at the pre-activation z, by torch's own backward kernels.
from gemm_ladder.library.activations import DERIVATIVES as _ACTIVATION_BACKWARD
from gemm_ladder.dispatch.validate import (
    FLOAT_MAX,
    MmShape,
    NotSupportedError,
    check_domain,
    check_linear,
    check_linear_out,
    check_mm,
    check_swiglu,
    check_swiglu_layout,
    first_requiring_grad,
    linear_call,
    result_dtype,
    trivial,
)

NAMESPACE = "gemm_ladder"
#: Devices the fake implementations accept: CUDA (FakeTensors of real inputs) and meta (tracing and
#: tests without a GPU). A CPU tensor is refused with the real kernel's rule.
FAKE_DEVICES = ("cuda", "meta")

SCHEMAS = {
    "mm": "mm(Tensor a, Tensor b, *, ScalarType? out_dtype=None) -> Tensor",
    "mm_out": "mm_out(Tensor a, Tensor b, *, Tensor(a!) out, ScalarType? out_dtype=None) -> ()",
    "linear": ("linear(Tensor x, Tensor w, Tensor? bias=None, Tensor? residual=None, *, str? activation=None, "
               "float alpha=1.0, float beta=1.0, ScalarType? out_dtype=None) -> Tensor"),
    "linear_out": ("linear_out(Tensor x, Tensor w, Tensor? bias=None, Tensor? residual=None, *, Tensor(a!) out, "
                   "str? activation=None, float alpha=1.0, float beta=1.0, ScalarType? out_dtype=None) -> ()"),
    "swiglu": "swiglu(Tensor x, Tensor w_gate, Tensor w_up) -> Tensor",
}

_LIB = torch.library.Library(NAMESPACE, "DEF")
for _schema in SCHEMAS.values():
    _LIB.define(_schema)


# --- CUDA kernels: the API's direct path ---------------------------------------------------------------


#: The functional ops' CUDA kernels: the eager call's fast key -> checked call -> bound launch path
#: (api.mm_op / api.linear_op), with the checks the dispatcher has already made left out.
_mm_cuda = mm_op
_linear_cuda = linear_op


def _mm_out_cuda(a, b, *, out, out_dtype=None):
    mm_direct(a, b, out, out_dtype, check_grad=True)


def _linear_out_cuda(x, w, bias=None, residual=None, *, out, activation=None, alpha=1.0, beta=1.0, out_dtype=None):
    linear_direct(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta, out_dtype=out_dtype,
                  out=out, check_grad=True)


for _name, _fn in (("mm_out", _mm_out_cuda), ("linear_out", _linear_out_cuda)):
    _LIB.impl(_name, _fn, "CUDA")


# --- fake implementations (FakeTensor and meta) -------------------------------------------------------


def _check_domain(shape: MmShape) -> None:
    """The kernels' limits (an extent past 2^31 - 1 raises OutsideDomainError), as the real kernel and
    ``explain`` apply them: after the empty problems, which are valid whatever their other extents."""
    if trivial(shape) is None:
        check_domain(shape)


@torch.library.register_fake(f"{NAMESPACE}::mm", lib=_LIB)
def _mm_fake(a, b, *, out_dtype=None):
    shape = check_mm(a, b, None, out_dtype, device_types=FAKE_DEVICES, check_grad=False)
    _check_domain(shape)
    return a.new_empty((shape.m, shape.n), dtype=shape.out_dtype)


@torch.library.register_fake(f"{NAMESPACE}::mm_out", lib=_LIB)
def _mm_out_fake(a, b, *, out, out_dtype=None):
    _check_domain(check_mm(a, b, out, out_dtype, device_types=FAKE_DEVICES, check_grad=False))


def _linear_meta(x, w, bias, residual, activation, alpha, beta, out_dtype) -> tuple[int, torch.dtype]:
    k, n = check_linear(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                        device_types=FAKE_DEVICES, check_grad=False)
    dtype = result_dtype(out_dtype, x.dtype)
    _check_domain(MmShape(math.prod(x.shape[:-1]), n, k, dtype))
    return n, dtype


@torch.library.register_fake(f"{NAMESPACE}::linear", lib=_LIB)
def _linear_fake(x, w, bias=None, residual=None, *, activation=None, alpha=1.0, beta=1.0, out_dtype=None):
    n, dtype = _linear_meta(x, w, bias, residual, activation, alpha, beta, out_dtype)
    return x.new_empty((*x.shape[:-1], n), dtype=dtype)


@torch.library.register_fake(f"{NAMESPACE}::linear_out", lib=_LIB)
def _linear_out_fake(x, w, bias=None, residual=None, *, out, activation=None, alpha=1.0, beta=1.0, out_dtype=None):
    n, dtype = _linear_meta(x, w, bias, residual, activation, alpha, beta, out_dtype)
    out2 = check_linear_out(out, x, n, dtype)
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not reshape(-1, k): K = 0 leaves -1 undetermined
    check_mm(x2, w.T, out2, out_dtype, device_types=FAKE_DEVICES, check_grad=False)
    if linear_call(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                   check_grad=False) is not None:  # a fused epilogue: the real op's overlap rule
        refuse_out_overlap(out, bias, residual)


@torch.library.register_fake(f"{NAMESPACE}::swiglu", lib=_LIB)
def _swiglu_fake(x, w_gate, w_up):
    k, n = check_swiglu(x, w_gate, w_up, device_types=FAKE_DEVICES)
    m = math.prod(x.shape[:-1])
    if m and n and k:  # as the kernel: empty problems first, then the domain and the layouts it reads
        check_domain(MmShape(m, n, k, x.dtype))
        check_swiglu_layout(x.reshape(m, k), w_gate, w_up, addresses=False)
    return x.new_empty((*x.shape[:-1], n))


# --- autograd -------------------------------------------------------------------------------------------


def _in_dtype(grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The incoming gradient in the operands' dtype: the kernels take bf16/fp16 operands, so the
    gradient of an out_dtype=float32 output is rounded to the inputs' dtype before its GEMMs."""
    return grad if grad.dtype == dtype else grad.to(dtype)


def _mm_setup(ctx, inputs, keyword_only_inputs, output):
    a, b = inputs
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)


def _mm_backward(ctx, grad):
    """c = a @ b: grad_a = grad @ b.T (M, N) @ (N, K); grad_b = a.T @ grad (K, M) @ (M, N). Both are
    gemm_ladder.mm calls on transposed views: the layouts kernel reads an MN-major operand in place."""
    from gemm_ladder.api import mm

    a, b = ctx.saved_tensors
    dtype = (a if a is not None else b).dtype
    g = _in_dtype(grad, dtype)
    grad_a = mm(g, b.T) if ctx.needs_input_grad[0] else None
    grad_b = mm(a.T, g) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b




def _linear_setup(ctx, inputs, keyword_only_inputs, output):
    # Trailing defaulted arguments (bias, residual = None) are not passed on to here: pad them back.
    x, w, bias, residual = (*inputs, None, None)[:4]
    ctx.activation = keyword_only_inputs.get("activation")
    ctx.alpha = keyword_only_inputs.get("alpha", 1.0)
    ctx.beta = keyword_only_inputs.get("beta", 1.0)
    ctx.residual_dtype = residual.dtype if residual is not None else None
    ctx.save_for_backward(x, w, bias)


def _linear_backward(ctx, grad):
    """y = act(z) + beta * residual, z = alpha * x @ w.T + bias, on (M, K) rows of x (batch dimensions merged):

    * grad_residual = beta * grad;
    * grad_z = grad * act'(z), z recomputed by gemm_ladder.linear(x, w, bias, alpha=alpha) (no activation),
      act' by torch's backward kernel for the activation; grad_z = grad without one;
    * grad_bias = grad_z summed over the rows (fp32 sum, rounded to bias's dtype);
    * grad_x = alpha * grad_z @ w and grad_w = alpha * grad_z^T @ x: gemm_ladder.mm on grad_z (M, N),
      w (N, K) read as a K-major... and grad_z.T (N, M), an MN-major view: no transposed copies.
    """
    from gemm_ladder.api import linear, mm

    x, w, bias = ctx.saved_tensors
    n, k = w.shape
    alpha, beta, act = ctx.alpha, ctx.beta, ctx.activation
    given = len(ctx.needs_input_grad)  # as inputs: trailing defaulted arguments are not counted
    need_x, need_w, need_bias, need_res = (*ctx.needs_input_grad, False, False)[:4]
    grad_res = (grad * beta).to(ctx.residual_dtype) if need_res else None
    g = _in_dtype(grad, x.dtype)
    if act is not None:
        z = linear(x.detach(), w.detach(), None if bias is None else bias.detach(), alpha=alpha)
        g = _ACTIVATION_BACKWARD[act](g, z)
    m = math.prod(x.shape[:-1])  # not reshape(-1, ...): N or K = 0 leaves -1 undetermined
    g2 = g.reshape(m, n)
    grad_bias = g2.sum(0, dtype=torch.float32).to(bias.dtype) if need_bias else None
    grad_x = grad_w = None
    if need_x:
        grad_x = mm(g2, w)
        if alpha != 1.0:
            grad_x = grad_x * alpha
        grad_x = grad_x.view(x.shape)
    if need_w:
        grad_w = mm(g2.T, x.reshape(m, k))
        if alpha != 1.0:
            grad_w = grad_w * alpha
    return (grad_x, grad_w, grad_bias, grad_res)[:given]


#: The keys a call goes to below autograd, less ADInplaceOrView (a fallthrough for these functional ops).
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset - torch._C.DispatchKeySet(torch._C.DispatchKey.ADInplaceOrView)
#: Per op, the backend dispatch keys whose kernel the Autograd kernel may call directly (the op's
#: kernel for that key, as registered above); bench/host_overhead.py --fake-gpu adds CPU.
DIRECT_KERNELS: dict[str, dict] = {"mm": {torch._C.DispatchKey.CUDA: _mm_cuda},
                                   "linear": {torch._C.DispatchKey.CUDA: _linear_cuda}}
#: Per op, what the Autograd kernel decided per raw dispatch key set: the direct kernel, or None
#: (redispatch). Clear it (:func:`clear_direct_kernels`) after changing :data:`DIRECT_KERNELS`.
_DIRECT_FOR: dict[str, dict[int, object]] = {"mm": {}, "linear": {}}


def clear_direct_kernels() -> None:
    """Forget the Autograd kernels' per-key-set decisions (after a change of :data:`DIRECT_KERNELS`)."""
    for decided in _DIRECT_FOR.values():
        decided.clear()


def _register_autograd(name: str, backward, setup_context) -> None:
    """``torch.library.register_autograd`` for op ``name``, with a cheaper path where there is no
    autograd to record (grad mode off, or no input requiring grad).

    register_autograd registers, as the op's Autograd kernel, torch's generated ``autograd_impl``
    (torch/_library/autograd.py), which on a call with nothing to record still builds a metadata
    object and redispatches through Python (``forward_no_grad``, ``OpOverload.redispatch``): several
    microseconds per call. This registers the same generated kernel for calls with something to
    record, and otherwise goes below autograd at once: straight to the op's CUDA kernel (the same
    function the dispatcher would call, :data:`DIRECT_KERNELS`: api.mm_op / api.linear_op, the fast
    key's path) when the call's next dispatch key is CUDA (plain CUDA tensors, no mode or wrapper in
    between; decided once per dispatch key set, by its raw value), without torch's below-autograd
    guard (nothing can be recorded there), else through ``redispatch`` under that guard as torch's
    kernel does (FakeTensor, meta, functionalization, ...). Where this torch lacks the private pieces used
    (``torch._library.autograd.Info`` / ``make_autograd_impl``), the public function is used.
    """
    qualname = f"{NAMESPACE}::{name}"
    try:
        from torch._library.autograd import Info, make_autograd_impl

        op = getattr(torch.ops.gemm_ladder, name).default
        generated = make_autograd_impl(op, Info(backward, setup_context))
    except (ImportError, AttributeError, TypeError):
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=_AUTOGRAD_LIB)
        return
    grad_enabled, any_requires_grad = torch.is_grad_enabled, torch._C._any_requires_grad
    below_autograd, redispatch = torch._C._AutoDispatchBelowAutograd, op.redispatch
    kernels = DIRECT_KERNELS[name]
    direct_for = _DIRECT_FOR[name]  # raw dispatch key set -> the direct kernel, or None

    def autograd_kernel(keyset, *args, **kwargs):
        if grad_enabled() and any_requires_grad(*args):
            return generated(keyset, *args, **kwargs)
        raw = keyset.raw_repr()
        direct = direct_for.get(raw, False)
        if direct is False:
            direct = direct_for[raw] = kernels.get((keyset & _BELOW_AUTOGRAD).highestPriorityTypeId())
        if direct is not None:
            # No below-autograd guard (it costs about as much as the dispatch key lookup and the grad
            # check together): nothing here can be recorded, since no input requires grad or grad mode
            # is off, and the kernel's own tensors (output, workspaces) are made without requires_grad.
            return direct(*args, **kwargs)
        with below_autograd():
            return redispatch(keyset & _BELOW_AUTOGRAD, *args, **kwargs)

    _AUTOGRAD_LIB.impl(name, autograd_kernel, "Autograd", with_keyset=True)


def _register_python_kernels() -> None:
    """The Python CUDA kernels of mm, linear and swiglu and the Autograd kernels of mm and linear, each set in
    a Library of its own, so that :func:`use_host` can remove them (``_destroy``) before the compiled host
    module registers its own (no registration overrides another) and :func:`use_python` can put them back."""
    global _CUDA_LIB, _AUTOGRAD_LIB
    _CUDA_LIB = torch.library.Library(NAMESPACE, "IMPL")
    _CUDA_LIB.impl("mm", _mm_cuda, "CUDA")
    _CUDA_LIB.impl("linear", _linear_cuda, "CUDA")
    _CUDA_LIB.impl("swiglu", swiglu_direct, "CUDA")
    _AUTOGRAD_LIB = torch.library.Library(NAMESPACE, "IMPL")
    _register_autograd("mm", _mm_backward, _mm_setup)
    _register_autograd("linear", _linear_backward, _linear_setup)
    DIRECT_KERNELS["mm"][torch._C.DispatchKey.CUDA] = _mm_cuda
    DIRECT_KERNELS["linear"][torch._C.DispatchKey.CUDA] = _linear_cuda
    clear_direct_kernels()


_register_python_kernels()


# --- the compiled host path -----------------------------------------------------------------------

_HOST: dict = {}
#: The planned ops of the other op modules (ops_grouped, ops_grouped_swiglu: :func:`on_host`), each a dict
#: {op name: (planner, Python kernel)}.
_HOST_USERS: list[dict] = []


def _register_planned(module, callbacks: dict) -> None:
    """Hand ``module`` (the compiled host module) each planned op's planner and Python kernel (as launch.cpp calls
    them, with the op's arguments) and register its C++ CUDA kernel."""
    for name, (plan, run) in callbacks.items():
        module.set_op_callbacks(name, plan, run)
        module.register_op_kernel(name)


def on_host(callbacks: dict) -> None:
    """Have the compiled host module launch these ops' calls while it is in use (from now, where it already is):
    ``callbacks`` {op name: (planner, Python kernel)}, the op one of the module's ``PLANNED_OPS``, its planner
    answering a launch template (gemm_ladder/host/templates.py) or None (the Python kernel runs that signature);
    :func:`use_python` removes their C++ kernels. How an op module defined elsewhere (ops_grouped.py,
    ops_grouped_swiglu.py) hands its ops to C++."""
    _HOST_USERS.append(callbacks)
    if _HOST.get("module") is not None:
        _register_planned(_HOST["module"], callbacks)


def use_host():
    """Switch the CUDA and Autograd kernels of mm and linear, swiglu's CUDA kernel and the planned ops of
    :func:`on_host` to the compiled host module (gemm_ladder/host): build or load it, give it its planners,
    remove the Python kernels and register its own (launch.cpp, autograd.cpp); and scaled_mm's functional
    calls to its entry (ops_fp8.set_host).
    Returns the module, or None where it is not used (``GEMM_LADDER_HOST=0``, or the build failed: a
    warning said why, and the Python kernels stay).
    Done at most once per process; called at import on a machine with a CUDA device, and never from
    inside a kernel (a registration must not change while its kernel runs). Raises HostBuildError
    under ``GEMM_LADDER_HOST=require`` when the build fails."""
    if _HOST.get("module") is not None:
        return _HOST["module"]
    if "module" in _HOST and _HOST.get("off"):
        return None
    from gemm_ladder import api, host
    from gemm_ladder.host import planner

    module = host.load()
    if module is not None:
        planner.register(module)
        _CUDA_LIB._destroy()
        _AUTOGRAD_LIB._destroy()
        module.register_kernels()
        module.register_autograd()
        _register_planned(module, {"swiglu": (planner.plan_swiglu, planner.run_swiglu)})
        # the host module's entries (typed dispatcher calls of _MM, _LINEAR and _SWIGLU), the OpOverloads, its clear
        api.set_host_ops((module.mm, module.linear, _MM, _LINEAR, module.swiglu, module.clear))
        from gemm_ladder import ops_fp8

        ops_fp8.set_host(module.scaled_mm)
        for callbacks in _HOST_USERS:
            _register_planned(module, callbacks)
    _HOST["module"] = module
    _HOST["off"] = module is None
    return module


def use_python() -> None:
    """Back to the Python kernels (the host module's registrations removed; for tests and benchmarks
    comparing the two paths). Never call it while a kernel runs."""
    module = _HOST.get("module")
    if module is None:
        return
    from gemm_ladder import api

    api.set_host_ops(None)
    from gemm_ladder import ops_fp8

    ops_fp8.set_host(None)
    module.unregister_op_kernels(["swiglu", *(name for callbacks in _HOST_USERS for name in callbacks)])
    module.unregister_kernels()
    module.unregister_autograd()
    module.clear()
    _register_python_kernels()
    _HOST["module"] = None
    _HOST["off"] = False


def host_module():
    """The compiled host module when :func:`use_host` switched to it, else None."""
    return _HOST.get("module")


# --- Python entry points ------------------------------------------------------------------------------

_MM = torch.ops.gemm_ladder.mm.default
_MM_OUT = torch.ops.gemm_ladder.mm_out.default
_LINEAR = torch.ops.gemm_ladder.linear.default
_LINEAR_OUT = torch.ops.gemm_ladder.linear_out.default
_SWIGLU = torch.ops.gemm_ladder.swiglu.default


def _refuse_grad_for_out(*tensors) -> None:
    if (name := first_requiring_grad(dict(zip(("first operand", "second operand", "bias", "residual"), tensors)))):
        raise NotSupportedError(f"out= with a {name} that requires grad: an out= call has no backward (as "
                                "torch's out= ops have none); drop out= to differentiate")


def _real(v):
    """An int alpha or beta as the schema's float (a float, or anything else, is passed on as given:
    the op's schema check or the fake names what is wrong)."""
    return float(v) if type(v) is int and -FLOAT_MAX <= v <= FLOAT_MAX else v


_Tensor, _dtype = torch.Tensor, torch.dtype


def _refuse(op: str, check, *args, **kwargs) -> None:
    """Run the full ``check`` on arguments the op's dispatcher would refuse with its own message (a
    non-tensor, a schema type mismatch, a CPU tensor: no CPU kernel), so that the library's exception
    (GemmTypeError, GemmInputError naming the argument) is raised instead. Rules as the fakes'; a CPU
    tensor passes where a CPU kernel was registered for ``op`` (the autograd tests, host_overhead --fake-gpu)."""
    cpu = torch._C._dispatch_has_kernel_for_dispatch_key(f"{NAMESPACE}::{op}", "CPU")
    check(*args, **kwargs, device_types=FAKE_DEVICES + (("cpu",) if cpu else ()), check_grad=False)


def mm(a, b, *, out=None, out_dtype=None):
    """``torch.ops.gemm_ladder.mm`` (or ``mm_out`` with ``out``): :func:`gemm_ladder.mm` through the
    registered op (what compiled graphs and autograd see). Raises as gemm_ladder.mm, before the
    dispatcher sees the call."""
    # A few attribute reads, no allocation: what the dispatcher needs (tensors on CUDA or meta, a dtype).
    if not (isinstance(a, _Tensor) and isinstance(b, _Tensor) and (a.is_cuda or a.is_meta)
            and (b.is_cuda or b.is_meta) and (out_dtype is None or type(out_dtype) is _dtype)):
        _refuse("mm" if out is None else "mm_out", check_mm, a, b, out, out_dtype)
    if out is None:
        return _MM(a, b, out_dtype=out_dtype)
    _refuse_grad_for_out(a, b)
    _MM_OUT(a, b, out=out, out_dtype=out_dtype)
    return out


def linear(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0, out_dtype=None, out=None):
    """``torch.ops.gemm_ladder.linear`` (or ``linear_out`` with ``out``): :func:`gemm_ladder.linear`
    through the registered op. Raises as gemm_ladder.linear, before the dispatcher sees the call."""
    alpha, beta = _real(alpha), _real(beta)
    if not (isinstance(x, _Tensor) and isinstance(w, _Tensor) and (x.is_cuda or x.is_meta) and (w.is_cuda or w.is_meta)
            and type(alpha) is float and type(beta) is float and (activation is None or type(activation) is str)
            and (bias is None or isinstance(bias, _Tensor)) and (residual is None or isinstance(residual, _Tensor))
            and (out_dtype is None or type(out_dtype) is _dtype)):
        _refuse("linear" if out is None else "linear_out", check_linear, x, w, bias, activation=activation,
                residual=residual, alpha=alpha, beta=beta, out_dtype=out_dtype)
    if out is None:
        return _LINEAR(x, w, bias, residual, activation=activation, alpha=alpha, beta=beta, out_dtype=out_dtype)
    _refuse_grad_for_out(x, w, bias, residual)
    _LINEAR_OUT(x, w, bias, residual, out=out, activation=activation, alpha=alpha, beta=beta, out_dtype=out_dtype)
    return out


def swiglu(x, w_gate, w_up):
    """``torch.ops.gemm_ladder.swiglu``: :func:`gemm_ladder.swiglu` through the registered op (compiled
    graphs, meta tensors). No backward (as gemm_ladder.swiglu: it refuses inputs requiring grad).
    Raises as gemm_ladder.swiglu, before the dispatcher sees the call."""
    if not (isinstance(x, _Tensor) and isinstance(w_gate, _Tensor) and isinstance(w_up, _Tensor)
            and (x.is_cuda or x.is_meta)):
        _refuse("swiglu", check_swiglu, x, w_gate, w_up)
    module = _HOST.get("module")
    if module is not None and not torch.compiler.is_compiling():
        _api.SWIGLU_PLANNED.fresh(module.clear)
    return _SWIGLU(x, w_gate, w_up)


__all__ = ["FAKE_DEVICES", "NAMESPACE", "SCHEMAS", "host_module", "linear", "mm", "on_host", "swiglu", "use_host",
           "use_python"]

# The API reaches these entry points through what it is handed here (it never imports this module).
_api.set_registered_ops((mm, linear, swiglu))


# On a machine with a CUDA device the compiled host path is used from the start (built at first
# import, as a kernel is at first use); elsewhere gemm_ladder.ops.use_host() switches to it.
if torch.cuda.is_available():
    from gemm_ladder.host import mode as _host_mode

    if _host_mode() != "off":
        use_host()
