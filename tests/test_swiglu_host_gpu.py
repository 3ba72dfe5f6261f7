"""swiglu's C++ kernel (the compiled host path) on the GPU: each public call as a model makes it (nn.Parameter
weights under no_grad, a fresh activation every call) bit for bit the Python path's launch and within bound of
float64, on every path (the small-M gated build, the fused kernel with and without its stream-K tail, batched x; the
paths that stay in Python: the small-M pair, a padded output); one planner call per signature and one C++ launch
per call where ``explain_swiglu`` says C++; inputs requiring grad refused through the public function and through
the op; a bad call refused before any launch; a CUDA graph captured and replayed on new values; a call from a thread
with no current context.

Outputs are poisoned (the allocator's free blocks filled with NaN) before each call.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder
from gemm_ladder.api import swiglu_direct
from gemm_ladder.errors import GemmInputError, NotSupportedError
from host_gpu import host, poison  # noqa: F401 - host: the module fixture
from host_gpu import seed as _seed

pytestmark = pytest.mark.gpu
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def ref(x, wg, wu):
    x = x.reshape(-1, x.shape[-1]).double()
    return F.silu(x @ wg.double().T) * (x @ wu.double().T)


def rel(got, want):
    g = got.reshape(-1, got.shape[-1]).double()
    assert not g.isnan().any(), "an output element was not written"
    return float((g - want).norm() / want.norm().clamp_min(1e-30))


def weights(n, k, dtype=BF16):
    return [torch.nn.Parameter(torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5) for _ in range(2)]


# (x's shape, N): the gated build at 1, 48 and 15 (batched) rows; the fused kernel at 1000 and 4096 rows (N 1024
# leaves a stream-K tail at 1000 rows on 132 SMs); 160 rows (the small-M pair where the device's threshold takes
# it, else the fused kernel); a padded output (N 1001)
CASES = [((1, 1024), 4096), ((48, 512), 1536), ((3, 5, 512), 768), ((1000, 512), 1024), ((4096, 1024), 2048),
         ((160, 512), 2048), ((300, 256), 1001)]


@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("shape,n", CASES, ids=[f"{'x'.join(map(str, s))}-{n}" for s, n in CASES])
def test_swiglu_on_the_host_matches_the_python_path_bitwise(host, dtype, shape, n):
    seed = _seed()
    k = shape[-1]
    wg, wu = weights(n, k, dtype)
    info = gemm_ladder.explain_swiglu(torch.empty(shape, device="cuda", dtype=dtype), wg, wu)
    on_cpp = info["host"].startswith("C++")
    # the small-M pair (160 rows where this device's threshold takes it) and a padded output stay in Python
    assert on_cpp == (info["path"] in ("small_m_gated", "fused") and n % 8 == 0), info
    host.clear()  # planned afresh here, whatever ran before in this process
    before = (host.planner_calls(), host.launches())
    with torch.no_grad():
        for _ in range(3):  # fresh activations: new addresses, one signature
            x = torch.randn(shape, device="cuda", dtype=dtype)
            poison(x.numel() // k, n)
            got = gemm_ladder.swiglu(x, wg, wu)
            want = swiglu_direct(x, wg.detach(), wu.detach())
            assert got.shape == (*shape[:-1], n) and torch.equal(got, want), f"seed {seed}"
            assert rel(got, ref(x, wg, wu)) < 1e-2, f"seed {seed}"
    assert host.planner_calls() - before[0] == 1, "one planner call per signature"
    assert host.launches() - before[1] == (3 if on_cpp else 0), "one C++ launch per call on the C++ paths"


def test_a_changed_setting_is_planned_again(host, monkeypatch):
    from gemm_ladder.dispatch import swiglu_small_m

    wg, wu = (w.detach() for w in weights(1536, 512))
    x = torch.randn(16, 512, device="cuda", dtype=BF16)
    with torch.no_grad():
        gemm_ladder.swiglu(x, wg, wu)  # planned with the gated build in one launch
        before = host.launches()
        assert gemm_ladder.explain_swiglu(x, wg, wu)["path"] == "small_m_gated"
        monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", False)  # now the pair, launched from Python
        assert gemm_ladder.explain_swiglu(x, wg, wu)["path"] == "small_m_pair"
        got = gemm_ladder.swiglu(x, wg, wu)
    assert host.launches() == before, "the template planned before the change was dropped"
    assert torch.equal(got, swiglu_direct(x, wg, wu))


def test_inputs_requiring_grad_are_refused_through_the_function_and_the_op(host):
    wg, wu = weights(256, 128)
    x = torch.randn(64, 128, device="cuda", dtype=BF16)
    before = host.launches()
    with pytest.raises(NotSupportedError):
        gemm_ladder.swiglu(x, wg, wu)
    for _ in range(2):  # the planner raises each time: nothing is kept for that signature
        with pytest.raises(NotSupportedError):
            torch.ops.gemm_ladder.swiglu(x, wg, wu)
    assert host.launches() == before
    with torch.no_grad():
        assert torch.equal(torch.ops.gemm_ladder.swiglu(x, wg, wu), swiglu_direct(x, wg.detach(), wu.detach()))
    assert host.launches() == before + 1


def test_a_bad_call_raises_the_library_error_before_any_launch(host):
    x = torch.randn(64, 128, device="cuda", dtype=BF16)
    w = torch.randn(256, 128, device="cuda", dtype=BF16)
    before = host.launches()
    with pytest.raises(GemmInputError, match="dtype"):
        gemm_ladder.swiglu(x, w, w.to(FP16))
    with pytest.raises(GemmInputError, match="shape|K"):
        torch.ops.gemm_ladder.swiglu(x, w, w[:, :64])
    with pytest.raises(GemmInputError, match="device"):
        torch.ops.gemm_ladder.swiglu(x, w, w.cpu())
    assert host.launches() == before


@pytest.mark.parametrize("m", [16, 2048])
def test_graph_capture_replays_new_values(host, m):
    seed = _seed()
    wg, wu = (w.detach() for w in weights(1024, 512))
    x = torch.randn(m, 512, device="cuda", dtype=BF16)
    with torch.no_grad():
        gemm_ladder.swiglu(x, wg, wu)  # warm: the build loaded
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = gemm_ladder.swiglu(x, wg, wu)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(y, swiglu_direct(x, wg, wu)), f"seed {seed}"


def test_a_call_from_a_thread_with_no_current_context(host):
    wg, wu = (w.detach() for w in weights(1024, 256))
    x = torch.randn(300, 256, device="cuda", dtype=BF16)
    want = swiglu_direct(x, wg, wu)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("y", gemm_ladder.swiglu(x, wg, wu)))
    t.start()
    t.join()
    torch.cuda.synchronize()
    assert torch.equal(got["y"], want)
