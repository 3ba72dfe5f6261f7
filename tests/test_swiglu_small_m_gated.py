"""The small-M kernel's gated build (library/swiglu_small_m.py, sm90_gemm_small_m.cu with GL_SWIGLU), CPU part:
the designer's plan of its 256-row stages, the weights' maps, the resource gate of every bucket, the ring audit,
the refusals, the family's registration, and swiglu's small-M path choosing it (explain on meta tensors).
tests/test_swiglu_small_m_gated_gpu.py runs it.
"""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.audit import audit
from gemm_ladder.dispatch import kernels as dispatch_kernels
from gemm_ladder.dispatch import swiglu_small_m
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import SmallMGemm
from gemm_ladder.library.swiglu_small_m import (
    BUCKETS, FAMILY, SWIGLU_SMALL_M, STAGE_ROWS, SwigluSmallM, kernel_for, swiglu_small_m_kernel,
)

from conftest import needs_nvcc
from test_library_small_m import _ring  # the small-M kernel's ring as the auditor models it: the gated build's too


@pytest.mark.parametrize("bn", BUCKETS)
def test_the_plan_holds_both_weights_rows_in_each_stage(bn):
    """Tile (256, BN, 64): 128 rows of each weight and BN of x a stage, the deepest ring that fits (one more
    refused), two consumer warpgroups of 128 weight rows (64 of each weight) and a producer warpgroup, C from
    registers; each weight's map is (N, K) with a box of 128 rows, half the stage."""
    g = swiglu_small_m_kernel(bn)
    plan = g.plan(bn, 1000, 520, "bf16")
    d = plan.kernel_defines()
    assert d == g.config("bf16").plan_defines()
    assert (d["GL_BM"], d["GL_BN"], d["GL_BK"]) == (STAGE_ROWS, bn, 64) == (256, bn, 64)
    assert d["GL_THREADS"] == 384 and d["GL_CONSUMERS"] == 2 and d["GL_C_PANELS"] == 0
    assert d["GL_EXPECT_TX_BYTES"] == (256 + bn) * 64 * 2  # both weights' 128-row boxes and x's box
    assert plan.stages == g.ring_stages("bf16") >= 4 and d["GL_SMEM_BYTES"] <= 232448
    deeper = SmallMGemm(bn).ring_stages("bf16")
    assert plan.stages < deeper  # twice the weight bytes a stage: fewer stages than the plain bucket
    w = g.weight_map_spec(plan, 1000, 520, 528)
    assert (w.global_dim, w.global_strides, w.box_dim) == ((520, 1000), (1056,), (64, 128))
    assert w.box_bytes * 2 + plan.tensor_maps["b"].box_bytes == d["GL_EXPECT_TX_BYTES"]
    assert g.config("bf16").extra == (("GL_SWIGLU", 1),) and g.config("bf16").defines()["GL_SWIGLU"] == 1


@needs_nvcc
@pytest.mark.parametrize("bn,dtype", [(bn, "bf16") for bn in BUCKETS] + [(8, "fp16"), (128, "fp16")])
def test_resource_gate(bn, dtype, use_cache):
    """Every bucket (fp16 at the narrowest and the widest) compiles for sm_90a with no spill, stack or local
    memory, with HGMMA and TMA loads and no TMA store (C from registers): both fragments (BN accumulators) fit
    the consumers' 232 registers."""
    from gemm_ladder.gates.resources import check_cubin_resources

    g = SwigluSmallM(bn)
    kernel = g.build(dtype)
    geo = g.geometry(dtype)
    report = check_cubin_resources(kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=None, dtype=dtype,
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=1)
    assert report.passed, report.messages
    assert report.stack_bytes == report.spill_stores == report.spill_loads == 0
    assert report.sass["HGMMA"] > 0 and report.sass["UTMALDG"] > 0 and report.sass["UTMASTG"] == 0
    assert report.sass["LDL"] == report.sass["STL"] == 0


@pytest.mark.parametrize("bn", (8, 128))
def test_the_ring_audits_clean_and_a_seeded_fault_is_found(bn):
    """The ring is the plain small-M kernel's protocol (one full barrier a stage armed with both weights' and x's
    bytes, both consumers releasing it) at this build's depth: clean over short, carried and wrapping pieces, and
    a consumer's release not counted is found."""
    plan = swiglu_small_m_kernel(bn).plan(bn, 4096, 4096, "bf16")
    s = plan.stages
    for k, t in [(1, 3), (2, 3), (s - 1, 2), (s + 1, 2), (2 * s + 1, 1)]:
        result = audit(_ring(plan, k, t))
        assert result.ok, f"BN={bn} S={s} K={k} T={t}\n{result.render()}"
    assert "early_overwrite" in {v.kind for v in audit(_ring(plan, s + 1, 1, empty_count=1)).violations}


def _views(m=7, n=1000, k=520, dtype=torch.bfloat16, device="meta"):
    x = torch.empty(m, k, dtype=dtype, device=device)
    wg, wu = torch.empty(n, k, dtype=dtype, device=device), torch.empty(n, k, dtype=dtype, device=device)
    return [operand_view(t, k_dim=1) for t in (x, wg, wu)], torch.empty(m, n, dtype=dtype, device=device)


def test_supports_names_the_rule_it_refuses():
    g = swiglu_small_m_kernel(8)
    views, out = _views()
    assert g.supports(*views, out) is None
    x, wg, wu = views
    assert "dtype" in g.supports(x, wg, wu, out.to(torch.float32))
    assert "1 <= M <= 256" in g.supports(*_views(m=300)[0], torch.empty(300, 1000, dtype=torch.bfloat16, device="meta"))
    assert "(M, N)" in g.supports(x, wg, wu, torch.empty(7, 999, dtype=torch.bfloat16, device="meta"))
    short_up = operand_view(torch.empty(900, 520, dtype=torch.bfloat16, device="meta"), k_dim=1)
    assert "(N, K)" in g.supports(x, wg, short_up, out)
    mn = operand_view(torch.empty(520, 1000, dtype=torch.bfloat16, device="meta").T, k_dim=1)
    assert "MN-major" in g.supports(x, mn, wu, out)
    odd = operand_view(torch.empty(1000, 523, dtype=torch.bfloat16, device="meta")[:, :520], k_dim=1)
    assert "16-byte" in g.supports(x, odd, wu, out)
    cpu_views, cpu_out = _views(device="cpu")
    assert "CUDA" in g.supports(*cpu_views, cpu_out)
    huge = [operand_view(torch.empty(2**31, 8, dtype=torch.bfloat16, device="meta"), k_dim=1)] * 2
    x8 = operand_view(torch.empty(7, 8, dtype=torch.bfloat16, device="meta"), k_dim=1)
    assert "2^31" in g.supports(x8, *huge, torch.empty(7, 2**31, dtype=torch.bfloat16, device="meta"))
    from gemm_ladder.library.kernel import Operands
    fp16_views, fp16_out = _views(dtype=torch.float16)
    problem = Operands(fp16_views[0], fp16_views[1], fp16_out, more=(fp16_views[2],))
    assert "this build (bf16)" in SWIGLU_SMALL_M.supports(g.config("bf16"), problem)
    assert SWIGLU_SMALL_M.supports(g.config("fp16"), problem) is None
    with pytest.raises(ValueError, match="BN in"):
        SwigluSmallM(256)


def test_the_family_is_registered_and_kernel_for_round_trips():
    config = swiglu_small_m_kernel(64).config("fp16")
    assert config.family == FAMILY and dispatch_kernels.family(config) is SWIGLU_SMALL_M
    assert kernel_for(config) is swiglu_small_m_kernel(64) and dispatch_kernels.kernel_object(config).bn == 64
    with pytest.raises(ValueError, match="no such configuration"):
        kernel_for(SmallMGemm(64).config("fp16"))
    assert SWIGLU_SMALL_M.describe(config)["tile"] == [256, 64, 64]


@pytest.mark.parametrize("m,bn,tiles", [(1, 8, 1), (16, 16, 1), (64, 64, 1), (128, 128, 1)])
def test_swiglu_takes_one_launch_when_asked(m, bn, tiles, monkeypatch):
    """With ONE_LAUNCH on (the default), explain_swiglu on the small-M path names the gated build, M in one tile of
    its bucket; with it off, the pair. one_launch_bn caps the bucket at 128 (192 rows: two tiles, which the path
    does not take: ONE_LAUNCH_MAX_M)."""
    assert swiglu_small_m.one_launch_bn(192) == 128 and swiglu_small_m.one_launch_bn(17) == 32
    with pytest.raises(ValueError):
        swiglu_small_m.one_launch_bn(0)
    x = torch.empty(m, 4096, dtype=torch.bfloat16, device="meta")
    w = torch.empty(14336, 4096, dtype=torch.bfloat16, device="meta")
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", False)
    assert gemm_ladder.explain_swiglu(x, w, w)["path"] == "small_m_pair"
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", True)
    e = gemm_ladder.explain_swiglu(x, w, w)
    assert e["path"] == "small_m_gated" and "ONE_LAUNCH" in e["reason"]
    (launch,) = e["launches"]
    assert launch["kernel"]["bn"] == bn and launch["m_tiles"] == tiles
    assert swiglu_small_m.one_launch_bn(m) == bn
