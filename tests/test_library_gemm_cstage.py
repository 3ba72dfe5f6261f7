"""The layouts kernel's staged-store build (sm90_gemm.cu with GL_C_STAGED: ``library_gemm(...,
c_from_registers=True, c_staged=True)``, name suffix ``_cstage``), without a GPU: its plan (per-warp
buffers in shared memory, no output tensor map), its rules (the register store's: any pitch, any
element-aligned base, float32), the resource gate on its builds (no spill, no local memory, no TMA
store, 16-byte global stores present), its ring audited at its stage count, and the dispatcher's switch
(dispatch/kernels.py's STAGED_STORE) routing every output a TMA store cannot write to it, with
``explain`` naming the staged copy. The copy itself is checked byte for byte on the CPU by
tests/test_staged_store_host.py, and on the H200 by tests/test_library_gemm_cstage_gpu.py."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import needs_nvcc

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.audit import audit, protocol_for_level
from gemm_ladder.design.problem import PlanRefused
from gemm_ladder.design.smem import STAGED_WARP_BYTES, plan_smem
from gemm_ladder.design.problem import arch_info
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.precompile import library_builds
from gemm_ladder.dispatch.route import ASSUMED_DEVICE
from gemm_ladder.library.gemm import MAJORS, TILE_N, library_gemm
from gemm_ladder.library.operand import operand_view
from test_dispatch import unaligned_out

BF = torch.bfloat16
STAGED = "staged copy (16-byte stores)"
_HGMMA = re.compile(r"HGMMA\.(\d+x\d+x16)\.F32((?:\.BF16)?) [^;]*gdesc\[\w+\]((?:\.tnsp[AB])*)")


def staged(a="k", b="k", bn=256, fp32=False):
    return library_gemm(a, b, bn, c_from_registers=True, c_staged=True, out_fp32=fp32)


# --- plan -------------------------------------------------------------------------------------------


def test_the_staged_plan_gives_each_consumer_warp_a_buffer():
    """32 KiB of warp buffers (2 consumers x 4 warps x 4 KiB) after the stages: BN 256 keeps its 4 stages
    (the TMA build's panel rings took the same 32 KiB), BN 128 and 64 have one fewer than the register
    store (6 and 8: the TMA build's counts); no output tensor map; the -D constants say so."""
    assert [staged(bn=bn).stages for bn in (256, 128, 64)] == [4, 6, 8]
    for bn in TILE_N:
        g = staged("k", "mn", bn)
        d = g.build_defines("bf16")
        assert (d["GL_C_FROM_REGISTERS"], d["GL_C_STAGED"], d["GL_C_PANELS"], d["GL_C_RING"]) == (1, 1, 0, 0)
        assert d["GL_SMEM_C_PANEL_BYTES"] == STAGED_WARP_BYTES == 4096 and d["GL_SMEM_C_OFFSET"] % 1024 == 0
        assert d["GL_SMEM_BYTES"] <= 227 * 1024
        assert "GL_C_STAGED" not in library_gemm("k", "mn", bn, c_from_registers=True).build_defines("bf16")
        plan = g.plan(4097, 4095, 4093, "bf16", lda=4096, ldb=4096)
        assert set(plan.tensor_maps) == {"a", "b"} and plan.smem.c_staged and plan.smem.c_bytes == 8 * 4096
        buffers = [r for r in plan.smem.regions() if r[0].startswith("C warp buffer")]
        assert len(buffers) == 8 and buffers[0][1] == plan.smem.c_offset
        assert all(b[1] == buffers[0][1] + i * 4096 for i, b in enumerate(buffers))
        assert buffers[-1][1] + 4096 <= plan.smem.full_bar_offset
        assert "__syncwarp" in plan.smem.c_staging and plan.to_json()["problem"]["c_staged"] is True
    assert staged().name == "sm90_gemm_kk_bn256_cstage" and staged(bn=128, fp32=True).name == "sm90_gemm_kk_bn128_cstage_f32"
    assert staged().output_store == STAGED and staged(fp32=True).build_defines("fp16")["GL_OUT_FP32"] == 1


def test_c_staged_alone_is_refused():
    with pytest.raises(ValueError, match="c_staged=True needs c_from_registers"):
        library_gemm("k", "k", 256, c_staged=True)
    with pytest.raises(PlanRefused, match="c_staged"):
        plan_smem(bm=128, bn=256, bk=64, elem_bytes=2, stages=4, cluster=2, threads=384, arch=arch_info("sm_90a"),
                  consumers=2, c_staged=True)


def views(m=256, n=384, k=128):
    a = operand_view(torch.randn(m, k).to(BF), k_dim=1)
    b = operand_view(torch.randn(k, n).to(BF), k_dim=0)
    return a, b


def test_the_staged_build_takes_any_output_pitch_and_base():
    """The register store's rules: any pitch >= N, any element-aligned base, float32 in the out_fp32 build."""
    g, f32 = staged("k", "mn"), staged("k", "mn", fp32=True)
    a, b = views()
    for c in (torch.empty(256, 389, dtype=BF)[:, :384], torch.empty(256, 385, dtype=BF)[:, 1:],
              torch.empty(256, 384, dtype=BF)):
        assert "CUDA device" in g.supports(a, b, c)  # every other rule holds
        assert "float32" in f32.supports(a, b, c)
        assert "CUDA device" in f32.supports(a, b, torch.empty(256, 387, dtype=torch.float32)[:, 3:])
    assert "pitch" in g.supports(a, b, torch.empty(256, 400, dtype=BF).as_strided((256, 384), (383, 1)))


@pytest.mark.parametrize("bn", TILE_N)
def test_the_staged_builds_ring_audits_clean(bn):
    """The stage ring at the staged build's depth audits clean (level 9's protocol, the output one write
    per tile per consumer: the warp buffers are private to their warps and ordered by __syncwarp, so
    they add no cross-warp protocol to audit)."""
    d = staged("mn", "mn", bn).defines("bf16")
    stages = d["GL_STAGES"]
    k_iters = stages // 2 + 1
    p = protocol_for_level(9, k_iters=k_iters, tiles=2, stages=stages, cluster=d["GL_CLUSTER"],
                           consumers=d["GL_CONSUMERS"], c_ring=1, staging_buffers=1, panels_per_tile=1,
                           deferred_panels=0, bn=bn)
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()


# --- builds: the resource gate ------------------------------------------------------------------------

#: Every operand order at BN 256 and 128 in bf16, BN 64 once, fp16 once, float32 at every width.
JOBS = ([(a, b, bn, False, "bf16") for a in MAJORS for b in MAJORS for bn in (256, 128)]
        + [("k", "k", 64, False, "bf16"), ("k", "k", 256, False, "fp16")]
        + [("k", "k", bn, True, "bf16") for bn in TILE_N])


@pytest.fixture(scope="module")
def staged_reports(nvcc_cache):
    from gemm_ladder.gates.resources import check_level_resources

    os.environ["GEMM_LADDER_CACHE"] = str(nvcc_cache)
    try:
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            done = pool.map(lambda j: check_level_resources(staged(*j[:3], fp32=j[3]), j[4]), JOBS)
            return dict(zip(JOBS, done))
    finally:
        del os.environ["GEMM_LADDER_CACHE"]


@needs_nvcc
@pytest.mark.parametrize("job", JOBS, ids=lambda v: str(v))
def test_staged_builds_pass_the_resource_gate(staged_reports, job):
    """No spills, no stack, no local memory; level 9's register split and wgmma forms; no TMA store; C
    leaves through 16-byte global stores (STG.E.128) read from shared memory with 16-byte loads
    (LDS.128), element stores (STG.E.U16 / STG.E) only for the rows' ends."""
    a_major, b_major, bn, fp32, dtype = job
    report, sass = staged_reports[job]
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
    assert report.sass["UTMASTG"] == 0, "the staged build still issues TMA stores"
    assert re.search(r"\bSTG\.E\.128 ", sass) and re.search(r"\bLDS\.128 ", sass) and re.search(r"\bSTS(\.64)? ", sass)
    assert re.search(r"\bSTG\.E " if fp32 else r"\bSTG\.E\.U16 ", sass), "no element store for a row's ends"
    assert "USETMAXREG" in sass
    forms = set(_HGMMA.findall(sass))
    want = "".join(t for t, mn in ((".tnspA", a_major), (".tnspB", b_major)) if mn == "mn")
    assert forms == {(f"64x{bn}x16", ".BF16" if dtype == "bf16" else "", want)}, forms


@needs_nvcc
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_staged_build_takes_the_linear_epilogue_without_spills(use_cache, activation):
    """The fused epilogue (bias, activation, residual, alpha) applied per pair right before the pair is
    staged (staged_store.cuh's kTight form), at BN 128 and 64, both orientations, and a float32 output:
    no spill, the 16-byte copy present. At BN 256 the build stores from registers (GL_STAGED_COPY: the
    copy spilled there), also without spills, and the library says so (store_with_epilogue)."""
    from gemm_ladder.gates.resources import check_cubin_resources
    from gemm_ladder.library.epilogue import linear_epilogue
    from gemm_ladder.runtime.compiler import disassemble

    ep = linear_epilogue(bias=True, activation=activation, residual=True, alpha=True)
    dts = {"gl_bias_": BF, "gl_residual_": BF}
    paired = {n: (True, False) for n in dts}
    for bn, swap, wide, fp32 in ((128, False, False, False), (128, True, False, False), (128, False, True, True),
                                 (64, True, True, True), (256, False, False, False), (256, True, False, False),
                                 (256, False, True, True)):
        kernel = staged("k", "k", bn, fp32)
        built = kernel.build("bf16", epilogue_source=ep.source(dts, swap, wide=wide, pairs=paired))
        rep = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype="bf16")
        assert rep.passed, (bn, swap, wide, fp32, rep.messages)
        assert rep.sass["HGMMA"] and not rep.sass["UTMASTG"] and rep.sass["LDL"] == rep.sass["STL"] == 0
        sass = disassemble(built.cubin)
        copies = bool(re.search(r"\bSTG\.E\.128 ", sass)) and bool(re.search(r"\bLDS\.128 ", sass))
        assert copies == (bn != 256), (bn, swap, wide, fp32)
        assert kernel.store_with_epilogue() == ("C from registers" if bn == 256 else STAGED)


# --- dispatch ---------------------------------------------------------------------------------------


def meta(*shape, dtype=BF):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.fixture
def staged_switch(monkeypatch):
    monkeypatch.setattr(K, "STAGED_STORE", True)
    dispatch.clear_cache()
    yield
    dispatch.clear_cache()


def test_the_switch_picks_the_build():
    """dispatch/kernels.py's general_unaligned_out follows STAGED_STORE (the one line to flip)."""
    for fp32 in (False, True):
        got = K.general_unaligned_out("k", "mn", 256, out_fp32=fp32)
        assert got.name == ("sm90_gemm_kmn_bn256_" + ("cstage" if K.STAGED_STORE else "creg") + ("_f32" if fp32 else ""))


@pytest.mark.parametrize("shape,out", [
    ((4096, 4096, 4095), None),                     # N = 4095: odd rows
    ((4097, 4093, 4095), None),                     # the shape
    ((1000, 512, 50257), None),                     # a vocabulary's N
    ((1000, 512, 384), ("pitch", 391)),             # an aligned N with an odd pitch
    ((1000, 512, 384), ("offset", 1)),              # a base 2 bytes past a 16-byte boundary
    ((1000, 512, 384), ("transposed", 1001)),       # a column-major out with an odd pitch: D^T into c.T
])
def test_unaligned_outputs_go_to_the_staged_build_when_switched_on(staged_switch, shape, out):
    m, k, n = shape
    c, given = unaligned_out(m, n, out)
    route = dispatch.decide(meta(m, k), meta(k, n), c, given=given, device=ASSUMED_DEVICE)
    assert route.kind == "general" and route.kernel.c_staged and route.kernel.name.endswith("_cstage")
    assert route.c_path.workspace is None and route.c_path.store == STAGED and route.c_path.label == STAGED
    assert route.c_path.transposed == (out is not None and out[0] == "transposed")
    e = gemm_ladder.explain(meta(m, k), meta(k, n), out=c if given else None)
    assert e.output["output_path"] == STAGED and e.kernel["name"].endswith("_cstage")


def test_float32_output_goes_to_the_staged_build_when_switched_on(staged_switch):
    e = gemm_ladder.explain(meta(1000, 512), meta(512, 304), out_dtype=torch.float32)
    assert e.kind == "general" and e.output["output_path"] == STAGED and e.kernel["name"].endswith("_cstage_f32")
    assert len(e.launches) == 1


def test_aligned_outputs_keep_the_tma_store_when_switched_on(staged_switch):
    for c in (meta(4096, 4096), meta(4096, 4104)[:, :4096]):
        route = dispatch.decide(meta(4096, 4096), meta(4096, 4096), c, given=True, device=ASSUMED_DEVICE)
        assert not route.kernel.c_from_registers and route.c_path.store == "TMA store"


def test_precompile_builds_the_store_the_switch_picks(monkeypatch):
    """Precompile builds, per (order, timed BN), bf16 and float32 out, the build STAGED_STORE routes to:
    the register store when off, its staged twin (same labels otherwise) when on."""
    off = {cls: [b.label for b in library_builds(("bf16",), (cls,))] for cls in ("unaligned", "fp32_out")}
    monkeypatch.setattr(K, "STAGED_STORE", True)
    on = {cls: [b.label for b in library_builds(("bf16",), (cls,))] for cls in ("unaligned", "fp32_out")}
    for cls, tag in (("unaligned", ""), ("fp32_out", " fp32 out")):
        creg = [x for x in off[cls] if x.startswith("general from registers")]
        cstage = [x for x in on[cls] if x.startswith("general staged")]
        assert creg and len(cstage) == len(creg)
        assert not any(x.startswith("general staged") for x in off[cls])
        assert not any(x.startswith("general from registers") for x in on[cls])
        assert {x.replace("general staged", "general from registers") for x in cstage} == set(creg)
        assert all(x.endswith(f"{tag} bf16") for x in cstage)
