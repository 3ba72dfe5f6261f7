"""The fast key of a repeated eager call (dispatch.calls, "The fast key"): never reuses a stale entry."""

import pytest
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
    import gemm_ladder.ops  # noqa: F401 - registers the ops with the API (api._OPS)

    # The API reaches the registered ops through what gemm_ladder.ops handed it (it does not import ops).
    monkeypatch.setattr(api, "_OPS", (lambda *args, **kw: seen.append(args) or "op", *api._OPS[1:]))
    assert api.mm(a, b) == "op" and len(runs) == 1
    with torch.no_grad():
        api.mm(a, b)
    assert len(runs) == 2
    calls.CALLS.clear()
    assert not calls.CALLS.fast


# --- the ops' kernels (api.mm_op / api.linear_op) on the same fast path -----------------------------------


class _Path:
    workspace = None
    transposed = False


class _Route:
    a_path = b_path = c_path = _Path()


@pytest.fixture
def op_on_cpu(monkeypatch):
    """The ops' CUDA kernels registered for CPU too (and as the Autograd kernel's direct call for CPU),
    with the GPU parts faked as bench/host_overhead.py --fake-gpu does: the stream handle a constant, a
    bound launch a recorder. The checked construction of a Call (api._mm_call / api._linear_call) is
    replaced by a counter (its checks refuse CPU tensors); ``state['refuse']`` makes it raise."""
    from gemm_ladder import ops
    from gemm_ladder.contract import GemmInputError
    from gemm_ladder.library.epilogue import linear_epilogue

    state = {"checks": 0, "launches": [], "refuse": False}

    def checked(kind):
        def make(*args):
            state["checks"] += 1
            if state["refuse"]:
                raise GemmInputError("refused by the test")
            x, w = args[0], args[1]
            m, k = (x.shape[0], x.shape[1]) if kind == "mm" else (x.numel() // x.shape[-1], x.shape[-1])
            n = w.shape[1] if kind == "mm" else w.shape[0]
            ep = None
            if kind == "linear" and args[2] is not None:
                ep = linear_epilogue(bias=True, activation=None, residual=False, alpha=False)
            return calls.Call("bound", (m, n) if kind == "mm" else (*x.shape[:-1], n), x.dtype, m, n, k, _Route(),
                              epilogue=ep)
        return make

    monkeypatch.setattr(api, "_mm_call", checked("mm"))
    monkeypatch.setattr(api, "_linear_call", checked("linear"))
    monkeypatch.setattr(calls, "raw_stream", lambda device: 0)
    monkeypatch.setattr(calls, "bind_route", lambda route, a, b, c, epilogue=None: (
        lambda: state["launches"].append((a.data_ptr(), b.data_ptr()))))
    lib = torch.library.Library("gemm_ladder", "IMPL")
    lib.impl("mm", ops._mm_cuda, "CPU")
    lib.impl("linear", ops._linear_cuda, "CPU")
    cpu = torch._C.DispatchKey.CPU
    direct = state["direct"] = []  # the Autograd kernel's direct calls
    ops.DIRECT_KERNELS["mm"][cpu] = lambda *args, **kw: direct.append("mm") or ops._mm_cuda(*args, **kw)
    ops.DIRECT_KERNELS["linear"][cpu] = lambda *args, **kw: direct.append("linear") or ops._linear_cuda(*args, **kw)
    ops.clear_direct_kernels()
    calls.CALLS.clear()
    yield state
    calls.CALLS.clear()
    del ops.DIRECT_KERNELS["mm"][cpu], ops.DIRECT_KERNELS["linear"][cpu]
    ops.clear_direct_kernels()  # else the CPU key set's decision would outlive this registration
    lib._destroy()


def test_op_kernel_makes_a_fast_entry_only_after_the_checks(op_on_cpu):
    state = op_on_cpu
    a, b = t(8, 4), t(4, 8)
    state["refuse"] = True
    with pytest.raises(ValueError, match="refused by the test"):
        torch.ops.gemm_ladder.mm(a, b)
    assert not calls.CALLS.fast and len(calls.CALLS) == 0  # nothing kept for a refused call
    state["refuse"] = False
    c = torch.ops.gemm_ladder.mm(a, b)
    assert c.shape == (8, 8) and state["checks"] == 2 and len(calls.CALLS.fast) == 1
    for _ in range(3):  # repeated: the fast entry, no checks, one launch each
        torch.ops.gemm_ladder.mm(a, b)
    assert state["checks"] == 2 and len(state["launches"]) == 4
    assert all(launch == (a.data_ptr(), b.data_ptr()) for launch in state["launches"])
    a2 = t(8, 4)  # other addresses, same signature: the checked signature's Call, a new fast entry and bind
    torch.ops.gemm_ladder.mm(a2, b)
    assert state["checks"] == 2 and len(calls.CALLS.fast) == 2 and state["launches"][-1][0] == a2.data_ptr()
    # The eager call shares the op's fast entry (the same key, the same checked Call).
    api.mm(a, b)
    assert state["checks"] == 2 and len(calls.CALLS.fast) == 2 and state["launches"][-1][0] == a.data_ptr()


def test_op_kernel_fast_key_reads_the_stream_and_capture_state(op_on_cpu, monkeypatch):
    state = op_on_cpu
    stream = {"now": (0, False)}
    monkeypatch.setattr(calls, "stream_state", lambda device: stream["now"])
    a, b = t(8, 4), t(4, 8)
    torch.ops.gemm_ladder.mm(a, b)
    stream["now"] = (7, False)  # another current stream: not the first stream's fast entry
    torch.ops.gemm_ladder.mm(a, b)
    stream["now"] = (0, True)  # capturing: not the eager entry either
    torch.ops.gemm_ladder.mm(a, b)
    assert len(calls.CALLS.fast) == 3 and state["checks"] == 1  # (the faked signature has no capture flag)


def test_op_kernel_never_keeps_a_fast_entry_for_an_uncached_signature(op_on_cpu):
    state = op_on_cpu
    a, b = t(8, 4), torch.nn.Parameter(t(4, 8), requires_grad=False)  # not a plain tensor: no signature
    for _ in range(3):
        torch.ops.gemm_ladder.mm(a, b)
    assert state["checks"] == 3 and not calls.CALLS.fast


def test_autograd_kernel_direct_call_records_nothing_and_grad_goes_to_the_generated_kernel(op_on_cpu):
    state = op_on_cpu
    a, b = t(8, 4), t(4, 8)
    c = torch.ops.gemm_ladder.mm(a, b)  # grad mode on, nothing requires grad: the direct call
    assert c.grad_fn is None and not c.requires_grad and len(calls.CALLS.fast) == 1 and state["direct"] == ["mm"]
    ag = a.clone().requires_grad_(True)
    with torch.no_grad():  # grad mode off: the direct call too
        c = torch.ops.gemm_ladder.mm(ag, b)
    assert c.grad_fn is None and not c.requires_grad and state["direct"] == ["mm", "mm"]
    launches = len(state["launches"])
    c = torch.ops.gemm_ladder.mm(ag, b)  # recorded: torch's generated kernel, then the CPU kernel below it
    assert c.requires_grad and c.grad_fn is not None and state["direct"] == ["mm", "mm"]
    assert len(state["launches"]) == launches + 1  # ... which ran the same checked call
    assert state["checks"] == 1 and len(calls.CALLS.fast) == 2  # ag: the signature checked, a new fast key
    with torch.inference_mode():  # no Autograd key at all: the CPU kernel itself
        torch.ops.gemm_ladder.mm(a, b)
    assert state["direct"] == ["mm", "mm"] and state["checks"] == 1


def test_linear_op_kernel_fast_path_with_bias(op_on_cpu):
    state = op_on_cpu
    x, w, bias = t(2, 3, 4), t(8, 4), t(8)
    y = torch.ops.gemm_ladder.linear(x, w, bias)
    assert y.shape == (2, 3, 8) and state["checks"] == 1 and len(calls.CALLS.fast) == 1
    torch.ops.gemm_ladder.linear(x, w, bias, alpha=2.0)  # alpha != 1: another epilogue, checked
    assert state["checks"] == 2
    torch.ops.gemm_ladder.linear(x, w, bias)
    torch.ops.gemm_ladder.linear(x, w, t(8))  # another bias address: a new fast key, the same signature
    assert state["checks"] == 2 and len(calls.CALLS.fast) == 3
    y = torch.ops.gemm_ladder.linear(x, w, bias)
    assert y.grad_fn is None and state["checks"] == 2 and state["direct"] == ["linear"] * 5
