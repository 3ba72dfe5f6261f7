"""linear's bias added by the tensor cores (sm90_gemm.cu's bias stage, bias_stage.cuh), without a GPU: the
epilogue twin that leaves the bias to the kernel, which builds take it (library.gemm.LibraryGemm.epilogue_call),
that precompile builds what a launch binds, and (with nvcc) the builds: no spills, one more k16 wgmma per K range
that can end a unit's K (whole units and the stream-K tail), and nothing new in a build without it.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import needs_nvcc

from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.gates.resources import check_cubin_resources
from gemm_ladder.library import gemm as G
from gemm_ladder.library.epilogue import Epilogue, linear_epilogue
from gemm_ladder.library.gemm import epilogue_for, library_gemm

META = torch.device("meta")


@pytest.fixture(autouse=True)
def bias_by_mma(monkeypatch):
    """The stage on (library.gemm.BIAS_BY_MMA, on by default), whatever another test or a user left it at."""
    monkeypatch.setattr(G, "BIAS_BY_MMA", True)
BF16 = torch.bfloat16


def call_of(bias_dtype=BF16, *, bias=True, activation=None, residual=False, alpha=1.0, n=520, m=300):
    x = torch.empty(m, 264, dtype=BF16, device=META)
    w = torch.empty(n, 264, dtype=BF16, device=META)
    b = torch.empty(n, dtype=bias_dtype, device=META) if bias else None
    r = torch.empty(m, n, dtype=BF16, device=META) if residual else None
    return linear_call(x, w, b, activation=activation, residual=r, alpha=alpha, check_grad=False)


def test_the_twin_drops_the_bias_from_the_function_and_keeps_its_slot():
    ep = linear_epilogue(bias=True, activation="gelu", residual=True, alpha=False)
    twin = ep.mma_twin
    assert twin is not None and twin.mma_vector == "gl_bias_" and twin.inputs == ep.inputs
    assert "gl_bias_" not in twin.cuda and "gl_bias_" in ep.cuda
    assert twin.reference is ep.reference  # the kernel adds the bias: the result is the same function
    assert twin.mma_twin is None  # a twin's call goes through epilogue_call unchanged
    assert library_gemm("k", "k", 256).epilogue_call(call_of().oriented(False), BF16).epilogue.mma_twin is None
    dts = {"gl_bias_": BF16, "gl_residual_": BF16}
    src, plain = twin.source(dts, False), ep.source(dts, False)
    assert "#define GL_BIAS_MMA_SLOT 0" in src and "GL_BIAS_MMA_SLOT" not in plain
    assert "gl_p.ptr[0]" not in src and "gl_p.ptr[1]" in src  # the bias is not loaded, the residual is
    assert "gl_p.ptr[0]" in plain


@pytest.mark.parametrize("kw", [dict(bias=False, activation="gelu"), dict(bias=True, alpha=True)],
                         ids=["no_bias", "alpha"])
def test_no_twin_without_a_bias_or_with_alpha(kw):
    """alpha scales the sum before the bias: the MMA would add the bias to the unscaled sum."""
    ep = linear_epilogue(bias=kw["bias"], activation=kw.get("activation"), residual=False, alpha=kw.get("alpha", False))
    assert ep.mma_twin is None


def test_a_user_epilogue_has_no_twin():
    ep = Epilogue("acc + b", lambda acc, b: acc + b, {"b": "col"})
    assert ep.mma_twin is None and ep.mma_vector is None


@pytest.mark.parametrize("kw,swap", [(dict(bn=256), False), (dict(bn=192), True), (dict(bn=128, cluster=1), True),
                                     (dict(bn=64, bm=64, cluster=1), True), (dict(bn=144, c_from_registers=True), False),
                                     (dict(bn=144, c_from_registers=True), True)], ids=str)
def test_cooperative_builds_take_the_bias_by_mma(kw, swap):
    call = call_of(activation="silu").oriented(swap)
    got = library_gemm("k", "k", **kw).epilogue_call(call, BF16)
    assert got.epilogue is call.epilogue.mma_twin and got.tensors is call.tensors and got.swap == swap


@pytest.mark.parametrize("kernel,call,why", [
    (dict(bn=128, bm=64, pingpong=True, cluster=1), call_of(), "ping-pong: whole tiles per consumer"),
    (dict(bn=128, bm=256), call_of(), "the 256-row tile: two fragments per consumer"),
    (dict(bn=256), call_of(torch.float32), "a float32 bias: not the operands' dtype"),
    (dict(bn=256), call_of(alpha=0.5), "alpha"),
    (dict(bn=256), call_of(bias=False, activation="gelu"), "no bias"),
    (dict(bn=128, release_lag=2), call_of(), "a release lag of 2: the stage's release assumes one group behind"),
    (dict(bn=256), call_of().oriented(True), "swapped at BN 256: the stage spilled 16 bytes"),
    (dict(bn=256, cluster=1), call_of(activation="gelu").oriented(True), "swapped at BN 256, one CTA"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_where_the_bias_stays_in_the_epilogue(kernel, call, why):
    assert library_gemm("k", "k", **kernel).epilogue_call(call, BF16) is call, why


def test_a_strided_bias_stays_in_the_epilogue():
    x = torch.empty(300, 264, dtype=BF16, device=META)
    w = torch.empty(520, 264, dtype=BF16, device=META)
    b = torch.empty(1040, dtype=BF16, device=META)[::2]
    call = linear_call(x, w, b, check_grad=False)
    assert library_gemm("k", "k", 256).epilogue_call(call, BF16) is call


def test_the_setting_turns_it_off(monkeypatch):
    call = call_of()
    monkeypatch.setattr(G, "BIAS_BY_MMA", False)
    assert library_gemm("k", "k", 256).epilogue_call(call, BF16) is call


def test_precompile_builds_what_a_launch_binds():
    """linear_epilogue_source with a build's config and route_builds with the call give each build's own source:
    the twin for a cooperative build, the epilogue's for a ping-pong one (a twin there would not compile)."""
    from gemm_ladder.dispatch.kernels import general
    from gemm_ladder.dispatch.precompile import EpilogueVariant, linear_epilogue_source

    v = EpilogueVariant("same", "gelu", None, False)
    coop = general("k", "k", 256, "bf16", 2)
    pp = general("k", "k", 128, "bf16", 1, 64, pingpong=True)
    assert "GL_BIAS_MMA_SLOT" in linear_epilogue_source(v, "bf16", swap=False, config=coop)
    assert "GL_BIAS_MMA_SLOT" not in linear_epilogue_source(v, "bf16", swap=False, config=pp)
    assert "GL_BIAS_MMA_SLOT" not in linear_epilogue_source(v, "bf16", swap=False)
    call = call_of(activation="gelu")
    assert epilogue_for(coop, call, BF16).epilogue is call.epilogue.mma_twin
    assert epilogue_for(pp, call, BF16) is call


def test_route_builds_with_the_call_use_the_routes_own_source():
    from gemm_ladder.dispatch import decide
    from gemm_ladder.dispatch.precompile import route_builds

    x = torch.empty(1576, 1024, dtype=BF16, device=META)
    w = torch.empty(3072, 1024, dtype=BF16, device=META)
    c = torch.empty(1576, 3072, dtype=BF16, device=META)
    call = linear_call(x, w, torch.empty(3072, dtype=BF16, device=META), check_grad=False)
    route = decide(x, w.T, c, given=False)
    oriented = call.oriented(route.c_path.transposed)
    by_call = route_builds(route, "bf16", epilogue_name="bias", epilogue_call=oriented)
    want = epilogue_for(route.config, oriented, BF16).source()
    assert by_call[0].label == route_builds(route, "bf16", want, "bias")[0].label


_HGMMA = re.compile(r"HGMMA\.64x\d+x16\.F32")


@needs_nvcc
@pytest.mark.parametrize("kw,swap", [(dict(bn=256), False), (dict(bn=256, cluster=1), False), (dict(bn=128), True),
                                     (dict(bn=192), False), (dict(bn=192), True), (dict(bn=64, bm=64, cluster=1), True),
                                     (dict(bn=144, c_from_registers=True), False),
                                     (dict(bn=128, a_major="mn"), True), (dict(bn=256, b_major="mn"), False)],
                         ids=str)
def test_the_bias_stage_builds_without_spills(use_cache, kw, swap):
    """bias + GELU by the MMA: no spill, no local memory; two HGMMA more than the same epilogue in the epilogue
    (the stage's k16 step after a whole unit's K loop and after a stream-K piece's)."""
    kw = dict(kw)
    kernel = library_gemm(kw.pop("a_major", "k"), kw.pop("b_major", "k"), **kw)
    call = call_of(activation="gelu").oriented(swap)
    twin = kernel.epilogue_call(call, BF16)
    assert twin is not call
    counts = {}
    for name, c in (("mma", twin), ("epi", call)):
        built = kernel.build("bf16", epilogue_source=c.source())
        report = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype="bf16")
        assert report.passed, report.messages
        assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
        assert report.sass["LDL"] == report.sass["STL"] == 0
        counts[name] = report.sass["HGMMA"]
    assert counts["mma"] == counts["epi"] + 2


def test_explain_says_where_the_bias_is_added():
    import gemm_ladder

    def bias_of(m, n, k, dtype=BF16, activation=None):
        a = torch.empty(m, k, dtype=BF16, device=META)
        b = torch.empty(n, k, dtype=BF16, device=META).T  # linear's weight, K-major
        return gemm_ladder.explain(a, b, activation=activation, bias=torch.empty(n, dtype=dtype, device=META)).bias

    assert bias_of(1023, 2304, 768).startswith("MMA")
    assert bias_of(1023, 2304, 768, torch.float32) == "epilogue (a torch.float32 bias, not the operands' torch.bfloat16)"
    assert bias_of(1576, 3072, 1024) == "epilogue (a ping-pong build)"  # the 128-row rule (dispatch/pingpong.py)
    assert bias_of(16, 4096, 4096) == "epilogue (the small-M kernel adds it there)"
    assert bias_of(12608, 4096, 1024, activation="gelu") == "epilogue (a ping-pong build)"
    assert bias_of(1576, 3072, 4096, activation="gelu").startswith("MMA")  # K > 1024: no ping-pong
    assert gemm_ladder.explain(torch.empty(64, 64, dtype=BF16, device=META),
                               torch.empty(64, 64, dtype=BF16, device=META)).bias is None


@pytest.mark.parametrize("bn", (128, 256))
def test_the_ring_with_the_bias_stage_audits_clean(bn):
    """The bias stage is one more ring iteration per unit whose full barrier the producer completes with a plain
    arrive (no bytes); the barriers see k_tiles + 1 iterations a tile. The plan's ring audited at that count
    (one CTA per cluster: a 2-CTA cluster's state space takes minutes; its releases are proven in
    tests/test_audit_pingpong.py). The consumers' own stores into the stage are ordered by the named barrier and
    the proxy fence (bias_stage.cuh), which the barrier model does not cover."""
    from gemm_ladder.audit.plans import audit_plan

    k = library_gemm("k", "k", bn, cluster=1)
    plan = k.plan(1024, 1024, 320, "bf16").to_json()  # K = 320: five K tiles, six ring iterations a tile
    tiles = -(-3 * k.stages // 6)  # every stage used three times (the auditor's bound)
    result = audit_plan(plan, k_iters=6, tiles=tiles, max_states=3_000_000)
    assert result.ok and result.complete, result.render()


def test_explain_says_the_stage_is_off(monkeypatch):
    import gemm_ladder

    monkeypatch.setattr(G, "BIAS_BY_MMA", False)
    a = torch.empty(1576, 1024, dtype=BF16, device=META)
    b = torch.empty(3072, 1024, dtype=BF16, device=META).T
    got = gemm_ladder.explain(a, b, bias=torch.empty(3072, dtype=BF16, device=META)).bias
    assert got == "epilogue (the bias stage is off: library.gemm.BIAS_BY_MMA)"
