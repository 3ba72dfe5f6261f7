"""The fast key of a repeated eager call (dispatch.calls, "The fast key"): never reuses a stale entry."""

import torch

from gemm_ladder import api
from gemm_ladder.dispatch import calls


def t(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


def test_fast_key_changes_with_address_stream_capture_dtype_and_layout(monkeypatch):
    state = {"stream": (1, False)}
    monkeypatch.setattr(calls, "stream_state", lambda device: state["stream"])
    a, b = t(8, 4), t(4, 8)
    k = calls.fast_mm_key(a, b, None)
    assert k == calls.fast_mm_key(a, b, None)
    assert k != calls.fast_mm_key(t(8, 4), b, None)  # another address of a
    assert k != calls.fast_mm_key(a, t(4, 8), None)  # of b
    assert k != calls.fast_mm_key(a.half(), b, None)  # dtype
    assert k != calls.fast_mm_key(a, b, torch.float32)  # out_dtype
    assert k != calls.fast_mm_key(a, b.T.contiguous().T, None)  # strides
    state["stream"] = (2, False)
    assert k != calls.fast_mm_key(a, b, None)  # another current stream
    state["stream"] = (1, True)
    assert k != calls.fast_mm_key(a, b, None)  # capturing


def test_fast_linear_key_rules():
    x, w, bias = t(8, 4), t(8, 4), t(8)
    key = lambda **kw: calls.fast_linear_key(x, w, kw.get("bias"), kw.get("residual"), kw.get("activation"),
                                             kw.get("alpha", 1.0), kw.get("beta", 1.0), None)
    assert key(alpha=True) is None and key(activation=["relu"]) is None and key(bias=[1.0]) is None
    assert key(alpha=1) != key(alpha=1.0)  # the type is a rule
    assert key(bias=bias) != key(bias=t(8))  # bias address: in the bound EpilogueParams
    assert key(alpha=2.0) == key(alpha=3.0)  # the value is set at run time


def test_fast_path_runs_the_checked_call_and_grad_goes_to_the_op(monkeypatch):
    calls.CALLS.clear()
    a, b = t(8, 4), t(4, 8)
    runs = []

    class Call:
        kind, out_shape, out_dtype = "route", (8, 8), torch.bfloat16

        def run(self, *args):
            runs.append(args)

    calls.CALLS.fast[calls.fast_mm_key(a, b, None)] = Call()
    c = api.mm(a, b)
    assert c.shape == (8, 8) and len(runs) == 1 and runs[0][0] is a
    a.requires_grad_(True)  # autograd must record: the op path, never the cached direct call
    seen = []
    from gemm_ladder import ops

    monkeypatch.setattr(ops, "mm", lambda *args, **kw: seen.append(args) or "op")
    assert api.mm(a, b) == "op" and len(runs) == 1
    with torch.no_grad():
        api.mm(a, b)
    assert len(runs) == 2
    calls.CALLS.clear()
    assert not calls.CALLS.fast
