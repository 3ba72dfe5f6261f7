"""The small-M library kernel (library/small_m.py, kernels/library/sm90_gemm_small_m.cu), CPU part.

Gated like a level: the designer's plan of its tile and ring, the resource gate of its builds, an
audit of its ring; and the split's arithmetic, the bucket rule and the refusals.
tests/test_library_small_m_gpu.py runs it.
"""

from __future__ import annotations

import subprocess

import pytest
import torch

from gemm_ladder.audit import RingConfig, audit, build_ring_protocol
from gemm_ladder.design import PlanRefused, plan_gemm
from gemm_ladder.design.render import plan_markdown
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import (
    BK, BUCKETS, CONSUMERS, SMALL_M_MAX, TILE_ROWS, SmallMGemm, bucket, small_m_gemm, split_work,
)
from gemm_ladder.runtime.compiler import KERNEL_ROOT, nvcc_path

from conftest import needs_nvcc


def test_the_designer_plans_a_narrow_tile_stored_from_registers():
    """BN = 16 has no 128-byte store panel: refused with staging, planned when c is stored from registers,
    with no output tensor map (C^T's row pitch of M elements need not be 16-byte aligned), no staging bytes
    and every other byte given to the stages."""
    kw = dict(tile=(128, 16, 64), stages=12, consumers=2, persistent=True, producer_warpgroup=True)
    with pytest.raises(PlanRefused, match="C panels"):
        plan_gemm(4096, 7, 4096, "bf16", **kw)
    plan = plan_gemm(4096, 7, 4096, "bf16", c_from_registers=True, **kw)
    assert set(plan.tensor_maps) == {"a", "b"}
    assert plan.smem.c_bytes == 0 and plan.kernel_defines()["GL_C_PANELS"] == 0
    assert plan.smem.full_bar_offset == 12 * (128 + 16) * 64 * 2
    assert plan.to_json()["problem"]["c_from_registers"] is True
    assert "st.global" in plan_markdown(plan)
    with pytest.raises(PlanRefused, match="shared memory per block"):
        plan_gemm(4096, 7, 4096, "bf16", c_from_registers=True, **{**kw, "stages": 13})


@pytest.mark.parametrize("bn", BUCKETS)
def test_every_bucket_is_planned_with_the_deepest_ring_that_fits(bn):
    """The plan of the transposed problem (N on the tile's 128 rows, M on its BN columns) is the kernel's
    ring: the stage count is the largest that fits (one more is refused), a producer and two consumer
    warpgroups, both consumers release every stage, and a stage's bytes are a weight box and an x box."""
    g = SmallMGemm(bn)
    stages = g.ring_stages("bf16")
    plan = g.plan(bn, 4096, 4096, "bf16")
    d = plan.kernel_defines()
    assert d == g.defines("bf16") and plan.stages == stages >= 4
    assert (d["GL_BM"], d["GL_BN"], d["GL_BK"]) == (TILE_ROWS, bn, BK)
    assert d["GL_THREADS"] == 384 and d["GL_EMPTY_ARRIVALS"] == CONSUMERS and d["GL_C_PANELS"] == 0
    assert d["GL_EXPECT_TX_BYTES"] == (TILE_ROWS + bn) * BK * 2
    assert plan.tensor_maps["a"].global_dim == (4096, 4096) and plan.tensor_maps["b"].global_dim == (4096, bn)
    with pytest.raises(PlanRefused, match="shared memory per block"):
        SmallMGemm(bn, stages=stages + 1).defines("bf16")
    assert g.geometry("bf16").dynamic_smem == d["GL_SMEM_BYTES"] <= 232448


def _builds():
    """(BN, dtype, fp32 output, A major, B major): every bucket as F.linear calls it, both dtypes and the
    fp32 output at the extremes, an MN-major weight (x @ W) in a narrow and the widest bucket, both
    MN-major from BN = 64."""
    yield from ((bn, "bf16", False, "k", "k") for bn in BUCKETS)
    yield from ((bn, "fp16", out, "k", "k") for bn in (8, 256) for out in (False, True))
    yield 16, "bf16", True, "k", "k"
    yield from ((bn, "bf16", False, "k", "mn") for bn in (16, 256))
    yield 64, "fp16", False, "mn", "mn"


@needs_nvcc
@pytest.mark.parametrize("bn,dtype,out_fp32,a_major,b_major", list(_builds()))
def test_resource_gate(bn, dtype, out_fp32, a_major, b_major, use_cache):
    """Every bucket compiles for sm_90a with no spill, no stack and no local memory, computes with
    HGMMA, loads with TMA, and stores without it (from registers)."""
    from gemm_ladder.gates.resources import check_cubin_resources

    g = SmallMGemm(bn)
    kernel = g.build(dtype, out_fp32=out_fp32, a_major=a_major, b_major=b_major)
    geo = g.geometry(dtype)
    report = check_cubin_resources(kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=None, dtype=dtype,
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=1)
    assert report.passed, report.messages
    assert report.stack_bytes == report.spill_stores == report.spill_loads == 0
    assert report.sass["HGMMA"] > 0 and report.sass["UTMALDG"] > 0 and report.sass["UTMASTG"] == 0
    assert report.sass["LDL"] == report.sass["STL"] == 0


def test_mn_major_operands_are_planned_as_boxes_of_64_rows():
    """An MN-major weight (the plan's a) and x (its b) get maps whose inner dimension is N or M, boxes of
    64 elements by BK, and the stride of their K; an MN-major x narrower than a box is refused."""
    plan = SmallMGemm(64).plan(40, 1000, 520, "bf16", a_major="mn", b_major="mn", lda=48, ldb=1024)
    w, x = plan.tensor_maps["a"], plan.tensor_maps["b"]
    assert (w.global_dim, w.global_strides, w.box_dim) == ((1000, 520), (2048,), (64, 64))
    assert (x.global_dim, x.global_strides, x.box_dim) == ((40, 520), (96,), (64, 64))
    d = SmallMGemm(64).defines("bf16", a_major="mn", b_major="k")
    assert (d["GL_A_MN_MAJOR"], d["GL_B_MN_MAJOR"]) == (0, 1)  # the plan's a is the weight B
    with pytest.raises(PlanRefused):
        SmallMGemm(16).defines("bf16", a_major="mn")


def _ring(plan, k_iters: int, tiles: int, **faults):
    """The kernel's ring as the auditor models it, from the plan's facts: a producer thread, two consumer
    warpgroups reading every stage, each stage released once the wgmma of the next is issued
    (release_lag 1, wgmma.wait_group 1). A 'tile' is one piece of a CTA's range (K tiles [kb, ke) of one
    unit), the counter carried across pieces. The builder's epilogue writes a private staging buffer per
    consumer and stores it; the kernel stores from registers instead, which touches no shared memory, so
    that part of the model adds no hazard the kernel has and hides none."""
    bm, bn, bk = plan.tile
    ring = dict(full_count=plan.ring.full_init_count, empty_count=plan.ring.empty_init_count,
                full_initial_phase=plan.ring.first_full_wait_parity, empty_initial_phase=plan.ring.first_empty_wait_parity)
    return build_ring_protocol(RingConfig(
        stages=plan.stages, k_iters=k_iters, tiles=tiles, consumers=plan.consumers.warpgroups, cluster=plan.cluster,
        warp_specialized=plan.consumers.producer_warpgroup, release_lag=1, bm=bm, bn=bn, bk=bk, **{**ring, **faults}),
        name=f"small-m-BN{bn}-S{plan.stages}-K{k_iters}-T{tiles}")


def _ring_bounds(stages: int):
    """(K iterations per piece, pieces per CTA) audited for a ring of ``stages``: many short pieces (a
    CTA's range crossing unit boundaries), pieces just past one ring round carried across a piece
    boundary, and one piece of 2S + 1 iterations (the phase wrap-around: the ring repeats every 2S)."""
    return [(1, 3), (2, 3), (stages - 1, 2), (stages + 1, 2), (2 * stages + 1, 1)]


def test_every_buckets_ring_audits_clean():
    """Each shipped ring depth (4..13 stages, one per bucket); pieces of one CTA have different lengths
    in the kernel, which the short and long pieces here bound."""
    for bn in BUCKETS:
        plan = SmallMGemm(bn).plan(bn, 4096, 4096, "bf16")
        for k, t in _ring_bounds(plan.stages):
            result = audit(_ring(plan, k, t))
            assert result.ok, f"BN={bn} S={plan.stages} K={k} T={t}\n{result.render()}"


def test_the_ring_audit_finds_a_seeded_fault():
    """The same model with one consumer's release not counted (empty count 1 for two consumers), with
    the producer's first wait on the wrong parity, or with the producer not waiting for a free stage
    fails, within the same bounds: the audit above can fail. (A fault in the empty barriers
    shows only once the ring wraps: K x pieces > S. The shallowest ring, BN = 256's 4 stages, keeps the
    search for the shortest counterexample, which a violation triggers, to a fraction of a second.)"""
    plan = SmallMGemm(256).plan(256, 4096, 4096, "bf16")
    s = plan.stages
    assert "early_overwrite" in {v.kind for v in audit(_ring(plan, s + 1, 1, empty_count=1)).violations}
    assert "deadlock" in {v.kind for v in audit(_ring(plan, s + 1, 2, empty_initial_phase=0)).violations}
    assert "early_overwrite" in {v.kind for v in audit(_ring(plan, s + 1, 1, empty_wait=False)).violations}


#: (units, K tiles, CTAs): the H200's 132 CTAs on the llm shapes' units (N / 128 x M tiles), fewer
#: units than CTAs, more, one iteration per CTA, and split-K grids (units x s).
SPLITS = [(32, 64, 132), (112, 64, 132), (32, 224, 132), (224, 128, 132), (64, 64, 132), (1, 1, 1), (3, 5, 7),
          (32, 64, 32), (32, 64, 96), (10, 3, 30), (5, 9, 45), (200, 2, 132)]


@pytest.mark.parametrize("units,k_tiles,ctas", SPLITS)
def test_the_split_computes_every_iteration_once_and_numbers_contributors_in_k_order(units, k_tiles, ctas):
    """The kernel reduces slots 0..contributors-1 of a unit in K order: each unit's pieces must cover its
    K tiles exactly once, numbered 0, 1, ... along K, each knowing the same contributor count; every CTA
    gets iterations and no CTA gets more than one more than another."""
    t = split_work(units, k_tiles, ctas)
    by_unit: dict[int, list] = {}
    per_cta = []
    for c in range(ctas):
        segs = t.segments(c)
        per_cta.append(sum(s.ke - s.kb for s in segs))
        for s in segs:
            by_unit.setdefault(s.unit, []).append(s)
    assert sorted(by_unit) == list(range(units)) and min(per_cta) >= 1 and max(per_cta) - min(per_cta) <= 1
    for unit, segs in by_unit.items():
        segs.sort(key=lambda s: s.kb)
        assert [(s.kb, s.ke) for s in segs][0][0] == 0 and segs[-1].ke == k_tiles
        assert all(a.ke == b.kb for a, b in zip(segs, segs[1:])), unit
        assert [s.mine for s in segs] == list(range(len(segs))) and {s.contributors for s in segs} == {len(segs)}
    assert t.max_contributors == max(len(v) for v in by_unit.values())


def test_the_grid_rule_and_its_limits():
    g = SmallMGemm(16)
    # 4096 x 4096: 32 units < 132 resident CTAs: each unit's 64 K tiles in 132 // 32 = 4 ranges; K = 64: one
    # K tile per unit, 32 CTAs. 28672 x 8192: 224 units >= 132: stream-K over 132 CTAs.
    assert g.ctas(16, 4096, 4096, 132) == 128 and g.ctas(16, 4096, 64, 132) == 32
    assert g.ctas(16, 14336, 4096, 132) == 112 and g.ctas(16, 28672, 8192, 132) == 132
    assert g.ctas(16, 4096, 4096, 132, splits=4) == 128  # classic split-K: 32 units x 4
    assert g.ctas(16, 4096, 128, 132, splits=4) == 64  # 2 K tiles: at most 2 ranges per unit
    assert g.ctas(40, 1000, 520, 132, splits=1) == 8 * 3  # M = 40 > BN = 16: 3 M tiles per N tile
    # Few units, short K: a range keeps MIN_SPLIT_K_ITERS = 8 K tiles. Mixtral's router (N = 8, K = 4096, M = 37
    # at BN 32: 2 units of 64 K tiles) in 8 ranges a unit, not 66; GPT-2's c_proj at M = 1 (6 units of 12
    # K tiles) whole, not 22 ranges of one K tile or less.
    assert SmallMGemm(32).ctas(37, 8, 4096, 132) == 2 * 8 and SmallMGemm(8).ctas(1, 768, 768, 132) == 6
    assert SmallMGemm(8).ctas(1, 768, 3072, 132) == 6 * 6  # T5's wo at M = 1: 48 K tiles in 6 ranges
    with pytest.raises(ValueError, match="splits"):
        g.ctas(16, 4096, 4096, 132, splits=0)
    split4 = g.schedule(16, 4096, 4096, 128)
    assert split4.max_contributors == 4 and all(
        s.ke - s.kb == 16 for c in range(128) for s in split4.segments(c))  # 64 K tiles in 4 even ranges
    assert g.schedule(16, 4096, 4096, 32).max_contributors == 1  # splits = 1: no workspace
    with pytest.raises(ValueError, match="between 1 and"):
        split_work(32, 1, 33)
    with pytest.raises(ValueError, match="32-bit"):
        split_work(2**16, 2**10, 2**15)


HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "gemm_ladder/stream_k.cuh"
int main(int argc, char** argv) {  // the kernel's split: StreamKTail over every unit (first_unit 0)
  for (int a = 1; a + 2 < argc; a += 3) {
    const int units = atoi(argv[a]), k_tiles = atoi(argv[a + 1]), ctas = atoi(argv[a + 2]);
    const gl::StreamKTail t(0, units, k_tiles, ctas);
    for (int c = 0; c < ctas; ++c)
      for (int it = t.begin(c), end = t.begin(c + 1); it < end;) {
        const gl::StreamKTail::Segment s = t.segment(c, it, end);
        printf("%d %d %d %d %d %d %d\n", a, c, s.unit, s.kb, s.ke, s.mine, s.contributors);
        it = s.next;
      }
  }
  return 0;
}
"""


@needs_nvcc
def test_the_host_split_is_the_kernels(tmp_path):
    """split_work (Python, sizes the workspace) and the kernel's StreamKTail (stream_k.cuh compiled for
    the host) give the same pieces, built the way the kernel builds it."""
    src, exe = tmp_path / "split.cu", tmp_path / "split"
    src.write_text(HOST_PROGRAM)
    subprocess.run([nvcc_path(), "-std=c++17", "-DGL_DTYPE_BF16", f"-I{KERNEL_ROOT / 'include'}", str(src), "-o",
                    str(exe)], check=True, capture_output=True, timeout=300)
    args, expected = [], []
    for i, (units, k_tiles, ctas) in enumerate(SPLITS):
        t = split_work(units, k_tiles, ctas)
        args += [str(units), str(k_tiles), str(ctas)]
        expected += [(1 + 3 * i, c, s.unit, s.kb, s.ke, s.mine, s.contributors) for c in range(ctas)
                     for s in t.segments(c)]
    out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, timeout=60).stdout
    assert [tuple(int(x) for x in line.split()) for line in out.splitlines()] == expected


def test_buckets_and_cached_instances():
    assert [bucket(m) for m in (0, 1, 8, 9, 16, 17, 64, 100, 128, 129, 192, 193, 256)] == \
        [8, 8, 8, 16, 16, 32, 64, 128, 128, 192, 192, 256, 256]
    assert small_m_gemm(5) is small_m_gemm(8) and small_m_gemm(100).bn == 128
    for bad in (-1, SMALL_M_MAX + 1):
        with pytest.raises(ValueError, match="0 <= M <= 256"):
            small_m_gemm(bad)
    with pytest.raises(ValueError, match="BN in"):
        SmallMGemm(24)


def _views(m=7, n=1000, k=520, dtype=torch.bfloat16):
    x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    return operand_view(x, k_dim=1), operand_view(w, k_dim=1), torch.empty(m, n, dtype=dtype)


def test_supports_names_the_rule_it_refuses():
    """Every refusal names the argument and the rule; an input the kernel takes except for living on the
    CPU is refused for that alone (all rules but the device are checked here without a GPU)."""
    g = small_m_gemm(7)
    a, b, c = _views()
    assert g.supports(a, b, c) == "a is on cpu: the small-M kernel runs on a CUDA device"
    cases = {
        "takes bfloat16 or float16": _views(dtype=torch.float32),
        "must share a dtype": (a, operand_view(b.tensor.half(), k_dim=1), c),
        "c has dtype torch.float16": (a, b, c.half()),
        "K differs": (a, operand_view(torch.randn(1000, 528).bfloat16(), k_dim=1), c),
        "M <= 256": (*_views(m=257)[:2], torch.empty(257, 1000, dtype=torch.bfloat16)),
        "expected (M, N) = (7, 1000)": (a, b, c[:, :999]),
        "row-major (stride (ldc, 1), ldc >= N": (a, b, torch.empty(7, 2000, dtype=torch.bfloat16)[:, ::2]),
        "a is MN-major: the small-M kernel loads an MN-major A in boxes of 64 rows":
            (operand_view(a.tensor.T.contiguous().T, k_dim=1), b, c),
        "a (base": (operand_view(torch.randn(7, 521).bfloat16()[:, 1:], k_dim=1), b, c),  # base 2 bytes off
        "b (base": (a, operand_view(torch.randn(1000, 524).bfloat16()[:, :520], k_dim=1), c),  # pitch 1048 B
    }
    for rule, args in cases.items():
        reason = g.supports(*args)
        assert reason is not None and rule in reason, (rule, reason)
    # Taken apart from the device: padded pitches, an MN-major weight, an MN-major x from BN = 64 up, a
    # column-major or fp32 c, empty shapes.
    padded = operand_view(torch.randn(7, 528).bfloat16()[:, :520], k_dim=1)
    w_mn = operand_view(torch.randn(520, 1000).bfloat16().T, k_dim=1)
    x_mn = operand_view(torch.randn(520, 40).bfloat16().T, k_dim=1)
    assert w_mn.major == x_mn.major == "mn"
    assert small_m_gemm(40).supports(x_mn, w_mn, torch.empty(40, 1000, dtype=torch.bfloat16)).endswith("CUDA device")
    for args in ((padded, b, c), (a, w_mn, c), (a, b, torch.empty(1000, 7, dtype=torch.bfloat16).T),
                 (a, b, torch.empty(7, 1024, dtype=torch.bfloat16)[:, :1000]), (a, b, c.float()),
                 _views(m=0), _views(n=0), _views(k=0)):
        assert g.supports(*args).endswith("runs on a CUDA device")
    with pytest.raises(ValueError, match="runs on a CUDA device"):
        g.launch(a, b, c)  # refused before anything touches CUDA
