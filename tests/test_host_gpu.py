"""The compiled host path on the GPU (issue 21): what a model passes (nn.Parameter weights, a new
activation every call, grad on and off), every built-in epilogue, the C++ autograd against torch's,
torch.compile (fullgraph, dynamic) forward and backward, CUDA-graph trees (mode="reduce-overhead"),
a graph captured with torch.cuda.graph, one planner call per signature, and an exported program
loaded after ``import torch, gemm_ladder`` in a fresh process.

Outputs are poisoned (the allocator's next blocks filled with NaN) and compared with a float64
reference; inputs are fresh random tensors on every call.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder
from host_gpu import host  # noqa: F401 - the module fixture

pytestmark = pytest.mark.gpu
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def poison(shape=(), dtype=BF16):
    """Fill the caching allocator's free blocks with NaN (a large one, and several of the output's
    size, which the small pool hands back for a small output): an output element the kernel does not
    write stays NaN."""
    blocks = [torch.full((64 << 20,), float("nan"), device="cuda", dtype=FP32)]
    blocks += [torch.full(shape, float("nan"), device="cuda", dtype=dtype) for _ in range(8)]
    del blocks


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(y).any(), "an output element was not written"
    return ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def reference(x, w, bias=None, residual=None, activation=None, alpha=1.0, beta=1.0):
    z = alpha * (x.double() @ w.double().T) + (0 if bias is None else bias.double())
    z = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
         "silu": F.silu}[activation](z)
    return z + (0 if residual is None else beta * residual.double())


EPILOGUES = [
    {},
    {"bias": BF16},
    {"bias": FP32, "activation": "gelu"},
    {"activation": "relu"},
    {"bias": BF16, "activation": "gelu_tanh"},
    {"activation": "silu", "alpha": 0.5},
    {"residual": BF16, "beta": 0.75},
    {"bias": BF16, "activation": "gelu", "residual": FP32, "alpha": 2.0, "beta": -1.0},
    {"residual": BF16, "beta": 0.0},
]


@pytest.mark.parametrize("shape", [(7, 512, 256), (300, 768, 512), (2, 64, 1024, 384)], ids=str)
@pytest.mark.parametrize("ep", EPILOGUES, ids=lambda e: "+".join(f"{k}={v}" for k, v in e.items()) or "plain")
@pytest.mark.parametrize("grad", [False, True])
def test_linear_with_parameters_and_fresh_activations(host, shape, ep, grad):
    *lead, n, k = shape
    w = torch.nn.Parameter(torch.randn(n, k, device="cuda", dtype=BF16) / k ** 0.5)
    bias = (torch.nn.Parameter(torch.randn(n, device="cuda", dtype=ep["bias"])) if "bias" in ep else None)
    for _ in range(4):  # a new activation (and residual) every call
        x = torch.randn(*lead, k, device="cuda", dtype=BF16)
        res = torch.randn(*lead, n, device="cuda", dtype=ep["residual"]) if "residual" in ep else None
        kw = {key: ep[key] for key in ("activation", "alpha", "beta") if key in ep}
        poison((*lead, n))
        with torch.set_grad_enabled(grad):
            y = gemm_ladder.linear(x, w, bias, residual=res, **kw)
        assert y.shape == (*lead, n) and y.dtype == BF16 and (y.grad_fn is not None) == grad
        ref = reference(x, w.detach(), None if bias is None else bias.detach(), res, kw.get("activation"),
                        kw.get("alpha", 1.0), kw.get("beta", 1.0))
        assert rel_err(y.detach(), ref) < 1e-2


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (16, 4096, 4096), (4097, 4095, 4096), (333, 1000, 1024)],
                         ids=str)
def test_mm_with_parameters_and_fresh_activations(host, shape):
    m, n, k = shape
    w = torch.nn.Parameter(torch.randn(n, k, device="cuda", dtype=BF16) / k ** 0.5)
    for _ in range(3):
        a = torch.randn(m, k, device="cuda", dtype=BF16)
        poison((m, n))
        c = gemm_ladder.mm(a, w.T)
        assert rel_err(c, a.double() @ w.detach().double().T) < 1e-2
        poison((m, n), FP32)
        c32 = gemm_ladder.mm(a, w.T, out_dtype=FP32)
        assert c32.dtype == FP32 and rel_err(c32, a.double() @ w.detach().double().T) < 1e-2


def test_one_planner_call_per_signature(host):
    w = torch.nn.Parameter(torch.randn(1024, 512, device="cuda", dtype=BF16))
    b = torch.nn.Parameter(torch.randn(1024, device="cuda", dtype=BF16))
    gemm_ladder.linear(torch.randn(64, 512, device="cuda", dtype=BF16), w, b, activation="gelu")
    before = host.planner_calls()
    keep = []
    for i in range(50):  # new activations, held so that their addresses differ
        x = torch.randn(64, 512, device="cuda", dtype=BF16)
        keep.append(x)
        gemm_ladder.linear(x, w, b, activation="gelu")
    assert host.planner_calls() == before
    assert len({t.data_ptr() for t in keep}) == 50
    e = gemm_ladder.explain(keep[0], w.detach().T)
    assert e.host.startswith("C++") and "host:" in str(e)


def _linear_grads(fn, x, w, bias, res, g):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, bias, res)]
    fn(*leaves).backward(g)
    return [t.grad for t in leaves]


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_autograd_against_torch(host, activation):
    x = torch.randn(3, 100, 256, device="cuda", dtype=BF16)
    w = torch.randn(384, 256, device="cuda", dtype=BF16) / 16
    bias = torch.randn(384, device="cuda", dtype=BF16)
    res = torch.randn(3, 100, 384, device="cuda", dtype=BF16)
    g = torch.randn(3, 100, 384, device="cuda", dtype=BF16)
    kw = dict(activation=activation, alpha=0.5, beta=2.0)
    ours = _linear_grads(lambda x, w, b, r: gemm_ladder.linear(x, w, b, residual=r, **kw), x, w, bias, res, g)
    ref = _linear_grads(lambda x, w, b, r: reference(x, w, b, r, **kw), x.double(), w.double(), bias.double(),
                        res.double(), g.double())
    for name, o, r in zip(("x", "w", "bias", "residual"), ours, ref):
        assert o.dtype == BF16, name
        assert rel_err(o, r) < 2e-2, name
    assert "LinearFunction" in gemm_ladder.linear(x.requires_grad_(), w, bias).grad_fn.name()


def test_compile_fullgraph_dynamic_forward_and_backward(host):
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).cuda().to(BF16)
    exact = copy.deepcopy(model).double()  # torch's layers in float64, before ours replace them in place
    gemm_ladder.nn.replace_linear(model)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for m in (33, 64, 100):
        x = torch.randn(m, 256, device="cuda", dtype=BF16, requires_grad=True)
        y = compiled(x)
        y.float().square().mean().backward()
        x2 = x.detach().clone().requires_grad_()
        y2 = model(x2)  # our eager layers: the compiled graph runs the same kernels
        y2.float().square().mean().backward()
        x64 = x.detach().double().requires_grad_()
        y64 = exact(x64)
        y64.square().mean().backward()
        assert rel_err(y.detach(), y2.detach().double()) < 2e-2
        assert rel_err(x.grad, x2.grad.double()) < 5e-2
        assert rel_err(y.detach(), y64.detach()) < 2e-2 and rel_err(x.grad, x64.grad) < 5e-2  # against float64


@pytest.mark.parametrize("tokens", [8, 300])
def test_reduce_overhead_replays_and_matches(host, tokens):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(4096, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 4096)).cuda()
    model = model.to(BF16)
    exact = copy.deepcopy(model).double()  # torch's layers in float64, before ours replace them in place
    gemm_ladder.nn.replace_linear(model)
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for i in range(6):  # warm-up, record, then replays, each on a new input
            x = torch.randn(tokens, 4096, device="cuda", dtype=BF16)
            before = host.launches()
            y = compiled(x).clone()
            launched = host.launches() - before
            assert rel_err(y, model(x).double()) < 1e-2  # the replay computes what our eager layers do
            assert rel_err(y, exact(x.double())) < 2e-2  # and that is right, against float64
            if i >= 3:  # replays: the graph runs, no call reaches the op's kernel
                assert launched == 0, f"call {i} launched {launched} kernels from C++: not a replay"
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_torch_cuda_graph_capture_and_replay(host):
    w = torch.randn(2048, 1024, device="cuda", dtype=BF16) / 32
    b = torch.randn(2048, device="cuda", dtype=BF16)
    x = torch.randn(16, 1024, device="cuda", dtype=BF16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gemm_ladder.linear(x, w, b, activation="relu")  # plans and loads outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = gemm_ladder.linear(x, w, b, activation="relu")
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(y, reference(x, w, b, activation="relu")) < 1e-2


def test_exported_program_loads_after_import_gemm_ladder(host, tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(256, 128, device="cuda", dtype=BF16))

        def forward(self, x):
            return torch.ops.gemm_ladder.linear(x, self.w, None, None, activation="gelu")

    x = torch.randn(32, 128, device="cuda", dtype=BF16)
    path = tmp_path / "gl.pt2"
    torch.export.save(torch.export.export(M(), (x,)), path)
    code = ("import torch, gemm_ladder\n"
            f"ep = torch.export.load({str(path)!r})\n"
            "x = torch.randn(32, 128, device='cuda', dtype=torch.bfloat16)\n"
            "print(tuple(ep.module()(x).shape))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "(32, 256)" in r.stdout, r.stderr[-3000:]


# --- calls from threads with no CUDA context current -------------------------------------------------

_THREADS = r"""
import os, threading, torch, gemm_ladder, gemm_ladder.ops as ops
from gemm_ladder import host
assert ops.use_host() is not None, (host.mode(), host.describe(), torch.cuda.is_available(), os.environ.get("GEMM_LADDER_HOST_CACHE"))
torch.manual_seed(1)
a = torch.randn(300, 264, device="cuda", dtype=torch.bfloat16)
b = torch.randn(264, 520, device="cuda", dtype=torch.bfloat16)
w = torch.randn(520, 264, device="cuda", dtype=torch.bfloat16)
out = {}
def run():
    out["mm"] = gemm_ladder.mm(a, b)  # a fresh thread: no context current until the call makes one
    out["linear"] = gemm_ladder.linear(a, w)
t = threading.Thread(target=run); t.start(); t.join()
x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
gemm_ladder.mm(x, y).backward(torch.ones(300, 520, device="cuda", dtype=torch.bfloat16))  # the autograd thread
torch.cuda.synchronize()
ref = a.double() @ b.double()
for name, got, want in (("mm", out["mm"], ref), ("linear", out["linear"], a.double() @ w.double().T),
                        ("grad_b", y.grad, a.double().T @ torch.ones(300, 520, device="cuda", dtype=torch.float64))):
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, (name, err)
print("OK")
"""


@pytest.mark.timeout(120)
def test_calls_from_threads_with_no_context_current(host):
    """A thread that has not called the CUDA runtime has no driver context current (c10's device guard
    does not set one for the device already 'current'): the host path makes the primary context current
    before its driver calls. Before that every such call segfaulted, the backward of mm on the autograd
    engine's device thread among them (bench/results/logs/2026-12-04_device_host_thread_segfault_smallm_fp8_be836b8.log).
    In a fresh process, so a crash fails this test instead of the session."""
    # The child loads this process's build of the host module (a test's private kernel cache would make it
    # build another), and must use it: GEMM_LADDER_HOST=require raises, with the reason, where it would not.
    env = dict(os.environ, GEMM_LADDER_HOST="require", GEMM_LADDER_HOST_CACHE=str(Path(host.__file__).parent.parent))
    r = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, timeout=110, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
