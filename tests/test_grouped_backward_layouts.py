"""The grouped ops' backward on layouts the forward takes but whose transposes and gradients break the
kernel's TMA rules as they stand (N = 12: a gradient's row pitch of 24 bytes; 3 rows per batch: a batched
contraction of 6 bytes), without a GPU: the kernel replaced by test_grouped_swiglu.py's CPU stand-in, which
applies the kernel's own rules (check_grouped_mm) to every call first, so a backward call the kernel would
refuse fails here. Gradients against float64 autograd of the same values; eager and compiled (aot_eager)."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.api_grouped import with_aligned_pitch as aligned_rows

from test_grouped_swiglu import _reference, cpu_kernel  # noqa: F401 (the fixture)

BF = torch.bfloat16


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def _check_grads(ours, ref, tol=2e-2):
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert o.grad is not None and o.grad.shape == o.shape and o.grad.dtype == o.dtype, i
        err = (o.grad.double() - r.grad).norm() / r.grad.norm()
        assert err < tol, (i, float(err))


def _run(fn, compiled, *args):
    return (torch.compile(fn, fullgraph=True, backend="aot_eager") if compiled else fn)(*args)


def _per_group_reference(x, w, offs):
    out, start = [], 0
    for e, end in enumerate(offs.tolist()):
        out.append(x[start:end] @ w[e].T)
        start = end
    return torch.cat(out)


@pytest.mark.parametrize("op", ["grouped_mm", "grouped_linear"])
@pytest.mark.parametrize("compiled", [False, True])
def test_rows_grouped_along_m_with_n_12(cpu_kernel, compiled, op):
    """2-D x 3-D, a weight of N = 12 (K-major for grouped_mm, nn.Linear's for grouped_linear): grad_x reads
    grad_y (R, 12) and grad_w is grouped along K over it."""
    torch.manual_seed(0)
    offs = torch.tensor([5, 5, 12, 20]).to(torch.int32)
    x, w = _leaves(torch.randn(20, 16).to(BF), (torch.randn(4, 12, 16) / 4).to(BF))
    fn = {"grouped_mm": lambda x, w, o: gemm_ladder.grouped_mm(x, w.transpose(-2, -1), o),
          "grouped_linear": lambda x, w, o: gemm_ladder.grouped_linear(x, w, o)}[op]
    y = _run(fn, compiled, x, w, offs)
    xr, wr = _leaves(x.double(), w.double())
    ref = _per_group_reference(xr, wr, offs)
    gy = torch.randn(y.shape, dtype=torch.float64)
    y.backward(gy.to(BF))
    ref.backward(gy)
    _check_grads((x, w), (xr, wr))


@pytest.mark.parametrize("m, n", [(3, 16), (8, 12), (5, 12)], ids=["M=3", "N=12", "M=5 N=12"])
@pytest.mark.parametrize("compiled", [False, True])
def test_batched_grouped_mm_with_short_rows(cpu_kernel, compiled, m, n):
    """3-D x 3-D: grad_b contracts over M (3 or 5 rows a batch), grad_a over N (12): padded with zeros."""
    torch.manual_seed(2)
    a, w = _leaves(torch.randn(4, m, 16).to(BF), (torch.randn(4, n, 16) / 4).to(BF))
    y = _run(lambda a, w: gemm_ladder.grouped_mm(a, w.transpose(-2, -1)), compiled, a, w)
    ar, wr = _leaves(a.double(), w.double())
    ref = ar @ wr.transpose(-2, -1)
    gy = torch.randn(y.shape, dtype=torch.float64)
    y.backward(gy.to(BF))
    ref.backward(gy)
    _check_grads((a, w), (ar, wr))


def test_grouped_swiglu_with_n_12(cpu_kernel):
    torch.manual_seed(3)
    offs = torch.tensor([4, 4, 11, 20]).to(torch.int32)
    x, wg, wu = _leaves(torch.randn(20, 16).to(BF), *((torch.randn(4, 12, 16) / 4).to(BF) for _ in range(2)))
    out = gemm_ladder.grouped_swiglu(x, wg, wu, offs)
    ref, leaves = _reference(x, wg, wu, offs)
    gy = torch.randn(out.shape, dtype=torch.float64)
    out.backward(gy.to(BF))
    ref.backward(gy)
    _check_grads((x, wg, wu), leaves)


def test_aligned_rows_keeps_an_aligned_operand_and_pads_the_rest():
    t = torch.randn(5, 12, dtype=BF)
    v = aligned_rows(t)
    assert v.shape == (5, 12) and v.stride() == (16, 1) and torch.equal(v, t)
    assert aligned_rows(v) is v  # already a 16-byte pitch: no copy
    ok = torch.randn(5, 16, dtype=BF)
    assert aligned_rows(ok) is ok
    col = torch.randn(12, 5, dtype=BF).t()  # column-major: copied row-major
    assert aligned_rows(col).stride(1) == 1 and torch.equal(aligned_rows(col), col)
