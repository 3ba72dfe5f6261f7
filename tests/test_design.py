"""The TMA pipeline designer against hand-computed values (CPU only).

Golden numbers are worked out here from the rules, not by calling the designer twice.
"""

from __future__ import annotations

import pytest

from gemm_ladder.design import PlanRefused, assess_suitability, describe, kernel_defines_for, plan_gemm
from gemm_ladder.design.problem import ARCHS
from gemm_ladder.design.render import plan_markdown
from gemm_ladder.design.smem import plan_tmem

BF16 = "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"
FP16 = "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"
ORDER = ["tensorDataType", "tensorRank", "globalAddress", "globalDim", "globalStrides", "boxDim",
         "elementStrides", "interleave", "swizzle", "l2Promotion", "oobFill"]


# --- tensor maps --------------------------------------------------------------------------------------

def test_encode_kwargs_bf16_4096_cube():
    p = plan_gemm(4096, 4096, 4096, "bf16", tile=(128, 128, 64), stages=4)
    base = 0x7F0000000000
    a = p.tensor_maps["a"].encode_kwargs(base)
    assert list(a) == ORDER
    assert a == {
        "tensorDataType": BF16, "tensorRank": 2, "globalAddress": base,
        "globalDim": [4096, 4096],          # (K, M)
        "globalStrides": [4096 * 2],        # row pitch of a in bytes
        "boxDim": [64, 128],                # (BK, BM)
        "elementStrides": [1, 1],
        "interleave": "CU_TENSOR_MAP_INTERLEAVE_NONE", "swizzle": "CU_TENSOR_MAP_SWIZZLE_128B",
        "l2Promotion": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B", "oobFill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
    }
    b = p.tensor_maps["b"].encode_kwargs(base)
    assert (b["globalDim"], b["globalStrides"], b["boxDim"]) == ([4096, 4096], [8192], [64, 128])
    c = p.tensor_maps["c"].encode_kwargs(base)
    assert (c["globalDim"], c["globalStrides"], c["boxDim"]) == ([4096, 4096], [8192], [64, 128])
    assert c["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"


def test_encode_kwargs_fp16_tails_cluster2():
    # M=1000, N=1032, K=520, tile 128x256x64, cluster 2 along M: B box is BN/2 = 128 rows.
    p = plan_gemm(1000, 1032, 520, "fp16", tile=(128, 256, 64), stages=3, cluster=2, consumers=2, persistent=True)
    a = p.tensor_maps["a"].encode_kwargs(1024)
    b = p.tensor_maps["b"].encode_kwargs(2048)
    c = p.tensor_maps["c"].encode_kwargs(4096)
    assert a["tensorDataType"] == b["tensorDataType"] == c["tensorDataType"] == FP16
    assert (a["globalDim"], a["globalStrides"], a["boxDim"]) == ([520, 1000], [1040], [64, 128])
    assert (b["globalDim"], b["globalStrides"], b["boxDim"]) == ([520, 1032], [1040], [64, 128])
    assert (c["globalDim"], c["globalStrides"], c["boxDim"]) == ([1032, 1000], [2064], [64, 128])
    assert p.load_protocol.expect_tx_bytes == 128 * 64 * 2 + 256 * 64 * 2 == 49152  # all of B arrives by multicast
    assert p.load_protocol.empty_arrival_count == 2 * 2
    assert p.load_protocol.multicast_mask == 0b11
    assert p.schedule.m_tiles == 8 and p.schedule.n_tiles == 5 and p.schedule.k_tiles == 9
    # persistent: 4 unit rows (2 M tiles each) x 5 N tiles = 20 units < 66 resident clusters -> 40 CTAs
    assert p.schedule.grid == (40, 1, 1) and p.schedule.cluster_dims == (2, 1, 1)
    assert (p.schedule.m_tail, p.schedule.n_tail, p.schedule.k_tail) == (1000 - 7 * 128, 1032 - 4 * 256, 520 - 8 * 64)


def test_encode_kwargs_rejects_misaligned_address():
    p = plan_gemm(256, 256, 256)
    with pytest.raises(PlanRefused, match="globalAddress"):
        p.tensor_maps["a"].encode_kwargs(0x1008)


def test_enum_names_exist_in_cuda_bindings():
    driver = pytest.importorskip("cuda.bindings.driver")
    p = plan_gemm(1000, 1032, 520, "fp16", tile=(128, 256, 64), stages=3, cluster=2, consumers=2, persistent=True)
    enums = {"tensorDataType": driver.CUtensorMapDataType, "interleave": driver.CUtensorMapInterleave,
             "swizzle": driver.CUtensorMapSwizzle, "l2Promotion": driver.CUtensorMapL2promotion,
             "oobFill": driver.CUtensorMapFloatOOBfill}
    for spec in p.tensor_maps.values():
        kw = spec.encode_kwargs(0)
        for key, enum in enums.items():
            assert hasattr(enum, kw[key]), (key, kw[key])


# --- shared memory ------------------------------------------------------------------------------------

def test_smem_128x128x64_4_stages():
    s = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=4).smem
    assert (s.a_offset, s.a_stage_bytes) == (0, 128 * 64 * 2)
    assert (s.b_offset, s.b_stage_bytes) == (4 * 16384, 128 * 64 * 2)
    assert (s.c_offset, s.c_bytes, s.c_panel_bytes, s.c_panels) == (8 * 16384, 32768, 128 * 128, 2)
    assert s.full_bar_offset == 8 * 16384 + 32768 == 163840
    assert s.empty_bar_offset == 163840 + 4 * 8
    assert s.barriers_end == 163840 + 64
    assert s.total_bytes == 163904 + 1024 == 164928
    assert s.ctas_per_sm == 233472 // (164928 + 1024) == 1
    for name, off, _ in s.regions():
        if name.startswith(("A", "B", "C")):
            assert off % 1024 == 0, name


def test_smem_and_defines_fp16_cluster2():
    d = kernel_defines_for("fp16", (128, 256, 64), stages=3, cluster=2, consumers=2)
    assert d["GL_SMEM_A_OFFSET"] == 0 and d["GL_SMEM_A_STAGE_BYTES"] == 16384
    assert d["GL_SMEM_B_OFFSET"] == 3 * 16384 and d["GL_SMEM_B_STAGE_BYTES"] == 32768
    assert d["GL_SMEM_C_OFFSET"] == 3 * 16384 + 3 * 32768 == 147456
    assert d["GL_SMEM_C_PANEL_BYTES"] == 128 * 128 and d["GL_C_PANELS"] == 4
    assert d["GL_SMEM_FULL_BAR_OFFSET"] == 147456 + 65536
    assert d["GL_SMEM_EMPTY_BAR_OFFSET"] == 212992 + 24
    assert d["GL_SMEM_BYTES"] == 212992 + 48 + 1024
    assert d["GL_EXPECT_TX_BYTES"] == 49152 and d["GL_B_BOX_ROWS"] == 128
    assert (d["GL_BM"], d["GL_BN"], d["GL_BK"], d["GL_STAGES"], d["GL_CONSUMERS"], d["GL_CLUSTER"]) == (128, 256, 64, 3, 2, 2)


def test_kernel_defines_shape_independent():
    cfg = dict(dtype="bf16", tile=(128, 128, 64), stages=4, cluster=1, consumers=1, arch="sm_90a")
    want = kernel_defines_for(**cfg)
    for shape in [(4096, 4096, 4096), (1, 8, 8), (4097, 4088, 4096)]:
        assert plan_gemm(*shape, **cfg).kernel_defines() == want
    required = {"GL_BM", "GL_BN", "GL_BK", "GL_STAGES", "GL_CONSUMERS", "GL_CLUSTER", "GL_SMEM_A_OFFSET",
                "GL_SMEM_B_OFFSET", "GL_SMEM_A_STAGE_BYTES", "GL_SMEM_B_STAGE_BYTES", "GL_SMEM_C_OFFSET",
                "GL_SMEM_C_PANEL_BYTES", "GL_C_PANELS", "GL_SMEM_FULL_BAR_OFFSET", "GL_SMEM_EMPTY_BAR_OFFSET",
                "GL_SMEM_BYTES", "GL_EXPECT_TX_BYTES", "GL_B_BOX_ROWS"}
    assert required <= set(want)
    assert all(isinstance(v, int) for v in want.values())


def test_level4_single_stage():
    p = plan_gemm(512, 512, 512, stages=1)
    assert p.ring.pipe_depth == 1 and p.ring.release_mode == "current"
    assert p.smem.total_bytes == 16384 + 16384 + 32768 + 16 + 1024


# --- descriptors --------------------------------------------------------------------------------------

def test_wgmma_descriptor_fields():
    d = plan_gemm(4096, 4096, 4096).wgmma_descriptors
    for op in ("a", "b"):
        x = d[op]
        assert x.layout_type == 1 and x.layout_type_bits == "62-63"
        assert (x.leading_byte_offset, x.leading_byte_offset_encoded) == (16, 1)
        assert (x.stride_byte_offset, x.stride_byte_offset_encoded) == (1024, 64)
        assert (x.k_step_bytes, x.k_step_encoded, x.k_steps_per_tile) == (32, 2, 4)
        assert x.base_offset == 0 and x.major == "K" and x.agrees_with_tma
        assert x.template == (1 << 62) | (64 << 32) | (1 << 16) == 0x4000004000010000


def test_tcgen05_descriptor_and_tmem():
    p = plan_gemm(4096, 4096, 4096, arch="sm_100a", tile=(128, 256, 64), stages=3)
    x = p.wgmma_descriptors["a"]
    assert x.instruction == "tcgen05.mma" and x.layout_type == 2
    assert x.template == (2 << 61) | (1 << 46) | (64 << 32) | (1 << 16)
    assert (p.tmem.columns_used, p.tmem.columns_allocated) == (256, 256)
    # sm_100a: the one tcgen05.commit per CTA frees a stage, not one arrival per consumer warpgroup
    q = plan_gemm(4096, 4096, 4096, arch="sm_100a", tile=(128, 256, 64), stages=3, cluster=2, consumers=2,
                  persistent=True)
    assert q.load_protocol.empty_arrival_count == 2 == q.kernel_defines()["GL_EMPTY_ARRIVALS"]
    assert plan_tmem(bm=128, bn=96, arch=ARCHS["sm_100a"]).columns_allocated == 128
    with pytest.raises(PlanRefused, match=r"tensor memory columns.*1024.*512"):
        plan_tmem(bm=256, bn=512, arch=ARCHS["sm_100a"])


# --- refusals -----------------------------------------------------------------------------------------

def test_refuse_too_many_stages():
    # 7 x (16384 + 16384) + 32768 + 7*16 + 1024 = 263280 > 232448; 6 stages = 230496 fits
    plan_gemm(4096, 4096, 4096, stages=6)
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4096, stages=7)
    msg = str(exc.value)
    assert exc.value.rule == "shared memory per block"
    assert "263280" in msg and "232448" in msg and "at most 6 stages" in msg


def test_refuse_misaligned_row_stride():
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4093, "bf16")
    msg = str(exc.value)
    assert "globalStrides" in msg and "8186" in msg and "multiple of 16" in msg
    assert "vectorized thread copy" in msg
    s = assess_suitability(4096, 4096, 4093, "bf16")
    assert not s.fits and "2-byte" in s.alternative


def test_refuse_c_row_stride():
    with pytest.raises(PlanRefused, match=r"c: globalStrides\[0\] = 8190"):
        plan_gemm(4096, 4095, 4096)


def test_refuse_box_over_256():
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4096, tile=(128, 512, 64), stages=2)
    assert "boxDim" in str(exc.value) and "512" in str(exc.value) and "256" in str(exc.value)


def test_refuse_inner_box_under_16_bytes_names_alternative():
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4096, tile=(128, 128, 4))
    assert "boxDim[0] bytes" in str(exc.value) and "vectorized thread copy" in str(exc.value)


def test_refuse_swizzle_disagreeing_with_mma():
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4096, tile=(128, 128, 32))
    msg = str(exc.value)
    assert exc.value.rule == "swizzle vs MMA layout"
    assert "64 bytes" in msg and "128-byte" in msg and "CU_TENSOR_MAP_SWIZZLE_64B" in msg


def test_refuse_accumulator_registers_and_empty_dims():
    with pytest.raises(PlanRefused, match=r"256 registers per thread > 255"):
        plan_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=3, consumers=1)
    with pytest.raises(PlanRefused, match="globalDim"):
        plan_gemm(0, 4096, 4096)


def test_small_problem_fits_but_not_worthwhile():
    p = plan_gemm(64, 64, 64)
    assert p.suitability.fits and not p.suitability.worthwhile
    assert "vectorized thread copy" in p.suitability.alternative


# --- protocols and timeline ---------------------------------------------------------------------------

def test_ring_and_ledger():
    p = plan_gemm(4096, 4096, 4096, stages=4)
    r = p.ring
    assert (r.full_init_count, r.empty_init_count, r.initial_phase) == (1, 1, 0)
    assert (r.first_full_wait_parity, r.first_empty_wait_parity) == (0, 1)
    rows = {x.iteration: x for x in r.ledger}
    assert (rows[0].stage, rows[0].full_wait_parity, rows[0].empty_wait_parity) == (0, 0, 1)
    assert rows[0].empty_passes_immediately and not rows[4].empty_passes_immediately
    assert (rows[5].stage, rows[5].full_wait_parity, rows[5].empty_wait_parity) == (1, 1, 0)
    assert (rows[9].stage, rows[9].full_wait_parity) == (1, 0)
    assert p.issuer.thread == 0
    assert p.load_protocol.full_arrival_count == 1


def test_issuer_in_producer_warpgroup():
    # as levels 7-9: warpgroup 0 is the producer (thread 0 loads), consumers are warpgroups 1..W,
    # thread 128 (thread 0 of consumer 0) stores, thread 0 of each consumer warpgroup releases stages
    p = plan_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=3, consumers=2)
    assert p.consumers.producer_warpgroup and p.consumers.threads_per_cta == 384
    assert (p.issuer.thread, p.issuer.warpgroup, p.issuer.store_thread) == (0, "producer", 128)
    assert (p.consumers.first_warpgroup, p.consumers.first_thread, p.consumers.release_threads) == (1, 128, (128, 256))
    assert p.consumers.threads == 256 and p.consumers.accumulator_registers == 128
    text = describe(p)
    assert "threads 128-383" in text.consumers and "warpgroup 0" in text.issuer
    assert "thread 128" in text.issuer.lower()
    assert any("thread 128" in step for step in text.store_steps)
    assert "128, 256" in text.empty_arrivers
    j = p.to_json()
    assert (j["issuer"]["thread"], j["issuer"]["store_thread"]) == (0, 128)
    assert j["consumers"]["release_threads"] == [128, 256]


def test_issuer_without_producer_warpgroup():
    # levels 4-6: thread 0 issues loads and stores and is a consumer (warpgroup 0)
    p = plan_gemm(4096, 4096, 4096, stages=3)
    assert not p.consumers.producer_warpgroup and p.consumers.threads_per_cta == 128
    assert (p.issuer.thread, p.issuer.store_thread, p.issuer.warpgroup) == (0, 0, "consumer 0")
    assert (p.consumers.first_warpgroup, p.consumers.release_threads) == (0, (0,))
    assert "also a consumer" in describe(p).issuer


def _loads(plan, phase):
    return [j for r in describe(plan).timeline if r.phase == phase for j in r.loads]


def test_timeline_k_tiles_5_stages_3():
    p = plan_gemm(256, 256, 5 * 64, stages=3)
    assert _loads(p, "prologue") == [0, 1, 2]
    assert _loads(p, "steady") == [3, 4]
    assert _loads(p, "drain") == []
    iters = [r for r in describe(p).timeline if r.iteration is not None]
    assert [(r.iteration, r.stage, r.parity) for r in iters] == [(0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 0, 1), (4, 1, 1)]
    assert [r.phase for r in iters] == ["steady", "steady", "steady", "drain", "drain"]
    # load 3 goes into stage 0 only after iteration 1 released stage 0 (k=0)
    row1 = iters[1]
    assert row1.loads == (3,) and "release stage 0" in row1.consumer and "wait empty[0] parity 0" in row1.producer


def test_timeline_one_k_tile():
    p = plan_gemm(256, 256, 64, stages=4)
    assert _loads(p, "prologue") == [0] and _loads(p, "steady") == [] and _loads(p, "drain") == []
    iters = [r for r in describe(p).timeline if r.iteration is not None]
    assert len(iters) == 1 and iters[0].phase == "drain"
    assert any("commit_group" in r.producer for r in describe(p).timeline)
    assert "wait_group.read 0" in describe(p).timeline[-1].producer


def test_timeline_fewer_k_tiles_than_stages():
    p = plan_gemm(256, 256, 136, stages=4)  # 3 K tiles (K tail of 8)
    assert p.schedule.k_tiles == 3
    assert _loads(p, "prologue") == [0, 1, 2] and _loads(p, "steady") == []
    assert [r.iteration for r in describe(p).timeline if r.phase == "drain" and r.iteration is not None] == [0, 1, 2]


@pytest.mark.parametrize("k_tiles,stages", [(7, 3), (1, 1), (3, 1), (8, 4), (9, 4), (2, 2), (20, 6)])
def test_timeline_every_load_once_and_after_release(k_tiles, stages):
    p = plan_gemm(256, 256, 64 * k_tiles, stages=stages)
    loads = [j for r in describe(p).timeline for j in r.loads]
    assert sorted(loads) == list(range(k_tiles)) == loads
    assert _loads(p, "prologue") == list(range(min(stages, k_tiles)))
    released = set()
    for r in describe(p).timeline:
        # a release of iteration i happens in the consumer action, before the producer of the same row reuses it
        for i in range(k_tiles):
            if f"(k={i}): arrive" in r.consumer:
                released.add(i)
        for j in r.loads:
            if j >= stages:
                assert j - stages in released, (j, r)
    # drain issues no loads, and the last iteration is in the drain
    assert _loads(p, "drain") == []
    assert [r for r in describe(p).timeline if r.iteration == k_tiles - 1][0].phase == "drain"


def test_persistent_schedule():
    p = plan_gemm(4096, 4096, 4096, persistent=True)
    assert p.schedule.grid == (132, 1, 1) and p.schedule.cluster_dims == (1, 1, 1) and p.schedule.tiles == 32 * 32
    # three rounds of the ring, numbered by the global K counter (it continues across tiles)
    assert [r.iteration for r in p.ring.ledger] == list(range(12))
    notes = describe(p).schedule_notes
    assert "continues across tiles" in notes[0]
    assert "blockIdx.x / 1" in notes[0] and "grouped order" in notes[1]


def test_persistent_cluster_schedule():
    # levels 8-9: 1-D grid of min(units, resident clusters) * cluster CTAs, cluster dims (cluster, 1, 1)
    p = plan_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=3, cluster=2, consumers=2, persistent=True)
    sc = p.schedule
    assert (sc.m_tiles, sc.n_tiles) == (32, 16)
    # 16 unit rows x 16 N tiles = 256 units; 132 SMs x 1 CTA/SM / 2 = 66 resident clusters
    assert sc.grid == (132, 1, 1) and sc.cluster_dims == (2, 1, 1) and sc.ctas == 132
    notes = describe(p).schedule_notes
    assert "min(256 work units, 66 resident clusters)" in notes[0]
    assert "unit = blockIdx.x / 2" in notes[0] and "gridDim.x / 2 = 66" in notes[0]
    assert "M tile unit_m * 2 + r" in notes[0]
    # CTA 0 takes units 0, 66, 132, 198 -> (unit row, N tile) (0, 0), (2, 8), (12, 0), (14, 8)
    assert "(0, 0), (4, 8), (24, 0), (28, 8)" in notes[2]
    # small problem: the grid stops at the work units
    q = plan_gemm(1024, 512, 512, tile=(128, 256, 64), stages=3, cluster=2, consumers=2, persistent=True)
    assert q.schedule.grid == (4 * 2 * 2, 1, 1)


def test_unit_coords_grouped_order():
    from gemm_ladder.design.plan import unit_coords

    # 10 unit rows, 3 N tiles: group 0 = rows 0..7 (24 units), group 1 = rows 8..9
    assert [unit_coords(u, 10, 3) for u in range(10)] == [(r, 0) for r in range(8)] + [(0, 1), (1, 1)]
    assert unit_coords(23, 10, 3) == (7, 2)
    assert [unit_coords(u, 10, 3) for u in range(24, 30)] == [(8, 0), (9, 0), (8, 1), (9, 1), (8, 2), (9, 2)]
    seen = {unit_coords(u, 10, 3) for u in range(30)}
    assert seen == {(r, t) for r in range(10) for t in range(3)}


def test_non_persistent_schedule_has_no_cluster():
    p = plan_gemm(1000, 1032, 520, stages=3)
    assert p.schedule.grid == (9, 8, 1) and p.schedule.cluster_dims == (1, 1, 1) and p.schedule.ctas == 72
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4096, cluster=2)
    assert exc.value.rule == "cluster without persistent"


def test_odd_m_tiles_in_a_cluster():
    p = plan_gemm(3 * 128, 256, 256, tile=(128, 128, 64), stages=2, cluster=2, persistent=True)
    # 2 unit rows (the second half out of bounds) x 2 N tiles = 4 units -> 8 CTAs
    assert p.schedule.m_tiles == 3 and p.schedule.grid == (8, 1, 1) and p.schedule.cluster_dims == (2, 1, 1)
    assert any("multicast" in note and "ranks >= 1" in note for note in describe(p).schedule_notes)


# --- output staging over the stages (level 5) ---------------------------------------------------------

def test_c_aliases_stages_smem():
    p = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=3, c_aliases_stages=True)
    s = p.smem
    assert s.c_aliases_stages and s.c_offset == 0 and s.c_bytes == 32768
    assert s.full_bar_offset == 3 * 32768  # barriers after the stages (longer than C staging)
    assert s.total_bytes == 3 * 32768 + 48 + 1024 == 99376
    assert s.ctas_per_sm == 233472 // (99376 + 1024) == 2
    assert p.kernel_defines()["GL_SMEM_C_OFFSET"] == 0 and p.kernel_defines()["GL_SMEM_BYTES"] == 99376
    j = p.to_json()
    assert j["problem"]["c_aliases_stages"] is True and j["smem"]["c_aliases_stages"] is True
    assert "overlays" in j["smem"]["c_staging"] and "drained" in j["smem"]["c_staging"]
    assert "one tile per CTA" in j["smem"]["c_staging"]
    md = plan_markdown(p)
    assert "overlays the operand stages" in md and "C panel 0 (overlays the stages)" in md
    assert "__syncthreads" in describe(p).store_steps[0]
    # without the alias, C follows the stages
    q = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=3)
    assert q.smem.c_offset == 3 * 32768 and q.smem.total_bytes == 99376 + 32768
    assert "follows the operand stages" in q.to_json()["smem"]["c_staging"]


def test_c_aliases_stages_refused_when_persistent():
    with pytest.raises(PlanRefused) as exc:
        plan_gemm(4096, 4096, 4096, stages=3, persistent=True, c_aliases_stages=True)
    assert exc.value.rule == "output staging alias" and "persistent" in str(exc.value)


# --- the ladder's TMA levels are the designer's plans ------------------------------------------------

def test_every_tma_level_is_a_plan():
    from gemm_ladder.levels import LEVELS
    from gemm_ladder.levels.tma import TmaLevel

    tma = {n: lv for n, lv in LEVELS.items() if isinstance(lv, TmaLevel)}
    assert sorted(tma) == [4, 5, 6, 7, 8, 9]
    for number, lv in tma.items():
        p = plan_gemm(4096, 4096, 4096, "bf16", tile=lv.tile, stages=lv.stages, cluster=lv.cluster,
                      consumers=lv.consumers, persistent=lv.persistent, producer_warpgroup=lv.producer_warpgroup,
                      c_aliases_stages=lv.c_aliases_stages, c_ring=lv.c_ring)
        assert p.kernel_defines() == lv.defines("bf16"), number
        assert p.consumers.threads_per_cta == lv.geometry("bf16").threads == p.kernel_defines()["GL_THREADS"], number
        assert p.smem.total_bytes == lv.geometry("bf16").dynamic_smem, number
        # what the kernels do: thread 0 loads; thread 128 stores after a producer warpgroup, else thread 0
        assert p.issuer.thread == 0, number
        assert p.issuer.store_thread == (128 if lv.producer_warpgroup else 0), number
        # level 9 (c_ring): each consumer warpgroup's thread 0 stores its own rows
        assert p.issuer.store_threads == ((128, 256) if lv.c_ring else (p.issuer.store_thread,)), number
        if lv.persistent:
            assert p.schedule.cluster_dims == (lv.cluster, 1, 1) and p.schedule.grid[1:] == (1, 1), number
            assert p.schedule.grid[0] % lv.cluster == 0, number
        else:
            assert p.schedule.grid == (32, 32, 1) and p.schedule.cluster_dims == (1, 1, 1), number


# --- timeline elision ---------------------------------------------------------------------------------

def test_markdown_timeline_elided_for_long_k():
    p = plan_gemm(4096, 4096, 8192, stages=4)  # 128 K tiles
    assert len([r for r in describe(p).timeline if r.iteration is not None]) == 128  # the description is complete
    md = plan_markdown(p)
    section = md.split("## Timeline", 1)[1].split("## Schedule", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| phase")]
    assert "… 116 iterations omitted (k = 6..121) …" in section
    iters = [line.split(" | ")[1] for line in rows if line.split(" | ")[1].isdigit()]
    assert iters == [str(k) for k in [*range(6), *range(122, 128)]]
    assert len(rows) == 4 + 12 + 1 + 3  # prologue, drawn iterations, the omitted row, epilogue steps
    # short K: every iteration, no omitted row
    short = plan_markdown(plan_gemm(256, 256, 13 * 64, stages=3))
    assert "omitted" not in short.split("## Timeline", 1)[1].split("## Schedule", 1)[0]


def test_timeline_png_long_k_is_fast_and_bounded(tmp_path):
    import time

    pytest.importorskip("matplotlib")
    from gemm_ladder.design.render import timeline_png

    timeline_png(plan_gemm(256, 256, 320, stages=3), tmp_path / "warm.png")  # import and font cache
    p = plan_gemm(4096, 4096, 8192, stages=4)
    start = time.process_time()  # this process's CPU time: the drawing's cost, not the machine's load
    timeline_png(p, tmp_path / "long.png")
    elapsed = time.process_time() - start
    assert elapsed < 2.0, elapsed
    data = (tmp_path / "long.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(data[16:20], "big")
    assert width < 2000, width
    # width no longer grows with K
    timeline_png(plan_gemm(4096, 4096, 65536, stages=4), tmp_path / "longer.png")
    assert int.from_bytes((tmp_path / "longer.png").read_bytes()[16:20], "big") == width


def test_c_ring_staging_buys_a_fourth_stage_at_level_9():
    """Level 9's tile (128 x 256 x 64, 2 consumers): a whole-tile staging (64 KiB) leaves room for 3 stages
    of 48 KiB in 227 KiB; two 8 KiB panel buffers per consumer (32 KiB) leave room for 4."""
    from gemm_ladder.design.smem import max_stages
    from gemm_ladder.design.problem import arch_info

    kw = dict(bm=128, bn=256, bk=64, elem_bytes=2, arch=arch_info("sm_90a"), consumers=2)
    assert max_stages(**kw) == 3 and max_stages(**kw, c_ring=2) == 4
    p = plan_gemm(8192, 8192, 8192, tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True, c_ring=2)
    s = p.smem
    # 4 x (16384 + 32768) stages, then 2 consumers x 2 buffers x (64 rows x 128 B), then 8 barriers + 1024 slack
    assert (s.c_offset, s.c_panel_bytes, s.c_bytes, s.c_ring) == (196608, 8192, 32768, 2)
    assert s.total_bytes == 196608 + 32768 + 8 * 8 + 1024 == 230464
    assert p.tensor_maps["c"].box_dim == (64, 64)  # one consumer's 64 rows x 64 columns per store
    d = p.kernel_defines()
    assert (d["GL_C_RING"], d["GL_C_PANELS"], d["GL_SMEM_C_PANEL_BYTES"]) == (2, 4, 8192)
    names = [r[0] for r in s.regions() if r[0].startswith("C buffer")]
    assert names == ["C buffer 0.0 (consumer 0)", "C buffer 0.1 (consumer 0)",
                     "C buffer 1.0 (consumer 1)", "C buffer 1.1 (consumer 1)"]
    assert "wait_group.read 1" in " ".join(describe(p).store_steps)
    with pytest.raises(PlanRefused, match="at most 3 stages"):
        plan_gemm(8192, 8192, 8192, tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True)
    with pytest.raises(PlanRefused, match="does not divide"):
        plan_gemm(8192, 8192, 8192, tile=(128, 256, 64), stages=3, cluster=2, consumers=2, persistent=True, c_ring=3)
    with pytest.raises(PlanRefused, match="producer warpgroup of their own"):
        plan_gemm(4096, 4096, 4096, stages=3, persistent=True, c_ring=2)
    # One consumer with a producer warpgroup (the library's 64-row tile) keeps its own panel ring.
    one = plan_gemm(4096, 4096, 4096, tile=(64, 128, 64), stages=8, cluster=2, consumers=1, persistent=True, c_ring=2)
    assert (one.kernel_defines()["GL_CONSUMERS"], one.kernel_defines()["GL_THREADS"]) == (1, 256)


def test_plan_gemm_computes_numbers_only(monkeypatch):
    """The launch path (levels 4+ plan each new shape) builds no sentence and no timeline; the plan module
    imports neither the describer nor the renderer (no plan <-> render cycle)."""
    import ast
    import inspect

    import gemm_ladder.design.describer as describer
    import gemm_ladder.design.plan as plan_module

    def refuse(*args, **kwargs):
        raise AssertionError("plan_gemm described the plan")

    for name in ("describe", "build_timeline", "conclusion", "_load_steps", "_store_steps", "_schedule_notes"):
        monkeypatch.setattr(describer, name, refuse)
    plan_gemm(8192, 8192, 8192, tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True, c_ring=2,
              stream_k=True)
    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(plan_module)))
                if isinstance(node, ast.ImportFrom)}
    assert not imported & {"gemm_ladder.design.describer", "gemm_ladder.design.render"}
