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
    biased = Linear(8, 4, device="meta", dtype=BF16)
    with pytest.raises(NotSupportedError, match="bias: .*issue 13"):  # no silent fallback to torch
        biased(torch.empty(2, 8, dtype=BF16, device="meta"))


def model():
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16, bias=False, device="meta", dtype=BF16), torch.nn.GELU(),
        torch.nn.Sequential(torch.nn.Linear(16, 16, bias=False, device="meta", dtype=torch.float16)),
        torch.nn.Linear(16, 8, device="meta", dtype=BF16),      # a bias: no epilogue yet
        torch.nn.Linear(8, 8, bias=False, dtype=torch.float32),  # fp32 on CPU: not ours
    )


def test_replace_linear_swaps_the_supported_layers_and_keeps_their_parameters():
    m = model()
    params = {name: p for name, p in m.named_parameters()}
    with pytest.warns(UserWarning) as caught:
        out = replace_linear(m)
    assert out is m
    assert type(m[0]) is Linear and type(m[2][0]) is Linear
    assert type(m[3]) is torch.nn.Linear and type(m[4]) is torch.nn.Linear
    assert all(p is params[name] for name, p in m.named_parameters())  # the same Parameter objects
    assert list(m.state_dict()) == list(model().state_dict())
    text = str(caught[0].message)
    assert "left 2 torch.nn.Linear layer(s)" in text and "3: bias" in text and "4: weight dtype torch.float32" in text


def test_replace_linear_strict_refuses_before_swapping():
    m = model()
    with pytest.raises(NotSupportedError, match=r"strict=True\): 2 Linear layer\(s\)"):
        replace_linear(m, strict=True)
    assert type(m[0]) is torch.nn.Linear


def test_replace_linear_on_a_single_layer_and_leaves_subclasses():
    layer = torch.nn.Linear(8, 8, bias=False, device="meta", dtype=BF16)
    new = replace_linear(layer)
    assert type(new) is Linear and new.weight is layer.weight

    class Mine(torch.nn.Linear):
        pass

    m = torch.nn.Sequential(Mine(8, 8, bias=False, device="meta", dtype=BF16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say: nothing skipped
        replace_linear(m)
    assert type(m[0]) is Mine
    with pytest.raises(TypeError, match="torch.nn.Module"):
        replace_linear("model")


def test_unsupported_reasons():
    assert unsupported_reason(torch.nn.Linear(4, 4, bias=False, device="meta", dtype=BF16)) is None
    assert "on cpu" in unsupported_reason(torch.nn.Linear(4, 4, bias=False, dtype=BF16))
