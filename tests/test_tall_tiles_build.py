"""The general kernel's 192-row tile (three consumer warpgroups), built and audited without a GPU.

library/gemm.py's UNROUTED_TILE_M: the same kernel body with kConsumers = 3, each consumer owning 64 rows of a
192 x BN tile, 152 registers each after the producer gives its share back (setmaxnreg). Built at the widths
TALL_TILE_MAX_N allows (BN <= 128 with the TMA store, <= 192 from registers); the others are refused before any
compile. Every build passes the resource gate (no spill, stack or local memory, no serialised wgmma) and its
ring (three consumers' releases, three panel rings) audits clean. Not ranked by the route.
"""

from __future__ import annotations

import pytest
from conftest import gate_reports, needs_nvcc

from gemm_ladder.audit import audit, protocol_for_level
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.library.gemm import TALL_TILE_MAX_N, UNROUTED_TILE_M, library_gemm, tile_built

#: (bn, c_from_registers, cluster) of every 192-row build gated here (bf16; fp16 at BN 128, both clusters).
JOBS = [(bn, False, cl) for bn in (64, 128) for cl in (2, 1)] + [(bn, True, cl) for bn in (96, 144, 192) for cl in (2, 1)]


@pytest.fixture(scope="module")
def reports(nvcc_cache):
    jobs = [(*j, "bf16") for j in JOBS] + [(128, False, cl, "fp16") for cl in (2, 1)]
    return gate_reports(nvcc_cache, jobs, lambda j: library_gemm("k", "k", j[0], bm=192, c_from_registers=j[1],
                                                                 cluster=j[2]))


@needs_nvcc
@pytest.mark.parametrize("job", JOBS, ids=str)
def test_192_row_builds_pass_the_resource_gate(reports, job):
    """No spill at 152 registers a consumer; three consumers' wgmma (HGMMA 64 x BN); the register split kept."""
    for dtype in ("bf16", "fp16") if job[:2] == (128, False) else ("bf16",):
        report, sass = reports[(*job, dtype)]
        assert report.passed, report.messages
        assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
        assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
        assert "USETMAXREG" in sass, "the producer's registers are not given to the consumers"
        assert f"HGMMA.64x{job[0]}x16" in sass
        assert (report.sass["UTMASTG"] == 0) == job[1], "the TMA store where built, none from registers"


def test_the_plan_has_three_consumers():
    """512 threads (a producer and three consumers), every consumer's release counted per CTA of the cluster,
    and the stages that fit beside three panel rings."""
    for bn, creg, stages in ((64, False, 6), (128, False, 4), (144, True, 5), (192, True, 4)):
        d = library_gemm("k", "k", bn, bm=192, c_from_registers=creg).defines("bf16")
        assert (d["GL_BM"], d["GL_CONSUMERS"], d["GL_THREADS"], d["GL_EMPTY_ARRIVALS"]) == (192, 3, 512, 6)
        assert d["GL_STAGES"] == stages, (bn, creg, d["GL_STAGES"])
        assert d["GL_SMEM_BYTES"] <= 232448


@pytest.mark.parametrize("bn", [64, 128])
def test_the_192_row_ring_audits_clean(bn):
    """Level 9's protocol with three consumers, each with its panel ring, over a bound that wraps the stages."""
    d = library_gemm("k", "k", bn, bm=192).defines("bf16")
    stages, panels, ring = d["GL_STAGES"], d["GL_C_PANELS"], d["GL_C_RING"]
    k_iters = stages // 2 + 1
    p = protocol_for_level(9, k_iters=k_iters, tiles=2, stages=stages, cluster=d["GL_CLUSTER"],
                           consumers=d["GL_CONSUMERS"], c_ring=ring, tile=(192, bn, 64))
    assert panels == bn // 64 and ring == min(2, panels)
    assert len({buf.name for buf in p.buffers if buf.kind == "staging"}) == 3 * ring
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()

    # Seeded on one CTA (a small state space: found in under a second; the pair's took minutes): the empty
    # barrier counting two consumers' releases, not three, lets the producer rewrite a stage the third still reads.
    bad = protocol_for_level(9, k_iters=3, tiles=2, stages=2, cluster=1, consumers=3, c_ring=ring, tile=(192, bn, 64),
                             empty_count=2)
    found = audit(bad, max_states=1_000_000)
    assert not found.ok and "VIOLATIONS" in found.render()


def test_the_widths_a_192_row_tile_has_and_refuses():
    assert UNROUTED_TILE_M == (192,) and TALL_TILE_MAX_N == {"tma": 128, "registers": 192}
    assert tile_built(192, 128, "k") and tile_built(192, 192, "k", True) and tile_built(192, 128, "mn")
    assert not tile_built(192, 192, "k") and not tile_built(192, 256, "k") and not tile_built(192, 256, "k", True)
    assert not tile_built(256, 128, "k")
    for kwargs in (dict(bn=192), dict(bn=256), dict(bn=128, c_from_registers=True, out_fp32=True),
                   dict(bn=128, c_from_registers=True, out_e4m3=True), dict(bn=64, pingpong=True)):
        with pytest.raises(ValueError):
            library_gemm("k", "k", bm=192, **kwargs)
    with pytest.raises(ValueError, match="BM in"):
        library_gemm("k", "k", 128, bm=256)


def test_the_route_does_not_rank_192_row_tiles():
    """The route ranks the heights it has cost-model terms for; 192 is built for measurement only."""
    assert 192 not in K.general_tile_ms()
    assert library_gemm("k", "k", 128, bm=192).name == "sm90_gemm_kk_bn128_bm192"
