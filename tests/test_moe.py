"""gemm_ladder.moe on the CPU: which path a transformers experts layer takes and why, the refusals, the
registration in transformers' ExpertsInterface, the fakes on meta tensors, and the routing around the
grouped products (sort, offs, gather back, weights, experts elsewhere) checked against a per-token
float64 loop with the grouped ops replaced by a reference that leaves rows past the last group NaN."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from gemm_ladder import moe
from gemm_ladder.dispatch.validate import NotSupportedError


class Experts(torch.nn.Module):
    """The shape of a transformers 5.x experts layer (``use_experts_implementation``'s flags as attributes)."""

    def __init__(self, e=6, h=32, i=16, *, device="meta", dtype=torch.bfloat16, bias=False, transposed=False,
                 act=None, gate=True):
        super().__init__()
        self.num_experts, self.has_gate, self.has_bias, self.is_transposed = e, gate, bias, transposed
        self.is_concatenated = True
        inner = 2 * i if gate else i
        shape_in = (e, h, inner) if transposed else (e, inner, h)
        shape_down = (e, i, h) if transposed else (e, h, i)
        make = lambda *s: torch.nn.Parameter(torch.randn(*s, device=device, dtype=dtype) / 4)  # noqa: E731
        setattr(self, "gate_up_proj" if gate else "up_proj", make(*shape_in))
        self.down_proj = make(*shape_down)
        if bias:
            setattr(self, "gate_up_proj_bias" if gate else "up_proj_bias", make(e, inner))
            self.down_proj_bias = make(e, h)
        self.act_fn = act or torch.nn.SiLU()


class ClampedGate(Experts):
    """A layer with its own gate (gpt-oss's form: interleaved, clamped)."""

    def _apply_gate(self, y):
        gate, up = y[..., ::2].clamp(max=7.0), y[..., 1::2].clamp(-7.0, 7.0)
        return (up + 1) * gate * torch.sigmoid(gate * 1.702)


def test_the_usual_gated_layer_takes_the_fused_swiglu_path():
    plan = moe.experts_plan(Experts())
    assert plan["path"] == "fused_swiglu" and plan["bias"] is None and plan["experts"] == 6


@pytest.mark.parametrize("layer, words, bias", [
    (lambda: Experts(bias=True), "a bias", "epilogue"),
    (lambda: Experts(transposed=True), "(E, in, out)", None),
    (lambda: Experts(act=torch.nn.GELU()), "GELU", None),
    (lambda: Experts(gate=False, act=torch.nn.GELU()), "no gate", None),
    (lambda: ClampedGate(bias=True, transposed=True), "_apply_gate", "pytorch"),
])
def test_other_layers_take_two_grouped_gemms_and_say_why(layer, words, bias):
    plan = moe.experts_plan(layer())
    assert plan["path"] == "grouped_gemms" and words in plan["why"] and plan["bias"] == bias


@pytest.mark.parametrize("change, words", [
    (lambda m: setattr(m, "down_proj", torch.nn.Parameter(m.down_proj.float())), "bfloat16 and float16"),
    (lambda m: setattr(m, "gate_up_proj", torch.nn.Parameter(torch.zeros(6, 32, 32))), "bfloat16 and float16"),
    (lambda m: setattr(m, "down_proj", torch.nn.Parameter(torch.zeros(6, 32, dtype=torch.bfloat16))), "3-D"),
    (lambda m: setattr(m, "is_concatenated", False), "interleaved"),
])
def test_layers_it_cannot_run_are_refused_before_any_launch(change, words):
    m = Experts()
    change(m)
    assert words in moe.unsupported_reason(m)
    with pytest.raises(NotSupportedError, match="Experts"):
        moe.experts_forward(m, torch.zeros(4, 32, dtype=torch.bfloat16, device="meta"),
                            torch.zeros(4, 2, dtype=torch.long, device="meta"), torch.zeros(4, 2, device="meta"))


def test_cpu_weights_are_refused_with_the_reason():
    assert "CUDA" in moe.unsupported_reason(Experts(device="cpu"))


def test_the_fakes_give_the_output_on_meta_tensors():
    for layer in (Experts(), Experts(bias=True), ClampedGate(bias=True, transposed=True)):
        y = moe.experts_forward(layer, torch.empty(37, 32, dtype=torch.bfloat16, device="meta"),
                                torch.empty(37, 3, dtype=torch.long, device="meta"), torch.empty(37, 3, device="meta"))
        assert y.shape == (37, 32) and y.dtype == torch.bfloat16 and y.device.type == "meta"


def test_mismatched_routing_shapes_are_refused():
    with pytest.raises(NotSupportedError, match="one weight per chosen expert"):
        moe.experts_forward(Experts(), torch.empty(5, 32, dtype=torch.bfloat16, device="meta"),
                            torch.empty(5, 2, dtype=torch.long, device="meta"), torch.empty(5, 3, device="meta"))


# --- the routing around the products, against a per-token loop ----------------------------------------------


class _UndefinedGradPast(torch.autograd.Function):
    """Identity whose backward makes x's gradient NaN on rows past ``end``: the grouped ops' backward leaves
    those rows of grad_x unwritten."""

    @staticmethod
    def forward(ctx, x, end):
        ctx.end = end
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        g[ctx.end:] = float("nan")
        return g, None


def _grouped_reference(x, w_t, offs, bias=None):
    """y[r] = x[r] @ w_t[e] (+ bias[e]) for r in group e, float64; rows past offs[-1] NaN (the ops leave them
    undefined), in the output and in x's gradient. Differentiable: autograd gives the reference gradients."""
    ends = offs.tolist()
    x = _UndefinedGradPast.apply(x, ends[-1])
    parts, start = [], 0
    for e, end in enumerate(ends):
        y = x[start:end].double() @ w_t[e].double()
        parts.append(y if bias is None else y + bias[e].double())
        start = end
    parts.append(torch.full((x.shape[0] - start, w_t.shape[-1]), float("nan"), dtype=torch.float64))
    return torch.cat(parts).to(x.dtype)


@pytest.fixture
def reference_ops(monkeypatch):
    """gemm_ladder's grouped ops replaced by :func:`_grouped_reference` on CPU float64 tensors."""
    monkeypatch.setattr(moe, "grouped_linear",
                        lambda x, w, offs, bias=None: _grouped_reference(x, w.transpose(-2, -1), offs, bias))
    monkeypatch.setattr(moe, "grouped_mm", lambda x, b, offs: _grouped_reference(x, b, offs))

    def swiglu(x, w_gate, w_up, offs):
        g, u = _grouped_reference(x, w_gate.transpose(-2, -1), offs), _grouped_reference(x, w_up.transpose(-2, -1), offs)
        return torch.nn.functional.silu(g) * u

    monkeypatch.setattr(moe, "grouped_swiglu", swiglu)
    monkeypatch.setattr(moe, "unsupported_reason", lambda module: None)  # CPU float64 layers


def _per_token(layer, x, index, weights):
    """The experts layer as a loop over tokens and choices, float64 (transformers' eager semantics)."""
    has_gate, has_bias, transposed, _ = moe._flags(layer)
    w_in = layer.gate_up_proj if has_gate else layer.up_proj
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(index.shape[1]):
            e = int(index[t, j])
            if e >= layer.num_experts:
                continue
            wi, wd = (w_in[e], layer.down_proj[e]) if transposed else (w_in[e].T, layer.down_proj[e].T)
            y = x[t] @ wi + (getattr(layer, "gate_up_proj_bias" if has_gate else "up_proj_bias")[e] if has_bias else 0)
            if not has_gate:
                h = layer.act_fn(y)
            elif isinstance(layer, ClampedGate):
                h = layer._apply_gate(y)
            else:
                g, u = y.chunk(2)
                h = layer.act_fn(g) * u
            z = h @ wd + (layer.down_proj_bias[e] if has_bias else 0)
            out[t] = out[t] + weights[t, j] * z
    return out


@pytest.mark.parametrize("layer", [
    lambda: Experts(device="cpu", dtype=torch.float64),
    lambda: Experts(device="cpu", dtype=torch.float64, bias=True),
    lambda: Experts(device="cpu", dtype=torch.float64, gate=False, act=torch.nn.GELU()),
    lambda: ClampedGate(device="cpu", dtype=torch.float64, bias=True, transposed=True),
], ids=["swiglu", "bias", "no_gate", "clamped_transposed"])
@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_the_routing_matches_a_per_token_loop_with_experts_elsewhere(reference_ops, layer, top_k):
    torch.manual_seed(top_k)
    m = layer()
    tokens = 23
    x = torch.randn(tokens, 32, dtype=torch.float64, requires_grad=True)
    index = torch.stack([torch.randperm(8)[:top_k] for _ in range(tokens)])  # ids 6 and 7: experts elsewhere
    index[0] = torch.arange(6, 6 + top_k) % 8 if top_k <= 2 else index[0]  # a token with most choices elsewhere
    weights = torch.rand(tokens, top_k, dtype=torch.float64, requires_grad=True)
    got = moe.experts_forward(m, x, index, weights)
    want = _per_token(m, x, index, weights)
    assert not got.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(want)
    grads = torch.autograd.grad((got * g).sum(), (x, weights, *m.parameters()))
    refs = torch.autograd.grad((want * g).sum(), (x, weights, *m.parameters()), allow_unused=True)
    for a, b in zip(grads, refs):
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("training", [False, True])
def test_the_gated_layer_fuses_without_a_backward_and_runs_gate_up_proj_whole_with_one(reference_ops, monkeypatch,
                                                                                       training):
    """Inference: grouped_swiglu on gate_up_proj's halves (one launch). Training: gate_up_proj itself in one grouped
    GEMM, so that its gradient is one product in the parameter's layout (the halves' would each be scattered into a
    zeroed copy of it); the result and every gradient the per-token loop's either way."""
    calls = []
    linear, swiglu = moe.grouped_linear, moe.grouped_swiglu
    monkeypatch.setattr(moe, "grouped_linear", lambda x, w, offs, bias=None: calls.append(("linear", w.shape)) or
                        linear(x, w, offs, bias))
    monkeypatch.setattr(moe, "grouped_swiglu", lambda *a: calls.append(("swiglu",)) or swiglu(*a))
    torch.manual_seed(3)
    m = Experts(device="cpu", dtype=torch.float64)
    x = torch.randn(9, 32, dtype=torch.float64, requires_grad=training)
    index, weights = torch.stack([torch.randperm(6)[:2] for _ in range(9)]), torch.rand(9, 2, dtype=torch.float64)
    with torch.set_grad_enabled(training):
        got = moe.experts_forward(m, x, index, weights)
    torch.testing.assert_close(got, _per_token(m, x, index, weights), rtol=1e-12, atol=1e-12)
    down = ("linear", m.down_proj.shape)
    assert calls == ([("linear", m.gate_up_proj.shape), down] if training else [("swiglu",), down])
    if training:
        grads = torch.autograd.grad(got.sum(), (x, *m.parameters()))
        refs = torch.autograd.grad(_per_token(m, x, index, weights).sum(), (x, *m.parameters()))
        for a, b in zip(grads, refs):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_token_routed_only_elsewhere_gives_zero_even_when_no_pair_is_here(reference_ops):
    m = Experts(device="cpu", dtype=torch.float64)
    x = torch.randn(5, 32, dtype=torch.float64)
    got = moe.experts_forward(m, x, torch.full((5, 2), 6), torch.rand(5, 2, dtype=torch.float64))
    assert torch.equal(got, torch.zeros_like(got))


# --- registration ---------------------------------------------------------------------------------------------


def test_register_puts_experts_forward_in_transformers_interface(monkeypatch):
    class ExpertsInterface:
        _global_mapping: dict = {}

        @classmethod
        def register(cls, key, value):
            cls._global_mapping[key] = value

    integration = types.ModuleType("transformers.integrations.moe")
    integration.ExpertsInterface = ExpertsInterface
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    monkeypatch.setitem(sys.modules, "transformers.integrations", types.ModuleType("transformers.integrations"))
    monkeypatch.setitem(sys.modules, "transformers.integrations.moe", integration)
    assert moe.register_transformers() == "gemm_ladder"
    assert ExpertsInterface._global_mapping["gemm_ladder"] is moe.experts_forward


def test_register_without_transformers_5_says_what_it_needs(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers.integrations.moe", None)  # import fails
    with pytest.raises(ImportError, match="transformers >= 5"):
        moe.register_transformers()
