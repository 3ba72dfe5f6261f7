"""The layouts library kernel built and audited without a GPU.

Resource gate: every build (4 operand layouts x BN 64/128/256 x bf16/fp16) compiles with nvcc, passes
gemm_ladder.gates.resources (no spills, no stack or local memory, HGMMA and TMA loads present), keeps
level 9's register split (setmaxnreg: USETMAXREG in SASS), and its HGMMA carry exactly the transpose
forms of its layout (``.tnspA`` for an MN-major A, ``.tnspB`` for an MN-major B). The builds run in
parallel threads (nvcc processes); on the 2-core CI machine they take about a minute in all.

Audit: the kernel's ring is level 9's (the same source), so the auditor's level-9 protocol, given this
kernel's stage count, panels per tile and panel buffers (read from its plan's defines), proves it free
of deadlock, early reuse and phase errors over a bound that wraps the ring at least once.
"""

from __future__ import annotations

import re

import pytest
from conftest import gate_reports, needs_nvcc

from gemm_ladder.audit import audit, protocol_for_level
from gemm_ladder.library.gemm import K_MAJOR_B_TILE_N, MAJORS, REGISTER_STORE_TILE_N, TILE_N, library_gemm

CONFIGS = [(a, b, bn) for a in MAJORS for b in MAJORS for bn in TILE_N] + \
    [(a, "k", bn) for a in MAJORS for bn in K_MAJOR_B_TILE_N]  # BN 192: a K-major B only
#: wgmma in SASS: HGMMA.64xNx16.F32.BF16 for bf16 inputs, HGMMA.64xNx16.F32 for fp16 (nvcc 13.0).
_HGMMA = re.compile(r"HGMMA\.(\d+x\d+x16)\.F32((?:\.BF16)?) [^;]*gdesc\[\w+\]((?:\.tnsp[AB])*)")


@pytest.fixture(scope="module")
def reports(nvcc_cache):
    """{(a_major, b_major, bn, dtype): (ResourceReport, SASS)} for every build."""
    jobs = [(a, b, bn, dt) for a, b, bn in CONFIGS for dt in ("bf16", "fp16")]
    return gate_reports(nvcc_cache, jobs, lambda j: library_gemm(*j[:3]))


@needs_nvcc
@pytest.mark.parametrize("a_major,b_major,bn", CONFIGS, ids=lambda v: str(v))
def test_every_build_passes_the_resource_gate(reports, a_major, b_major, bn):
    for dtype, mnemonic in (("bf16", ".BF16"), ("fp16", "")):
        report, sass = reports[a_major, b_major, bn, dtype]
        assert report.passed, report.messages
        assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
        assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
        assert "USETMAXREG" in sass, "level 9's register split (setmaxnreg) is gone"
        forms = set(_HGMMA.findall(sass))
        want = "".join(t for t, mn in ((".tnspA", a_major), (".tnspB", b_major)) if mn == "mn")
        assert forms == {(f"64x{bn}x16", mnemonic, want)}, forms


@needs_nvcc
def test_mn_major_loads_issue_one_tma_per_64_elements(reports):
    """An MN-major operand's tile is loaded as 64-element boxes: more UTMALDG than the K-major build."""
    kk = reports["k", "k", 256, "bf16"][0].sass["UTMALDG"]
    assert reports["mn", "k", 256, "bf16"][0].sass["UTMALDG"] > kk
    assert reports["k", "mn", 256, "bf16"][0].sass["UTMALDG"] > kk


@needs_nvcc
def test_bn64_mn_major_b_is_one_k_split_box_per_rank(reports):
    """At BN 64 an MN-major B is loaded as one box of 32 K lines per CTA rank (stage_ring.cuh's K-split
    branch), as many TMA loads as a K-major B's 32-row slice: the K-split build issues no more loads
    than the K-major one, where MN-major A adds its per-64-row boxes."""
    for a in ("k", "mn"):
        assert reports[a, "mn", 64, "bf16"][0].sass["UTMALDG"] == reports[a, "k", 64, "bf16"][0].sass["UTMALDG"]
    assert reports["mn", "k", 64, "bf16"][0].sass["UTMALDG"] > reports["k", "k", 64, "bf16"][0].sass["UTMALDG"]


@needs_nvcc
def test_the_native_layout_is_level_9s_machine_code(use_cache):
    """A and B K-major at BN 256 is level 9's kernel: the same source, the same plan but for two
    constants it does not read, so the same SASS (its measurements carry over)."""
    import sys
    from pathlib import Path

    from gemm_ladder.levels import LEVELS

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from sass_fingerprint import fingerprint

    for dtype in ("bf16", "fp16"):
        assert fingerprint(str(library_gemm("k", "k", 256).build(dtype).cubin)) == \
            fingerprint(str(LEVELS[9].build(dtype).cubin))


@pytest.mark.parametrize("bn", TILE_N)
def test_the_kernels_ring_audits_clean(bn):
    g = library_gemm("mn", "mn", bn)
    d = g.defines("bf16")
    stages, panels, ring = d["GL_STAGES"], d["GL_C_PANELS"], d["GL_C_RING"]
    k_iters = stages // 2 + 1  # two tiles of it wrap the ring: every stage is reused in the next round
    p = protocol_for_level(9, k_iters=k_iters, tiles=2, stages=stages, cluster=d["GL_CLUSTER"],
                           consumers=d["GL_CONSUMERS"], staging_buffers=ring, panels_per_tile=panels,
                           deferred_panels=panels - min(ring, panels), bn=bn)
    assert 2 * k_iters > stages
    # one buffer per consumer at BN 64 (one panel per tile) is named D0, D1 (audit/ring.py)
    assert {buf.name for buf in p.buffers if buf.kind == "staging"} == \
        {f"D{c}" if ring == 1 else f"D{c}.{r}" for c in range(2) for r in range(ring)}
    assert (ring, panels, stages) == {256: (2, 4, 4), 128: (2, 2, 6), 64: (1, 1, 8)}[bn]
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()


# --- the build that stores C from registers (GL_C_FROM_REGISTERS) --------------------------------

#: Register-store builds gated here: every operand order at BN 256 and 128 in bf16, fp16 on one, and
#: the float32-output build at both widths.
REGISTER_JOBS = ([(a, b, bn, False, "bf16") for a, b, bn in CONFIGS] + [("k", "k", 256, False, "fp16")]
                 + [("k", "k", bn, True, "bf16") for bn in TILE_N])


@pytest.fixture(scope="module")
def register_reports(nvcc_cache):
    """{(a_major, b_major, bn, out_fp32, dtype): (ResourceReport, SASS)} of the register-store builds."""
    return gate_reports(nvcc_cache, REGISTER_JOBS, lambda j: library_gemm(*j[:3], c_from_registers=True, out_fp32=j[3]))


@needs_nvcc
@pytest.mark.parametrize("job", REGISTER_JOBS, ids=lambda v: str(v))
def test_register_store_builds_pass_the_resource_gate(register_reports, job):
    """No spills, no stack, no local memory; wgmma and TMA loads as the TMA build has them, level 9's
    register split kept; and no TMA store at all: C leaves through global stores (STG), no UTMASTG."""
    a_major, b_major, bn, fp32, dtype = job
    report, sass = register_reports[job]
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
    assert report.sass["UTMASTG"] == 0, "the register-store build still issues TMA stores"
    # A pair: STG.E.64 (two floats) or STG.E (bf16x2); an element: STG.E (a float) or STG.E.U16.
    assert re.search(r"\bSTG\.E\.64 " if fp32 else r"\bSTG\.E ", sass), "no global store of a pair"
    assert re.search(r"\bSTG\.E " if fp32 else r"\bSTG\.E\.U16 ", sass), "no element store (misaligned pairs, the N edge)"
    assert "USETMAXREG" in sass
    forms = set(_HGMMA.findall(sass))
    want = "".join(t for t, mn in ((".tnspA", a_major), (".tnspB", b_major)) if mn == "mn")
    assert forms == {(f"64x{bn}x16", ".BF16" if dtype == "bf16" else "", want)}, forms


#: The register-store-only widths (BN 32, 96, 144: not whole 64-column store panels), K-major A and B: level 9's
#: 128-row pair and the one-consumer 64-row build alone in its cluster, bf16; fp16 on one.
NARROW_JOBS = [(bn, bm, cluster, "bf16") for bn in REGISTER_STORE_TILE_N for bm, cluster in ((128, 2), (64, 1))] + \
    [(96, 64, 1, "fp16")]


@pytest.fixture(scope="module")
def narrow_reports(nvcc_cache):
    return gate_reports(nvcc_cache, NARROW_JOBS,
                        lambda j: library_gemm("k", "k", j[0], c_from_registers=True, bm=j[1], cluster=j[2]))


@needs_nvcc
@pytest.mark.parametrize("job", NARROW_JOBS, ids=lambda v: str(v))
def test_register_store_only_widths_pass_the_resource_gate(narrow_reports, job):
    """BN 32, 96 and 144 compile to their wgmma width (HGMMA.64x32x16, ...), no spill, no stack, no TMA store."""
    bn, bm, cluster, dtype = job
    report, sass = narrow_reports[job]
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMASTG"] == 0
    assert set(_HGMMA.findall(sass)) == {(f"64x{bn}x16", ".BF16" if dtype == "bf16" else "", "")}


@needs_nvcc
def test_register_store_only_widths_compile_with_a_fused_epilogue(use_cache):
    """A bias + residual epilogue at BN 32, 96 and 144 in both orientations: its residual's prefetch runs are
    not whole 128-byte lines there (fused_epilogue.cuh's epi_prefetch_runs takes a partial last line)."""
    import torch

    from gemm_ladder.library.epilogue import linear_epilogue

    ep = linear_epilogue(bias=True, activation="gelu_tanh", residual=True, alpha=True)
    dts = {name: torch.bfloat16 for name in ep.tensor_inputs}
    for bn in REGISTER_STORE_TILE_N:
        g = library_gemm("k", "k", bn, c_from_registers=True, bm=64, cluster=1)
        for swap in (False, True):
            src = ep.source(dts, swap, wide=False, pairs={name: (True, False) for name in dts},
                            prefetch={"gl_residual_": "rows" if swap else "cols"})  # a row-major residual's
            assert g.build("bf16", epilogue_source=src).cubin.exists()


def test_register_store_only_widths_are_refused_elsewhere():
    """BN 32, 96 and 144 are built for a K-major B stored from registers; a TMA store or an MN-major B is refused."""
    for bn in REGISTER_STORE_TILE_N:
        assert library_gemm("k", "k", bn, c_from_registers=True).name == f"sm90_gemm_kk_bn{bn}_creg"
        with pytest.raises(ValueError, match=f"bn = {bn}: .*c_from_registers = False"):
            library_gemm("k", "k", bn)
        with pytest.raises(ValueError, match=f"bn = {bn}: .*b_major = 'mn'"):
            library_gemm("k", "mn", bn, c_from_registers=True)


def test_register_store_plan_stages_no_c():
    """The plan of the register-store build: no C panels or ring, no output tensor map, and the shared
    memory the panel rings took goes to the stage ring where a whole stage fits (BN 128: 7 stages, not
    6; BN 256: still 4); the -D constants say so."""
    for bn, stages in ((256, 4), (128, 7)):
        g = library_gemm("k", "mn", bn, c_from_registers=True)
        tma = library_gemm("k", "mn", bn)
        assert g.stages == stages and tma.stages == (4 if bn == 256 else 6)
        d = g.build_defines("bf16")
        assert (d["GL_C_PANELS"], d["GL_C_RING"], d["GL_STAGES"], d["GL_C_FROM_REGISTERS"]) == (0, 0, stages, 1)
        assert "GL_OUT_FP32" not in d and "GL_C_FROM_REGISTERS" not in tma.build_defines("bf16")
        assert library_gemm("k", "mn", bn, c_from_registers=True, out_fp32=True).build_defines("bf16")["GL_OUT_FP32"] == 1
        assert d["GL_SMEM_BYTES"] <= 227 * 1024
        plan = g.plan(4097, 4095, 4093, "bf16", lda=4096, ldb=4096)
        assert set(plan.tensor_maps) == {"a", "b"} and plan.smem.c_from_registers and plan.smem.c_bytes == 0
        assert g.output_store == "C from registers" and tma.output_store == "TMA store"
    with pytest.raises(ValueError, match="out_fp32=True needs c_from_registers"):
        library_gemm("k", "k", 256, out_fp32=True)


@pytest.mark.parametrize("bn", TILE_N)
def test_the_register_store_builds_ring_audits_clean(bn):
    """The stage ring at the register-store build's depth (7 stages at BN 128) audits clean: level 9's
    protocol with this build's stages, its output modelled as one write per tile per consumer (the
    register stores touch no shared memory, so no staging buffer constrains the ring beyond that)."""
    d = library_gemm("mn", "mn", bn, c_from_registers=True).defines("bf16")
    stages = d["GL_STAGES"]
    k_iters = stages // 2 + 1
    p = protocol_for_level(9, k_iters=k_iters, tiles=2, stages=stages, cluster=d["GL_CLUSTER"],
                           consumers=d["GL_CONSUMERS"], c_ring=1, staging_buffers=1, panels_per_tile=1,
                           deferred_panels=0, bn=bn)
    assert 2 * k_iters > stages
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()


# --- the measuring build with two wgmma groups in flight (release_lag=2) ----------------------------------

def test_the_release_lag_is_a_separate_measuring_build():
    shipped, lag2 = library_gemm("k", "k", 64, cluster=1, bm=64), library_gemm("k", "k", 64, cluster=1, bm=64, release_lag=2)
    assert lag2.name == shipped.name + "_lag2" and lag2.release_lag == 2 and shipped.release_lag == 1
    assert lag2.config("bf16").defines()["GL_RELEASE_LAG"] == 2 and "GL_RELEASE_LAG" not in shipped.config("bf16").defines()
    assert library_gemm("k", "k", 64, cluster=1, bm=64, release_lag=1) is shipped
    for bad in (0, 3, True, 2.0, "2"):
        with pytest.raises(ValueError, match="release_lag"):
            library_gemm("k", "k", 64, release_lag=bad)
    from gemm_ladder.library.gemm import kernel_for

    assert kernel_for(lag2.config("bf16")) is lag2


@pytest.mark.parametrize("bn,bm,cluster", [(64, 64, 1), (128, 128, 2), (256, 128, 2)])
def test_the_release_lag_2_ring_audits_clean(bn, bm, cluster):
    g = library_gemm("k", "k", bn, bm=bm, cluster=cluster, release_lag=2)
    d = g.defines("bf16")
    stages, panels, ring = d["GL_STAGES"], d["GL_C_PANELS"], d["GL_C_RING"]
    k_iters = stages // 2 + 1  # two tiles of it wrap the ring
    p = protocol_for_level(9, k_iters=k_iters, tiles=2, stages=stages, cluster=cluster, consumers=d["GL_CONSUMERS"],
                           staging_buffers=ring, panels_per_tile=panels, deferred_panels=panels - min(ring, panels),
                           tile=(bm, bn, 64), c_ring=ring, release_lag=2)
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()


@needs_nvcc
@pytest.mark.parametrize("bn,bm,cluster", [(64, 64, 1), (128, 64, 1), (128, 128, 2), (256, 128, 2)])
def test_the_release_lag_2_builds_pass_the_resource_gate_and_wait_on_two_groups(use_cache, bn, bm, cluster):
    from gemm_ladder.gates.resources import check_level_resources

    report, sass = check_level_resources(library_gemm("k", "k", bn, bm=bm, cluster=cluster, release_lag=2), "bf16")
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    # the main loop's wait leaves two groups in flight; the shipped build's leaves one
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x2" in sass
    _, shipped = check_level_resources(library_gemm("k", "k", bn, bm=bm, cluster=cluster), "bf16")
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x2" not in shipped and "WARPGROUP.DEPBAR.LE gsb0, 0x1" in shipped


def test_the_release_lag_2_plan_says_so_and_audits_at_lag_2():
    """The lag-2 build's plan (the designer's, plan_gemm's release_lag) names its release mode "two_back", keeps
    one stage fewer in flight ahead, and its plan audits clean as lag 2 (stage k released after the read of
    k + 2); plan_gemm refuses the lag at two stages and any lag but 1 and 2."""
    from gemm_ladder.audit import protocol_from_plan
    from gemm_ladder.design import PlanRefused, plan_gemm

    shipped = library_gemm("k", "k", 128).plan(2048, 1024, 4096, "bf16")
    plan = library_gemm("k", "k", 128, release_lag=2).plan(2048, 1024, 4096, "bf16")
    assert (shipped.ring.release_mode, plan.ring.release_mode) == ("previous", "two_back")
    assert plan.ring.lookahead == shipped.ring.lookahead - 1
    p = protocol_from_plan(plan.to_json(), k_iters=plan.stages * 3 // 2 + 1, tiles=2)
    cons = next(r for r in p.roles if r.kind == "consumer")
    seq = [(op.op, op.tag if op.op == "consume" else op.note) for op in cons.program if op.op in ("consume", "arrive")]
    assert seq[:4] == [("consume", 0), ("consume", 1), ("consume", 2), ("arrive", "consumer_release k#0")]
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()
    with pytest.raises(PlanRefused, match="three stages"):
        plan_gemm(256, 256, 256, "bf16", tile=(128, 128, 64), stages=2, persistent=True, consumers=2, c_ring=2,
                  release_lag=2)
    with pytest.raises(PlanRefused, match="release_lag"):
        plan_gemm(256, 256, 256, "bf16", release_lag=3)
