"""gemm_ladder.nn.replace_gated_mlp without a GPU: which modules it swaps (the forward's text, the activation, the
biases, the dtype, ``classes=``), what it keeps (submodule names, state_dict keys, the same Parameters), the warning
and ``strict``, and the formula it falls back to (meta tensors). With transformers installed: its Llama, Qwen2, Phi-3
and Gemma models on meta tensors (Gemma's GELU refused by name). The GPU side is tests/test_gated_mlp_gpu.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

from gemm_ladder.errors import NotSupportedError
from gemm_ladder.gated_mlp import GatedMLP, gated_reason, replace_gated_mlp

META = dict(device="meta", dtype=torch.bfloat16)


class LlamaLikeMLP(nn.Module):  # transformers' LlamaMLP, as written there
    def __init__(self, hidden=64, inter=96, bias=False, act=None, **kw):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=bias, **kw)
        self.up_proj = nn.Linear(hidden, inter, bias=bias, **kw)
        self.down_proj = nn.Linear(inter, hidden, bias=bias, **kw)
        self.act_fn = act or nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class DropoutMLP(LlamaLikeMLP):  # another formula with the same submodules: not a gated MLP to the swap
    def forward(self, x):
        return self.down_proj(torch.dropout(self.act_fn(self.gate_proj(x)) * self.up_proj(x), 0.1, self.training))


class Phi3LikeMLP(nn.Module):  # transformers' Phi3MLP
    def __init__(self, hidden=64, inter=96, **kw):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * inter, bias=False, **kw)
        self.down_proj = nn.Linear(inter, hidden, bias=False, **kw)
        self.activation_fn = nn.SiLU()

    def forward(self, hidden_states: torch.FloatTensor) -> torch.FloatTensor:
        up_states = self.gate_up_proj(hidden_states)

        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)

        return self.down_proj(up_states)


class Block(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.norm = nn.LayerNorm(64, **META)
        self.mlp = mlp


def test_swaps_the_llama_and_phi3_forms_and_keeps_their_parameters():
    model = nn.Sequential(Block(LlamaLikeMLP(**META)), Block(Phi3LikeMLP(**META)))
    keys = list(model.state_dict())
    params = [id(p) for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert replace_gated_mlp(model) is model
    assert [type(b.mlp) for b in model] == [GatedMLP, GatedMLP]
    assert [b.mlp.form for b in model] == ["separate", "fused"]
    assert list(model.state_dict()) == keys and [id(p) for p in model.parameters()] == params
    x = torch.empty(3, 5, 64, **META)
    assert model[0].mlp(x).shape == (3, 5, 64) and model[1].mlp(x).shape == (3, 5, 64)  # meta: the formula


def test_the_fused_forms_weights_are_its_halves_in_phi3s_chunk_order():
    mlp = GatedMLP.from_module(Phi3LikeMLP(**META))
    w = mlp.gate_up_proj.weight
    g, u = mlp._weights()
    assert g.shape == u.shape == (96, 64) and g.data_ptr() == w.data_ptr()
    assert u.data_ptr() == w.data_ptr() + 96 * 64 * w.element_size()


def test_other_formulas_are_left_alone_silently_and_refusals_are_named():
    model = nn.Sequential(DropoutMLP(**META), LlamaLikeMLP(bias=True, **META), LlamaLikeMLP(act=nn.GELU(), **META),
                          LlamaLikeMLP(device="meta", dtype=torch.float32))
    with pytest.warns(UserWarning, match="left 3 gated MLP") as record:
        replace_gated_mlp(model)
    message = str(record[0].message)
    assert "1: its gate and up projections have a bias" in message and "2: its activation is GELU" in message
    assert "3: weight dtype torch.float32" in message and "0:" not in message
    assert not any(isinstance(m, GatedMLP) for m in model)
    with pytest.raises(NotSupportedError, match="strict=True"):
        replace_gated_mlp(nn.Sequential(LlamaLikeMLP(bias=True, **META)), strict=True)
    assert "not down_proj" in gated_reason(DropoutMLP(**META))


def test_classes_vouch_for_a_forward_of_another_text_and_the_model_itself_may_be_one():
    assert isinstance(replace_gated_mlp(DropoutMLP(**META), classes=(DropoutMLP,)), GatedMLP)
    assert isinstance(replace_gated_mlp(LlamaLikeMLP(**META)), GatedMLP)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        replace_gated_mlp(object())


def test_a_shared_module_is_swapped_once():
    mlp = LlamaLikeMLP(**META)
    model = nn.ModuleDict({"a": mlp, "b": mlp})
    replace_gated_mlp(model)
    assert model["a"] is model["b"] and isinstance(model["a"], GatedMLP)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3", "gemma"])
def test_transformers_models(arch):
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"transformers {transformers.__version__}: the forms are transformers 5's")
    cfg = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config = getattr(transformers, {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "phi3": "Phi3Config",
                                    "gemma": "GemmaConfig"}[arch])(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    if arch == "gemma":  # GeLU (tanh): the same forward text, refused by its activation
        with pytest.warns(UserWarning, match="activation is"):
            replace_gated_mlp(model)
        assert not any(isinstance(m, GatedMLP) for m in model.modules())
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replace_gated_mlp(model)
    assert sum(isinstance(m, GatedMLP) for m in model.modules()) == 2
    assert model(torch.zeros(1, 7, dtype=torch.long, device="meta")).logits.shape == (1, 7, 128)


def test_precompile_records_the_inference_swiglu_and_builds_each_rows_path():
    from gemm_ladder.dispatch.route import ASSUMED_DEVICE
    from gemm_ladder.model_precompile import SwigluCall, model_builds, record

    mlp = GatedMLP.from_module(LlamaLikeMLP(hidden=1024, inter=4096, **META)).eval()
    with torch.no_grad():  # as inference runs it
        calls = record(mlp, (torch.empty(4, 512, 1024, **META),))
    assert [type(c) for c in calls] == [SwigluCall] and calls[0].a[0] == (4, 512, 1024)
    labels = [b.label for b in model_builds(calls, rows=(1, 100, 160), device=ASSUMED_DEVICE)]
    # the prefill's fused kernel; decode's gated small-M builds (1 and 100 rows); on the H200 assumed, 160 rows
    # (above ONE_LAUNCH_MAX_M, at most its SMALL_M_MAX) the pair: up into fp32, then the gated epilogue
    assert labels[:3] == ["sm90_swiglu bf16", "sm90_swiglu_small_m bn 8 bf16", "sm90_swiglu_small_m bn 128 bf16"]
    assert "fp32 out" in labels[3] and "epilogue swiglu_small_m" in labels[4]
    # and below gated_mlp.MIN_ROWS_OVER_GEMM_LADDER the projections' own GEMMs (a GatedMLP over gemm-ladder's Linear
    # runs its formula there): the gate and up calls at 1, 100 and 160 rows
    assert labels[5:] and not any("swiglu" in label for label in labels[5:])
    mlp.train()
    trained = record(mlp, (torch.empty(4, 512, 1024, **META),), backward=True)  # training: the module's formula
    assert not any(isinstance(c, SwigluCall) for c in trained)
    assert not any(isinstance(c, SwigluCall) for c in record(mlp.eval(), (torch.empty(4, 512, 1024, **META),)))
    # (an eval model traced with grad mode on and Parameters requiring grad: the module's formula, as it would run)


class ScaledLinear(nn.Linear):  # a subclass with its own forward: the swap would skip it
    def forward(self, x):
        return 2 * super().forward(x)


def test_subclassed_or_hooked_projections_and_unaligned_rows_are_refused():
    sub = LlamaLikeMLP(**META)
    sub.gate_proj = ScaledLinear(64, 96, bias=False, **META)
    hooked = LlamaLikeMLP(**META)
    hooked.up_proj.register_forward_hook(lambda m, i, o: o)
    patched = LlamaLikeMLP(**META)
    patched.gate_proj.forward = lambda x: x  # an instance forward (accelerate's offload hooks are one)
    assert "subclass" in gated_reason(sub)
    assert "hooks" in gated_reason(hooked) and "hooks" in gated_reason(patched)
    assert "16-byte" in gated_reason(LlamaLikeMLP(hidden=60, **META))


def test_path_takes_the_modules_forward_where_swiglu_does_not_apply():
    mlp = GatedMLP.from_module(LlamaLikeMLP(**META)).eval()
    x = torch.empty(5, 64, **META)
    with torch.no_grad():
        assert mlp.path(x) == "swiglu"
        assert "x on cpu" in mlp.path(torch.empty(5, 64, dtype=torch.bfloat16))
        assert "not row-major" in mlp.path(torch.empty(64, 5, **META).T)
        mlp.up_proj.register_forward_pre_hook(lambda m, i: None)  # hooked after the swap (LoRA, offload)
        assert "replaced or hooked" in mlp.path(x)
    assert "gradient" in GatedMLP.from_module(LlamaLikeMLP(**META)).path(x)  # grad on, Parameters requiring grad
    cast = GatedMLP.from_module(LlamaLikeMLP(**META)).float()  # the model cast after the swap
    with torch.no_grad():
        assert "swiglu takes one dtype" in cast.path(torch.empty(5, 64, device="meta"))
        assert cast(torch.empty(5, 64, device="meta")).shape == (5, 64)


def test_the_fallback_is_the_original_modules_own_forward():
    orig = DropoutMLP(hidden=64, inter=96, dtype=torch.bfloat16)  # on the CPU, which the swap refuses: built by hand
    mlp = GatedMLP("separate", orig).train()
    x = torch.randn(7, 64, dtype=torch.bfloat16)
    torch.manual_seed(3)
    got = mlp(x)  # x on the CPU: the formula, i.e. DropoutMLP's forward with its dropout
    torch.manual_seed(3)
    assert torch.equal(got, DropoutMLP.forward(orig, x)) and orig.training
    mlp.eval()
    assert not orig.training  # train/eval reaches the original module's flag


def test_over_gemm_ladders_linear_swiglu_is_taken_from_the_measured_rows():
    import gemm_ladder.nn
    from gemm_ladder.gated_mlp import MIN_ROWS_OVER_GEMM_LADDER as ROWS

    mlp = GatedMLP.from_module(gemm_ladder.nn.replace_linear(LlamaLikeMLP(**META))).eval()
    torch_mlp = GatedMLP.from_module(LlamaLikeMLP(**META)).eval()
    with torch.no_grad():
        assert "rows <" in mlp.path(torch.empty(2, ROWS // 2 - 1, 64, **META))
        assert mlp.path(torch.empty(2, ROWS // 2, 64, **META)) == "swiglu"
        assert torch_mlp.path(torch.empty(1, 64, **META)) == "swiglu"  # over cuBLAS: at any row count


class VouchedMLP(LlamaLikeMLP):  # a vouched class with state of its own beyond the projections
    def __init__(self, **kw):
        super().__init__(**kw)
        self.drop = nn.Dropout(0.5)
        self.scale = nn.Parameter(torch.ones(1, **kw))
        self.register_buffer("seen", torch.zeros(1, **kw))

    def forward(self, x):
        return self.down_proj(self.drop(self.act_fn(self.gate_proj(x)) * self.up_proj(x))) * self.scale


def test_the_swapped_module_shares_the_originals_state_and_later_replacements():
    import gemm_ladder.nn

    orig = VouchedMLP(**META)
    keys = list(orig.state_dict())
    mlp = replace_gated_mlp(orig, classes=(VouchedMLP,))
    assert list(mlp.state_dict()) == keys and mlp.scale is orig.scale and mlp.drop is orig.drop
    mlp.eval()
    assert not orig.training and not orig.drop.training  # eval reaches the original's children too
    gemm_ladder.nn.replace_linear(mlp)  # after the swap: the original's forward sees gemm-ladder's Linear
    assert type(orig.gate_proj) is gemm_ladder.nn.Linear and mlp.gate_proj is orig.gate_proj
    mlp.up_proj = ScaledLinear(64, 96, bias=False, **META)  # a LoRA-style wrapper set on the swapped module
    assert orig.up_proj is mlp.up_proj
    with torch.no_grad():
        assert "replaced or hooked" in mlp.path(torch.empty(600, 64, **META))


def test_a_hooked_activation_and_rows_swiglu_cannot_read_in_place_take_the_formula():
    mlp = GatedMLP.from_module(LlamaLikeMLP(**META)).eval()
    with torch.no_grad():
        assert "not row-major" in mlp.path(torch.empty(1, 64, **META).expand(4, 64))  # rows 0 bytes apart
        assert "not row-major" in mlp.path(torch.empty(200, **META)[:136].as_strided((2, 1, 64), (68, 64, 1)))
        assert mlp.path(torch.empty(4, 3, 128, **META)[..., :64]) == "swiglu"  # a padded pitch of 256 bytes
        assert mlp.path(torch.empty(3, 4, 64, **META).transpose(0, 1)) == "swiglu"  # merged by a copy
        mlp.act_fn.register_forward_hook(lambda m, i, o: o)
        assert "activation" in mlp.path(torch.empty(4, 64, **META))
