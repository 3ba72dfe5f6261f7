"""grouped_linear's activation fused in the grouped kernel's epilogue (issue 24: ``grouped_linear(x, w, offs, bias,
activation=...)``) without a GPU: the builds (``grouped_gemm(..., activation=name)``: the translation unit's macro, the
config's key, the refusals), the resource gate on their SASS (no spill at BN 128 and 256, one CTA and a pair), which
calls fuse it (no backward) and which run it after the op (grad), explain, the op's fake and its refused backward.
GPU results: tests/test_grouped_activation_gpu.py."""

from __future__ import annotations

import pytest
import torch
from conftest import needs_nvcc

import gemm_ladder
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError
from gemm_ladder.library.activations import ACTIVATIONS
from gemm_ladder.library.grouped import activation_prelude, grouped_gemm, kernel_for
from gemm_ladder import ops_grouped
from gemm_ladder.ops_grouped import why_unfused

BF = torch.bfloat16


@pytest.fixture(autouse=True)
def _fusing(monkeypatch):
    """The switch on (its default; GL_GROUPED_ACTIVATION_FUSED=0 at import may have turned it off)."""
    monkeypatch.setattr(ops_grouped, "ACTIVATION_FUSED", True)


def _meta(*shape, dtype=BF, **kw):
    return torch.empty(*shape, dtype=dtype, device="meta", **kw)


def _offs(n):
    return torch.empty(n, dtype=torch.int32, device="meta")


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_the_build_carries_the_activation_in_its_translation_unit_and_key(name):
    k = grouped_gemm(256, "k", bias=True, activation=name)
    assert k.name == f"sm90_grouped_gemm_256_k_bias_{name}"
    unit = k.translation_unit("bf16")
    assert f"#define GL_GROUPED_ACTIVATION(x) ({ACTIVATIONS[name].cuda_of('x')})" in unit
    assert unit.index("fused_epilogue.cuh") < unit.index("GL_GROUPED_ACTIVATION") < unit.index("sm90_grouped_gemm.cu")
    config = k.config("bf16")
    assert config.epilogue == activation_prelude(name) and kernel_for(config) is k
    plain = grouped_gemm(256, "k", bias=True)
    assert plain.config("bf16").epilogue is None and "GL_GROUPED_ACTIVATION" not in plain.translation_unit("bf16")
    assert plain.config("bf16") != config  # a different key, so a different cached build


@pytest.mark.parametrize("kwargs", [dict(k_grouped=True, b_major="mn"), dict(masked=True), dict(swiglu=True),
                                    dict(tail=True), dict(b_major="mn", ring=4), dict(bias=True, cluster=2)],
                         ids=["along_k", "masked", "swiglu", "tail", "ring4", "bias_pair_256"])
def test_builds_the_activation_is_not_made_with_are_refused(kwargs):
    with pytest.raises(ValueError, match="activation"):
        grouped_gemm(**{"bn": 256, "b_major": "k", **kwargs}, activation="gelu")
    with pytest.raises(ValueError, match="one of"):
        grouped_gemm(256, "k", activation="tanh")


def test_a_pair_with_a_bias_at_bn_128_and_without_one_at_256_are_built():
    assert grouped_gemm(128, "k", bias=True, cluster=2, activation="gelu").cluster == 2
    assert grouped_gemm(256, "k", cluster=2, activation="silu").cluster == 2


@needs_nvcc
@pytest.mark.parametrize("bn,name,bias,cluster,dtype", [
    (256, "gelu", True, 1, "bf16"), (256, "gelu", False, 1, "bf16"), (256, "relu", True, 1, "bf16"),
    (256, "silu", False, 2, "bf16"), (256, "gelu_tanh", True, 1, "fp16"), (128, "gelu", True, 2, "bf16"),
    (128, "silu", True, 1, "fp16")])
def test_the_builds_pass_the_resource_gate(use_cache, bn, name, bias, cluster, dtype):
    """No spill, stack or local memory, no serialised wgmma; the TMA panel store kept (UTMASTG) beside the
    register store of a group's partial slice."""
    from gemm_ladder.gates.resources import check_level_resources

    report, sass = check_level_resources(grouped_gemm(bn, "k", bias=bias, cluster=cluster, activation=name), dtype)
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["UTMASTG"] > 0 and report.sass["UTMALDG"] > 0
    if name == "silu":  # one ex2 per value a thread (BN / 2) in each store, the pack's and the register store's
        assert sass.count("MUFU.EX2") >= bn


def _call(n=4096, k=2048, groups=8, bias=True, w_grad=False):
    x = _meta(4096, k)
    w = _meta(groups, n, k)
    if w_grad:
        w = torch.nn.Parameter(w)
    return x, w, _offs(groups), (_meta(groups, n) if bias else None)


def test_which_calls_fuse():
    x, w, offs, bias = _call(k=1024, w_grad=True)
    assert "w requires grad" in why_unfused(x, w, bias)
    with torch.no_grad():
        assert why_unfused(x, w, bias) is None
    x, w, offs, bias = _call(k=1024)
    assert why_unfused(x, w, bias) is None
    assert why_unfused(x.requires_grad_(), w, bias).startswith("x requires grad")
    # K = 2048 and N = 4096 with a bias: the rules' pair has no activation build; it fuses on one CTA (explain below)
    x, w, offs, bias = _call(k=2048)
    assert why_unfused(x, w, bias) is None and why_unfused(x, w, None) is None
    ops_grouped.ACTIVATION_FUSED = False  # the fixture puts it back
    assert "ACTIVATION_FUSED is off" in why_unfused(x, w, None)


@pytest.mark.parametrize("bias", [True, False])
def test_the_public_call_launches_the_fused_build_where_it_fuses(monkeypatch, bias):
    """grouped_linear's eager path, the kernel replaced by a recorder: the activation reaches the launch (fused),
    or the op runs without it and the reference after it (unfused)."""
    seen = []

    def direct(a, b, offs, **kw):
        seen.append(kw.get("activation"))
        return a.new_empty((a.shape[0], b.shape[-1]))

    monkeypatch.setattr(ops_grouped, "through_op", lambda *t: False)
    monkeypatch.setattr(ops_grouped, "grouped_mm_direct", direct)
    x, w, offs, b = _call(k=1024, bias=bias)
    with torch.no_grad():
        gemm_ladder.grouped_linear(x, w, offs, b, activation="gelu")
    assert seen == ["gelu"]


def test_a_compiled_call_records_the_fused_op_or_the_op_and_the_activation():
    from torch._dynamo.testing import CompileCounterWithBackend

    x, w, offs, b = _call(k=1024)
    fused, op = "gemm_ladder.grouped_linear_act(", "gemm_ladder.grouped_linear("
    for grad, wanted, unwanted in ((False, fused, op), (True, op, fused)):
        backend = CompileCounterWithBackend("eager")
        fn = torch.compile(lambda *t: gemm_ladder.grouped_linear(*t, activation="gelu"), backend=backend, fullgraph=True)
        weight = torch.nn.Parameter(w) if grad else w
        fn(x, weight, offs, b)
        code = str(backend.graphs[-1].code)
        assert wanted in code and unwanted not in code, code
        assert grad == ("gelu(" in code.replace("'gelu'", "")), code  # the reference after the op, unfused only
        torch._dynamo.reset()


def test_refusals_before_any_launch():
    x, w, offs, b = _call(k=1024)
    with pytest.raises(GemmTypeError):
        gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs, activation=3)
    from gemm_ladder.api_grouped import grouped_mm_direct

    with pytest.raises(GemmInputError, match="one of"):  # checked first, on an empty problem too
        grouped_mm_direct(_meta(0, 1024), w.transpose(-2, -1), offs, activation="tanh")
    with pytest.raises(GemmInputError, match=r"x must be \(R, K\)"):
        gemm_ladder.grouped_linear(_meta(8, 16, 1024), w, None, b, activation="relu")


def test_explain_names_the_fused_build_and_why_one_cta():
    x, w, offs, bias = _call()
    e = gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs, bias=bias, activation="gelu")
    assert e["activation"] == "gelu" and e["kernel"] == "sm90_grouped_gemm_256_k_bias_gelu"
    # K = 2048 takes a pair by the cluster rule; with a bias at BN 256 the activation's build is one CTA
    assert e["cluster"] == 1 and "not built on a pair" in e["cluster_reason"]
    assert gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs, activation="gelu")["cluster"] == 2
    assert gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs)["activation"] is None
    with pytest.raises(GemmInputError, match="one of"):
        gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs, activation="tanh")
    with pytest.raises(GemmInputError, match="grouped along M only"):
        gemm_ladder.explain_grouped_mm(_meta(4096, 64).t(), _meta(4096, 128), offs, activation="relu")


def test_the_fused_op_fake_and_its_refused_backward():
    x, w, offs, bias = _call(n=768, k=512)
    y = torch.ops.gemm_ladder.grouped_linear_act(x, w, offs, bias, "silu")
    assert y.shape == (4096, 768) and y.dtype == BF and y.device.type == "meta"
    with pytest.raises(GemmInputError):
        torch.ops.gemm_ladder.grouped_linear_act(x, w, offs, bias, "tanh")
    with pytest.raises(GemmInputError):
        torch.ops.gemm_ladder.grouped_linear_act(x, _meta(8, 768, 256), offs, bias, "silu")  # K differs
    xg = _meta(4096, 512).requires_grad_()
    out = torch.ops.gemm_ladder.grouped_linear_act(xg, w, offs, bias, "relu")
    with pytest.raises(NotSupportedError, match="no backward"):
        torch.autograd.grad(out.sum(), xg)
