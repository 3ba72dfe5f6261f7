"""grouped_linear's activation fused in the grouped kernel's epilogue (issue 24) on the GPU: each activation with and
without a bias, BN 128 and 256, one CTA and a pair, against float64 per group (empty, one-row and unaligned groups, an
N tail), into outputs whose memory was NaN-filled first, no worse than the unfused form (the op, then the activation's
PyTorch reference on its rounded output); bitwise repeatable; under torch.compile(fullgraph=True) and a CUDA graph; and
a call that needs a backward runs the unfused form (its gradients flow). The build's CPU checks:
tests/test_grouped_activation.py."""

from __future__ import annotations

import secrets

import pytest
import torch

import gemm_ladder
from gemm_ladder.gates.correctness import UNIT_ROUNDOFF
from gemm_ladder.library.activations import ACTIVATIONS

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fusing(monkeypatch):
    """The switch on (ops_grouped.ACTIVATION_FUSED, its default; the environment may have turned it off)."""
    import gemm_ladder.ops_grouped as ops_grouped

    monkeypatch.setattr(ops_grouped, "ACTIVATION_FUSED", True)

SIZES = [[0, 5, 0, 1, 300, 0], [37, 129, 64, 255, 3, 0, 511]]
#: (N, K): BN 128 on one CTA; BN 256 with an N tail and K = 2048, where the cluster rule takes a pair (one CTA with a
#: bias: the pair's build with a bias is not made).
SHAPES = [(384, 264), (2312, 2048)]


def _seed() -> int:
    s = secrets.randbelow(2**31)
    torch.manual_seed(s)
    return s


def _problem(sizes, n, k, dtype, bias):
    rows, e = sum(sizes), len(sizes)
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda") / k**0.5
    b = torch.randn(e, n, dtype=dtype, device="cuda") if bias else None
    offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    return x, w, b, offs


def _per_group_errors(y, x, w, b, ends, name):
    """(group, relative Frobenius error against float64 act(x @ w[e].T + b[e])) for every non-empty group."""
    out, start = [], 0
    for e, end in enumerate(ends):
        if end > start:
            z = x[start:end].double() @ w[e].double().T + (0 if b is None else b[e].double())
            ref = ACTIVATIONS[name].reference(z)
            got = y[start:end].double()
            assert not torch.isnan(got).any(), f"group {e}: NaN in an output row"
            out.append((e, ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()))
        start = end
    return out


@pytest.mark.parametrize("n,k", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("sizes", SIZES, ids=["empty_one_unaligned", "mid_tile"])
def test_fused_activation_matches_float64_no_worse_than_unfused(sizes, name, bias, n, k):
    """The activation's build itself (grouped_mm_direct with the activation, as routed for it: one CTA where a bias
    at BN 256 would have had a pair) against float64, no worse than the unfused form; the public call runs it
    bitwise where grouped_linear fuses (ops_grouped.why_unfused), else the unfused form."""
    from gemm_ladder.api_grouped import grouped_mm_direct
    from gemm_ladder.ops_grouped import why_unfused

    seed = _seed()
    dtype = torch.bfloat16
    x, w, b, offs = _problem(sizes, n, k, dtype, bias)
    explained = gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs, bias=b, activation=name)
    assert explained["kernel"].endswith(f"_{name}")
    torch.full((x.shape[0], n), float("nan"), dtype=dtype, device="cuda")  # freed at once: the output reuses it
    fused = grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=b, activation=name)
    unfused = ACTIVATIONS[name].reference(torch.ops.gemm_ladder.grouped_linear(x, w, offs, b))
    ends = offs.tolist()
    u = UNIT_ROUNDOFF["bf16"]
    for (e, err), (_, base) in zip(_per_group_errors(fused, x, w, b, ends, name),
                                   _per_group_errors(unfused, x, w, b, ends, name)):
        assert err <= 1.5 * base + u, (f"{explained['kernel']} group {e}: rel err {err:.3g} against the unfused "
                                       f"{base:.3g} (seed {seed})")
    again = grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=b, activation=name)
    assert torch.equal(fused[: ends[-1]], again[: ends[-1]]), f"not bitwise repeatable (seed {seed})"
    public = gemm_ladder.grouped_linear(x, w, offs, b, activation=name)
    expected = fused if why_unfused(x, w, b) is None else unfused
    assert torch.equal(public[: ends[-1]], expected[: ends[-1]]), f"the public call ran another form (seed {seed})"


def test_fp16_and_a_float32_output_of_the_build():
    """fp16 inputs through the public call; the float32 output build (registers only) through grouped_mm_direct."""
    from gemm_ladder.api_grouped import grouped_mm_direct

    seed = _seed()
    sizes = [0, 5, 0, 1, 300, 0]
    x, w, b, offs = _problem(sizes, 384, 264, torch.float16, True)
    y = gemm_ladder.grouped_linear(x, w, offs, b, activation="gelu_tanh")
    ends = offs.tolist()
    unfused = ACTIVATIONS["gelu_tanh"].reference(torch.ops.gemm_ladder.grouped_linear(x, w, offs, b))
    for (e, err), (_, base) in zip(_per_group_errors(y, x, w, b, ends, "gelu_tanh"),
                                   _per_group_errors(unfused, x, w, b, ends, "gelu_tanh")):
        assert err <= 1.5 * base + UNIT_ROUNDOFF["fp16"], f"fp16 group {e}: {err:.3g} vs {base:.3g} (seed {seed})"
    y32 = grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=b, out_dtype=torch.float32, activation="silu")
    assert y32.dtype == torch.float32
    start = 0
    for e, end in enumerate(ends):  # against torch's float32 composition: 4x its error plus 8 float32 roundoffs
        if end > start:
            xs, ws = x[start:end], w[e]
            ref = torch.nn.functional.silu(xs.double() @ ws.double().T + b[e].double())
            low = torch.nn.functional.silu(xs.float() @ ws.float().T + b[e].float()).double()
            err = ((y32[start:end].double() - ref).norm() / ref.norm()).item()
            base = ((low - ref).norm() / ref.norm()).item()
            assert err <= 4 * base + 8 * 2.0**-24, f"float32 out group {e}: {err:.3g} vs torch {base:.3g} (seed {seed})"
        start = end


def test_compiled_and_graph_replayed_without_a_backward():
    sizes = [37, 129, 64, 255, 3, 0, 511]
    x, w, b, offs = _problem(sizes, 384, 264, torch.bfloat16, True)
    with torch.no_grad():
        eager = gemm_ladder.grouped_linear(x, w, offs, b, activation="relu")
        compiled = torch.compile(lambda *t: gemm_ladder.grouped_linear(*t, activation="relu"), fullgraph=True)
        assert torch.equal(compiled(x, w, offs, b), eager)
        static_x = x.clone()
        graph = torch.cuda.CUDAGraph()
        gemm_ladder.grouped_linear(static_x, w, offs, b, activation="relu")  # built and loaded before capture
        with torch.cuda.graph(graph):
            replayed = gemm_ladder.grouped_linear(static_x, w, offs, b, activation="relu")
        fresh = torch.randn_like(x)
        static_x.copy_(fresh)
        graph.replay()
        assert torch.equal(replayed, gemm_ladder.grouped_linear(fresh, w, offs, b, activation="relu"))


def test_a_call_with_a_backward_runs_the_unfused_form_and_its_gradients_flow():
    sizes = [0, 5, 0, 1, 300, 0]
    x, w, b, offs = _problem(sizes, 384, 264, torch.bfloat16, True)
    wp = torch.nn.Parameter(w.clone())
    y = gemm_ladder.grouped_linear(x, wp, offs, b, activation="gelu")
    assert y.grad_fn is not None
    with torch.no_grad():
        unfused = ACTIVATIONS["gelu"].reference(torch.ops.gemm_ladder.grouped_linear(x, w, offs, b))
    assert torch.equal(y.detach(), unfused)
    y.float().square().sum().backward()
    assert wp.grad is not None and torch.isfinite(wp.grad).all() and wp.grad.abs().sum() > 0
