"""bench/moe_models.py's comparison of the two sides, without a GPU: routing flips counted per layer from the routers'
top-k indices, the error over the tokens routed alike, the error the disagreement bound applies to, and the routers
hooked on a small transformers model (where transformers >= 5 is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import moe_models as mm  # noqa: E402


def test_agreement_counts_flips_per_layer_and_measures_the_tokens_routed_alike():
    torch.manual_seed(0)
    ref = torch.randn(2, 3, 16)
    out = ref.clone()
    out[1, 2] += 5.0  # token 5: another computation
    out[0, 0] += 1e-3 * torch.randn(16)
    picks_ref = {0: torch.tensor([[0, 1]] * 6), 1: torch.tensor([[2, 3]] * 6)}
    picks_out = {0: torch.tensor([[1, 0]] * 6), 1: torch.tensor([[2, 3]] * 5 + [[2, 4]])}  # order alone is no flip
    a = mm.agreement(out, ref, picks_out, picks_ref)
    assert a["routing_flips"] == [0, 1]
    keep = torch.ones(6, dtype=torch.bool)
    keep[5] = False
    want = mm.rel_err(out.reshape(6, 16)[keep], ref.reshape(6, 16)[keep])
    assert a["rel_err_routed_alike"] == pytest.approx(want) and want < 1e-3 < mm.rel_err(out, ref)
    assert mm.agreement(out, ref, {}, picks_ref) == {}  # no routers hooked
    every = {0: torch.tensor([[5, 6]] * 6), 1: picks_ref[1]}
    assert mm.agreement(out, ref, every, picks_ref)["rel_err_routed_alike"] is None


def test_the_disagreement_bound_applies_to_the_tokens_routed_alike_where_recorded():
    flipped = {"mode": "decode step (no cache)", "speedup": 1.1, "rel_err": 0.099, "rel_err_routed_alike": 0.01}
    wrong = {"mode": "decode step (no cache)", "speedup": 1.1, "rel_err": 0.099, "rel_err_routed_alike": 0.09}
    compiled = {"mode": "torch.compile prefill", "speedup": 1.0, "rel_err": 0.06}  # no routers hooked
    all_flipped = {"mode": "prefill", "speedup": 1.0, "rel_err": 0.2, "rel_err_routed_alike": None}
    assert [mm.compared_err(r) for r in (flipped, wrong, compiled, all_flipped)] == [0.01, 0.09, 0.06, 0.2]
    assert mm.summarize([flipped, wrong, compiled, all_flipped])["disagree"] == 3
    assert "routing flips [0, 2]" in mm.describe({"model": "m", "mode": "prefill", "shape": "1x1", "ms": [1.0, 1.0],
                                                  "sides": ["a", "b"], "speedup": 1.0, "rel_err": 0.1,
                                                  "routing_flips": [0, 2], "rel_err_routed_alike": 0.01})


def test_routers_hooked_on_a_small_transformers_model():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed here")
    if not hasattr(transformers, "Qwen3MoeConfig"):
        pytest.skip("this transformers has no Qwen3-MoE")
    try:
        from transformers.integrations.moe import ExpertsInterface  # noqa: F401
    except ImportError:
        pytest.skip("transformers < 5: no ExpertsInterface")
    config = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=1, head_dim=16, moe_intermediate_size=16,
                                         intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                                         max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config, experts_implementation="eager").eval()
    x = torch.randint(0, 64, (3, 5))
    with torch.no_grad():
        h, picks = mm.routed(model, x)
        again, _ = mm.routed(model, x)
    assert sorted(picks) == [0, 1] and all(p.shape == (15, 2) and not p.is_floating_point() for p in picks.values())
    assert torch.equal(h, again) and mm.agreement(h, again, picks, picks) == {"routing_flips": [0, 0],
                                                                              "rel_err_routed_alike": 0.0}
    assert all(not layer.mlp.gate._forward_hooks for layer in model.layers)  # the hooks removed
