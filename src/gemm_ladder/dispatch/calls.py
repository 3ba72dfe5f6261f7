"""The per-call cache: from a call's signature to what it runs, so that a repeated call costs a key,
two dictionary lookups, the output's allocation and one driver call.

A call's **signature** is what every input rule and the dispatcher's decision read: each operand's
shape, strides, dtype and device, its base address modulo 16 (TMA's alignment), ``out_dtype``, whether
the current stream is capturing a graph (a capture runs unsplit), and, when ``out`` is given, the full
addresses of every operand (the rule that ``out`` shares no element with ``a`` or ``b`` reads them).
The first call of a signature is checked in full (:mod:`gemm_ladder.dispatch.validate`) and decided
(:func:`gemm_ladder.dispatch.decide`); its :class:`Call` is kept. A call with the same signature
passed the same checks, so it skips them.

A :class:`Call` whose route reads and writes everything in place keeps **bound launches**
(:mod:`gemm_ladder.library.bound`) keyed by the operands' exact addresses and the stream: a tensor map
embeds its operand's base address, so a launch is never reused for other addresses; new addresses
bind anew (maps encoded again, or found in the kernels' own map caches). A route with a repack or an
output workspace allocates per call and runs through :func:`gemm_ladder.dispatch.execute.run`.

``linear`` with its built-in fused epilogue (bias, activation, residual, alpha, beta) is cached the
same way. Its signature adds the epilogue's identity: the activation, which inputs are present (bias,
a residual that is read: beta != 0, alpha != 1), each input's signature as above, and the types of
alpha and beta (their rules); the :class:`Call` keeps the epilogue (:func:`linear_epilogue
<gemm_ladder.library.epilogue.linear_epilogue>`), whose generated source (its dtypes and the route's
orientation) is what the kernel was built with. Bound launches are then keyed by the epilogue inputs'
addresses too (they are in the kernel's EpilogueParams argument); alpha and beta are written into the
bound argument on every call (:meth:`BoundLaunch.set_scalars
<gemm_ladder.library.bound.BoundLaunch.set_scalars>`), so new values need no new bind. A user
:class:`~gemm_ladder.library.epilogue.Epilogue` is not cached (api.linear runs it uncached).

**The fast key.** A repeated plain eager call (``api.mm`` / ``api.linear`` with no ``out``, plain
tensors, no autograd) does not build the signature above: it reads each value once into one tuple
(:func:`fast_mm_key`, :func:`fast_linear_key`: shapes, strides, dtypes, devices and full base
addresses of every tensor, ``out_dtype``, the epilogue's identity, the current stream's handle and
whether it is capturing) and finds its :class:`Call` in :attr:`CallCache.fast` with one lookup. The
full addresses make that tuple finer than the signature (it implies the signature: same shapes,
strides, dtypes, devices, alignment), so an entry is only ever made for a tuple whose signature was
checked, and the stream and capture state are read on every call (the current stream may change
between two calls). The bound launch is then found by the addresses already read and the output's.

Both caches (and the fast keys) are cleared when full (a model calls a few dozen signatures; a bound launch holds a few
hundred bytes) and by :func:`clear`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from gemm_ladder.dispatch.autotune import transient

#: Signatures kept before the cache is cleared.
CALL_CACHE_SIZE = 1024
#: Bound launches kept per signature (address sets) before they are cleared.
BINDS_PER_CALL = 16


@dataclass(eq=False)
class Call:
    """What a checked call signature runs.

    ``kind``: 'empty' (M or N is 0: nothing to compute), 'zeros' (K = 0), 'bound' (an in-place route:
    bound launches per address set), 'route' (a route with a repack or an output workspace).
    ``out_shape``: the shape of an output allocated by the call; ``m``, ``n``, ``k``: the 2-D problem.
    ``view``: for ``linear``, whether x's batch dimensions merge into a view (else reshape copies).
    ``epilogue``: for ``linear``, its built-in fused epilogue (an Epilogue whose tensor inputs are
    bias then the residual, its scalars alpha then beta, each only where used), or None.
    """

    kind: str
    out_shape: tuple[int, ...]
    out_dtype: torch.dtype
    m: int
    n: int
    k: int
    route: object = None
    view: bool = True
    binds: dict = field(default_factory=dict)
    epilogue: object = None

    def run(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bind=None, inputs: tuple = (),
            scalars: tuple = ()) -> None:
        """``c = a @ b`` (``c = epilogue(a @ b)`` with an epilogue) for operands of this signature
        (a (M, K), b (K, N), c (M, N)). ``inputs``: the epilogue's tensor inputs in its slot order,
        2-D in c's (M, N) coordinates where they are tiles; ``scalars``: its scalar inputs in order.

        ``bind(route, a, b, c, epilogue)`` makes a bound launch (dispatch's :func:`bind_route`;
        injectable so that the cache's keying is testable without a GPU)."""
        kind = self.kind
        if kind == "bound":
            key = (a.data_ptr(), b.data_ptr(), c.data_ptr(), raw_stream(c.get_device()))
            if inputs:  # an epilogue's inputs: their addresses are in the bound EpilogueParams
                key += tuple(t.data_ptr() for t in inputs)
            launch = self.binds.get(key)
            if launch is None:
                if len(self.binds) >= BINDS_PER_CALL:
                    self.binds.clear()
                epilogue = self.epilogue_call(inputs, scalars, c.device)
                launch = self.binds[key] = (bind or bind_route)(self.route, a, b, c, epilogue)
            elif scalars:
                launch.set_scalars(scalars)
            launch()
        elif kind == "route":
            from gemm_ladder.dispatch.execute import run

            run(self.route, a, b, c, epilogue=self.epilogue_call(inputs, scalars, c.device))
        elif kind == "zeros":
            if self.epilogue is None:
                c.zero_()  # the empty sum
            else:  # the epilogue of the empty sum, by its float64 reference (as api.linear's uncached path)
                ep = self.epilogue_call(inputs, scalars, c.device)
                c.copy_(ep.reference(torch.zeros(c.shape, dtype=torch.float64, device=c.device)))

    def launch_bound(self, bind_key: tuple, scalars: tuple = ()) -> bool:
        """Launch this call's bound launch for ``bind_key`` (a's, b's and c's base addresses, the stream
        handle, then the epilogue inputs' addresses: the key :meth:`run` binds under) and return True;
        False, launching nothing, when none is bound for it (then :meth:`run` binds). ``scalars``: the
        epilogue's scalar inputs, written into the bound argument first."""
        launch = self.binds.get(bind_key)
        if launch is None:
            return False
        if scalars:
            launch.set_scalars(scalars)
        launch()
        return True

    def epilogue_call(self, inputs: tuple, scalars: tuple, device: torch.device):
        """This call's epilogue bound to ``inputs`` and ``scalars`` for the (M, N) output (not yet
        oriented: the route does that), or None without one."""
        ep = self.epilogue
        if ep is None:
            return None
        values = dict(zip(ep.tensor_inputs, inputs))
        values.update(zip(ep.scalar_inputs, scalars))
        return ep.bind(values, self.m, self.n, device, check_grad=False)


def raw_stream(device_index: int) -> int:
    """The handle of the current stream of CUDA device ``device_index`` (torch's cheapest way to ask:
    no Stream object is made)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def stream_state(device_index: int) -> tuple[int, bool]:
    """(current stream handle, whether it is capturing a CUDA graph) of device ``device_index``;
    (0, False) for a tensor not on a CUDA device (``get_device()`` = -1: CPU and meta), which no real
    launch is cached for (the checks refuse it). Read on every call: the current stream can change
    between calls, and a capture changes the route (unsplit)."""
    if device_index < 0:
        return 0, False
    return raw_stream(device_index), torch.cuda.is_current_stream_capturing()


def fast_mm_key(a: torch.Tensor, b: torch.Tensor, out_dtype) -> tuple:
    """The fast key of ``mm(a, b, out_dtype=out_dtype)`` for plain tensors a and b (the caller checks
    ``type(t) is torch.Tensor``; see the module docstring). Its first two items are a's and b's base
    addresses and its last two the stream handle and the capture flag (the bound launch's key reads them)."""
    return (a.data_ptr(), b.data_ptr(), a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.device,
            b.device, out_dtype, *stream_state(a.get_device()))


def fast_linear_key(x, w, bias, residual, activation, alpha, beta, out_dtype) -> tuple | None:
    """The fast key of ``linear`` with the built-in epilogue (x, w plain tensors, as
    :func:`fast_mm_key`), or None where the signature would be None (a bias or residual that is not
    a plain tensor, alpha or beta not an int or float: the full checks run). alpha and beta enter by
    type and by what selects the epilogue (alpha != 1, beta == 0), not by value (set at run time)."""
    ta, tb = type(alpha), type(beta)
    if ta not in _REAL or tb not in _REAL or (activation is not None and type(activation) is not str):
        return None
    key = (x.data_ptr(), w.data_ptr(), x.shape, w.shape, x.stride(), w.stride(), x.dtype, w.dtype, x.device,
           w.device, out_dtype, activation, ta, tb, alpha != 1, beta == 0)
    for t in (bias, residual):
        if t is None:
            key += (None,)
        elif type(t) is torch.Tensor:
            key += (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)
        else:
            return None
    return key + stream_state(x.get_device())


def _plain(t) -> bool:
    """A tensor the signatures describe: exactly torch.Tensor, strided and not nested (a sparse, mkldnn or
    nested tensor has no strides or storage to key on: the full checks refuse it, naming its layout)."""
    return type(t) is torch.Tensor and t.layout is torch.strided and not t.is_nested


def _sig(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15)


def mm_key(a, b, out, out_dtype) -> tuple | None:
    """The signature of ``mm(a, b, out=out, out_dtype=out_dtype)``; None when an argument is not a plain
    tensor (the full checks then say why)."""
    if not (_plain(a) and _plain(b)):
        return None
    capturing = torch.cuda.is_current_stream_capturing() if a.is_cuda else False
    if out is None:
        return ("mm", _sig(a), _sig(b), out_dtype, capturing)
    if not _plain(out):
        return None
    return ("mm", _sig(a), _sig(b), out_dtype, capturing, _sig(out), a.data_ptr(), b.data_ptr(), out.data_ptr())


_REAL = (int, float)


def linear_key(x, w, out_dtype, bias=None, residual=None, activation=None, alpha=1.0, beta=1.0) -> tuple | None:
    """The signature of ``linear(x, w, bias, activation=..., residual=..., alpha=..., beta=...,
    out_dtype=...)`` with the built-in epilogue's identity (see the module docstring); None as
    :func:`mm_key` (also for a bias or residual that is not a plain tensor, or an activation that is
    not a str: the full checks then say why)."""
    if not (_plain(x) and _plain(w)):
        return None
    capturing = torch.cuda.is_current_stream_capturing() if x.is_cuda else False
    ta, tb = type(alpha), type(beta)
    if ta not in _REAL or tb not in _REAL:
        return None  # bool, numpy scalars, tensors...: the checks' rules, uncached
    if bias is None and residual is None and activation is None and alpha == 1 and beta == 1:
        return ("linear", _sig(x), _sig(w), out_dtype, capturing)
    if (bias is not None and not _plain(bias)) or (residual is not None and not _plain(residual)) or (
            activation is not None and type(activation) is not str):
        return None
    return ("linear", _sig(x), _sig(w), out_dtype, capturing, activation, ta, tb, alpha != 1, beta == 0,
            None if bias is None else _sig(bias), None if residual is None else _sig(residual))


class CallCache:
    """Checked call signatures and their :class:`Call` (see the module docstring)."""

    def __init__(self, size: int = CALL_CACHE_SIZE) -> None:
        self.size = size
        self._calls: dict[tuple, Call] = {}
        #: fast key (:func:`fast_mm_key`, :func:`fast_linear_key`) -> the Call of its checked signature.
        self.fast: dict[tuple, Call] = {}

    def get(self, key: tuple | None) -> Call | None:
        return None if key is None else self._calls.get(key)

    def put(self, key: tuple | None, call: Call) -> Call:
        """Keep ``call`` under ``key`` (None: not kept), unless its route is the model's choice standing in
        for an autotune timing a later call may make (dispatch/autotune.py ``transient``)."""
        if key is not None and not transient(getattr(call, "route", None)):
            if len(self._calls) >= self.size:
                self.clear()
            self._calls[key] = call
        return call

    def get_or_make(self, key: tuple | None, make) -> Call:
        """The Call of ``key``; on a miss ``make()`` checks and decides it, and it is kept."""
        call = self.get(key)
        return call if call is not None else self.put(key, make())

    def put_fast(self, key: tuple | None, call: Call) -> None:
        """Keep ``call`` under its fast key (made only after its signature was checked); not a transient
        call (see :meth:`put`)."""
        if key is not None and not transient(getattr(call, "route", None)):
            if len(self.fast) >= self.size:
                self.fast.clear()
            self.fast[key] = call

    def clear(self) -> None:
        self._calls.clear()
        self.fast.clear()

    def __len__(self) -> int:
        return len(self._calls)


#: The process's call cache (the API's).
CALLS = CallCache()


def make_call(kind: str, out_shape: tuple[int, ...], out_dtype: torch.dtype, m: int, n: int, k: int,
              route=None, view: bool = True, epilogue=None) -> Call:
    """A :class:`Call`; ``kind`` 'general'/'small_m' routes become 'bound' when every operand and the
    output are read and written in place, else 'route'."""
    if route is not None:
        in_place = route.a_path.workspace is None and route.b_path.workspace is None and route.c_path.workspace is None
        kind = "bound" if in_place else "route"
    return Call(kind, tuple(out_shape), out_dtype, m, n, k, route, view, epilogue=epilogue)


def bind_route(route, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, epilogue=None):
    """The bound launch of an in-place ``route`` on these tensors (a (M, K), b (K, N), c (M, N)): the
    operand views :func:`gemm_ladder.dispatch.execute.run` would give the kernel, bound by its ``bind``;
    ``epilogue`` (an EpilogueCall in c's coordinates, or None) oriented as execute.run orients it."""
    from gemm_ladder.dispatch.route import c_target, in_place_view

    xa, xb = (b.T, a) if route.c_path.transposed else (a, b.T)
    va, vb = in_place_view(xa), in_place_view(xb)
    for v, path in ((va, route.a_path), (vb, route.b_path)):
        assert v is not None and (v.major, v.ld) == (path.major, path.ld), "route and operand disagree"
    from gemm_ladder.library.kernel import Operands

    ep = epilogue.oriented(route.c_path.transposed) if epilogue is not None else None
    return route.family.bind(route.config, Operands(va, vb, c_target(c, route.c_path.transposed), ep),
                             **dict(route.options))


def rows(shape: tuple[int, ...]) -> int:
    """M of a (*, K) operand: the product of its batch dimensions (1 for a 1-D x)."""
    return math.prod(shape)


__all__ = ["BINDS_PER_CALL", "CALLS", "CALL_CACHE_SIZE", "Call", "CallCache", "bind_route", "fast_linear_key",
           "fast_mm_key", "linear_key", "make_call", "mm_key", "rows", "stream_state"]
