"""grouped_mm grouped along N (3-D x 2-D) and the backward of the cases grouped along K and N, on the GPU.

Fresh random normal operands each check (the seed printed on failure); outputs poisoned first (a NaN block of
the output's size freed just before the call, which the caching allocator hands back). Values per group against
float64 of the same inputs, within twice torch's own error of the same product plus a unit roundoff; gradients
against float64 autograd by relative Frobenius error. Covered: b column-major (read in place) and row-major
(copied), K not a multiple of 8, empty and one-column groups, columns past offs[E-1] (not written; zero
gradient), fp16 and bf16, a float32 output, bitwise repeatability, torch.compile(fullgraph=True) and a CUDA
graph replayed on new routing.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_grouped_along_n_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.api_grouped import padded_pitch
from gemm_ladder.gates.correctness import UNIT_ROUNDOFF

from test_grouped_gpu import _offs, _poison, _seed

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]


def _problem(e, m, k, n, dtype, b_cols):
    a = torch.randn(e, m, k, device="cuda", dtype=dtype)
    if b_cols:  # w.t() of a row-major (N, K) weight: read in place
        return a, (torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5).t()
    return a, torch.randn(k, n, device="cuda", dtype=dtype) / k**0.5


def _check_along_n(out, a, b, sizes, seed):
    """out[:, N_e] against a[e] @ b[:, N_e] in float64, each group within twice torch's error + a roundoff."""
    start = 0
    for e, size in enumerate(sizes):
        if size == 0:
            continue
        cols = slice(start, start + size)
        ref = a[e].double() @ b[:, cols].double()
        theirs = (a[e] @ b[:, cols]).double()
        eps = 2**-24 if out.dtype == torch.float32 else UNIT_ROUNDOFF[{torch.bfloat16: "bf16", torch.float16: "fp16"}[a.dtype]]
        bound = 2 * float((theirs - ref).norm() / ref.norm()) + eps
        err = float((out[:, cols].double() - ref).norm() / ref.norm())
        assert err <= bound, (seed, e, err, bound)
        start += size


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes, m, k, b_cols", [
    ([300, 0, 1, 517, 130], 200, 256, True),
    ([64, 64, 0, 191], 97, 320, False),
    ([5, 1000, 7], 33, 72, True),
    ([129, 0, 255], 64, 100, False),  # K = 100: a's rows copied to a 16-byte pitch
], ids=["cols", "rows", "skewed", "K=100"])
def test_grouped_along_n_matches_reference(dtype, sizes, m, k, b_cols):
    seed = _seed()
    a, b = _problem(len(sizes), m, k, sum(sizes), dtype, b_cols)
    offs = _offs(sizes)
    _poison((sum(sizes), m), dtype)
    out = gemm_ladder.grouped_mm(a, b, offs)
    assert out.shape == (m, sum(sizes)) and out.stride(0) == 1
    _check_along_n(out, a, b, sizes, seed)
    again = gemm_ladder.grouped_mm(a, b, offs)
    assert torch.equal(out, again), seed  # bitwise repeatable


def test_grouped_along_n_fp32_out_and_columns_past_offs():
    seed = _seed()
    a, b = _problem(3, 40, 128, 200, torch.bfloat16, True)
    offs = torch.tensor([50, 50, 170], dtype=torch.int32, device="cuda")  # columns 170..199 in no group
    out = gemm_ladder.grouped_mm(a, b, offs, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    _check_along_n(out[:, :170], a, b[:, :170], [50, 0, 120], seed)


@pytest.mark.parametrize("b_cols", [True, False], ids=["b cols", "b rows"])
def test_grouped_along_n_backward(b_cols):
    seed = _seed()
    sizes = [130, 0, 77, 300]
    a, b = _problem(len(sizes), 96, 128, 520, torch.bfloat16, b_cols)  # 13 columns past offs[E-1]
    a, b = a.requires_grad_(), b.detach().requires_grad_()
    offs = torch.tensor([130, 130, 207, 507], dtype=torch.int32, device="cuda")
    y = gemm_ladder.grouped_mm(a, b, offs)
    gy = torch.randn(96, 507, device="cuda", dtype=torch.float64)
    y[:, :507].backward(gy.to(torch.bfloat16))
    ar, br = (t.detach().double().requires_grad_() for t in (a, b))
    ends = [0, 130, 130, 207, 507]
    ref = torch.cat([ar[e] @ br[:, s:t] for e, (s, t) in enumerate(zip(ends, ends[1:]))], dim=1)
    ref.backward(gy)
    for ours, want in ((a, ar), (b, br)):
        err = float((ours.grad.double() - want.grad).norm() / want.grad.norm())
        assert err < 1e-2, (seed, err)
    assert torch.equal(b.grad[:, 507:], torch.zeros_like(b.grad[:, 507:])), seed


@pytest.mark.parametrize("m, n", [(64, 128), (37, 100)], ids=["aligned", "padded pitches"])
def test_grouped_along_k_backward(m, n):
    """y[e] = x[K_e].t() @ g[K_e] (the weight gradient's layout), differentiated; K past offs[E-1] gets zeros.
    x and b in buffers of 16-byte pitches (the forward's rule) where M and N are not multiples of 8, so the
    gradient's own (E, M, N) rows are not: the backward copies them to a 16-byte pitch."""
    seed = _seed()
    sizes = [200, 0, 1, 311]
    total_k = sum(sizes) + 9
    x, b = (padded_pitch(torch.randn(total_k, c, device="cuda", dtype=torch.bfloat16)).requires_grad_()
            for c in (m, n))
    offs = _offs(sizes)
    y = gemm_ladder.grouped_mm(x.t(), b, offs)
    gy = torch.randn(y.shape, device="cuda", dtype=torch.float64)
    y.backward(gy.to(torch.bfloat16))
    xr, br = (t.detach().double().requires_grad_() for t in (x, b))
    ends = [0, *offs.tolist()]
    torch.stack([xr[s:t].t() @ br[s:t] for s, t in zip(ends, ends[1:])]).backward(gy)
    for ours, want in ((x, xr), (b, br)):
        err = float((ours.grad.double() - want.grad).norm() / want.grad.norm())
        assert err < 1e-2, (seed, err)
        assert torch.equal(ours.grad[sum(sizes):], torch.zeros_like(ours.grad[sum(sizes):])), seed


def test_grouped_along_n_compiles_and_replays_in_a_cuda_graph():
    seed = _seed()
    a, b = _problem(4, 64, 128, 384, torch.bfloat16, True)
    offs = _offs([100, 0, 200, 84])
    fn = torch.compile(lambda a, b, o: gemm_ladder.grouped_mm(a, b, o), fullgraph=True)
    assert torch.equal(fn(a, b, offs), gemm_ladder.grouped_mm(a, b, offs)), seed
    static = gemm_ladder.grouped_mm(a, b, offs)  # warm: the build loaded before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = gemm_ladder.grouped_mm(a, b, offs)
    offs.copy_(_offs([10, 300, 0, 74]))  # new routing, same graph
    graph.replay()
    torch.cuda.synchronize()
    _check_along_n(static, a, b, [10, 300, 0, 74], seed)
