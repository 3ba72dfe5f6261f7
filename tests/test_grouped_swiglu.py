"""grouped_swiglu's CPU-checkable parts: registration and the fake, refusals before any launch, explain
on meta tensors, the backward's formula and torch.compile(fullgraph=True) of forward and backward with the
grouped kernel replaced by a CPU reference (no kernel built). GPU results: tests/test_grouped_swiglu_gpu.py."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
import gemm_ladder.ops_grouped as ops_grouped
import gemm_ladder.ops_grouped_swiglu as gs
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError
from gemm_ladder.api_grouped import along_n_operands
from gemm_ladder.api_grouped import check_grouped_mm as _real_check_grouped_mm

BF = torch.bfloat16


def _meta(*shape, dtype=BF):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _offs(n, device="meta"):
    return torch.empty(n, dtype=torch.int32, device=device)


def test_op_is_registered_and_its_fake_gives_three_outputs():
    out, gate, up = torch.ops.gemm_ladder.grouped_swiglu(_meta(10, 16), _meta(3, 8, 16), _meta(3, 8, 16), _offs(3))
    assert out.shape == gate.shape == up.shape == (10, 8)
    assert out.dtype == BF and gate.dtype == up.dtype == torch.float32
    assert gemm_ladder.grouped_swiglu is gs.grouped_swiglu and "grouped_swiglu" in gemm_ladder.__all__
    assert "explain_grouped_swiglu" in dir(gemm_ladder)


@pytest.mark.parametrize("args,exc,words", [
    (("x", _meta(3, 8, 16), _meta(3, 8, 16), _offs(3)), GemmTypeError, "x must be a torch.Tensor"),
    ((_meta(10, 16), _meta(3, 8, 16), _meta(3, 8, 16), [3, 5, 10]), GemmTypeError, "offs must be"),
    ((_meta(2, 10, 16), _meta(3, 8, 16), _meta(3, 8, 16), _offs(3)), GemmInputError, "(T, K)"),
    ((_meta(10, 16), _meta(8, 16), _meta(8, 16), _offs(3)), GemmInputError, "(E, N, K)"),
    ((_meta(10, 16), _meta(3, 16, 8).transpose(1, 2), _meta(3, 8, 16), _offs(3)), GemmInputError, "stride(2) == 1"),
    ((_meta(10, 16), _meta(3, 8, 16), _meta(3, 9, 16), _offs(3)), GemmInputError, "one shape"),
    ((_meta(10, 16), _meta(3, 8, 16), _meta(3, 8, 16, dtype=torch.float16), _offs(3)), GemmInputError, "one dtype"),
    ((_meta(10, 16), _meta(3, 8, 12), _meta(3, 8, 12), _offs(3)), GemmInputError, "contraction"),
    ((_meta(10, 16), _meta(3, 8, 16), _meta(3, 8, 16), _offs(4)), GemmInputError, "shape (3,)"),
    ((_meta(10, 16), _meta(1025, 8, 16), _meta(1025, 8, 16), _offs(1025)), NotSupportedError, "at most"),
])
def test_refusals_name_the_rule(args, exc, words):
    with pytest.raises(exc) as info:
        gemm_ladder.grouped_swiglu(*args)
    assert words in str(info.value)


@pytest.mark.parametrize("args, words", [
    ((_meta(100, 255), _meta(4, 128, 255), _meta(4, 128, 255), _offs(4)), "x: row pitch 255 elements"),
    ((_meta(100, 64), _meta(4, 128, 64), _meta(4, 128, 64), _offs(4, "cpu")), "offs must be on x's device"),
    ((_meta(100, 64), _meta(4, 128, 64, dtype=torch.float16), _meta(4, 128, 64, dtype=torch.float16), _offs(4)),
     "x and w_gate must share one dtype"),
    ((_meta(100, 64), _meta(4, 128, 64)[:, :, :48], _meta(4, 128, 64)[:, :, :48], _offs(4)),
     "x (100, 64) and w_gate.transpose(-2, -1) (4, 48, 128): contraction"),
])
def test_refusals_name_grouped_swiglus_own_arguments(args, words):
    """The shared grouped_mm checks name x, w_gate and w_up (never grouped_mm's a and b)."""
    with pytest.raises(GemmInputError) as info:
        gemm_ladder.grouped_swiglu(*args)
    assert words in str(info.value) and not str(info.value).startswith(("a:", "a ", "b:", "b ")), str(info.value)


def test_cpu_tensors_are_refused_before_any_build():
    x, w = torch.randn(10, 16, dtype=BF), torch.randn(3, 8, 16, dtype=BF)
    with pytest.raises(GemmInputError, match="CUDA device"):
        gemm_ladder.grouped_swiglu(x, w, w, torch.tensor([3, 5, 10], dtype=torch.int32))


def test_explain_on_meta_names_the_grouped_kernel_builds(monkeypatch):
    monkeypatch.setattr(gs, "FUSED_DEFAULT", False)  # the two-GEMM forward (a training call's, or the switch off)
    e = gemm_ladder.explain_grouped_swiglu(_meta(4096, 2048), _meta(128, 768, 2048), _meta(128, 768, 2048), _offs(128))
    assert e["path"] == "two_grouped_gemms" and e["fused"] is False and e["cublas"] is False
    assert (e["t"], e["n"], e["k"], e["groups"]) == (4096, 768, 2048, 128)
    gemms = [s for s in e["launches"] + e["backward"] if s["kind"] == "grouped_gemm"]
    assert len(gemms) == 6 and all(s["kernel"].startswith("sm90_grouped_gemm_") for s in gemms)
    # K = 2048, the weights K-major: the route's cluster build (library/grouped.py choose_cluster)
    assert [s["kernel"] for s in e["launches"][:2]] == ["sm90_grouped_gemm_128_k_f32_c2"] * 2
    assert [s["cluster"] for s in gemms] == [2, 2, 1, 1, 1, 1] and all(s["cluster_reason"] for s in gemms)
    # grouped.GRAD_W_BN, with grouped.choose_ring's buffer per panel
    assert {s["kernel"] for s in e["backward"][3:]} == {"sm90_grouped_gemm_256_kgrouped_r4"}
    assert e["launches"][2]["kind"] == "pointwise"
    with pytest.raises(GemmInputError, match="one shape"):
        gemm_ladder.explain_grouped_swiglu(_meta(64, 16), _meta(3, 8, 16), _meta(3, 4, 16), _offs(3))


def test_swiglu_grads_match_autograd_in_float64():
    torch.manual_seed(0)
    g, u, dy = (torch.randn(50, 30, dtype=torch.float64) * 3 for _ in range(3))
    gr, ur = g.clone().requires_grad_(), u.clone().requires_grad_()
    (torch.nn.functional.silu(gr) * ur).backward(dy)
    d_gate, d_up = gs.swiglu_grads(dy, g, u)
    torch.testing.assert_close(d_gate.double(), gr.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(d_up.double(), ur.grad, rtol=1e-6, atol=1e-6)


def _cpu_grouped_mm(a, b, offs=None, *, out_dtype=None, bias=None, bn=None):
    """The grouped kernel's results on the CPU, in fp32, a loop over the groups: a stand-in (2-D x 3-D
    grouped along M, 2-D x 2-D grouped along K, 3-D x 3-D batched; 3-D x 2-D through the library's own
    transposition, api_grouped.along_n_operands, as grouped_mm_direct runs it) that first applies the kernel's
    own rules (check_grouped_mm: the pitches and alignments a launch needs), so that every call a backward makes
    is one the kernel would take. Rows past offs[E-1], which the kernel leaves unwritten, are NaN."""
    _real_check_grouped_mm(a, b, offs, out_dtype, device_types=("cpu",))
    dt = out_dtype or a.dtype
    if a.dim() == 3 and b.dim() == 2:
        rows, weights, _ = along_n_operands(a, b)
        return _cpu_grouped_mm(rows, weights, offs, out_dtype=dt).t()
    if a.dim() == 3:
        return (a.float() @ b.float()).to(dt)
    ends = [0] + offs.tolist()
    if b.dim() == 2:
        if not offs.numel():
            return torch.zeros((0, a.shape[0], b.shape[1]), dtype=dt)
        return torch.stack([a[:, s:t].float() @ b[s:t].float() for s, t in zip(ends, ends[1:])]).to(dt)
    out = torch.full((a.shape[0], b.shape[2]), float("nan"))
    for e, (s, t) in enumerate(zip(ends, ends[1:])):
        out[s:t] = a[s:t].float() @ b[e].float()
    return out.to(dt)


@pytest.fixture
def cpu_kernel(monkeypatch):
    """The ops run on CPU tensors: the validation (which wants CUDA) and the kernel replaced."""
    monkeypatch.setattr(gs, "check_grouped_swiglu", lambda *a: None)
    monkeypatch.setattr(gs, "grouped_mm_direct", _cpu_grouped_mm)
    monkeypatch.setattr(ops_grouped, "grouped_mm_direct", _cpu_grouped_mm)
    # The ops' fakes and checks take CPU tensors here (the rules are otherwise the real ones).
    monkeypatch.setattr(ops_grouped, "check_grouped_mm", lambda a, b, offs=None, out_dtype=None, **k:
                        _real_check_grouped_mm(a, b, offs, out_dtype, device_types=("cpu", "meta")))


def _problem(sizes, n=24, k=32):
    torch.manual_seed(1)
    t, e = sum(sizes), len(sizes)
    x = torch.randn(t, k, dtype=BF).requires_grad_()
    wg = (torch.randn(e, n, k) / k**0.5).to(BF).requires_grad_()
    wu = (torch.randn(e, n, k) / k**0.5).to(BF).requires_grad_()
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)
    return x, wg, wu, offs


def _reference(x, wg, wu, offs):
    """Per group in float64, from the same bf16 values."""
    xr, wgr, wur = (t.detach().double().requires_grad_() for t in (x, wg, wu))
    outs, start = [], 0
    for e, end in enumerate(offs.tolist()):
        xs = xr[start:end]
        outs.append(torch.nn.functional.silu(xs @ wgr[e].T) * (xs @ wur[e].T))
        start = end
    return torch.cat(outs), (xr, wgr, wur)


@pytest.mark.parametrize("compiled", [False, True])
def test_backward_formula_through_the_op(cpu_kernel, compiled):
    """Forward and backward of the op (its autograd, the grouped_mm op for grad_x and grad_w) against
    float64 autograd of the reference; compiled: torch.compile(fullgraph=True) traces both (aot_eager)."""
    x, wg, wu, offs = _problem([5, 0, 1, 17, 9])

    def f(x, wg, wu, offs):
        return torch.ops.gemm_ladder.grouped_swiglu(x, wg, wu, offs)[0]

    fn = torch.compile(f, fullgraph=True, backend="aot_eager") if compiled else f
    out = fn(x, wg, wu, offs)
    ref, leaves = _reference(x, wg, wu, offs)
    gy = torch.randn_like(out)
    out.backward(gy)
    ref.backward(gy.double())
    assert (out.double() - ref).norm() / ref.norm() < 1e-2
    for name, got, want in zip(("grad_x", "grad_w_gate", "grad_w_up"), (x.grad, wg.grad, wu.grad), leaves):
        err = (got.double() - want.grad).norm() / want.grad.norm()
        assert err < 2e-2, f"{name}: rel err {err:.3g}"


def test_a_moe_layer_trains_through_the_ops_autograd(cpu_kernel):
    """The GPU test's top-2 MoE layer, small, on the CPU stand-in: grouped_swiglu and grouped_linear's
    autograd (through the public functions) train it as torch's matmuls per expert do, 5 AdamW steps."""
    import torch.nn.functional as F
    from test_grouped_swiglu_gpu import _MoE, _ours, _torch

    torch.manual_seed(2)
    e, d, h = 4, 32, 64
    init = [torch.randn(d, e) / d**0.5, torch.randn(e, h, d) / d**0.5, torch.randn(e, h, d) / d**0.5,
            torch.randn(e, d, h) / h**0.5]
    models = [_MoE(e, d, h, 2, init) for _ in range(2)]
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in models]
    for step in range(5):
        x = torch.randn(96, d)
        losses = []
        for model, opt, experts in zip(models, opts, (_ours, _torch)):
            loss = F.mse_loss(model(x, experts), torch.tanh(x))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 2e-2 * losses[1], (step, losses)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in models[0].parameters())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "two_gemms"])
def test_dynamo_traces_the_public_function_without_a_graph_break(fused, monkeypatch):
    """Both forwards of a call without a backward: the fused op (the default) and, with the switch off, the
    two-GEMM op."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(gs, "FUSED_DEFAULT", fused)

    def f(x, wg, wu, offs):
        return gemm_ladder.grouped_swiglu(x, wg, wu, offs) * 2

    with FakeTensorMode():
        x = torch.empty(400, 128, dtype=BF, device="cuda")
        wg = torch.empty(4, 64, 128, dtype=BF, device="cuda")
        offs = torch.empty(4, dtype=torch.int32, device="cuda")
    torch._dynamo.reset()
    out = torch._dynamo.export(f, aten_graph=False)(x, wg, wg, offs)
    code = out.graph_module.code
    assert ("gemm_ladder.grouped_swiglu_fused(" in code) == fused
    assert ("gemm_ladder.grouped_swiglu(" in code) == (not fused)
