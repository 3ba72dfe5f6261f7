"""The grouped kernel's fused gated-MLP build (``grouped_gemm(256, "k", swiglu=True)``) on the GPU: against a
float64 reference per group with empty, one-row and unaligned groups, N not a multiple of 128 and a K tail
(the error rule of tests/test_grouped_swiglu_gpu.py), rows past offs[E-1] left as they were, bitwise
repeatable, close to the two-GEMM forward; and the public call taking it where the switch is on and no
backward is needed (eager, torch.compile(fullgraph=True), CUDA-graph replay), the two GEMMs where a
backward is. Run on the H200: ``python3 -m pytest -q -m gpu tests/test_grouped_swiglu_fused_gpu.py``."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
import gemm_ladder.ops_grouped_swiglu as gs
from gemm_ladder.gates.correctness import UNIT_ROUNDOFF
from test_grouped_swiglu_gpu import DEV, NK, SIZES, _operands, _seed, assert_groups_close

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]


def _fused(x, wg, wu, offs, out=None):
    """One launch of the fused build into ``out`` (default a NaN-poisoned one)."""
    if out is None:
        out = torch.full((x.shape[0], wg.shape[1]), float("nan"), dtype=x.dtype, device=DEV)
    gs.fused_kernel().launch_swiglu(x, wg, wu, offs, out)
    return out


@pytest.mark.parametrize("sizes,n,k", [(s, n, k) for s in SIZES for n, k in NK])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_build_matches_float64(dtype, sizes, n, k):
    seed = _seed()
    x, wg, wu, offs = _operands(sizes, n, k, dtype)
    assert_groups_close(_fused(x, wg, wu, offs), x, wg, wu, offs, seed)


def test_rows_past_the_last_group_are_not_written_and_repeats_are_bitwise():
    x, wg, wu, offs = _operands([37, 0, 129, 64], 320, 264, torch.bfloat16)
    t = x.shape[0]
    x = torch.cat([x, torch.randn(50, x.shape[1], dtype=x.dtype, device=DEV)])  # 50 rows in no group
    first = _fused(x, wg, wu, offs)
    assert first[t:].isnan().all() and torch.isfinite(first[:t]).all()
    for _ in range(3):
        assert torch.equal(_fused(x, wg, wu, offs)[:t], first[:t])


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_is_close_to_the_two_gemm_forward(dtype):
    x, wg, wu, offs = _operands([300, 5, 0, 700, 1, 64], 768, 2048, dtype)
    fused = _fused(x, wg, wu, offs).double()
    two = gs.grouped_swiglu_direct(x, wg, wu, offs)[0].double()
    u = UNIT_ROUNDOFF["bf16" if dtype == torch.bfloat16 else "fp16"]
    # Both accumulate in fp32 and round once; they differ by SiLU's form (ex2.approx in the kernel, torch's
    # expf) and the summation order of the two GEMMs' tiles: a rounding step at most.
    assert ((fused - two).abs() <= 2 * u * two.abs() + 1e-6).all()


def test_public_call_takes_the_fused_build_without_a_backward(monkeypatch):
    monkeypatch.setattr(gs, "FUSED_DEFAULT", True)
    x, wg, wu, offs = _operands([40, 0, 130, 1, 85], 256, 512, torch.bfloat16)
    assert gemm_ladder.explain_grouped_swiglu(x, wg, wu, offs)["path"] == "fused"
    want = _fused(x, wg, wu, offs)
    assert torch.equal(gemm_ladder.grouped_swiglu(x, wg, wu, offs), want)
    compiled = torch.compile(lambda *a: gemm_ladder.grouped_swiglu(*a), fullgraph=True)
    assert torch.equal(compiled(x, wg, wu, offs), want)
    graph, out = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):
        out = gemm_ladder.grouped_swiglu(x, wg, wu, offs)
    x2 = torch.randn_like(x)
    x.copy_(x2)
    graph.replay()
    assert torch.equal(out, _fused(x2, wg, wu, offs))
    xg = x.detach().clone().requires_grad_()  # a backward: the two GEMMs, whose gate and up it reads
    assert gemm_ladder.explain_grouped_swiglu(xg, wg, wu, offs)["path"] == "two_grouped_gemms"
    y = gemm_ladder.grouped_swiglu(xg, wg, wu, offs)
    y.float().sum().backward()
    assert xg.grad is not None and torch.isfinite(xg.grad[:256]).all()
