"""The ping-pong build of the layouts kernel (sm90_gemm.cu's GL_PINGPONG: two consumer warpgroups take
the tiles in turn, one storing while the other computes), built and audited without a GPU: 64-row tiles,
and 128-row tiles (each consumer two 64-row fragments of its own tile) at BN <= 192.

Resource gate: each build (BN 64/128/192/256, 2-CTA clusters and one CTA, TMA panels and the register
store, bf16 and fp16, and one with a fused bias + GELU) compiles, passes gemm_ladder.gates.resources
(no spills, no stack or local memory, HGMMA at 64 x BN and TMA loads present) and keeps the register
split (USETMAXREG). The plan: the library kernel's config is the designer's ping-pong plan (its order
barriers, the empty count of one consumer per CTA, no stream-K tail), and that plan's ring audits clean.
The cooperative builds' defines carry no ping-pong constant, so their build keys and SASS are the ones
measured before (tests/test_library_gemm_build.py gates them).
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import gate_reports, needs_nvcc

from gemm_ladder.audit.plans import audit_plan
from gemm_ladder.gates.resources import check_cubin_resources
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.kernel import DATA_PARALLEL

#: (bn, cluster, c_from_registers, dtype)
JOBS = ([(bn, cl, False, "bf16") for bn in (64, 128, 192, 256) for cl in (2, 1)]
        + [(bn, 2, True, "bf16") for bn in (128, 256)] + [(128, 2, False, "fp16"), (128, 1, True, "fp16")])
#: The 128-row builds: (bn, cluster, c_from_registers, bm, dtype).
JOBS_128 = ([(bn, cl, False, 128, "bf16") for bn in (64, 128, 192) for cl in (2, 1)]
            + [(bn, 1, True, 128, "bf16") for bn in (64, 96, 128, 144, 192)] + [(128, 1, False, 128, "fp16")])
_HGMMA = re.compile(r"HGMMA\.64x(\d+)x16\.F32")


def kernel(bn: int, cluster: int = 2, reg: bool = False, bm: int = 64):
    return library_gemm("k", "k", bn, bm=bm, pingpong=True, cluster=cluster, c_from_registers=reg)


@pytest.fixture(scope="module")
def reports(nvcc_cache):
    return gate_reports(nvcc_cache, JOBS + JOBS_128, lambda j: kernel(*j[:-1]))


@needs_nvcc
@pytest.mark.parametrize("job", JOBS + JOBS_128, ids=lambda v: str(v))
def test_every_pingpong_build_passes_the_resource_gate(reports, job):
    report, sass = reports[job]
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
    assert "USETMAXREG" in sass, "the producer/consumer register split (setmaxnreg) is gone"
    assert set(_HGMMA.findall(sass)) == {str(job[0])}


@needs_nvcc
@pytest.mark.parametrize("bn,reg,bm,residual", [(128, False, 64, True), (256, False, 64, True), (256, True, 64, True),
                                                (64, False, 128, True), (144, True, 128, True), (128, False, 128, False),
                                                (192, False, 128, False)])
def test_the_linear_epilogue_builds_without_spills(use_cache, bn, reg, bm, residual):
    """bias + GELU (erf) + residual + alpha, the most live values a linear call fuses, at the widths a
    ping-pong consumer holds whole (64 x BN accumulators: 128 registers at BN 256). The 128 x 128 tile with
    the TMA store fits bias + GELU + alpha; with a residual too it spilled 84 bytes (its staging of two
    fragments per panel): docs/library.md."""
    from gemm_ladder.library.epilogue import linear_epilogue

    ep = linear_epilogue(bias=True, activation="gelu", residual=residual, alpha=True)
    dts = {"gl_bias_": torch.bfloat16, **({"gl_residual_": torch.bfloat16} if residual else {})}
    src = ep.source(dts, False, wide=False, pairs={n: (True, False) for n in dts})
    built = kernel(bn, reg=reg, bm=bm).build("bf16", epilogue_source=src)
    report = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype="bf16")
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["HGMMA"] and bool(report.sass["UTMASTG"]) != reg


@pytest.mark.parametrize("bn", (64, 128, 192, 256))
@pytest.mark.parametrize("cluster", (2, 1))
def test_the_config_is_the_designers_pingpong_plan(bn, cluster):
    k = kernel(bn, cluster)
    cfg = k.config("bf16")
    assert cfg.pingpong and cfg.consumers == 2 and cfg.tile[0] == 64 and cfg.schedule == DATA_PARALLEL
    d = cfg.defines()
    assert d["GL_PINGPONG"] == 1 and d["GL_CONSUMERS"] == 2 and d["GL_THREADS"] == 384
    assert d["GL_EMPTY_ARRIVALS"] == cluster  # one consumer per CTA reads each stage
    assert d["GL_SMEM_ORDER_BAR_OFFSET"] >= d["GL_SMEM_EMPTY_BAR_OFFSET"] + 8 * d["GL_STAGES"]
    assert k.splits == ("none",) and k.default_split == "none"
    plan = k.plan(4096, 2048, 512, "bf16")
    assert plan.schedule.stream_k is None  # every unit whole
    assert plan.to_json()["problem"].get("schedule") == "pingpong"


@pytest.mark.parametrize("bn,cluster", [(64, 2), (128, 2), (64, 1), (128, 1), (192, 1)])
def test_the_128_row_config_is_the_designers_pingpong_plan(bn, cluster):
    k = kernel(bn, cluster, bm=128)
    cfg = k.config("bf16")
    assert cfg.pingpong and cfg.consumers == 2 and cfg.tile[0] == 128 and cfg.schedule == DATA_PARALLEL
    d = cfg.defines()
    assert d["GL_PINGPONG"] == 1 and d["GL_BM"] == 128 and d["GL_EMPTY_ARRIVALS"] == cluster
    assert d["GL_EXPECT_TX_BYTES"] == (128 + bn) * 64 * 2  # a whole 128-row A stage for the one consumer
    plan = k.plan(4096, 2048, 512, "bf16").to_json()
    assert plan["problem"].get("schedule") == "pingpong"
    assert d["GL_SMEM_C_PANEL_BYTES"] == 128 * 128  # one store covers the tile's 128 rows


@pytest.mark.parametrize("bn,bm", [(128, 64), (192, 64), (256, 64), (128, 128), (64, 128), (192, 128)])
def test_the_kernels_pingpong_ring_audits_clean(bn, bm):
    """The plan the kernel is built from, its stage count and panel rings, through the auditor (one CTA
    per cluster: a 2-CTA cluster's state space at 8-13 stages takes minutes; tests/test_audit_pingpong.py
    proves the cluster's releases on a smaller ring)."""
    plan = kernel(bn, cluster=1, bm=bm).plan(4096, 2048, 256, "bf16").to_json()
    result = audit_plan(plan, max_states=3_000_000)
    assert result.ok and result.complete, result.render()


def test_cooperative_builds_carry_no_pingpong_constant():
    for bm in (128, 64):
        d = library_gemm("k", "k", 128, bm=bm).config("bf16").defines()
        assert "GL_PINGPONG" not in d and "GL_SMEM_ORDER_BAR_OFFSET" not in d


def test_pingpong_is_refused_where_it_cannot_run():
    with pytest.raises(ValueError, match="64 rows"):
        library_gemm("k", "k", 256, bm=128, pingpong=True)
    assert library_gemm("k", "k", 192, bm=128, pingpong=True).c_ring == 1  # BN 192: the TMA store too
