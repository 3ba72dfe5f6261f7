"""Many GPUs on the GPU (issue 27): every call runs on its tensors' device and leaves the caller's
current device and driver context as they were (mm, linear with its epilogue, out=, swiglu, the
backward), through the compiled host path and through the Python path; the caches are keyed by
device. With two GPUs: operands on cuda:1 while cuda:0 is current, results equal to torch's on
cuda:1, tensors on two devices refused, one loaded kernel per device.
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder
import gemm_ladder.ops as ops
from gemm_ladder.contract import GemmInputError
from gemm_ladder.runtime import module as rt

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def context() -> int:
    return rt._current_context()


@pytest.fixture(params=["host", "python"])
def path(request):
    """The compiled host path, then the Python one (GEMM_LADDER_HOST=0's), each for the test."""
    if request.param == "host":
        if ops.use_host() is None:
            pytest.fail("the host module did not build on the GPU machine (see the warning)")
        yield "host"
    else:
        was = ops.host_module()
        ops.use_python()
        yield "python"
        if was is not None:
            ops.use_host()


def calls(device):
    """mm, linear with bias + activation + residual, out=, swiglu and a backward on ``device``; each
    result checked against torch on the same device."""
    g = torch.Generator(device=device).manual_seed(0)
    r = lambda *s: torch.randn(*s, device=device, dtype=BF16, generator=g)  # noqa: E731
    a, b, w, bias, res = r(96, 64), r(64, 80), r(80, 64), r(80), r(96, 80)
    ref = (a.double() @ b.double())
    assert (gemm_ladder.mm(a, b).double() - ref).norm() / ref.norm() < 1e-2
    y = gemm_ladder.linear(a, w, bias, activation="gelu", residual=res)
    ref = F.gelu(a.double() @ w.double().T + bias.double()) + res.double()
    assert (y.double() - ref).norm() / ref.norm() < 1e-2 and y.device == a.device
    out = torch.full((96, 80), float("nan"), device=device, dtype=BF16)
    gemm_ladder.mm(a, b, out=out)
    ref = a.double() @ b.double()
    assert (out.double() - ref).norm() / ref.norm() < 1e-2
    wu = r(80, 64)
    s = gemm_ladder.swiglu(a, w, wu)
    ref = F.silu(a.double() @ w.double().T) * (a.double() @ wu.double().T)
    assert s.device == a.device and (s.double() - ref).norm() / ref.norm() < 2e-2
    x = a.clone().requires_grad_()
    wp = torch.nn.Parameter(w.clone())
    gemm_ladder.linear(x, wp, bias).float().square().sum().backward()
    x2 = a.clone().requires_grad_()
    w2 = w.clone().requires_grad_()
    F.linear(x2, w2, bias).float().square().sum().backward()
    for got, want in ((x.grad, x2.grad), (wp.grad, w2.grad)):
        assert (got.double() - want.double()).norm() / want.double().norm() < 3e-2
    torch.cuda.synchronize(device)


def test_one_gpu_leaves_the_current_device_and_context(path):
    torch.cuda.set_device(0)
    before = (torch.cuda.current_device(), context())
    calls(torch.device("cuda", 0))
    assert (torch.cuda.current_device(), context()) == before


def test_caches_are_keyed_by_device(path):
    calls(torch.device("cuda", 0))
    assert rt._loaded and all(isinstance(k[-1], int) and k[-1] >= 0 for k in rt._loaded)
    from gemm_ladder.runtime.workspace import COUNTERS, WORKSPACES

    for key in list(WORKSPACES._buffers) + list(COUNTERS._arenas):
        assert key[0] == 0  # (device, stream handle)
    host = ops.host_module()
    if host is not None:
        a = torch.randn(8, 64, device="cuda:0", dtype=BF16)
        sig = host.mm_signature(a, a.T, None, False)
        words = struct.unpack(f"{len(sig) // 8}q", sig)
        # kind, capturing, out_dtype, then a: dim, 2 sizes, 2 strides, dtype, device, residue mod 16
        assert words[3] == 2 and words[9] == 0


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


@two_gpus
def test_calls_on_the_second_gpu_leave_the_first_current(path):
    torch.cuda.set_device(0)
    before = (torch.cuda.current_device(), context())
    calls(torch.device("cuda", 1))
    assert (torch.cuda.current_device(), context()) == before
    calls(torch.device("cuda", 0))
    assert {k[-1] for k in rt._loaded} >= {0, 1}
    host = ops.host_module()
    if host is not None:
        a0 = torch.randn(8, 64, device="cuda:0", dtype=BF16)
        a1 = a0.to("cuda:1")
        assert host.mm_signature(a0, a0.T, None, False) != host.mm_signature(a1, a1.T, None, False)


@two_gpus
def test_tensors_on_two_gpus_are_refused(path):
    a = torch.randn(8, 64, device="cuda:0", dtype=BF16)
    b = torch.randn(64, 8, device="cuda:1", dtype=BF16)
    with pytest.raises(GemmInputError, match="must be on one device"):
        gemm_ladder.mm(a, b)
    with pytest.raises(GemmInputError, match="must be on one device"):
        gemm_ladder.linear(a, b.T)
    with pytest.raises(GemmInputError, match="bias is on cuda:1"):
        gemm_ladder.linear(a, a, torch.zeros(8, device="cuda:1", dtype=BF16))


@two_gpus
def test_cuda_graph_captured_on_the_second_gpu(path):
    torch.cuda.set_device(0)
    a = torch.randn(256, 128, device="cuda:1", dtype=BF16)
    w = torch.randn(192, 128, device="cuda:1", dtype=BF16)
    gemm_ladder.linear(a, w)  # built and loaded outside the capture
    with torch.cuda.device(1):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            gemm_ladder.linear(a, w)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = gemm_ladder.linear(a, w)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize(1)
    ref = a.double() @ w.double().T
    assert (y.double() - ref).norm() / ref.norm() < 1e-2
    assert torch.cuda.current_device() == 0
