"""The grouped kernel's fused gated-MLP build (issue 24's fused SwiGLU: ``grouped_gemm(256, "k", swiglu=True)``,
sm90_grouped_gemm.cu's GL_SWIGLU) without a GPU: the build's config, plan and refusals, the resource gate on
its SASS (no spill, no serialised wgmma), its stage ring audited, which calls take it (fused_rule, explain)
and its op's fake. GPU results: tests/test_grouped_swiglu_fused_gpu.py."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import needs_nvcc

import gemm_ladder
import gemm_ladder.ops_grouped_swiglu as gs
from gemm_ladder.audit import audit
from gemm_ladder.library.grouped import GROUP_TABLE_BYTES, grouped_gemm, kernel_for

BF = torch.bfloat16


def _meta(*shape, dtype=BF, **kw):
    return torch.empty(*shape, dtype=dtype, device="meta", **kw)


def _offs(n):
    return torch.empty(n, dtype=torch.int32, device="meta")


def test_the_fused_build_and_its_plan():
    k = grouped_gemm(256, "k", swiglu=True)
    assert k.name == "sm90_grouped_gemm_256_k_swiglu" and k.out_bn == 128 and k.c_ring == 0
    config = k.config("bf16")
    d = config.defines()
    assert d["GL_SWIGLU"] == 1 and d["GL_C_PANELS"] == 0 and d["GL_STAGES"] == 4
    assert d["GL_SMEM_BYTES"] + GROUP_TABLE_BYTES <= 232448
    assert kernel_for(config) is k and "GL_SWIGLU" not in grouped_gemm(256, "k").config("bf16").defines()
    plan = k.plan(4096, 768, 2048, 128, "bf16")
    # Two weight maps of one 128-row box each: A's 16 KiB and B's 256 rows (32 KiB) a stage.
    assert set(plan.tensor_maps) == {"x", "w", "w_up"}
    assert plan.tensor_maps["w"].box_dim == plan.tensor_maps["w_up"].box_dim == (64, 128, 1)
    assert plan.tensor_maps["w_up"].global_dim == (2048, 768, 128)
    assert plan.gemm.load_protocol.expect_tx_bytes == 128 * 64 * 2 + 256 * 64 * 2
    assert plan.n_tile == 128 and plan.max_tiles == (4096 // 128 + 128) * 6


@pytest.mark.parametrize("kwargs", [dict(bn=128), dict(b_major="mn"), dict(out_fp32=True), dict(bias=True),
                                    dict(masked=True), dict(cluster=2), dict(ring=4)])
def test_builds_the_fused_kernel_is_not_made_with_are_refused(kwargs):
    with pytest.raises(ValueError, match="swiglu=True"):
        grouped_gemm(**{"bn": 256, "b_major": "k", **kwargs}, swiglu=True)


def test_the_plain_launch_refuses_the_fused_build():
    from gemm_ladder.errors import GemmInputError

    x = torch.empty(10, 64, dtype=BF)
    with pytest.raises(GemmInputError, match="launch_swiglu"):
        grouped_gemm(256, "k", swiglu=True).launch(x, torch.empty(2, 128, 64, dtype=BF),
                                                     torch.empty(2, dtype=torch.int32), torch.empty(10, 128, dtype=BF))


def test_the_ring_audits_clean_and_fails_on_seeded_faults():
    k = grouped_gemm(256, "k", swiglu=True)
    s = k.defines("bf16")["GL_STAGES"]
    for k_iters, tiles in [(1, 3), (2, 3), (s - 1, 2), (s + 1, 2), (2 * s + 1, 1)]:
        result = audit(k.ring_protocol(k_iters, tiles))
        assert result.ok, result.render()
    assert "early_overwrite" in {v.kind for v in audit(k.ring_protocol(s + 1, 1, empty_count=1)).violations}


def test_which_calls_take_it(monkeypatch):
    x, w = _meta(4096, 2048), _meta(128, 768, 2048)
    assert gs.fused_rule(x, w, w) is None  # on by default (bench/grouped.py's eight swiglu cases measured)
    assert "FUSED_DEFAULT is off" in gs.fused_rule(x, w, w, fused=False)
    assert "requires grad" in gs.fused_rule(_meta(4096, 2048, requires_grad=True), w, w)
    with torch.no_grad():
        assert gs.fused_rule(_meta(4096, 2048, requires_grad=True), w, w) is None
    padded = torch.empty_strided((128, 768, 2048), (768 * 2048 * 2, 2048, 1), dtype=BF, device="meta")
    assert "strides" in gs.fused_rule(x, w, padded)
    e = gemm_ladder.explain_grouped_swiglu(x, w, w, _offs(128))
    assert e["path"] == "fused" and e["fused"] and e["launches"][0]["kernel"] == "sm90_grouped_gemm_256_k_swiglu"
    assert e["launches"][0]["out_tile"] == [128, 128] and e["backward"] == []
    monkeypatch.setattr(gs, "FUSED_DEFAULT", False)
    e = gemm_ladder.explain_grouped_swiglu(x, w, w, _offs(128))
    assert e["path"] == "two_grouped_gemms" and "FUSED_DEFAULT is off" in e["reason"]


def test_the_fused_op_is_registered_with_a_fake(monkeypatch):
    out = torch.ops.gemm_ladder.grouped_swiglu_fused(_meta(10, 64), _meta(3, 40, 64), _meta(3, 40, 64), _offs(3))
    assert out.shape == (10, 40) and out.dtype == BF and out.device.type == "meta"
    monkeypatch.setattr(gs, "FUSED_DEFAULT", True)
    with torch.no_grad():  # the public call on meta tensors goes through the fused op
        assert gemm_ladder.grouped_swiglu(_meta(10, 64), _meta(3, 40, 64), _meta(3, 40, 64), _offs(3)).shape == (10, 40)


@needs_nvcc
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_fused_build_passes_the_resource_gate(use_cache, dtype):
    """No spill, stack or local memory, no serialised wgmma (the gate fails on C7514/C7515/C7517); 64 x 256
    wgmma; SiLU's one ex2 per output a thread (64); stores from registers, no TMA store."""
    from gemm_ladder.gates.resources import check_level_resources

    report, sass = check_level_resources(grouped_gemm(256, "k", swiglu=True), dtype)
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["UTMASTG"] == 0 and report.sass["UTMALDG"] > 0
    assert re.search(r"HGMMA\.64x256x16\.F32", sass) and sass.count("MUFU.EX2") == 64
    assert re.search(r"\bSTG\.E ", sass)
