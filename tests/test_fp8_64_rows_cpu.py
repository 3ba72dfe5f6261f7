"""The fp8 kernel's 64-row tile (issue 25, decode's M <= 64) without a GPU: its builds (nvcc: no spill, no
register exchange, one consumer), its ring (audited; a seeded fault found), the launch's arguments (A's and
scale_a's boxes 64 rows, the split's workspace for one consumer), the tile-height rule and explain."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm
from gemm_ladder.library.quantized import quantize_fp8

from conftest import needs_nvcc
from fp8_cases import BLOCKS, LaunchRecorder, assert_build_clean, load_bench_fp8_offering

SMS = 132

ROWS64 = [Fp8Kernel("tensorwise", bn=64, store="tma", bm=64), Fp8Kernel("rowwise", bm=64),
          Fp8Kernel("blockwise", bn=64, bias=True, store="tma", bm=64), Fp8Kernel("blockwise", out_dtype="fp8", bm=64),
          Fp8Kernel("rowwise", bn=64, out_dtype="fp32", bm=64), Fp8Kernel("tensorwise", bn=64, split=True, bm=64),
          Fp8Kernel("blockwise", bn=64, store="tma", split=True, bm=64),
          Fp8Kernel("tensorwise", bn=64, overlap=False, bm=64)]


def _id(k: Fp8Kernel) -> str:
    return f"{k.scale_mode}-{k.out_dtype}-bn{k.bn}-{k.store}-ov{int(k.overlap)}-split{int(k.split)}"


@needs_nvcc
@pytest.mark.parametrize("kernel", ROWS64, ids=_id)
def test_64_row_builds_for_sm90a_without_spills(use_cache, kernel):
    sass = assert_build_clean(kernel)
    assert "USETMAXREG" not in sass  # one consumer: no register exchange with the producer
    assert kernel.threads == 256 and kernel.consumers == 1
    assert kernel.dynamic_smem <= fp8.SMEM_LIMIT


@needs_nvcc
def test_the_128_row_build_still_exchanges_registers(use_cache):
    from gemm_ladder.runtime.compiler import disassemble

    assert "USETMAXREG" in disassemble(Fp8Kernel("tensorwise", store="tma").build().cubin)


def test_64_rows_named_only_when_64():
    one, two = Fp8Kernel("blockwise"), Fp8Kernel("blockwise", bm=64)
    assert "GL_FP8_BM" not in one.defines() and "bm" not in repr(one)  # the 128-row builds' inputs unchanged
    assert two.defines()["GL_FP8_BM"] == 64 and "bm=64" in repr(two)
    assert two.config().tile == (64, 128, 128) and two.config().consumers == 1
    assert fp8.kernel_for(two.config()) == two and fp8.kernel_for(one.config()) == one
    with pytest.raises(ValueError, match="no such configuration"):
        Fp8Kernel("blockwise", bm=32).config()


@pytest.mark.parametrize("bn,stages", [(128, 8), (64, 13)])
def test_64_row_ring_fills_shared_memory(bn, stages):
    for mode in ("tensorwise", "blockwise"):
        for store in (fp8.STORE_REGISTERS, fp8.STORE_TMA):
            k = Fp8Kernel(mode, bn=bn, store=store, bm=64)
            assert k.ring_stages == stages and k.dynamic_smem <= fp8.SMEM_LIMIT
            # one stage more would not fit beside the staging buffer
            assert fp8.smem_bytes(mode, stages + 1, bn, fp8.STORE_TMA, 64) > fp8.SMEM_LIMIT
            assert k.expect_tx_bytes == 64 * 128 + bn * 128 + (256 if mode == "blockwise" else 0)


@pytest.mark.parametrize("kernel", [k for k in ROWS64 if not k.split], ids=_id)
def test_64_row_ring_audited(kernel):
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = kernel.ring_config(k_iters=4, tiles=3)
    assert ring.consumers == 1 and ring.empty_arrivals == 4  # one warpgroup's four warps: the kernel's count
    assert audit(build_ring_protocol(ring, name="fp8-64-rows")).ok


def test_64_row_ring_audit_catches_a_seeded_fault():
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = Fp8Kernel("blockwise", bm=64).ring_config(k_iters=4, tiles=2)
    bad = replace(ring, expect_tx_bytes=ring.expect_tx_bytes - 256)  # the 64 rows' scale box left out
    assert not audit(build_ring_protocol(bad, name="fp8-64-fault"), stop_at_first=True).ok
    # Two consumers' releases awaited where one releases: the ring wedges once the producer comes round
    # (18 loads on 8 stages).
    ring = Fp8Kernel("blockwise", bm=64).ring_config(k_iters=6, tiles=3)
    assert audit(build_ring_protocol(ring, name="fp8-64")).ok
    assert not audit(build_ring_protocol(replace(ring, empty_count=8), name="fp8-64-fault2"), stop_at_first=True).ok


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", [(64, 4096, 14336), (7, 1040, 4000), (100, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
def test_64_row_launch_arguments(monkeypatch, mode, shape):
    m, n, k = shape
    rec, workspaces = LaunchRecorder(), []
    monkeypatch.setattr(fp8, "_MAPS", {})
    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(fp8, "_sm_count", lambda device: SMS)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)
    monkeypatch.setattr(fp8, "_workspace", lambda stream, plan, bn, consumers: workspaces.append(
        (plan.workspace_floats(1, consumers, bn), plan.counters(1, consumers), consumers)) or (0x1000, 0x2000))
    monkeypatch.setattr(Fp8Kernel, "loaded", lambda self, device: rec)
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "auto")
    qa, sa = quantize_fp8(torch.randn(m, k), BLOCKS[mode][0])
    qw, sw = quantize_fp8(torch.randn(n, k), BLOCKS[mode][1])
    sb = sw.T if sw.dim() == 2 else sw
    call = check_scaled_mm(qa, qw.T, sa, sb, device_type="cpu")
    fp8.scaled_mm_launch(qa, qw.T, sa, sb, None, call)
    (grid, args), = rec.calls
    bm = 64 if m <= 64 else 128
    bn = fp8.tile_n(m, n, SMS, bm=bm)
    plan, _ = fp8.split_plan(m, n, k, bn, SMS, "auto", bm)
    assert grid == (plan.clusters, 1, 1)
    assert args[0]["boxDim"] == [128, bm]
    if mode == "blockwise":
        assert args[2]["boxDim"] == [bm, 1]
    assert [a.value for a in args[16:18]] == [plan.first_unit, plan.max_contributors]
    if plan.tail_units:
        assert workspaces == [(plan.workspace_floats(1, bm // 64, bn), plan.counters(1, bm // 64), bm // 64)]


def test_tile_m_rule():
    assert fp8.tile_m(64, "128")[0] == 128
    assert [fp8.tile_m(m, "auto")[0] for m in (1, 7, 64, 65, 128, 4096)] == [64, 64, 64, 128, 128, 128]
    with pytest.raises(ValueError, match="tile_m"):
        fp8.tile_m(64, "64")
    # M <= 64 is one tile high either way: the tile width rule gives the same width.
    assert fp8.tile_n(64, 4096, SMS, bm=64) == fp8.tile_n(64, 4096, SMS) == 64


def test_explain_names_the_tile_height(monkeypatch):
    import gemm_ladder

    meta = dict(device="meta")
    qa = torch.empty((64, 7168), dtype=torch.float8_e4m3fn, **meta)
    qb = torch.empty((4096, 7168), dtype=torch.float8_e4m3fn, **meta).T
    sa, sb = torch.empty((), **meta), torch.empty((), **meta)
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "auto")
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert e["tile"]["BM"] == 64 and e["threads"] == 256 and e["defines"]["GL_FP8_BM"] == 64
    assert "one 64-row tile" in e["tile_m_reason"]
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "128")
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert e["tile"]["BM"] == 128 and e["threads"] == 384 and "GL_FP8_BM" not in e["defines"]


def test_bench_times_the_128_row_launch_beside_the_64_row_one(monkeypatch, capsys):
    """bench/fp8.py: --tile-m is a documented option, and its 128-row wrapper sets the tile height for the
    call only (what the interleaved timing relies on)."""
    import sys

    import gemm_ladder

    module = load_bench_fp8_offering(monkeypatch, capsys, "gl_bench_fp8_rows", "--tile-m {128,auto,both}")
    meta = dict(device="meta")
    args = (torch.empty((64, 2048), dtype=torch.float8_e4m3fn, **meta),
            torch.empty((4096, 2048), dtype=torch.float8_e4m3fn, **meta).T, torch.empty((), **meta), torch.empty((), **meta))
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "auto")
    seen = module.rows128(lambda x, y: (fp8.TILE_M_DEFAULT, gemm_ladder.explain_scaled_mm(*args)["tile"]["BM"]))
    assert seen(None, None) == ("128", 128) and fp8.TILE_M_DEFAULT == "auto"
    assert module.split_of(*args)["bm"] == 64
    assert "gl_bench_fp8_rows" not in sys.modules
