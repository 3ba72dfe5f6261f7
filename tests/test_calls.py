"""The per-call cache (dispatch/calls.py) without a GPU: what a signature holds and what it leaves
out, and that a bound launch is reused only for the exact addresses and stream it was bound to
(launches faked: a counter stands for the kernel)."""

from __future__ import annotations

import pytest
import torch

from gemm_ladder import api
from gemm_ladder.contract import GemmInputError
from gemm_ladder.dispatch import calls
from gemm_ladder.dispatch.calls import BINDS_PER_CALL, Call, CallCache, linear_key, make_call, mm_key

BF16 = torch.bfloat16


def t(*shape, dtype=BF16):
    return torch.empty(shape, dtype=dtype)


def test_mm_signature_reads_layout_and_alignment_not_addresses():
    a, b = t(64, 32), t(32, 16)
    a2, b2 = t(64, 32), t(32, 16)  # other buffers, same layout, 16-byte aligned
    assert mm_key(a, b, None, None) == mm_key(a2, b2, None, None)
    assert mm_key(a, b, None, None) != mm_key(a, b, None, torch.float32)
    assert mm_key(a, b, None, None) != mm_key(a.T.contiguous().T, b, None, None)  # strides
    assert mm_key(a, b, None, None) == mm_key(t(65, 32)[1:], b, None, None)  # base 64 bytes on: same residue
    odd = t(64 * 32 + 1)[1:].view(64, 32)  # 2 bytes past the aligned base: another residue mod 16
    assert mm_key(a, b, None, None) != mm_key(odd, b, None, None)
    assert mm_key(a, b, None, None) != mm_key(a.half(), b.half(), None, None)
    assert mm_key([1], b, None, None) is None and mm_key(a, b, [1], None) is None


def test_with_out_the_signature_holds_every_address():
    # out must not overlap a or b: that rule reads addresses, so a signature with out holds them.
    a, b, out = t(8, 4), t(4, 8), t(8, 8)
    assert mm_key(a, b, out, None) != mm_key(t(8, 4), b, out, None)
    assert mm_key(a, b, out, None) != mm_key(a, b, t(8, 8), None)
    assert mm_key(a, b, out, None) == mm_key(a, b, out, None)


def test_linear_signature():
    x, w = t(2, 3, 8), t(4, 8)
    assert linear_key(x, w, None) == linear_key(t(2, 3, 8), t(4, 8), None)
    assert linear_key(x, w, None) != linear_key(t(6, 8), w, None)
    assert linear_key(x, w, None) != mm_key(x, w, None, None)


class FakeRoute:
    class _Path:
        workspace = None
    a_path = b_path = c_path = _Path()


@pytest.fixture
def fake_launches(monkeypatch):
    stream = {"handle": 1}
    monkeypatch.setattr(calls, "raw_stream", lambda device: stream["handle"])
    bound = []

    def bind(route, a, b, c):
        ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), stream["handle"])
        launched = []
        bound.append((ptrs, launched))
        return lambda: launched.append(ptrs)

    return stream, bound, bind


def test_a_bound_launch_is_reused_only_for_its_addresses_and_stream(fake_launches):
    stream, bound, bind = fake_launches
    call = make_call("route", (8, 8), BF16, 8, 8, 4, route=FakeRoute())
    assert call.kind == "bound"
    a, b, c = t(8, 4), t(4, 8), t(8, 8)
    for _ in range(3):
        call.run(a, b, c, bind=bind)
    assert len(bound) == 1 and len(bound[0][1]) == 3  # bound once, launched three times
    a2 = t(8, 4)
    call.run(a2, b, c, bind=bind)  # new address of a: a new binding (its tensor map embeds the address)
    assert len(bound) == 2 and bound[1][0][0] == a2.data_ptr()
    call.run(a, b, t(8, 8), bind=bind)  # new output address
    assert len(bound) == 3
    stream["handle"] = 2
    call.run(a, b, c, bind=bind)  # same tensors, another stream
    assert len(bound) == 4
    stream["handle"] = 1
    call.run(a, b, c, bind=bind)  # back: the first binding again
    assert len(bound) == 4 and len(bound[0][1]) == 4
    for ptrs, launched in bound:
        assert all(p == ptrs for p in launched)  # every launch ran with the addresses it was bound to


def test_bindings_are_bounded(fake_launches):
    _, bound, bind = fake_launches
    call = make_call("route", (8, 8), BF16, 8, 8, 4, route=FakeRoute())
    b, c = t(4, 8), t(8, 8)
    keep = [t(8, 4) for _ in range(BINDS_PER_CALL + 3)]
    for a in keep:
        call.run(a, b, c, bind=bind)
    assert len(call.binds) <= BINDS_PER_CALL


def test_routes_with_workspaces_are_not_bound():
    class Route(FakeRoute):
        class _Ws:
            workspace = (8, 8)
        a_path = _Ws()
    assert make_call("route", (8, 8), BF16, 8, 8, 4, route=Route()).kind == "route"
    assert make_call("zeros", (8, 8), BF16, 8, 8, 0).kind == "zeros"


def test_call_cache_is_bounded_and_keyless_calls_are_not_kept():
    cache = CallCache(size=2)
    entry = Call("empty", (0, 4), BF16, 0, 4, 3)
    for i in range(3):
        cache.put(("k", i), entry)
    assert len(cache) <= 2 and cache.get(("k", 2)) is entry
    cache.put(None, entry)
    assert cache.get(None) is None


def test_a_refused_call_is_not_cached():
    before = len(calls.CALLS)
    for _ in range(2):  # refused every time: nothing was kept that would let it through
        with pytest.raises(GemmInputError, match="a must be on a cuda"):
            api.mm_direct(t(4, 8), t(8, 4))
    assert len(calls.CALLS) == before
