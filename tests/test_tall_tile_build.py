"""The general kernel's cooperative 256-row tile (sm90_gemm.cu at BM 256: two consumer warpgroups of 128 rows,
each holding two 64-row fragments of the same tile; every unit whole), built and audited without a GPU.

Resource gate: each build (BN 64, 128 and 192 with the TMA store, both cluster sizes; 96-192 with the register
store; fp16; every operand order; a fused bias + GELU) compiles with no spill and no local memory, keeps the
register split and issues two 64-row wgmmas per k16 step. The plan is the designer's cooperative plan at 256 rows
(128 rows per consumer, a 256-row A box, 128-row C panels in a ring of one, no stream-K tail) and its ring audits
clean; the library refuses what the tile does not hold. Not routed: the dispatcher never sees BM 256.
"""

from __future__ import annotations

import pytest
import torch
from conftest import gate_reports, needs_nvcc

from gemm_ladder.audit.plans import audit_plan
from gemm_ladder.library.gemm import TALL_TILE_M, TILE_M, library_gemm
from gemm_ladder.library.kernel import DATA_PARALLEL

#: (bn, cluster, c_from_registers, a_major, b_major, dtype)
JOBS = ([(bn, cl, False, "k", "k", "bf16") for bn in (64, 128, 192) for cl in (1, 2)]
        + [(bn, 1, True, "k", "k", "bf16") for bn in (96, 128, 144, 192)]
        + [(128, 1, False, "k", "k", "fp16"), (128, 2, True, "k", "k", "fp16")]
        + [(128, cl, False, am, bmj, "bf16") for am, bmj in (("mn", "k"), ("k", "mn"), ("mn", "mn")) for cl in (1, 2)])


def kernel(bn: int, cluster: int = 1, reg: bool = False, a_major: str = "k", b_major: str = "k"):
    return library_gemm(a_major, b_major, bn, bm=TALL_TILE_M, cluster=cluster, c_from_registers=reg)


@pytest.fixture(scope="module")
def reports(nvcc_cache):
    return gate_reports(nvcc_cache, JOBS, lambda j: kernel(*j[:5]))


@needs_nvcc
@pytest.mark.parametrize("job", JOBS, ids=lambda v: str(v))
def test_every_256_row_build_passes_the_resource_gate(reports, job):
    report, sass = reports[job]
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
    assert "USETMAXREG" in sass, "the producer/consumer register split (setmaxnreg) is gone"
    # two 64-row fragments per consumer: each k16 step's wgmma issued twice, at the tile's width
    assert report.sass["HGMMA"] == 8 and f"HGMMA.64x{job[0]}x16" in sass
    assert bool(report.sass["UTMASTG"]) != job[2]


@needs_nvcc
@pytest.mark.parametrize("bn,reg,residual", [(128, False, False), (192, False, False), (192, True, True),
                                             (128, True, True)])
def test_the_linear_epilogue_builds_without_spills(use_cache, bn, reg, residual):
    """bias + GELU (erf) + alpha, and a residual from registers. With the TMA store a residual too spilled 64
    bytes at BN 128 and 112 at BN 192 (its staging of two fragments per panel, as the 128-row ping-pong tile's 84
    and 160): not gated."""
    from gemm_ladder.gates.resources import check_cubin_resources
    from gemm_ladder.library.epilogue import linear_epilogue

    ep = linear_epilogue(bias=True, activation="gelu", residual=residual, alpha=True)
    dts = {"gl_bias_": torch.bfloat16, **({"gl_residual_": torch.bfloat16} if residual else {})}
    src = ep.source(dts, False, wide=False, pairs={n: (True, False) for n in dts})
    built = kernel(bn, reg=reg).build("bf16", epilogue_source=src)
    report = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype="bf16")
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)


@pytest.mark.parametrize("bn,cluster,reg", [(128, 1, False), (128, 2, False), (64, 1, False), (192, 1, True),
                                            (192, 2, False)])
def test_the_config_is_the_designers_256_row_plan(bn, cluster, reg):
    k = kernel(bn, cluster, reg)
    cfg = k.config("bf16")
    assert not cfg.pingpong and cfg.consumers == 2 and cfg.tile[0] == 256 and cfg.schedule == DATA_PARALLEL
    d = cfg.defines()
    assert d["GL_BM"] == 256 and d["GL_CONSUMERS"] == 2 and d["GL_THREADS"] == 384 and "GL_PINGPONG" not in d
    assert d["GL_EMPTY_ARRIVALS"] == 2 * cluster  # both consumers read every stage
    assert d["GL_EXPECT_TX_BYTES"] == (256 + bn) * 64 * 2
    assert k.splits == ("none",) and k.default_split == "none" and k.name.endswith("_bm256")
    assert k.c_ring == (0 if reg else 1)
    # four stages or more beside the two 16 KiB panels to BN 128; at BN 192 (56 KiB a stage) three, four without them
    assert k.stages == 3 if (bn, reg) == (192, False) else k.stages >= 4
    plan = k.plan(1576, 3072, 1024, "bf16")
    assert plan.schedule.stream_k is None  # every unit whole
    maps = plan.to_json()["tensor_maps"]
    assert maps["a"]["box_dim"] == [64, 256]
    if not reg:
        assert maps["c"]["box_dim"] == [64, 128]  # one consumer's 128 rows per store
    assert audit_plan(plan.to_json()).ok


@pytest.mark.parametrize("kwargs", [dict(bn=256), dict(bn=192, pingpong=True), dict(bn=192, pingpong=True, c_from_registers=True),
                                    dict(bn=128, out_e4m3=True, c_from_registers=True), dict(bn=128, release_lag=2),
                                    dict(bn=256, c_from_registers=True)], ids=str)
def test_the_256_row_tile_refuses_what_it_cannot_hold(kwargs):
    bn = kwargs.pop("bn")
    with pytest.raises(ValueError, match="256"):
        library_gemm("k", "k", bn, bm=TALL_TILE_M, **kwargs)


def test_the_route_never_sees_256_rows():
    from gemm_ladder.dispatch import kernels as K

    assert TALL_TILE_M not in TILE_M
    assert TALL_TILE_M not in K.general_tile_ms()
