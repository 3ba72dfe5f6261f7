"""The small-M kernel's cluster build (split-K reduced through distributed shared memory), on the CPU.

What is checked here without a GPU: every bucket's cluster build compiles for sm_90a within the
resource gate (no spill, no local memory, HGMMA and TMA loads, no TMA store) with the cluster
instructions in place (two cluster barriers per role, S x ceil(BN / 8 / S) 16-byte distributed
shared-memory loads per thread, BN / 8 16-byte shared stores); the host's rule (cluster_ways: which
launches take it, with the occupancy faked), the grid and K ranges it implies, the override's errors;
the designer's plan of the build (its launch schedule, not a multicast); explain's text; and that the
plain (cluster_k = 1) build's source is untouched by the cluster code (its preprocessed kernel has no
cluster instruction). The GPU side is tests/test_library_small_m_cluster_gpu.py.
"""

from __future__ import annotations

import re

import pytest
import torch

from conftest import needs_nvcc
from gemm_ladder.design.describer import conclusion, describe
from gemm_ladder.design.stream_k import StreamKTail
from gemm_ladder.library.small_m import BUCKETS, CLUSTER_WAYS, SmallMGemm, small_m_kernel

BF16 = torch.bfloat16


def _cluster_builds():
    """(BN, S, dtype, fp32 out, A major, B major): every bucket at S = 4 (4096 x 4096's split), the extremes
    of S at narrow and wide buckets (the uneven slices: BN / 8 < S), other dtypes, outputs and majors."""
    yield from ((bn, 4, "bf16", False, "k", "k") for bn in BUCKETS)
    yield from ((bn, s, "bf16", False, "k", "k") for bn in (8, 16, 192, 256) for s in (2, 8))
    yield 256, 4, "fp16", True, "k", "k"
    yield 16, 2, "bf16", False, "k", "mn"
    yield 64, 8, "fp16", False, "mn", "mn"


@needs_nvcc
@pytest.mark.parametrize("bn,ways,dtype,out_fp32,a_major,b_major", list(_cluster_builds()))
def test_cluster_build_resource_gate(bn, ways, dtype, out_fp32, a_major, b_major, use_cache):
    """The cluster build compiles with no spill, stack or local memory (the reduction's S x kPer float4
    loads fit in the registers the fragment leaves), computes with HGMMA, loads with TMA, stores from
    registers, and its SASS holds the cluster protocol: barrier.cluster arrive and wait (UCGABAR_ARV /
    UCGABAR_WAIT: each role's two), the fragment's BN / 8 shared stores of 16 bytes (STS.128) and the
    S x ceil(BN / 8 / S) 16-byte loads through the cluster window (LD.E.128)."""
    from gemm_ladder.gates.resources import check_cubin_resources
    from gemm_ladder.runtime.compiler import disassemble

    g = SmallMGemm(bn, cluster_k=ways)
    kernel = g.build(dtype, out_fp32=out_fp32, a_major=a_major, b_major=b_major)
    geo = g.geometry(dtype)
    assert geo.cluster == ways and geo.threads == 384
    sass = disassemble(kernel.cubin)
    report = check_cubin_resources(kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=None, dtype=dtype,
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=ways, sass=sass)
    assert report.passed, report.messages
    assert report.stack_bytes == report.spill_stores == report.spill_loads == 0
    assert report.sass["HGMMA"] > 0 and report.sass["UTMALDG"] > 0 and report.sass["UTMASTG"] == 0
    assert report.sass["LDL"] == report.sass["STL"] == 0
    vec = bn // 8
    assert len(re.findall(r"\bSTS\.128\b", sass)) == vec
    assert len(re.findall(r"\bLD\.E\.128\b", sass)) == ways * -(-vec // ways)
    assert len(re.findall(r"\bUCGABAR_ARV\b", sass)) == 4 and len(re.findall(r"\bUCGABAR_WAIT\b", sass)) == 4


@needs_nvcc
@pytest.mark.parametrize("bn,ways,out_fp32", [(256, 2, True), (64, 8, False), (8, 4, False)])
def test_cluster_build_with_a_fused_epilogue(bn, ways, out_fp32, use_cache):
    """bias + GELU + residual (alpha) fused after the cluster reduction: no spill, no local memory, both
    cluster barriers in each role (four arrivals in the SASS: two consumer, two producer)."""
    from gemm_ladder.library.epilogue import linear_epilogue
    from gemm_ladder.runtime.compiler import disassemble

    ep = linear_epilogue(bias=True, activation="gelu", residual=True, alpha=True)
    dts = {"gl_bias_": BF16, "gl_residual_": BF16}
    build = SmallMGemm(bn, cluster_k=ways).build("bf16", out_fp32=out_fp32, epilogue_source=ep.source(
        dts, False, pairs={name: (True, False) for name in dts}))
    sass = disassemble(build.cubin)
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in build.ptxas_log
    assert "LDL" not in sass and "STL" not in sass
    assert len(re.findall(r"\bUCGABAR_ARV\b", sass)) == 4 and len(re.findall(r"\bUCGABAR_WAIT\b", sass)) == 4


@needs_nvcc
def test_the_plain_build_has_no_cluster_code(use_cache):
    """cluster_k = 1 compiles none of the cluster path: no cluster barrier, no 16-byte shared store (its
    SASS is the plain build's; /work/notes-style SASS fingerprints before and after were compared)."""
    from gemm_ladder.runtime.compiler import disassemble

    sass = disassemble(SmallMGemm(128).build("bf16").cubin)
    assert "UCGABAR" not in sass and not re.search(r"\bSTS\.128\b", sass)


def test_cluster_build_arguments_are_checked():
    for bad in (3, 16, 0):
        with pytest.raises(ValueError, match="cluster_k"):
            SmallMGemm(64, cluster_k=bad)
    with pytest.raises(ValueError, match="one CTA per SM"):
        SmallMGemm(64, cluster_k=2, ctas_per_sm=2)
    g = SmallMGemm(64, cluster_k=4)
    assert g.defines("bf16") == SmallMGemm(64).defines("bf16")  # the same plan and ring: only GL_CLUSTER_K differs
    assert small_m_kernel(64).clustered(4) is small_m_kernel(64).clustered(4)
    assert small_m_kernel(64).clustered(4).cluster_k == 4 and small_m_kernel(64).clustered(4).bn == 64


def test_a_cluster_build_is_not_bound_directly():
    """The cluster build's kernel computes unit blockIdx.x / S whatever grid it is given: bound directly
    (its own ctas rule: one CTA per unit at splits = 1), it would leave half the units (S = 2) unwritten.
    Only the plain build's cluster_reduce=True, which sizes the grid, launches it; a direct bind is
    refused with the rule, before the operands are even looked at."""
    from gemm_ladder.library.operand import operand_view

    x = operand_view(torch.empty(16, 4096, dtype=torch.bfloat16, device="meta"), k_dim=1)
    w = operand_view(torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta"), k_dim=1)
    c = torch.empty(16, 4096, dtype=torch.bfloat16, device="meta")
    for g in (small_m_kernel(16).clustered(2), SmallMGemm(16, cluster_k=4)):
        with pytest.raises(ValueError, match="the cluster build is launched by its plain build"):
            g.bind(x, w, c, splits=1)
        with pytest.raises(ValueError, match="the cluster build is launched by its plain build"):
            g.launch(x, w, c, splits=1)


class _Fits:
    """A fake occupancy: clusters of S resident (a dict), recording what was asked."""

    def __init__(self, fits):
        self.fits, self.asked = fits, []

    def __call__(self, ways):
        self.asked.append(ways)
        return self.fits.get(ways, 0)


H200_LIKE = {2: 66, 4: 32, 8: 16}  # the fake occupancy numbers (not measured: what the rule is tested against)


@pytest.mark.parametrize("m", [1, 16, 64, 128, 256])
def test_4096_square_takes_the_cluster_path_of_4_when_32_clusters_fit(m):
    """4096 x 4096 in one M tile (BN = the bucket of M) is 32 units: the grid rule splits each 4 ways
    (128 CTAs of 132), so the cluster build of 4 is taken when 32 clusters of 4 fit, and the global path
    when 31 do (fake occupancy)."""
    from gemm_ladder.library.small_m import bucket

    g = small_m_kernel(bucket(m))
    ctas = g.ctas(m, 4096, 4096, 132)
    assert ctas == 128 and g.units(m, 4096) == 32
    fits = _Fits(H200_LIKE)
    assert g.cluster_ways(m, 4096, 4096, ctas, fits) == 4 and fits.asked == [4]
    assert g.cluster_ways(m, 4096, 4096, ctas, _Fits({4: 31})) == 1
    assert g.cluster_ways(m, 4096, 4096, ctas, _Fits({4: 33})) == 4
    # the split it implies is split_work's: CTA 4u + r takes unit u's K range r of 4, [r x 64 / 4, ...)
    sched = g.schedule(m, 4096, 4096, ctas)
    for cta in (0, 1, 6, 127):
        (seg,) = sched.segments(cta)
        u, r = divmod(cta, 4)
        assert (seg.unit, seg.mine, seg.contributors, seg.kb, seg.ke) == (u, r, 4, r * 64 // 4, (r + 1) * 64 // 4)


@pytest.mark.parametrize("m,n,k,splits,fits,want", [
    (16, 4096, 14336, None, H200_LIKE, 4),      # 32 units x 4 over K = 14336
    (16, 4096, 4096, 2, H200_LIKE, 2),          # 2 ways forced: 64 clusters of 2
    (16, 1024, 4096, 8, H200_LIKE, 8),          # 8 units x 8 ways forced: 8 clusters of 8
    (16, 4096, 4096, 8, H200_LIKE, 1),          # 32 clusters of 8 do not fit (16)
    (16, 14336, 4096, None, H200_LIKE, 1),      # 112 units: not split (132 // 112 = 1)
    (16, 28672, 8192, None, H200_LIKE, 1),      # 224 units: stream-K over 132 CTAs (uneven)
    (16, 5120, 4096, None, H200_LIKE, 1),       # 40 units x 3 ways: 3 is not a cluster size
    (16, 4096, 128, None, H200_LIKE, 2),        # 2 K tiles: 32 units x 2 = 64 CTAs, 2 ways
    (16, 4096, 64, None, H200_LIKE, 1),         # 1 K tile: no split at all
    (16, 4096, 4096, 1, H200_LIKE, 1),          # splits = 1 (a graph capture): no split
    (16, 6144, 4096, None, H200_LIKE, 2),       # 48 units x 2 ways
    (16, 6144, 4096, None, {2: 47}, 1),         # ... unless fewer than 48 clusters of 2 fit
])
def test_the_cluster_rule(m, n, k, splits, fits, want):
    g = small_m_kernel(16)
    ctas = g.ctas(m, n, k, 132, splits)
    got = g.cluster_ways(m, n, k, ctas, _Fits(fits))
    assert got == want, (m, n, k, splits, ctas)
    if want > 1:
        assert ctas == g.units(m, n) * want


def test_the_rule_asks_the_occupancy_only_when_the_split_is_even():
    fits = _Fits(H200_LIKE)
    g = small_m_kernel(16)
    assert g.cluster_ways(16, 5120, 4096, g.ctas(16, 5120, 4096, 132), fits) == 1 and fits.asked == []
    assert g.cluster_ways(16, 28672, 8192, 132, fits) == 1 and fits.asked == []
    # a cluster build, a timeline build or a two-CTAs-per-SM build never chooses again
    for other in (g.clustered(4), SmallMGemm(16, timeline=True), SmallMGemm(16, ctas_per_sm=2)):
        assert other.cluster_ways(16, 4096, 4096, 128, fits) == 1
    assert fits.asked == []


def test_the_kernels_k_ranges_are_split_works():
    """The kernel computes rank r's range as r x kt / S .. (r + 1) x kt / S (ClusterShare); split_work's
    StreamKTail over units x S CTAs gives CTA u S + r the same range of unit u, for any K tiles >= S."""
    for units in (1, 7, 32):
        for ways in CLUSTER_WAYS:
            for kt in (ways, ways + 1, 63, 64, 65, 224):
                sched = StreamKTail(units=units, clusters=units * ways, k_tiles=kt, first_unit=0)
                for cta in range(units * ways):
                    (seg,) = sched.segments(cta)
                    u, r = divmod(cta, ways)
                    assert (seg.unit, seg.kb, seg.ke) == (u, r * kt // ways, (r + 1) * kt // ways)


def test_the_plan_of_the_cluster_build_is_its_launch_not_a_multicast():
    g = small_m_kernel(16).clustered(4)
    plan = g.plan(16, 4096, 4096, "bf16")
    sc = plan.schedule
    assert plan.cluster == 1 and plan.load_protocol.multicast_mask == 0  # no multicast
    assert sc.k_split_cluster == 4 and sc.grid == (128, 1, 1) and sc.cluster_dims == (4, 1, 1) and sc.ctas == 128
    assert plan.to_json()["schedule"]["k_split_cluster"] == 4
    text = describe(plan)
    notes = " ".join(text.schedule_notes)
    assert "split-K in clusters, not multicast" in notes
    assert "mapa + ld.shared::cluster" in notes and "q = 0..3 in that order" in notes
    assert "second cluster barrier" in notes and "32 clusters of 4" in notes
    assert any("split-K cluster" in r for r in text.risks)
    assert "K split 4 ways in a cluster of 4 CTAs, reduced through distributed shared memory" in conclusion(plan)
    plain = small_m_kernel(16).plan(16, 4096, 4096, "bf16")
    assert plain.schedule.k_split_cluster == 1 and "cluster of" not in conclusion(plain)
    assert not any("split-K" in n for n in describe(plain).schedule_notes)


def _explain(m, n, k):
    import gemm_ladder as gl

    x = torch.empty(m, k, device="meta", dtype=BF16)
    w = torch.empty(n, k, device="meta", dtype=BF16)
    return gl.explain(x, w.t())


def test_explain_says_the_global_reduction():
    """gemm_ladder.mm never takes the cluster build (it is opt-in: SmallMGemm.bind's cluster_reduce=True),
    so explain says the global workspace and cluster 1 even where the cluster rule's shape conditions hold
    (16 x 4096 x 4096: 32 units x 4 CTAs)."""
    e = _explain(16, 4096, 4096)
    assert e.kind == "small_m" and e.grid == [128, 1, 1] and e.cluster == 1
    assert "global workspace" in e.split and "cluster of" not in e.split
    assert "cluster of" not in e.plan["conclusion"]
    e = _explain(16, 28672, 8192)
    assert "global workspace" in e.split and e.cluster == 1


@pytest.mark.parametrize("bn,ways", [(16, 4), (256, 2), (64, 8)])
def test_the_cluster_builds_ring_audits_clean(bn, ways):
    """The cluster build's ring, as test_library_small_m.py models the plain one from the plan's facts,
    with one piece per CTA (the cluster build's one K range) of 1, S - 1, S + 1 and 2S + 1 K iterations
    (the phase wrap-around), audits clean. Outside the model (as the plain build's stores from registers
    are): the fragment written over the drained ring and read between the two cluster barriers."""
    from gemm_ladder.audit import RingConfig, audit, build_ring_protocol

    plan = small_m_kernel(bn).clustered(ways).plan(bn, 4096, 4096, "bf16")
    assert plan.ring.to_json() == small_m_kernel(bn).plan(bn, 4096, 4096, "bf16").ring.to_json()  # the same ring
    bm, tbn, bk = plan.tile
    for k_iters in (1, plan.stages - 1, plan.stages + 1, 2 * plan.stages + 1):
        protocol = build_ring_protocol(RingConfig(
            stages=plan.stages, k_iters=k_iters, tiles=1, consumers=plan.consumers.warpgroups, cluster=plan.cluster,
            warp_specialized=plan.consumers.producer_warpgroup, release_lag=1, bm=bm, bn=tbn, bk=bk,
            full_count=plan.ring.full_init_count, empty_count=plan.ring.empty_init_count,
            full_initial_phase=plan.ring.first_full_wait_parity, empty_initial_phase=plan.ring.first_empty_wait_parity),
            name=f"small-m-cluster-BN{bn}-S{plan.stages}-K{k_iters}")
        result = audit(protocol)
        assert result.ok, f"BN={bn} S={plan.stages} K={k_iters}\n{result.render()}"


def _cluster_program(ways: int, drop: str | None = None, early_arrive: bool = False) -> list[tuple]:
    """One CTA's steps in the cluster build's reduction (sm90_gemm_small_m.cu's reduce_in_cluster, one
    thread standing for its CTA; the producer warpgroup's two cluster_sync()s arrive and wait at the same
    barriers): store its fragment, barrier 1 (arrive, wait), read its slice from every CTA q in order,
    arrive at barrier 2, store C, wait at barrier 2, exit. ``drop`` removes one step and ``early_arrive``
    arrives at barrier 2 before the reads: the faults the model must catch."""
    prog = [("store",), ("arrive", 1), ("wait", 1)]
    reads = [("read", q) for q in range(ways)]
    prog += [("arrive", 2), *reads] if early_arrive else [*reads, ("arrive", 2)]
    prog += [("store_c",), ("wait", 2), ("exit",)]
    return [op for op in prog if op != drop]


def _cluster_violations(ways: int, **fault) -> set[str]:
    """Every state of ``ways`` CTAs running _cluster_program interleaved (barrier.cluster: a wait passes
    once every CTA has arrived at that barrier): the kinds of violation reachable, i.e. a read of CTA q's
    fragment before q stored it or after q exited, or a deadlock."""
    prog = _cluster_program(ways, **fault)
    end = len(prog)
    seen, todo, bad = set(), [tuple([0] * ways)], set()

    def done(pc, op):  # how many CTAs have passed step op
        return sum(1 for p in pc if op in prog[:p])

    while todo:
        pc = todo.pop()
        if pc in seen:
            continue
        seen.add(pc)
        moved = False
        for r in range(ways):
            if pc[r] == end:
                continue
            op = prog[pc[r]]
            if op[0] == "wait" and done(pc, ("arrive", op[1])) < ways:
                continue
            if op[0] == "read":
                q = op[1]
                if ("store",) in prog and ("store",) not in prog[:pc[q]]:
                    bad.add("read before the peer stored")
                if pc[q] == end:
                    bad.add("read after the peer exited")
            moved = True
            todo.append(pc[:r] + (pc[r] + 1,) + pc[r + 1:])
        if not moved and any(p < end for p in pc):
            bad.add("deadlock")
    return bad


@pytest.mark.parametrize("ways", CLUSTER_WAYS[:2])
def test_the_cluster_reduction_protocol_is_safe_and_each_barrier_is_needed(ways):
    """Over every interleaving of S CTAs (S = 2, 4): each read of a peer's fragment comes after the peer's
    store (barrier 1) and before the peer's exit (barrier 2), and nothing deadlocks. Without the wait at
    barrier 1 a read can precede the store; without the wait at barrier 2, or with its arrival before
    the reads, a CTA can exit while a peer still reads it: the model finds each."""
    assert _cluster_violations(ways) == set()
    assert "read before the peer stored" in _cluster_violations(ways, drop=("wait", 1))
    assert "read after the peer exited" in _cluster_violations(ways, drop=("wait", 2))
    assert "read after the peer exited" in _cluster_violations(ways, early_arrive=True)
