"""grouped_mm grouped along N (3-D x 2-D) and the backward of the cases grouped along K and N, without a GPU:
the kernel replaced by test_grouped_swiglu.py's CPU stand-in, which applies the kernel's own rules
(check_grouped_mm) to every call it gets (so a transposed operand the kernel would refuse fails here) and
leaves NaN where the kernel leaves rows unwritten. Values against float64 of the same inputs, per group;
gradients against float64 autograd; eager and compiled (aot_eager, fullgraph). The refusals, the fake's
strides and explain on meta tensors."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.api_grouped import (
    along_n_operands, check_grouped_mm, explain_grouped_mm, grouped_mm_direct, padded_pitch,
)
from gemm_ladder.errors import GemmInputError

from test_grouped_swiglu import cpu_kernel  # noqa: F401 (the fixture)

BF = torch.bfloat16


def _offs(sizes) -> torch.Tensor:
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32)


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def _run(fn, compiled, *args):
    return (torch.compile(fn, fullgraph=True, backend="aot_eager") if compiled else fn)(*args)


def _along_n_reference(a, b, sizes):
    """(M, sum(sizes)): a[e] @ b[:, group e's columns], float64."""
    ends = [0, *_offs(sizes).tolist()]
    return torch.cat([a[e] @ b[:, s:t] for e, (s, t) in enumerate(zip(ends, ends[1:]))], dim=1)


def _along_k_reference(a, b, sizes):
    """(E, M, N): a[:, group e's K] @ b[group e's K], float64."""
    ends = [0, *_offs(sizes).tolist()]
    return torch.stack([a[:, s:t] @ b[s:t] for s, t in zip(ends, ends[1:])])


def _rel(x, ref):
    return float((x.detach().double() - ref.detach()).norm() / ref.detach().norm().clamp_min(1e-30))


# A row-major b (copied: its transpose's rows are not contiguous), a column-major one (w.t() of an (N, K) weight,
# read in place), K = 12 (a's rows to a 16-byte pitch), and an empty group.
CASES = {
    "b row-major": dict(m=5, k=16, sizes=[3, 0, 9, 4], b_cols=False),
    "b column-major": dict(m=8, k=24, sizes=[7, 1, 8], b_cols=True),
    "K=12": dict(m=3, k=12, sizes=[4, 4, 0, 8], b_cols=True),
}


def _problem(m, k, sizes, b_cols, seed=0):
    torch.manual_seed(seed)
    n = sum(sizes)
    a = torch.randn(len(sizes), m, k).to(BF)
    b = (torch.randn(n, k) / k**0.5).to(BF).t() if b_cols else (torch.randn(k, n) / k**0.5).to(BF)
    return a, b


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_along_n_forward_and_backward(cpu_kernel, case, compiled):
    """y[:, N_e] = a[e] @ b[:, N_e] and its gradients: grad_a grouped along K over N, grad_b grouped along N."""
    c = CASES[case]
    a, b = _leaves(*_problem(**c))
    offs = _offs(c["sizes"])
    y = _run(lambda a, b, o: gemm_ladder.grouped_mm(a, b, o), compiled, a, b, offs)
    ar, br = _leaves(a.double(), b.double())
    ref = _along_n_reference(ar, br, c["sizes"])
    assert y.shape == ref.shape and y.dtype == BF
    assert y.stride(0) == 1  # the kernel's (N, M) output, transposed
    assert _rel(y, ref) < 1e-2
    gy = torch.randn(ref.shape, dtype=torch.float64)
    y.backward(gy.to(BF))
    ref.backward(gy)
    for ours, want in ((a, ar), (b, br)):
        assert ours.grad.shape == ours.shape and ours.grad.dtype == BF
        assert torch.isfinite(ours.grad).all()
        assert _rel(ours.grad, want.grad) < 2e-2


def test_grouped_along_n_leaves_columns_past_the_last_group_and_zeroes_their_gradient(cpu_kernel):
    """offs ends before b's last column: those output columns are not written (NaN from the stand-in, as the
    kernel leaves them) and b's columns there, read by no product, get a zero gradient, not the NaN."""
    a, b = _leaves(*_problem(m=4, k=16, sizes=[3, 5, 6], b_cols=True))
    offs = torch.tensor([3, 5, 9], dtype=torch.int32)  # columns 9..13 in no group
    y = gemm_ladder.grouped_mm(a, b, offs)
    assert torch.isnan(y[:, 9:].float()).all() and torch.isfinite(y[:, :9].float()).all()
    y[:, :9].float().sum().backward()
    assert torch.equal(b.grad[:, 9:], torch.zeros_like(b.grad[:, 9:]))
    ar, br = _leaves(a.double(), b.double())
    _along_n_reference(ar, br[:, :9], [3, 2, 4]).sum().backward()
    assert _rel(b.grad[:, :9], br.grad[:, :9]) < 2e-2 and _rel(a.grad, ar.grad) < 2e-2


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("m, n, sizes", [(8, 16, [5, 0, 9, 2]), (5, 12, [8, 3, 5])], ids=["aligned", "M=5 N=12"])
def test_grouped_along_k_backward(cpu_kernel, compiled, m, n, sizes):
    """y[e] = a[:, K_e] @ b[K_e] (the weight gradient's layout: a = x.t()), differentiated: grad_a and grad_b each
    grouped along M over K's rows; an empty group's out[e] is zeros and passes no gradient."""
    torch.manual_seed(4)
    total_k = sum(sizes)
    # a = x.t(): stride(0) == 1, as the kernel reads it; x and b with 16-byte pitches (the forward's rule), so that
    # M = 5 and N = 12 leave the gradients' own pitches (10 and 24 bytes) to the backward.
    x, b = (padded_pitch(torch.randn(total_k, c).to(BF)).requires_grad_() for c in (m, n))
    offs = _offs(sizes)
    y = _run(lambda x, b, o: gemm_ladder.grouped_mm(x.t(), b, o), compiled, x, b, offs)
    xr, br = _leaves(x.double(), b.double())
    ref = _along_k_reference(xr.t(), br, sizes)
    assert _rel(y, ref) < 1e-2
    gy = torch.randn(ref.shape, dtype=torch.float64)
    y.backward(gy.to(BF))
    ref.backward(gy)
    for ours, want in ((x, xr), (b, br)):
        assert ours.grad.shape == ours.shape and torch.isfinite(ours.grad).all()
        assert _rel(ours.grad, want.grad) < 2e-2


def test_grouped_along_k_zeroes_the_gradient_past_the_last_group(cpu_kernel):
    """K past offs[E-1] is read by no product: its rows of grad_a's transpose and of grad_b are zeros (the
    kernel grouped along M leaves them unwritten: NaN from the stand-in)."""
    torch.manual_seed(5)
    x, b = _leaves(torch.randn(20, 8).to(BF), torch.randn(20, 16).to(BF))
    offs = torch.tensor([4, 4, 13], dtype=torch.int32)
    gemm_ladder.grouped_mm(x.t(), b, offs).float().sum().backward()
    assert torch.equal(x.grad[13:], torch.zeros_like(x.grad[13:]))
    assert torch.equal(b.grad[13:], torch.zeros_like(b.grad[13:]))
    assert torch.isfinite(x.grad).all() and torch.isfinite(b.grad).all()


def test_along_n_operands_read_in_place_or_copy():
    """The transposition's operands: views where the kernel reads them in place, a copy (named) otherwise."""
    a = torch.randn(3, 5, 16).to(BF)
    w = torch.randn(40, 16).to(BF)
    rows, weights, copies = along_n_operands(a, w.t())
    assert rows.data_ptr() == w.data_ptr() and weights.data_ptr() == a.data_ptr() and copies == ()
    rows, weights, copies = along_n_operands(a, w.t().contiguous())
    assert rows.stride() == (16, 1) and [c.split()[0] for c in copies] == ["b"]
    a12 = torch.randn(3, 5, 12).to(BF)
    rows, weights, copies = along_n_operands(a12, torch.randn(40, 12).to(BF).t())
    assert weights.shape == (3, 12, 5) and weights.stride(1) == 1 and weights.stride(2) == 16
    assert [c.split()[0] for c in copies] == ["b", "a"]  # K = 12: b.t()'s pitch and a's rows both padded


def test_fake_gives_the_kernels_strides_and_explain_names_the_case():
    a = torch.empty(4, 24, 64, dtype=BF, device="meta")
    b = torch.empty(96, 64, dtype=BF, device="meta").t()
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    y = torch.ops.gemm_ladder.grouped_mm(a, b, offs)
    assert y.shape == (24, 96) and y.stride() == (1, 24)
    assert gemm_ladder.grouped_mm(a, b, offs).stride() == (1, 24)
    info = explain_grouped_mm(a, b, offs)
    assert info["case"] == "3d2d" and info["grouped_along"] == "N" and info["copies"] == ()
    assert info["b_major"] == "k" and info["tile"][1] in (128, 256)
    info = explain_grouped_mm(a, b.t().contiguous().t().contiguous(), offs)
    assert [c.split()[0] for c in info["copies"]] == ["b"]
    assert gemm_ladder.explain_grouped_mm(a, b, offs)["host"].startswith("python")


def test_grouped_along_n_refusals():
    a = torch.empty(4, 24, 64, dtype=BF, device="meta")
    b = torch.empty(64, 96, dtype=BF, device="meta")
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    assert check_grouped_mm(a, b, offs, device_types=("meta",)) == ("3d2d", BF)
    with pytest.raises(GemmInputError, match="offs is required"):
        check_grouped_mm(a, b, None, device_types=("meta",))
    with pytest.raises(GemmInputError, match=r"shape \(4,\)"):
        check_grouped_mm(a, b, offs[:3], device_types=("meta",))
    with pytest.raises(GemmInputError, match="contraction"):
        check_grouped_mm(a, b[:32], offs, device_types=("meta",))
    with pytest.raises(GemmInputError, match="CUDA device"):
        check_grouped_mm(a, b, offs)
    with pytest.raises(GemmInputError, match="not 3d2d"):
        explain_grouped_mm(a, b, offs, activation="relu")
    with pytest.raises(GemmInputError, match="grouped along N"):
        explain_grouped_mm(a, b, offs, bias=torch.empty(4, 96, dtype=BF, device="meta"))
    with pytest.raises(GemmInputError, match="CUDA device"):  # the direct call checks first: nothing launched
        grouped_mm_direct(torch.zeros(4, 24, 64, dtype=BF), torch.zeros(64, 96, dtype=BF), torch.zeros(4, dtype=torch.int32))


def test_the_reviews_layouts_differentiate(cpu_kernel):
    """Layouts a review found the first backward refusing: grouped along K with M = 1 (grad_b's weight a single row
    of K, N-major), with N = 1 and an expanded gradient (y.sum(): every stride 0), and grouped along N with b
    column-major at a base 2 bytes past a 16-byte boundary under torch.compile (traced with no address: the
    storage offset decides the copy)."""
    offs = torch.tensor([8, 16], dtype=torch.int32)
    x = padded_pitch(torch.randn(16, 1).to(BF)).requires_grad_()
    b = torch.randn(16, 8).to(BF).requires_grad_()
    gemm_ladder.grouped_mm(x.t(), b, offs).float().sum().backward()
    xr, br = _leaves(x.double(), b.double())
    _along_k_reference(xr.t(), br, [8, 8]).sum().backward()
    assert _rel(x.grad, xr.grad) < 2e-2 and _rel(b.grad, br.grad) < 2e-2
    x = torch.randn(16, 8).to(BF).requires_grad_()
    b1 = padded_pitch(torch.randn(16, 1).to(BF)).requires_grad_()
    gemm_ladder.grouped_mm(x.t(), b1, offs).sum().backward()
    xr, br = _leaves(x.double(), b1.double())
    _along_k_reference(xr.t(), br, [8, 8]).sum().backward()
    assert _rel(x.grad, xr.grad) < 2e-2 and _rel(b1.grad, br.grad) < 2e-2
    w = torch.zeros(24 * 24 + 1, dtype=BF)[1:].view(24, 24)[:, :16]
    w.copy_(torch.randn(24, 16))
    b = w.t().detach().requires_grad_()
    a = torch.randn(3, 8, 16).to(BF).requires_grad_()
    o3 = torch.tensor([8, 16, 24], dtype=torch.int32)
    _run(lambda a, b, o: gemm_ladder.grouped_mm(a, b, o), True, a, b, o3).float().sum().backward()
    ar, br = _leaves(a.double(), b.double())
    _along_n_reference(ar, br, [8, 8, 8]).sum().backward()
    assert _rel(a.grad, ar.grad) < 2e-2 and _rel(b.grad, br.grad) < 2e-2


def test_explain_copies_nothing():
    """explain on tensors says which operands the call would copy without copying them (no allocation here:
    the meta stand-ins decide the build)."""
    a = torch.randn(3, 8, 12).to(BF)
    b = torch.randn(12, 40).to(BF)  # row-major: b.t()'s rows are not contiguous
    with pytest.raises(GemmInputError, match="CUDA device"):  # CPU tensors: refused, nothing copied first
        explain_grouped_mm(a, b, torch.tensor([8, 16, 40], dtype=torch.int32))
    info = explain_grouped_mm(a.to("meta"), b.to("meta"), torch.empty(3, dtype=torch.int32, device="meta"))
    assert [c.split()[0] for c in info["copies"]] == ["b", "a"] and info["b_major"] == "k"
