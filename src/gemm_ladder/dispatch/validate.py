"""The rules every ``gemm_ladder.mm`` / ``linear`` input is held to, checked in Python before anything
is built or launched.

Everything here reads tensor metadata only (types, devices, dtypes, shapes, strides, storage
offsets), so it runs on CPU and meta tensors: the tests cover every rule without a GPU, passing
``device_types`` to allow the device they use. Each exception names the argument and the rule.

Order (torch.mm's, then ours): types, devices, dtypes, ranks, K, ``out_dtype``, ``out``, autograd;
then empty dimensions are decided (:func:`trivial`) before any domain rule (:func:`check_domain`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

from gemm_ladder.contract import DTYPES, FP8_DTYPES, GemmInputError, OutsideDomainError
from gemm_ladder.errors import GemmTypeError, NotSupportedError  # noqa: F401 - the public classes (re-exported here)
from gemm_ladder.library.activations import ACTIVATIONS
from gemm_ladder.library.epilogue import Epilogue, EpilogueCall, linear_epilogue

#: Input dtypes the library computes (the contract's); fp32 accumulation in every kernel.
INPUT_DTYPES = tuple(DTYPES.values())
#: The kernels take M, N and K as 32-bit ints (the ``int M, int N, int K`` kernel arguments; TMA
#: box coordinates are int32 too: PTX ISA, cp.async.bulk.tensor "tensorCoords"). Element counts of
#: an operand are not limited: addresses are 64-bit (tensor maps, the repack kernel's offsets).
MAX_DIM = 2**31 - 1


@dataclass(frozen=True)
class MmShape:
    """(M, N, K) of ``a (M, K) @ b (K, N)`` and the output dtype."""

    m: int
    n: int
    k: int
    out_dtype: torch.dtype


#: The largest float: an int alpha or beta past it has no float to pass (float() raises OverflowError).
FLOAT_MAX = sys.float_info.max


def check_strided(name: str, t: torch.Tensor) -> None:
    """A dense tensor: strided and not nested (a sparse, mkldnn or nested tensor has no strides for a
    tensor map to describe). Raises GemmInputError naming it and what to pass."""
    if t.layout is not torch.strided or t.is_nested:
        what = "a nested tensor" if t.is_nested else f"layout {t.layout}"
        raise GemmInputError(f"{name} is {what}: the kernels read dense (strided) tensors; pass {name}.to_dense()"
                             + (" or its components" if t.is_nested else ""))


def _check_tensor(name: str, t, device_types: tuple[str, ...]) -> None:
    if not isinstance(t, torch.Tensor):
        raise GemmTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_strided(name, t)
    if t.device.type not in device_types:
        raise GemmInputError(f"{name} must be on a {' or '.join(device_types)} device, got {t.device} "
                             "(the library runs its own kernels only; no CPU path)")


def _check_pair(names: tuple[str, str], x, y, device_types: tuple[str, ...]) -> None:
    """Types, devices and dtypes of two operands (named ``names`` in messages)."""
    for name, t in zip(names, (x, y)):
        _check_tensor(name, t, device_types)
    if x.device != y.device:
        raise GemmInputError(f"{names[0]} and {names[1]} must be on one device, got {names[0]} on {x.device}, "
                             f"{names[1]} on {y.device}")
    for name, t in zip(names, (x, y)):
        if t.dtype not in INPUT_DTYPES:
            if t.dtype in FP8_DTYPES:  # checked only once the dtype is refused: the accepted call pays nothing
                raise GemmInputError(f"{name} has dtype {t.dtype}: this call takes torch.bfloat16 or torch.float16; "
                                     "fp8 inputs and their scales go to gemm_ladder.scaled_mm (torch._scaled_mm's "
                                     "semantics; explain(a, b, scale_a=..., scale_b=...) says what it runs)")
            raise GemmInputError(f"{name} has dtype {t.dtype}; gemm_ladder computes torch.bfloat16 or torch.float16 "
                                 "inputs (fp32 accumulation) and never falls back to cuBLAS for others")
    if x.dtype != y.dtype:
        raise GemmInputError(f"{names[0]} and {names[1]} must share a dtype, got {names[0]}={x.dtype}, "
                             f"{names[1]}={y.dtype}")


#: Why a call that checks grad has no backward, and what to call instead (mm's and linear's out= calls).
NO_BACKWARD_OUT = ("an out= call has none, as torch's out= ops have none); call gemm_ladder.mm / linear without out= "
                   "(their backward runs on gemm-ladder's kernels), or call under torch.no_grad()")
#: The same for swiglu, which has no backward yet.
NO_BACKWARD_SWIGLU = ("swiglu's backward is not built); for training, compose gemm_ladder.linear and torch's silu "
                      "(linear's backward runs on gemm-ladder's kernels), or call under torch.no_grad()")


def first_requiring_grad(tensors: dict) -> str | None:
    """The name of the first of ``tensors`` ({name: value}, any value) that is a tensor requiring grad while
    grad mode is on, else None: what a call with no backward refuses, each call in its own words."""
    if torch.is_grad_enabled():
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return name
    return None


def _check_grad(names: tuple[str, str], x: torch.Tensor, y: torch.Tensor, why: str = NO_BACKWARD_OUT) -> None:
    if (which := first_requiring_grad(dict(zip(names, (x, y))))) is not None:
        raise NotSupportedError(f"{which} requires grad: this call has no backward ({why}")


def check_mm(a, b, out=None, out_dtype=None, *, device_types: tuple[str, ...] = ("cuda",),
             check_grad: bool = True) -> MmShape:
    """Check the arguments of ``mm(a, b, out=out, out_dtype=out_dtype)``; return (M, N, K, out dtype).

    Rules (each violation raises before any launch, naming the argument):
      a, b: torch.Tensors on one device of a type in ``device_types``; dtype torch.bfloat16 or
      torch.float16, the same for both; 2-D, a (M, K) and b (K, N), K equal.
      out_dtype: None (the input dtype) or torch.float32 (the dtype of the returned tensor or ``out``).
      out: None or a 2-D (M, N) tensor on a's device with dtype ``out_dtype`` (else the input dtype),
      without internal overlap (no two elements at one address) and sharing no element with a or b.
      Autograd (``check_grad``): with grad mode on, neither a nor b may require grad. The public
      functions differentiate through the registered ops (gemm_ladder.ops) and check this only for
      out= calls, which have no backward; the ops' own kernels pass ``check_grad=False``.

    Raises:
        GemmTypeError (also a TypeError): a non-tensor argument, or an out_dtype that is not a dtype.
        GemmInputError (a ValueError): any other rule.
        NotSupportedError (a NotImplementedError): inputs that require grad.
    """
    _check_pair(("a", "b"), a, b, device_types)
    for name, t, shape in (("a", a, "(M, K)"), ("b", b, "(K, N)")):
        if t.dim() != 2:
            raise GemmInputError(f"{name} must be 2-D {shape}, got {t.dim()} dimensions")
    if a.shape[1] != b.shape[0]:
        raise GemmInputError(f"a is (M, K) = {tuple(a.shape)} and b is (K, N) = {tuple(b.shape)}: "
                             f"a.shape[1] = {a.shape[1]} must equal b.shape[0] = {b.shape[0]}")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    result_dtype = _check_out_dtype(out_dtype, a.dtype)
    if out is not None:
        result_dtype = _check_out(out, m, n, a, b, out_dtype, result_dtype, device_types)
    if check_grad:
        _check_grad(("a", "b"), a, b)
    return MmShape(m, n, k, result_dtype)


def result_dtype(out_dtype, input_dtype: torch.dtype) -> torch.dtype:
    """The output dtype of a call: ``out_dtype`` checked (None: the input dtype; else the input dtype
    or torch.float32). Raises GemmTypeError for a non-dtype, GemmInputError for another dtype."""
    return _check_out_dtype(out_dtype, input_dtype)


def _check_out_dtype(out_dtype, input_dtype: torch.dtype) -> torch.dtype:
    if out_dtype is None:
        return input_dtype
    if not isinstance(out_dtype, torch.dtype):
        raise GemmTypeError(f"out_dtype must be a torch.dtype or None, got {type(out_dtype).__name__}")
    if out_dtype not in (input_dtype, torch.float32):
        raise GemmInputError(f"out_dtype={out_dtype}: the output is the input dtype ({input_dtype}) or "
                             "torch.float32 (or, from mm and linear without out=, torch.float8_e4m3fn: "
                             "quantized with 1 x 128 scales)")
    return out_dtype


def _check_out(out, m: int, n: int, a: torch.Tensor, b: torch.Tensor, out_dtype, result_dtype: torch.dtype,
               device_types: tuple[str, ...]) -> torch.dtype:
    _check_tensor("out", out, device_types)
    if out.device != a.device:
        raise GemmInputError(f"out must be on the operands' device {a.device}, got {out.device}")
    if out.dim() != 2 or tuple(out.shape) != (m, n):
        raise GemmInputError(f"out must have shape (M, N) = ({m}, {n}), got {tuple(out.shape)}")
    if out.dtype != result_dtype:
        rule = f"out_dtype={out_dtype}" if out_dtype is not None else f"the input dtype {a.dtype} (out_dtype=None)"
        raise GemmInputError(f"out has dtype {out.dtype}; it must be {result_dtype}, from {rule}")
    if internal_overlap(out):
        raise GemmInputError(f"out has internal overlap (strides {tuple(out.stride())} for shape "
                             f"{tuple(out.shape)}): two of its elements share one address")
    for name, t in (("a", a), ("b", b)):
        if may_overlap(out, t):
            raise GemmInputError(f"out overlaps {name}: an output element would overwrite an input element "
                                 "another tile still reads; pass an out that shares no memory with a and b")
    return result_dtype


def internal_overlap(t: torch.Tensor) -> bool:
    """True unless ``t``'s elements provably have distinct addresses.

    torch's own test (``torch._debug_has_internal_overlap``: 0 no, 1 yes, 2 too hard to tell) first;
    where it cannot tell, a 2-D view without overlap is one whose dimensions, sorted by stride, each
    step over the whole extent of the smaller one (stride_big >= stride_small x size_small). A view
    that interleaves its rows otherwise is reported as overlapping (refused, never guessed).
    """
    status = torch._debug_has_internal_overlap(t)
    if status != 2:
        return status == 1
    dims = sorted((t.stride(d), t.shape[d]) for d in range(t.dim()) if t.shape[d] > 1)
    if any(stride == 0 for stride, _ in dims):
        return True
    return any(big < small * size for (small, size), (big, _) in zip(dims, dims[1:]))


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last] element offset of ``t`` in its storage (non-negative strides)."""
    lo = t.storage_offset()
    return lo, lo + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))


def _pitched(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """(offset, pitch, rows, cols) of a 2-D view with one dimension of stride 1, in element offsets of
    its storage: element (r, c) at offset + r * pitch + c with c < cols <= pitch. None otherwise."""
    if t.dim() != 2:
        return None
    for inner in (1, 0):
        if t.stride(inner) == 1 or t.shape[inner] == 1:
            outer = 1 - inner
            rows, cols, pitch = t.shape[outer], t.shape[inner], t.stride(outer)
            if cols <= pitch or rows == 1:
                return t.storage_offset(), max(pitch, cols), rows, cols
    return None


def may_overlap(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ``x`` and ``y`` may share an element; False only when provably disjoint.

    Tensors on different storages never overlap (``torch._C._overlaps`` is False only then). On one
    storage: disjoint element spans never overlap; two 2-D views with unit inner stride and the same
    row pitch P (sub-blocks of one matrix: a fused QKV output, say) are rectangles of the P-wide
    grid and overlap only if the rectangles meet. Anything else sharing a span is reported as
    overlapping (refused with its rule rather than computed on a guess).
    """
    if x.numel() == 0 or y.numel() == 0 or not torch._C._overlaps(x, y):
        return False
    if x.element_size() != y.element_size():
        return True  # spans in different units: refuse rather than convert (no such use is known)
    (x0, x1), (y0, y1) = _span(x), _span(y)
    if x1 < y0 or y1 < x0:
        return False
    px, py = _pitched(x), _pitched(y)
    if px is None or py is None or px[1] != py[1]:
        return True
    pitch = px[1]

    def rect(p):
        offset, _, rows, cols = p
        r0, c0 = divmod(offset, pitch)
        return r0, r0 + rows, c0, c0 + cols

    (ar0, ar1, ac0, ac1), (br0, br1, bc0, bc1) = rect(px), rect(py)
    if ac1 > pitch or bc1 > pitch:  # a row wraps into the next: not a rectangle of the grid
        return True
    return ar0 < br1 and br0 < ar1 and ac0 < bc1 and bc0 < ac1


def trivial(shape: MmShape) -> str | None:
    """'empty' when M or N is 0 (nothing to compute), 'zeros' when K is 0 (the empty sum), else None.

    Decided right after :func:`check_mm`, before any domain rule: an empty product is valid whatever
    its other extents."""
    if shape.m == 0 or shape.n == 0:
        return "empty"
    if shape.k == 0:
        return "zeros"
    return None


def check_domain(shape: MmShape) -> None:
    """The limits of the kernels on a non-empty problem: each of M, N, K at most MAX_DIM (2^31 - 1).

    Raises OutsideDomainError naming the dimension and the rule. A symbolic extent (a SymInt: torch.compile's
    or torch.export's dynamic dimension) is not checked here, since comparing it would add a guard that
    bounds the dimension (torch.export refuses a Dim without a max); the call checks its concrete value.
    """
    for dim, value in (("M", shape.m), ("N", shape.n), ("K", shape.k)):
        if isinstance(value, torch.SymInt):
            continue
        if value > MAX_DIM:
            raise OutsideDomainError(f"{dim} = {value} > 2^31 - 1: the kernels take M, N and K as 32-bit "
                                     "ints (operands of more than 2^31 elements are fine; one extent is not)")


def check_activation(activation) -> None:
    """``linear``'s ``activation`` rule: None or a name in library/activations.py's ACTIVATIONS.
    Raises GemmTypeError for a non-string, GemmInputError for an unknown name."""
    if activation is not None and not isinstance(activation, str):
        raise GemmTypeError(f"activation must be a str or None, got {type(activation).__name__}")
    if activation is not None and activation not in ACTIVATIONS:
        raise GemmInputError(f"activation={activation!r}: use one of {', '.join(map(repr, ACTIVATIONS))} or None")


def check_linear(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0, out_dtype=None,
                 epilogue=None, inputs=None, device_types: tuple[str, ...] = ("cuda",),
                 check_grad: bool = True) -> tuple[int, int]:
    """Check every argument of ``linear`` (see :func:`gemm_ladder.api.linear`); return (K, N).

    Rules, in order: x and w as mm's operands (types, devices, bf16/fp16, one dtype), x (*, K) with at
    least one dimension, w (N, K), K equal; ``out_dtype`` None, x's dtype or torch.float32;
    ``activation`` None or a name in library/activations.py's ACTIVATIONS (relu, gelu, gelu_tanh, silu); ``alpha``, ``beta`` Python ints or
    floats (not bool); ``bias`` None or a 1-D (N,) tensor of x's dtype or float32 on x's device;
    ``residual`` None or a tensor of the output's shape (*, N), of x's dtype or float32, on x's device
    (any strides); ``epilogue`` None or a gemm_ladder.Epilogue, and then bias, activation, residual
    None and alpha = beta = 1 (one epilogue per call), and ``inputs`` exactly its declared inputs
    (:meth:`Epilogue.bind`'s rules); ``inputs`` only with an epilogue. Autograd (``check_grad``): with
    grad mode on, no operand, bias, residual or epilogue input may require grad. The public
    ``linear`` differentiates through the registered op (gemm_ladder.ops) and checks this only where
    no backward exists (out=, a user Epilogue); the op's own kernel and fake pass ``check_grad=False``.

    Raises GemmTypeError, GemmInputError (EpilogueError is one), NotSupportedError (grad).
    """
    _check_pair(("x", "w"), x, w, device_types)
    if x.dim() < 1:
        raise GemmInputError("x must have at least 1 dimension (*, K), got a 0-D tensor")
    if w.dim() != 2:
        raise GemmInputError(f"w must be 2-D (N, K), got {w.dim()} dimensions")
    if x.shape[-1] != w.shape[1]:
        raise GemmInputError(f"x is (*, K) = {tuple(x.shape)} and w is (N, K) = {tuple(w.shape)}: "
                             f"x.shape[-1] = {x.shape[-1]} must equal w.shape[1] = {w.shape[1]}")
    _check_out_dtype(out_dtype, x.dtype)
    n = w.shape[0]
    out_shape = (*x.shape[:-1], n)
    check_activation(activation)
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GemmTypeError(f"{name} must be a Python int or float (as torch.addmm's), got {type(v).__name__}")
        if isinstance(v, int) and not -FLOAT_MAX <= v <= FLOAT_MAX:
            raise GemmInputError(f"{name} is an int past the largest float ({FLOAT_MAX:.3e}): the epilogue scales "
                                 "by a float")
    for name, t, shape in (("bias", bias, (n,)), ("residual", residual, out_shape)):
        if t is None:
            continue
        _check_tensor(name, t, device_types)
        if t.device != x.device:
            raise GemmInputError(f"{name} is on {t.device}; x is on {x.device}")
        if t.dtype not in (x.dtype, torch.float32):
            raise GemmInputError(f"{name} has dtype {t.dtype}: it must be x's dtype {x.dtype} or torch.float32 "
                                 "(read and added in fp32 either way)")
        if tuple(t.shape) != shape:
            what = "the output's shape (*, N)" if name == "residual" else "(N,), one value per output column"
            raise GemmInputError(f"{name} has shape {tuple(t.shape)}; it must be {what} = {shape}")
        if check_grad and t.requires_grad and torch.is_grad_enabled():
            raise NotSupportedError(f"{name} requires grad: this call has no backward (an out= call has none, as "
                                    "torch's out= ops have none); call gemm_ladder.linear without out= (its "
                                    "backward runs on gemm-ladder's kernels), or call under torch.no_grad()")
    if epilogue is not None:
        if not isinstance(epilogue, Epilogue):
            raise GemmTypeError(f"epilogue must be a gemm_ladder.Epilogue, got {type(epilogue).__name__}")
        given = [name for name, v in (("bias", bias), ("activation", activation), ("residual", residual)) if v is not None]
        given += [name for name, v in (("alpha", alpha), ("beta", beta)) if v != 1]
        if given:
            raise GemmInputError(f"epilogue= is given, and so is {', '.join(given)}: one epilogue per call; put "
                                 "them in the Epilogue (its cuda and reference) instead")
    elif inputs:
        raise GemmInputError(f"unexpected keyword arguments {sorted(inputs)}: epilogue inputs are passed only "
                             "with epilogue=gemm_ladder.Epilogue(...)")
    if check_grad:
        _check_grad(("x", "w"), x, w)
    linear_call(x, w, bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                epilogue=epilogue, inputs=inputs, check_grad=check_grad)  # binds the epilogue: its inputs' rules
    return w.shape[1], w.shape[0]


def linear_call(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0, epilogue=None,
                inputs=None, check_grad: bool = True) -> EpilogueCall | None:
    """The epilogue of a checked ``linear`` call bound to its inputs in the (M, N) output's coordinates
    (M = x's rows, batch dimensions merged), or None when there is nothing to fuse. The built-in one
    (:func:`gemm_ladder.library.epilogue.linear_epilogue`) takes alpha when alpha != 1, bias, the
    activation, and the residual with beta unless beta == 0 (then the residual is not read at all:
    torch.addmm's rule, NaN and Inf in it are not propagated). ``check_grad``: :meth:`Epilogue.bind`'s
    (an input requiring grad under grad mode is refused). Raises EpilogueError for bad inputs."""
    n = w.shape[0]
    m = math.prod(x.shape[:-1])
    if epilogue is not None:
        return epilogue.bind(dict(inputs or {}), m, n, x.device, check_grad=check_grad)
    use_residual = residual is not None and beta != 0
    ep = linear_epilogue(bias=bias is not None, activation=activation, residual=use_residual, alpha=alpha != 1)
    if ep is None:
        return None
    values = {"gl_alpha_": alpha, "gl_bias_": bias, "gl_beta_": beta,
              "gl_residual_": residual.reshape(m, n) if use_residual else None}
    return ep.bind({k: v for k, v in values.items() if k in ep.inputs}, m, n, x.device, check_grad=check_grad)


def check_linear_out(out, x: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """The 2-D (M, N) view of ``linear``'s ``out`` (shape (*x.shape[:-1], N), dtype ``dtype``), for mm's
    own out rules (device, overlap) to check next. Raises GemmTypeError / GemmInputError naming the rule."""
    if not isinstance(out, torch.Tensor):
        raise GemmTypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    check_strided("out", out)
    want = (*x.shape[:-1], n)
    if tuple(out.shape) != tuple(want):
        raise GemmInputError(f"out must have shape (*x.shape[:-1], N) = {tuple(want)}, got {tuple(out.shape)}")
    if out.dtype != dtype:
        raise GemmInputError(f"out has dtype {out.dtype}; it must be {dtype}")
    try:
        return out.view(math.prod(out.shape[:-1]), n) if out.dim() != 2 else out  # not -1: N = 0 leaves it undetermined
    except RuntimeError:
        raise GemmInputError(f"out's batch dimensions (strides {tuple(out.stride())}) cannot be merged into one "
                             "view of (M, N) rows: pass a contiguous out") from None


def check_swiglu(x, w_gate, w_up, *, device_types: tuple[str, ...] = ("cuda",), check_grad: bool = True) -> tuple[int, int]:
    """Check ``swiglu(x, w_gate, w_up)``: x (*, K) with at least one dimension, w_gate and w_up (N, K).

    Rules, in order (each raises before any launch, naming the argument): x, w_gate, w_up
    torch.Tensors on one device of a type in ``device_types``, dtype torch.bfloat16 or torch.float16,
    one dtype for all three; w_gate and w_up 2-D of one shape (N, K); x's last dimension K; with grad
    mode on, none requires grad. Layouts are :func:`check_swiglu_layout`'s, on the 2-D x.
    Returns (K, N).

    Raises GemmTypeError (a non-tensor), GemmInputError (any other rule), NotSupportedError (autograd).
    """
    _check_pair(("x", "w_gate"), x, w_gate, device_types)
    _check_pair(("x", "w_up"), x, w_up, device_types)
    if x.dim() < 1:
        raise GemmInputError("x must have at least 1 dimension (*, K), got a 0-D tensor")
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        if w.dim() != 2:
            raise GemmInputError(f"{name} must be 2-D (N, K), got {w.dim()} dimensions")
    if w_gate.shape != w_up.shape:
        raise GemmInputError(f"w_gate is (N, K) = {tuple(w_gate.shape)} and w_up is {tuple(w_up.shape)}: the gate and "
                             "up projections must have one shape (each output column has one of each)")
    if x.shape[-1] != w_gate.shape[1]:
        raise GemmInputError(f"x is (*, K) = {tuple(x.shape)} and w_gate, w_up are (N, K) = {tuple(w_gate.shape)}: "
                             f"x.shape[-1] = {x.shape[-1]} must equal w_gate.shape[1] = {w_gate.shape[1]}")
    if check_grad:
        _check_grad(("x", "w_gate"), x, w_gate, NO_BACKWARD_SWIGLU)
        _check_grad(("x", "w_up"), x, w_up, NO_BACKWARD_SWIGLU)
    return w_gate.shape[1], w_gate.shape[0]


#: TMA's alignment rule for bases and row pitches (CUDA Driver API, cuTensorMapEncodeTiled:
#: globalAddress and globalStrides are multiples of 16 bytes).
_TMA_BYTES = 16


def check_swiglu_layout(x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, *, addresses: bool = True) -> None:
    """The layouts the swiglu kernel reads in place: x2 (M, K) (x with its batch dimensions merged),
    w_gate and w_up (N, K), each row-major (K-major: stride (ld, 1), ld >= K, the layout of
    ``nn.Linear``'s weight and of a contiguous x) with a 16-byte aligned base and a pitch of a multiple
    of 16 bytes, so that a TMA tensor map describes it. Nothing is repacked: a non-empty operand
    outside these rules raises NotSupportedError naming it, the rule and what to pass instead.
    Metadata only (runs on CPU and meta tensors; a meta tensor's base counts as aligned).
    ``addresses=False`` leaves the base addresses out (a FakeTensor has none: the op's fake).
    """
    m, k = x2.shape
    if 0 in (m, k, w_gate.shape[0]):
        return  # an empty problem reads nothing (the API returns its result without a launch)
    for name, t, rows in (("x", x2, m), ("w_gate", w_gate, w_gate.shape[0]), ("w_up", w_up, w_up.shape[0])):
        e = t.element_size()
        row_major = (t.stride(1) == 1 or k == 1) and (t.stride(0) >= k or rows == 1)
        if not row_major:
            raise NotSupportedError(
                f"{name} has strides {tuple(t.stride())} for shape {tuple(t.shape)}: the swiglu kernel reads it "
                f"row-major (K-major, stride (ld, 1) with ld >= K), where a TMA tensor map describes it; pass "
                f"{name}.contiguous() (a column-major weight is the transpose of nn.Linear's layout)")
        pitch = t.stride(0) if rows > 1 else k
        if (pitch * e) % _TMA_BYTES:
            fix = (f"pad K to a multiple of {_TMA_BYTES // e} (zero columns in x and in both weights leave the result "
                   "unchanged)") if pitch == k else f"pass {name}.contiguous() or a pitch of a multiple of {_TMA_BYTES // e}"
            raise NotSupportedError(
                f"{name}: rows {pitch} elements apart = {pitch * e} bytes, not a multiple of {_TMA_BYTES}: a TMA tensor "
                f"map cannot describe it (cuTensorMapEncodeTiled globalStrides); {fix}")
        if addresses and t.device.type != "meta" and t.data_ptr() % _TMA_BYTES:
            raise NotSupportedError(
                f"{name}: base address {t.data_ptr():#x} is not {_TMA_BYTES}-byte aligned (TMA, cuTensorMapEncodeTiled "
                f"globalAddress); pass {name}.clone() (a fresh allocation is aligned)")


__all__ = ["ACTIVATIONS", "FLOAT_MAX", "GemmInputError", "GemmTypeError", "MAX_DIM", "MmShape", "NotSupportedError",
           "OutsideDomainError", "check_activation", "check_domain", "check_linear", "check_linear_out", "check_mm",
           "check_strided", "check_swiglu", "check_swiglu_layout", "internal_overlap", "linear_call", "may_overlap", "result_dtype",
           "trivial"]
