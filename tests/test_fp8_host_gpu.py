"""scaled_mm on the compiled host path, on the GPU: a functional call launched from C++ (one launch per
call, counted; one planner call per signature) writes bit for bit what the Python path writes for every
scaling, output dtype, tile height, split and bias, and is float64-right; what the planner leaves to
Python (a bf16 bias, a strided rowwise scale, the quantized output, out=, K = 0) launches nothing from
C++ and is right too; a default changed between calls is planned anew; bad input raises the library's
errors through C++; a call from a new thread and a CUDA-graph capture work.

Outputs are poisoned (the allocator's free blocks filled with NaN) before each call; inputs are fresh
random tensors for every check.
"""

from __future__ import annotations

import threading

import pytest
import torch

import gemm_ladder
import gemm_ladder.ops_fp8 as ops_fp8
from fp8_cases import fp8_problem, rel_err
from test_host_gpu import host, poison  # noqa: F401 - host: the module fixture
from gemm_ladder.errors import GemmInputError
from gemm_ladder.library import fp8

pytestmark = pytest.mark.gpu
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def python_path(*args, **kwargs):
    """The same call with the host entry switched off (library/fp8.py scaled_mm_launch)."""
    with ops_fp8.python_launch():
        return gemm_ladder.scaled_mm(*args, **kwargs)


def counted(host, fn):
    launches, plans = host.launches(), host.planner_calls()
    y = fn()
    torch.cuda.synchronize()
    return y, host.launches() - launches, host.planner_calls() - plans


#: (M, N, K): decode on 64-row tiles (M = 1 and 7: blockwise scale_a padded per call by C++), split
#: along K (64 tiles, 56 K blocks); 300 rows with M, N and K tails; prefill on 128-row tiles.
SHAPES = [(1, 4096, 4096), (7, 2048, 1024), (64, 4096, 7168), (300, 1000, 1040), (2048, 3072, 1024)]


#: (output dtype, bias dtype): bf16 with and without a float32 bias, fp16 and fp32 without.
OUTPUTS = [(BF16, None), (BF16, FP32), (FP16, None), (FP32, None)]


@pytest.mark.parametrize("out_dtype,bias", OUTPUTS, ids=["bf16", "bf16-fp32bias", "fp16", "fp32"])
@pytest.mark.parametrize("mode", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cpp_launch_is_the_python_launch_bit_for_bit(host, shape, mode, out_dtype, bias):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = fp8_problem(m, n, k, mode, seed=m + n)
    b = None if bias is None else torch.randn(n, device="cuda", dtype=bias)
    ref = da @ dw.T + (0 if b is None else b.double())
    poison((m, n), FP32)
    y, launched, _ = counted(host, lambda: gemm_ladder.scaled_mm(qa, qb, sa, sb, bias=b, out_dtype=out_dtype))
    assert launched == 1 and y.dtype == out_dtype and y.shape == (m, n)
    assert not torch.isnan(y).any(), "an output element was not written"
    assert rel_err(y, ref) <= 1.5 * rel_err(ref.to(out_dtype), ref) + 2e-3
    poison((m, n), FP32)
    y_py, launched, _ = counted(host, lambda: python_path(qa, qb, sa, sb, bias=b, out_dtype=out_dtype))
    assert launched == 0
    assert torch.equal(y.view(torch.uint8), y_py.view(torch.uint8))


def test_one_plan_per_signature_and_new_activations_every_call(host):
    n, k = 2048, 1024
    _, qb, _, sb, _, dw = fp8_problem(64, n, k, "blockwise", seed=3)
    plans = 0
    for i in range(6):
        qa, _, sa, _, da, _ = fp8_problem(64, n, k, "blockwise", seed=100 + i)
        poison((64, n), FP32)
        y, launched, planned = counted(host, lambda: gemm_ladder.scaled_mm(qa, qb, sa, sb))
        plans += planned
        assert launched == 1
        assert rel_err(y, da @ dw.T) < 1e-2
    assert plans <= 1


def test_a_default_changed_between_calls_is_planned_anew(host, monkeypatch):
    qa, qb, sa, sb, da, dw = fp8_problem(48, 4096, 2048, "rowwise", seed=5)
    assert gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)["tile"]["BM"] == 64
    y64, _, _ = counted(host, lambda: gemm_ladder.scaled_mm(qa, qb, sa, sb))
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "128")
    y128, launched, planned = counted(host, lambda: gemm_ladder.scaled_mm(qa, qb, sa, sb))
    assert launched == 1 and planned == 1
    y_py = python_path(qa, qb, sa, sb)
    assert torch.equal(y128.view(torch.int16), y_py.view(torch.int16))
    assert rel_err(y64, da @ dw.T) < 1e-2 and rel_err(y128, da @ dw.T) < 1e-2


@pytest.mark.parametrize("case", ["bf16 bias", "strided rowwise scale", "quantized output", "out=", "K = 0"])
def test_what_the_planner_leaves_to_python_is_right_and_launches_nothing_from_cpp(host, case):
    m, n, k = 128, 512, 256 if case != "K = 0" else 0
    mode = "rowwise" if case == "strided rowwise scale" else "blockwise"
    if k:
        qa, qb, sa, sb, da, dw = fp8_problem(m, n, k, mode, seed=9)
        ref = da @ dw.T
    else:
        qa, qb = torch.empty(m, 0, device="cuda").to(torch.float8_e4m3fn), torch.empty(0, n, device="cuda").to(
            torch.float8_e4m3fn)
        sa, sb, ref = torch.ones(m, 0, device="cuda"), torch.ones(0, 4, device="cuda"), torch.zeros(m, n).double()
    kwargs = {}
    if case == "bf16 bias":
        kwargs["bias"] = torch.randn(n, device="cuda", dtype=BF16)
        ref = ref + kwargs["bias"].double()
    if case == "strided rowwise scale":
        sa = torch.cat([sa, sa], 1)[:, :1]
        assert not sa.is_contiguous()
    if case == "quantized output":
        kwargs["out_dtype"] = torch.float8_e4m3fn
    if case == "out=":
        kwargs["out"] = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
    y, launched, _ = counted(host, lambda: gemm_ladder.scaled_mm(qa, qb, sa, sb, **kwargs))
    assert launched == 0
    if case == "quantized output":
        values, scales = y
        y = values.double() * scales.double().repeat_interleave(128, 1)[:, :n]
    if k:
        # e4m3 values round to 3 mantissa bits (half an ulp: 2^-4 of a value) in the quantized output
        assert rel_err(y, ref.cuda()) < (7e-2 if case == "quantized output" else 2e-2)
    else:
        assert torch.equal(y.double().cpu(), ref)


def test_bad_input_raises_the_library_errors_through_cpp(host):
    qa, qb, sa, sb, _, _ = fp8_problem(64, 256, 512, "rowwise", seed=2)
    with pytest.raises(GemmInputError, match="K differs"):
        gemm_ladder.scaled_mm(qa, qb[:256], sa, sb)
    with pytest.raises(GemmInputError, match="match no scaling"):
        gemm_ladder.scaled_mm(qa, qb, sa[:32], sb)
    with pytest.raises(GemmInputError, match="same device|one device"):
        gemm_ladder.scaled_mm(qa, qb, sa.cpu(), sb)
    assert gemm_ladder.scaled_mm(qa, qb, sa, sb).shape == (64, 256)  # a refused call kept nothing


def test_a_call_from_a_new_thread(host):
    qa, qb, sa, sb, da, dw = fp8_problem(16, 4096, 4096, "tensorwise", seed=4)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("y", gemm_ladder.scaled_mm(qa, qb, sa, sb)))
    t.start()
    t.join()
    torch.cuda.synchronize()
    assert rel_err(out["y"], da @ dw.T) < 1e-2


def test_capture_and_replay(host):
    m, n, k = 64, 4096, 7168  # split when eager; a capture runs unsplit
    qa, qb, sa, sb, _, dw = fp8_problem(m, n, k, "blockwise", seed=6)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gemm_ladder.scaled_mm(qa, qb, sa, sb)  # loads the build outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    launches, plans = host.launches(), host.planner_calls()
    with torch.cuda.graph(graph):
        y = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    # captured from C++, planned under its own key (capturing: unsplit)
    assert (host.launches() - launches, host.planner_calls() - plans) == (1, 1)
    for i in range(3):
        qa2, _, sa2, _, da2, _ = fp8_problem(m, n, k, "blockwise", seed=60 + i)
        qa.copy_(qa2)
        sa.copy_(sa2)
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(y, da2 @ dw.T) < 1e-2
