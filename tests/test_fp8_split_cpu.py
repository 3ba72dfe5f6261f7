"""The fp8 kernel's stream-K split (issue 25, M <= 128) without a GPU: the host's choice for the decode shapes
of bench/fp8.py's layers, the schedule's coverage of every tile's K blocks, explain_scaled_mm's report, the
launch's arguments and workspace, the split build's config round trip, the ring audit of short segments,
and (nvcc) the split builds: no spills, no serialised wgmma, the tail compiled in only where asked."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

import gemm_ladder
from gemm_ladder.library import fp8, quantized
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm
from gemm_ladder.library.quantized import quantize_fp8
from gemm_ladder.library.kernel import DATA_PARALLEL, STREAM_K

from conftest import needs_nvcc
from fp8_cases import LaunchRecorder

E4M3 = torch.float8_e4m3fn
SMS = 132
#: bench/fp8.py's LAYERS: (N, K) of DeepSeek-V3 and Llama-3-8B linear layers.
LAYERS = [(1536, 7168), (24576, 1536), (576, 7168), (7168, 16384), (4096, 7168), (7168, 2048),
          (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
DECODE = [(m, n, k) for m in (64, 128) for n, k in LAYERS]



@pytest.fixture(autouse=True)
def _split_at_any_k(monkeypatch):
    """These tests exercise the split's mechanics at any K: the rule that leaves tiles of fewer than
    fp8.MIN_SPLIT_TILE_K_BLOCKS K blocks whole (measured slower there) has its own test. They split
    128-row tiles (M <= 64 takes 64-row tiles by default; their split: test_fp8_64_rows_cpu.py)."""
    monkeypatch.setattr(fp8, "MIN_SPLIT_TILE_K_BLOCKS", 0)
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "128")
    # The grid of up to one CTA per SM, ranges crossing tiles (what tiles above half the SMs take); the aligned
    # grid (fp8.SPLIT_ALIGNED, the default below half) has its own tests at the end.
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", False)


def _meta(m, n, k):
    a = torch.empty((m, k), dtype=E4M3, device="meta")
    b = torch.empty((n, k), dtype=E4M3, device="meta").T
    return a, b, torch.empty((), device="meta"), torch.empty((), device="meta")


@pytest.mark.parametrize("shape", DECODE, ids=lambda s: "x".join(map(str, s)))
def test_decode_shapes_split_when_tiles_are_fewer_than_sms(shape):
    m, n, k = shape
    bn = fp8.tile_n(m, n, SMS)
    tiles, k_blocks = math.ceil(m / 128) * math.ceil(n / bn), math.ceil(k / 128)
    plan, why = fp8.split_plan(m, n, k, bn, SMS)
    if tiles >= SMS:  # the 24576- and 28672-wide layers: 128-wide tiles fill the SMs
        assert (plan.first_unit, plan.clusters, plan.tail_units) == (tiles, SMS, 0) and "fill" in why
        return
    assert plan.first_unit == 0 and plan.units == tiles and plan.k_tiles == k_blocks
    assert tiles < plan.clusters <= SMS
    assert plan.total // plan.clusters >= fp8.MIN_SPLIT_K_BLOCKS  # every CTA streams at least 4 K blocks
    assert 2 <= plan.max_contributors <= k_blocks
    assert (plan.clusters + 1) * plan.total < 2**31
    _check_coverage(plan)


def _check_coverage(plan):
    """Every K block of every tile is computed by exactly one CTA; a tile's contributors are numbered 0..n-1
    in K order and each knows n."""
    seen = {}
    for c in range(plan.clusters):
        segs = plan.segments(c)
        assert segs, f"CTA {c} has no K block (its contributors would be miscounted)"
        for s in segs:
            seen.setdefault(s.unit, []).append(s)
    assert sorted(seen) == list(range(plan.units))
    for unit, segs in seen.items():
        segs.sort(key=lambda s: s.kb)
        assert [s.mine for s in segs] == list(range(len(segs)))
        assert {s.contributors for s in segs} == {len(segs)} and len(segs) <= plan.max_contributors
        assert segs[0].kb == 0 and segs[-1].ke == plan.k_tiles
        assert all(a.ke == b.kb and a.kb < a.ke for a, b in zip(segs, segs[1:]))


@pytest.mark.parametrize("shape", [(1, 1000, 4000), (7, 577, 7184), (128, 7168, 2064), (64, 64, 1024), (300, 512, 8192)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("min_blocks", [1, 4])
def test_schedule_covers_every_k_block_once(monkeypatch, shape, min_blocks):
    monkeypatch.setattr(fp8, "MIN_SPLIT_K_BLOCKS", min_blocks)
    m, n, k = shape
    plan, _ = fp8.split_plan(m, n, k, fp8.tile_n(m, n, SMS), SMS)
    if plan.tail_units:
        assert plan.total // plan.clusters >= min_blocks
        _check_coverage(plan)


def test_no_split_where_it_cannot_pay_or_is_turned_off():
    assert fp8.split_plan(4096, 4096, 4096, 128, SMS)[0].tail_units == 0  # 1024 tiles
    plan, why = fp8.split_plan(64, 4096, 256, 64, SMS)  # 64 tiles x 2 K blocks: fewer than 4 blocks per extra CTA
    assert plan.tail_units == 0 and plan.clusters == 64 and "no more CTAs" in why
    plan, why = fp8.split_plan(64, 4096, 14336, 64, SMS, "none")
    assert plan.tail_units == 0 and plan.clusters == 64 and "turned off" in why
    assert fp8.split_plan(0, 4096, 4096, 64, SMS)[0].tail_units == 0
    with pytest.raises(ValueError, match="split"):
        fp8.split_plan(64, 4096, 4096, 64, SMS, "all")


def test_explain_reports_the_split(monkeypatch):
    e = gemm_ladder.explain_scaled_mm(*_meta(64, 4096, 14336))
    assert (e["split"], e["tile"]["BN"], e["tiles"], e["k_blocks"], e["grid"]) == ("all", 64, 64, 112, SMS)
    assert e["defines"]["GL_FP8_SPLIT"] == 1 and e["contributors"] == 3
    plan, _ = fp8.split_plan(64, 4096, 14336, 64, SMS)
    # Partials: 64 tiles x 2 consumers x 3 slots x 64 x 64 fp32; counters: 64 tiles x 2 consumers.
    assert e["workspace_bytes"] == 4 * (64 * 2 * 3 * 64 * 64 + 64 * 2) == 4 * (plan.workspace_floats(1, 2, 64) + 128)
    big = gemm_ladder.explain_scaled_mm(*_meta(4096, 7168, 16384))
    assert (big["split"], big["contributors"], big["workspace_bytes"], big["grid"]) == ("none", 1, 0, SMS)
    assert "GL_FP8_SPLIT" not in big["defines"] and "fill" in big["split_reason"]
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "none")
    off = gemm_ladder.explain_scaled_mm(*_meta(64, 4096, 14336))
    assert (off["split"], off["grid"]) == ("none", 64) and "GL_FP8_SPLIT" not in off["defines"]


def test_quantized_output_splits_on_128_wide_tiles():
    a, b, _, _ = _meta(64, 4096, 7168)
    sa = torch.empty((56, 64), device="meta").T
    sb = torch.empty((32, 56), device="meta").T
    e = gemm_ladder.explain_scaled_mm(a, b, sa, sb, out_dtype=E4M3)
    assert (e["tile"]["BN"], e["tiles"], e["split"], e["grid"]) == (128, 32, "all", SMS)


def _patched_launch(monkeypatch):
    rec, built, workspaces = LaunchRecorder(), [], []
    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(fp8, "_sm_count", lambda device: SMS)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)

    def loaded(self, device):
        built.append(self)
        return rec

    def workspace(stream, plan, bn, consumers=2):
        workspaces.append((plan.workspace_floats(1, consumers, bn), plan.counters(1, consumers)))
        return 0x1000, 0x2000

    monkeypatch.setattr(Fp8Kernel, "loaded", loaded)
    monkeypatch.setattr(fp8, "_workspace", workspace)
    return rec, built, workspaces


@pytest.mark.parametrize("mode", ["tensorwise", "rowwise", "blockwise"])
def test_split_launch_arguments(monkeypatch, mode):
    rec, built, workspaces = _patched_launch(monkeypatch)
    m, n, k = 64, 1024, 4112  # 16 tiles of 128 x 64, 33 K blocks (a K tail of 16)
    blocks = quantized.SCHEME_BLOCKS
    qa, sa = quantize_fp8(torch.randn(m, k), blocks[mode][0])
    qw, sw = quantize_fp8(torch.randn(n, k), blocks[mode][1])
    sb = sw.T if sw.dim() == 2 else sw
    call = check_scaled_mm(qa, qw.T, sa, sb, None, device_type="cpu")
    fp8.scaled_mm_launch(qa, qw.T, sa, sb, None, call)
    (grid, args), = rec.calls
    plan, _ = fp8.split_plan(m, n, k, 64, SMS)
    assert built[-1].split and built[-1].bn == 64 and grid == (plan.clusters, 1, 1) == (132, 1, 1)
    assert [x.value for x in args[13:]] == [m, n, k, 0, plan.max_contributors, 0x1000, 0x2000]
    assert workspaces == [(16 * 2 * plan.max_contributors * 64 * 64, 32)]
    # The same call with the split off, and with an explicit unsplit build: the whole-tile launch.
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "none")
    fp8.scaled_mm_launch(qa, qw.T, sa, sb, None, call)
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "auto")
    fp8.scaled_mm_launch(qa, qw.T, sa, sb, None, call, kernel=Fp8Kernel(mode, bn=64))
    for (grid, args), kernel in zip(rec.calls[1:], built[1:]):
        assert not kernel.split and grid == (16, 1, 1)
        assert [x.value for x in args[16:]] == [16, 1, None, None]
    assert len(workspaces) == 1


def test_split_build_config_round_trip_and_inputs():
    k = Fp8Kernel("blockwise", bn=64, store="tma", split=True)
    c = k.config()
    assert c.schedule == STREAM_K and dict(c.extra)["GL_FP8_SPLIT"] == 1 and fp8.kernel_for(c) == k
    # The family's config of the same build is the launch's: scale_b read as fp8.scale_b_source says.
    assert fp8.FP8_GEMM.config("blockwise", bn=64, store="tma", split=True) == \
        dataclasses.replace(k, **fp8.scale_b_source("blockwise", None, split=True)).config()
    plain = Fp8Kernel("blockwise", bn=64, store="tma")
    assert plain.config().schedule == DATA_PARALLEL and "GL_FP8_SPLIT" not in plain.defines()
    # The unsplit build's repr (its translation unit's first line and its build label) does not name the split.
    assert "split" not in repr(plain) and repr(k) == repr(plain)[:-1] + ", split=True)"
    assert plain.translation_unit() != k.translation_unit()


@pytest.mark.parametrize("kernel", [Fp8Kernel("blockwise", bn=64, split=True),
                                    Fp8Kernel("tensorwise", bn=64, store="tma", split=True),
                                    Fp8Kernel("rowwise", overlap=False, split=True)], ids=["blockwise", "tma", "serial"])
@pytest.mark.parametrize("k_iters", [1, 2, 3, 5])
def test_ring_audited_with_split_segments(kernel, k_iters):
    """A split CTA walks segments of 1..k_blocks K blocks through the same ring as whole tiles: the
    protocol must hold for the shortest (and odd) ranges the overlapped promotion handles specially."""
    from gemm_ladder.audit import audit, build_ring_protocol

    assert audit(build_ring_protocol(kernel.ring_config(k_iters=k_iters, tiles=3), name="fp8-split")).ok


SPLIT_BUILDS = [Fp8Kernel("tensorwise", bn=64, split=True), Fp8Kernel("rowwise", bn=64, bias=True, split=True),
                Fp8Kernel("blockwise", bn=64, split=True), Fp8Kernel("blockwise", bn=64, store="tma", bias=True, split=True),
                Fp8Kernel("blockwise", out_dtype="fp8", bias=True, split=True),
                Fp8Kernel("tensorwise", bn=64, out_dtype="fp32", overlap=False, split=True),
                Fp8Kernel("rowwise", bn=128, out_dtype="fp16", store="tma", split=True)]


@needs_nvcc
@pytest.mark.parametrize("kernel", SPLIT_BUILDS, ids=lambda k: f"{k.scale_mode}-{k.out_dtype}-bias{int(k.bias)}-bn{k.bn}-ov{int(k.overlap)}-{k.store}")
def test_split_builds_without_spills_or_serialised_wgmma(use_cache, kernel):
    from gemm_ladder.gates.resources import parse_ptxas_log
    from gemm_ladder.runtime.compiler import disassemble

    built = kernel.build()
    usage = parse_ptxas_log(built.ptxas_log)[fp8.KERNEL_NAME]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0), built.ptxas_log
    assert "C7514" not in built.ptxas_log and "C7517" not in built.ptxas_log, built.ptxas_log
    sass = disassemble(built.cubin)
    assert set(re.findall(r"QGMMA\.(\d+x\d+x\d+)", sass)) == {f"64x{kernel.bn}x32"}
    # The tail is in the split build (the arrival count's atomic) and not in its unsplit twin.
    assert re.search(r"\bATOMG?\.E\.ADD|\bRED\.E\.ADD|\bATOMG\.", sass), "no arrival atomic in the split build"
    plain = disassemble(Fp8Kernel(kernel.scale_mode, kernel.a_dtype, kernel.b_dtype, kernel.out_dtype, kernel.bias,
                                  kernel.bn, overlap=kernel.overlap, store=kernel.store).build().cubin)
    assert not re.search(r"\bATOMG?\.|\bRED\.", plain)


def test_bench_times_the_unsplit_launch_beside_the_split_one(monkeypatch, capsys):
    """bench/fp8.py: --split is a documented option, and its unsplit wrapper turns the split off for the
    call only (what the interleaved timing relies on)."""
    import sys

    from fp8_cases import load_bench_fp8_offering

    module = load_bench_fp8_offering(monkeypatch, capsys, "gl_bench_fp8", "--split {auto,none,both}")
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "auto")
    seen = module.unsplit(lambda x, y: (fp8.SPLIT_DEFAULT, gemm_ladder.explain_scaled_mm(*_meta(64, 4096, 14336))["split"]))
    assert seen(None, None) == ("none", "none") and fp8.SPLIT_DEFAULT == "auto"
    assert module.split_of(*_meta(64, 4096, 14336)) == {"split": "all", "grid": SMS, "contributors": 3, "bm": 128, "bn": 64}
    assert "gl_bench_fp8" not in sys.modules


def test_an_explicit_split_build_through_the_family_launches_split(monkeypatch):
    """FP8_GEMM.config(..., split=True)'s build launched as the family's bind launches it (scaled_mm_launch
    with kernel=; the bind itself checks for a CUDA device): split by the rule (16 tiles of 128 x 128
    here); the unsplit config of the same call launches whole."""
    rec, built, workspaces = _patched_launch(monkeypatch)
    m, n, k = 64, 2048, 7232
    qa, sa = quantize_fp8(torch.randn(m, k), (1, 128))
    qw, sw = quantize_fp8(torch.randn(n, k), (128, 128))
    for split in (True, False):
        config = fp8.FP8_GEMM.config("blockwise", bn=128, store="registers", split=split)
        out = torch.empty((m, n), dtype=torch.bfloat16)
        call = check_scaled_mm(qa, qw.T, sa, sw.T, None, torch.bfloat16, out, device_type="cpu")
        fp8.scaled_mm_launch(qa, qw.T, sa, sw.T, None, call, out, kernel=fp8.kernel_for(config))
        assert built[-1] == fp8.kernel_for(config) and built[-1].split == split
    (g1, a1), (g2, a2) = rec.calls
    plan, _ = fp8.split_plan(m, n, k, 128, SMS)
    assert g1 == (SMS, 1, 1) and [x.value for x in a1[16:]] == [0, plan.max_contributors, 0x1000, 0x2000]
    assert g2 == (16, 1, 1) and [x.value for x in a2[16:]] == [16, 1, None, None]
    assert workspaces == [(16 * 2 * plan.max_contributors * 64 * 128, 32)]


def test_short_k_tiles_stay_whole_as_measured(monkeypatch):
    """Below MIN_SPLIT_TILE_K_BLOCKS K blocks a tile the split measured slower than whole tiles
    (bench/results/2026-12-04_fp8_quick_2134406.json: 0.65-0.93x at K = 2048 and 4096, 1.01-1.55x faster at
    K = 7168 and 14336): DeepSeek-V3's 128 x 7168 x 2048 runs whole, 64 x 4096 x 14336 splits."""
    monkeypatch.setattr(fp8, "MIN_SPLIT_TILE_K_BLOCKS", 48)
    plan, why = fp8.split_plan(128, 7168, 2048, 64, 132)
    assert plan.first_unit == plan.units and "measured slower" in why
    plan, why = fp8.split_plan(64, 4096, 14336, 64, 132)
    assert plan.first_unit == 0 and plan.max_contributors >= 2, why


def test_a_capture_runs_the_build_the_eager_call_loaded(monkeypatch):
    """A CUDA-graph capture after one eager call of the shape must need no module load (runtime/capture.py
    refuses one): the capture runs the split build the eager call loaded, unsplit (whole tiles, null workspace)."""
    rec, built, workspaces = _patched_launch(monkeypatch)
    m, n, k = 64, 4096, 14336
    qa, sa = quantize_fp8(torch.randn(m, k), (1, 128))
    qw, sw = quantize_fp8(torch.randn(n, k), (128, 128))
    call = check_scaled_mm(qa, qw.T, sa, sw.T, None, device_type="cpu")
    for capturing in (False, True):
        monkeypatch.setattr(fp8, "_capturing", lambda device, c=capturing: c)
        fp8.scaled_mm_launch(qa, qw.T, sa, sw.T, None, call)
    assert built[0] == built[1] and built[0].split
    (g1, _), (g2, a2) = rec.calls
    assert g1 == (SMS, 1, 1) and g2 == (64, 1, 1) and [x.value for x in a2[16:]] == [64, 1, None, None]
    assert len(workspaces) == 1


@pytest.mark.parametrize("kernel", [Fp8Kernel("blockwise", bn=64, split=True),
                                    Fp8Kernel("tensorwise", bn=64, store="tma", split=True),
                                    Fp8Kernel("rowwise", overlap=False, split=True)], ids=["blockwise", "tma", "serial"])
def test_ring_audited_on_the_split_plans_own_segments(kernel):
    """Each CTA's segments as the split plan gives them (different lengths, back to back: the auditor's
    tile_k_iters), for the decode shapes the split takes and the most-contributors stress of the GPU tests."""
    from gemm_ladder.audit import audit, build_ring_protocol

    seen = set()
    for m, n, k, min_blocks in ((64, 4096, 14336, fp8.MIN_SPLIT_K_BLOCKS), (64, 576, 7168, fp8.MIN_SPLIT_K_BLOCKS),
                                (128, 1152, 7296, 1)):
        plan = fp8._split_plan(m, n, k, 64, 132, "auto", min_blocks, 0)[0]
        assert plan.first_unit == 0, (m, n, k)
        for c in range(plan.clusters):
            lengths = tuple(s.ke - s.kb for s in plan.segments(c))
            if lengths in seen or sum(lengths) > 256:
                continue
            seen.add(lengths)
            report = audit(build_ring_protocol(kernel.ring_config(0, segments=lengths), name="fp8-split-segments"))
            assert report.ok, (m, n, k, c, lengths, report)
    assert any(len(set(x)) > 1 for x in seen)  # segments of different lengths on one CTA were audited


# The split of a short last wave (fp8.MAX_WAVE_EFFICIENCY, plan_wave): tiles that fill the SMs.

@pytest.mark.parametrize("shape,first", [((4096, 576, 7168), 0), ((4096, 1152, 4096), 132), ((2048, 2560, 4096), 132)],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else str(s))
def test_a_short_last_wave_is_split_below_the_efficiency(monkeypatch, shape, first):
    m, n, k = shape
    monkeypatch.setattr(fp8, "MAX_WAVE_EFFICIENCY", 0.9)
    plan, why = fp8.split_plan(m, n, k, 128, SMS)
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    assert (plan.units, plan.clusters, plan.first_unit, plan.k_tiles) == (tiles, SMS, first, math.ceil(k / 128))
    assert plan.max_contributors == 2 and "MAX_WAVE_EFFICIENCY" in why
    # Every tail tile's K blocks exactly once, in K order, by consecutive CTAs; every CTA has some.
    seen = {}
    for c in range(plan.clusters):
        segs = plan.segments(c)
        assert segs
        for s in segs:
            seen.setdefault(s.unit, []).append(s)
    assert sorted(seen) == list(range(first, tiles))
    for segs in seen.values():
        segs.sort(key=lambda s: s.kb)
        assert segs[0].kb == 0 and segs[-1].ke == plan.k_tiles
        assert all(a.ke == b.kb for a, b in zip(segs, segs[1:]))
    monkeypatch.setattr(fp8, "MAX_WAVE_EFFICIENCY", 0.0)
    plan, why = fp8.split_plan(m, n, k, 128, SMS)
    assert (plan.tail_units, plan.clusters) == (0, SMS) and "fill" in why


def test_full_waves_stay_whole_and_the_setting_replans(monkeypatch):
    monkeypatch.setattr(fp8, "MAX_WAVE_EFFICIENCY", 0.9)
    for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 24576, 1536), (1024, 4096, 4096)]:
        plan, why = fp8.split_plan(m, n, k, 128, SMS)  # 97-99% of their waves busy
        assert plan.tail_units == 0 and "fill" in why, why
    assert fp8.split_plan(4096, 576, 7168, 128, SMS, "none")[0].tail_units == 0
    before = fp8.settings()
    monkeypatch.setattr(fp8, "MAX_WAVE_EFFICIENCY", 0.5)
    assert fp8.settings() != before
    assert fp8.split_plan(4096, 576, 7168, 128, SMS)[0].tail_units == 0  # 61% busy: above 0.5


def test_explain_reports_a_wave_split(monkeypatch):
    monkeypatch.setattr(fp8, "MAX_WAVE_EFFICIENCY", 0.9)
    e = gemm_ladder.explain_scaled_mm(*_meta(4096, 1152, 4096))
    assert (e["split"], e["grid"], e["tiles"], e["contributors"]) == ("wave", SMS, 288, 2)
    assert e["defines"]["GL_FP8_SPLIT"] == 1 and "tiles [132, 288)" in e["split_reason"]
    # Partials: 156 split tiles x 2 consumers x 2 slots x 64 x 128 fp32; counters: 156 x 2.
    assert e["workspace_bytes"] == 4 * (156 * 2 * 2 * 64 * 128 + 156 * 2)
    assert gemm_ladder.explain_scaled_mm(*_meta(4096, 576, 7168))["split"] == "all"


@pytest.mark.parametrize("shape,tiles,per_tile", [((64, 4096, 7168), 64, 2), ((64, 1536, 7168), 24, 5),
                                                  ((64, 576, 7168), 9, 14)],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else str(s))
def test_the_aligned_split_gives_each_tile_its_own_ctas(monkeypatch, shape, tiles, per_tile):
    m, n, k = shape
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", True)
    plan, _ = fp8.split_plan(m, n, k, 64, SMS, bm=64)
    assert (plan.units, plan.clusters, plan.first_unit) == (tiles, tiles * per_tile, 0)
    assert plan.max_contributors == per_tile
    for c in range(plan.clusters):  # one tile per CTA: no range crosses a tile boundary
        assert [s.unit for s in plan.segments(c)] == [c // per_tile]
    _check_coverage(plan)


def test_the_aligned_split_keeps_the_crossing_grid_above_half_the_sms(monkeypatch):
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", True)
    plan, _ = fp8.split_plan(64, 7168, 16384, 64, SMS, bm=64)  # 112 tiles: one CTA per tile would not split
    assert (plan.units, plan.clusters) == (112, SMS)
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", False)
    assert fp8.split_plan(64, 4096, 7168, 64, SMS, bm=64)[0].clusters == SMS
