"""gemm_ladder.nn.replace_gated_mlp on the GPU: at inference (no_grad, nn.Parameter weights) one swiglu call per
forward, within bound of float64 (no worse than twice the original module's bf16 error); with grad on the module's own
formula, bit for bit the original's output and gradients; Phi-3's fused gate_up_proj; a transformers Llama model.
Outputs are compared on fresh random inputs each run (the seed in every message).
"""

from __future__ import annotations

import copy
import secrets

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder.gated_mlp as gated_mlp
from gemm_ladder.gated_mlp import GatedMLP, replace_gated_mlp
from test_gated_mlp import LlamaLikeMLP, Phi3LikeMLP

pytestmark = pytest.mark.gpu
CUDA = dict(device="cuda", dtype=torch.bfloat16)


@pytest.fixture
def calls(monkeypatch):
    """Counts gemm_ladder.swiglu calls made by GatedMLP."""
    from gemm_ladder.api import swiglu

    n = [0]

    def counted(*args):
        n[0] += 1
        return swiglu(*args)

    monkeypatch.setattr(gated_mlp, "_SWIGLU", [counted])
    return n


def _seed() -> int:
    s = secrets.randbelow(2**31)
    torch.manual_seed(s)
    return s


def ref64(mlp, x):
    if hasattr(mlp, "gate_up_proj"):
        g, u = F.linear(x.double(), mlp.gate_up_proj.weight.double()).chunk(2, dim=-1)
    else:
        g, u = F.linear(x.double(), mlp.gate_proj.weight.double()), F.linear(x.double(), mlp.up_proj.weight.double())
    return F.linear(F.silu(g) * u, mlp.down_proj.weight.double())


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("cls,rows", [(LlamaLikeMLP, 1), (LlamaLikeMLP, 300), (Phi3LikeMLP, 48), (Phi3LikeMLP, 2048)])
def test_inference_is_one_swiglu_within_bound_of_float64(calls, cls, rows):
    seed = _seed()
    orig = cls(hidden=512, inter=1024, **CUDA)
    mlp = GatedMLP.from_module(copy.deepcopy(orig))
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(rows, 512, **CUDA)
            got, theirs, want = mlp(x), orig(x), ref64(orig, x)
            assert rel(got, want) <= max(2 * rel(theirs, want), 4e-3), f"seed {seed}"
    assert calls[0] == 2


@pytest.mark.parametrize("cls", [LlamaLikeMLP, Phi3LikeMLP])
def test_training_runs_the_modules_own_formula_bit_for_bit(calls, cls):
    seed = _seed()
    orig = cls(hidden=256, inter=512, **CUDA)
    mlp = GatedMLP.from_module(copy.deepcopy(orig))
    x = torch.randn(64, 256, **CUDA, requires_grad=True)
    g = torch.randn(64, 256, **CUDA)
    y, y0 = mlp(x), orig(x)
    assert torch.equal(y, y0), f"seed {seed}"
    grads = torch.autograd.grad(y, [x, *mlp.parameters()], g)
    grads0 = torch.autograd.grad(y0, [x, *orig.parameters()], g)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads0)), f"seed {seed}"
    assert calls[0] == 0


def test_a_transformers_llama_model(calls):
    transformers = pytest.importorskip("transformers")
    seed = _seed()
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1536, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=4, pad_token_id=0, bos_token_id=1,
                                      eos_token_id=2)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).cuda().eval()
    fused = replace_gated_mlp(copy.deepcopy(model))
    assert sum(isinstance(m, GatedMLP) for m in fused.modules()) == 2
    ids = torch.randint(3, 512, (2, 37), device="cuda")
    with torch.no_grad():
        ref, got = model(ids).logits, fused(ids).logits
    assert calls[0] == 2 and rel(got, ref.double()) < 2e-2, f"seed {seed}"


def test_under_torch_compile(calls):
    seed = _seed()
    mlp = GatedMLP.from_module(LlamaLikeMLP(hidden=512, inter=1024, **CUDA)).eval()
    compiled = torch.compile(mlp, fullgraph=True)
    with torch.no_grad():
        x = torch.randn(64, 512, **CUDA)
        assert mlp.path(x) == "swiglu"
        assert rel(compiled(x), mlp(x).double()) < 1e-3, f"seed {seed}"
