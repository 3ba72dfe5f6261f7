"""gemm_ladder.nn without a GPU: Linear is a drop-in for torch.nn.Linear (parameters, state_dict,
initialisation), its forward goes through the registered op (shapes on meta tensors), and
replace_linear's swaps, its refusals and what it says about them."""

from __future__ import annotations

import warnings

import pytest
import torch

from gemm_ladder.dispatch.validate import NotSupportedError
from gemm_ladder.nn import Linear, replace_linear, unsupported_reason

BF16 = torch.bfloat16


@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_a_drop_in(bias):
    torch.manual_seed(0)
    ref = torch.nn.Linear(24, 40, bias=bias, dtype=BF16)
    torch.manual_seed(0)
    ours = Linear(24, 40, bias=bias, dtype=BF16)
    assert isinstance(ours, torch.nn.Linear)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        assert p.shape == q.shape and p.dtype == q.dtype and torch.equal(p, q), name  # torch's own init
    fresh = Linear(24, 40, bias=bias, dtype=BF16)
    fresh.load_state_dict(ref.state_dict())
    ref.load_state_dict(fresh.state_dict())
    assert torch.equal(fresh.weight, ref.weight)
    assert repr(ours) == repr(ref)


def test_forward_goes_through_the_op():
    layer = Linear(8, 4, bias=False, device="meta", dtype=BF16)
    y = layer(torch.empty(2, 3, 8, dtype=BF16, device="meta"))
    assert tuple(y.shape) == (2, 3, 4) and y.device.type == "meta"
    biased = Linear(8, 4, device="meta", dtype=BF16)  # the bias fused (issue 13)
    x = torch.empty(2, 3, 8, dtype=BF16, device="meta", requires_grad=True)
    y = biased(x)
    assert tuple(y.shape) == (2, 3, 4) and y.device.type == "meta"
    y.sum().backward()  # through the op's backward (its calls on the fakes)
    assert tuple(biased.bias.grad.shape) == (4,) and tuple(biased.weight.grad.shape) == (4, 8)
    assert tuple(x.grad.shape) == (2, 3, 8)


def test_forward_passes_the_bias_to_linear(monkeypatch):
    # The bias goes to gemm_ladder.linear, which fuses it: never added by torch in a second pass.
    from gemm_ladder import api

    seen = []
    monkeypatch.setattr(api, "linear", lambda x, w, b=None, **kw: seen.append((x, w, b, kw)) or "y")
    layer = Linear(8, 4, device="meta", dtype=BF16)
    x = torch.empty(2, 8, dtype=BF16, device="meta")
    assert layer(x) == "y"
    assert seen == [(x, layer.weight, layer.bias, {})]


def model():
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16, bias=False, device="meta", dtype=BF16), torch.nn.GELU(),
        torch.nn.Sequential(torch.nn.Linear(16, 16, bias=False, device="meta", dtype=torch.float16)),
        torch.nn.Linear(16, 8, device="meta", dtype=BF16),      # a bias: fused
        torch.nn.Linear(8, 8, bias=False, dtype=torch.float32),  # fp32 on CPU: not ours
        half_bias(torch.nn.Linear(8, 8, device="meta", dtype=BF16)),  # a bias linear cannot take
    )


def half_bias(layer):
    layer.bias = torch.nn.Parameter(layer.bias.to(torch.float16))
    return layer


def test_replace_linear_swaps_the_supported_layers_and_keeps_their_parameters():
    m = model()
    params = {name: p for name, p in m.named_parameters()}
    with pytest.warns(UserWarning) as caught:
        out = replace_linear(m)
    assert out is m
    assert type(m[0]) is Linear and type(m[2][0]) is Linear and type(m[3]) is Linear
    assert m[3].bias is params["3.bias"]
    assert type(m[4]) is torch.nn.Linear and type(m[5]) is torch.nn.Linear
    assert all(p is params[name] for name, p in m.named_parameters())  # the same Parameter objects
    assert list(m.state_dict()) == list(model().state_dict())
    text = str(caught[0].message)
    assert "left 2 torch.nn.Linear layer(s)" in text and "4: weight dtype torch.float32" in text
    assert "5: bias dtype torch.float16" in text and "3:" not in text


def test_replace_linear_strict_refuses_before_swapping():
    m = model()
    with pytest.raises(NotSupportedError, match=r"strict=True\): 2 Linear layer\(s\)"):
        replace_linear(m, strict=True)
    assert type(m[0]) is torch.nn.Linear


def test_replace_linear_on_a_single_layer_and_names_the_subclasses_it_leaves():
    layer = torch.nn.Linear(8, 8, bias=False, device="meta", dtype=BF16)
    new = replace_linear(layer)
    assert type(new) is Linear and new.weight is layer.weight

    class Mine(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    m = torch.nn.Sequential(Mine(8, 8, bias=False, device="meta", dtype=BF16),
                            torch.nn.Linear(8, 8, bias=False, device="meta", dtype=BF16))
    with pytest.warns(UserWarning, match=r"left 1 subclass\(es\) of torch.nn.Linear.*subclasses=True.*0 \(.*Mine\)"):
        replace_linear(m)  # was silent
    assert type(m[0]) is Mine and type(m[1]) is Linear
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for: nothing to say
        replace_linear(m, subclasses=True)
    assert type(m[0]) is Linear and m[0].weight.shape == (8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # our own Linear is never swapped, nor named
        again = replace_linear(m)
    assert again is m and type(m[1]) is Linear
    with pytest.raises(TypeError, match="torch.nn.Module"):
        replace_linear("model")


def test_replace_linear_keeps_a_shared_module_one_module():
    """One module registered in two places (tied layers) was turned into two modules."""
    shared = torch.nn.Linear(8, 8, bias=False, device="meta", dtype=BF16)
    inner = torch.nn.Sequential(shared)
    m = torch.nn.Sequential(shared, torch.nn.GELU(), inner, shared)
    replace_linear(m)
    assert type(m[0]) is Linear and m[0] is m[3] and m[0] is m[2][0] and m[0].weight is shared.weight
    assert len({id(x) for x in m.modules() if isinstance(x, torch.nn.Linear)}) == 1
    assert list(dict(m.named_parameters())) == ["0.weight"]  # still one Parameter, deduplicated as before


def test_unsupported_reasons():
    assert unsupported_reason(torch.nn.Linear(4, 4, bias=False, device="meta", dtype=BF16)) is None
    assert "on cpu" in unsupported_reason(torch.nn.Linear(4, 4, bias=False, dtype=BF16))
    assert unsupported_reason(torch.nn.Linear(4, 4, device="meta", dtype=BF16)) is None  # a bias is fused
    fp32_bias = torch.nn.Linear(4, 4, device="meta", dtype=BF16)
    fp32_bias.bias = torch.nn.Parameter(fp32_bias.bias.float())
    assert unsupported_reason(fp32_bias) is None  # linear takes a float32 bias too
    assert "bias dtype torch.float16" in unsupported_reason(half_bias(torch.nn.Linear(4, 4, device="meta", dtype=BF16)))
