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

Both caches are cleared when full (a model calls a few dozen signatures; a bound launch holds a few
hundred bytes) and by :func:`clear`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

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

    def run(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bind=None) -> None:
        """``c = a @ b`` for operands of this signature (a (M, K), b (K, N), c (M, N)).

        ``bind(route, a, b, c)`` makes a bound launch (dispatch's :func:`bind_route`; injectable so that
        the cache's keying is testable without a GPU)."""
        kind = self.kind
        if kind == "bound":
            key = (a.data_ptr(), b.data_ptr(), c.data_ptr(), raw_stream(c.get_device()))
            launch = self.binds.get(key)
            if launch is None:
                if len(self.binds) >= BINDS_PER_CALL:
                    self.binds.clear()
                launch = self.binds[key] = (bind or bind_route)(self.route, a, b, c)
            launch()
        elif kind == "route":
            from gemm_ladder.dispatch.execute import run

            run(self.route, a, b, c)
        elif kind == "zeros":
            c.zero_()  # the empty sum


def raw_stream(device_index: int) -> int:
    """The handle of the current stream of CUDA device ``device_index`` (torch's cheapest way to ask:
    no Stream object is made)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def _sig(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15)


def mm_key(a, b, out, out_dtype) -> tuple | None:
    """The signature of ``mm(a, b, out=out, out_dtype=out_dtype)``; None when an argument is not a plain
    tensor (the full checks then say why)."""
    if type(a) is not torch.Tensor or type(b) is not torch.Tensor:
        return None
    capturing = torch.cuda.is_current_stream_capturing() if a.is_cuda else False
    if out is None:
        return ("mm", _sig(a), _sig(b), out_dtype, capturing)
    if type(out) is not torch.Tensor:
        return None
    return ("mm", _sig(a), _sig(b), out_dtype, capturing, _sig(out), a.data_ptr(), b.data_ptr(), out.data_ptr())


def linear_key(x, w, out_dtype) -> tuple | None:
    """The signature of ``linear(x, w, out_dtype=out_dtype)`` (no epilogue); None as :func:`mm_key`."""
    if type(x) is not torch.Tensor or type(w) is not torch.Tensor:
        return None
    capturing = torch.cuda.is_current_stream_capturing() if x.is_cuda else False
    return ("linear", _sig(x), _sig(w), out_dtype, capturing)


class CallCache:
    """Checked call signatures and their :class:`Call` (see the module docstring)."""

    def __init__(self, size: int = CALL_CACHE_SIZE) -> None:
        self.size = size
        self._calls: dict[tuple, Call] = {}

    def get(self, key: tuple | None) -> Call | None:
        return None if key is None else self._calls.get(key)

    def put(self, key: tuple | None, call: Call) -> Call:
        if key is not None:
            if len(self._calls) >= self.size:
                self._calls.clear()
            self._calls[key] = call
        return call

    def clear(self) -> None:
        self._calls.clear()

    def __len__(self) -> int:
        return len(self._calls)


#: The process's call cache (the API's).
CALLS = CallCache()


def make_call(kind: str, out_shape: tuple[int, ...], out_dtype: torch.dtype, m: int, n: int, k: int,
              route=None, view: bool = True) -> Call:
    """A :class:`Call`; ``kind`` 'general'/'small_m' routes become 'bound' when every operand and the
    output are read and written in place, else 'route'."""
    if route is not None:
        in_place = route.a_path.workspace is None and route.b_path.workspace is None and route.c_path.workspace is None
        kind = "bound" if in_place else "route"
    return Call(kind, tuple(out_shape), out_dtype, m, n, k, route, view)


def bind_route(route, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
    """The bound launch of an in-place ``route`` on these tensors (a (M, K), b (K, N), c (M, N)): the
    operand views :func:`gemm_ladder.dispatch.execute.run` would give the kernel, bound by its ``bind``."""
    from gemm_ladder.dispatch.route import c_target, in_place_view

    xa, xb = (b.T, a) if route.c_path.transposed else (a, b.T)
    va, vb = in_place_view(xa), in_place_view(xb)
    for v, path in ((va, route.a_path), (vb, route.b_path)):
        assert v is not None and (v.major, v.ld) == (path.major, path.ld), "route and operand disagree"
    return route.kernel.bind(va, vb, c_target(c, route.c_path.transposed), **dict(route.options))


def rows(shape: tuple[int, ...]) -> int:
    """M of a (*, K) operand: the product of its batch dimensions (1 for a 1-D x)."""
    return math.prod(shape)


__all__ = ["BINDS_PER_CALL", "CALLS", "CALL_CACHE_SIZE", "Call", "CallCache", "bind_route", "linear_key",
           "make_call", "mm_key", "rows"]
