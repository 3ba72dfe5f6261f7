"""The fp8 kernel's stream-K split (issue 25, M <= 128) on the GPU: split and unsplit launches of the same
call against float64 of the dequantized inputs, per scale mode, with M tails down to one row, K not a
multiple of 128, a bias, the TMA and register stores, fp32 and quantized outputs; the split result within
the reassociation bound of the unsplit one; bitwise repeatable over fresh, poisoned outputs.

The split is forced on or off through fp8.SPLIT_DEFAULT ("auto" splits these shapes: their tiles are fewer
than the SMs; explain_scaled_mm says so before each launch), and stressed with fp8.MIN_SPLIT_K_BLOCKS = 1
(a CTA per K block where the grid allows: the most contributors per tile).
"""

from __future__ import annotations

import math

import pytest
import torch

import gemm_ladder
from gemm_ladder.library import fp8
from gemm_ladder.library.quantized import quantize_fp8

from fp8_cases import BLOCKS, assert_bitwise_repeatable, assert_quantized_near_float64
from fp8_cases import fp8_problem as _problem
from fp8_cases import rel_err as _rel_err

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
#: M of decode (1, 7, 64, 128 rows), N with and without a multiple of 8 (the TMA store and the register
#: store), K with a tail of 16..112 past a multiple of 128.
SHAPES = [(1, 1024, 4000), (7, 577, 7184), (64, 4096, 7232), (128, 7168, 2064)]



@pytest.fixture(autouse=True)
def _split_at_any_k(monkeypatch):
    """These tests exercise the split's mechanics at any K: the rule that leaves tiles of fewer than
    fp8.MIN_SPLIT_TILE_K_BLOCKS K blocks whole (measured slower there) has its own test."""
    monkeypatch.setattr(fp8, "MIN_SPLIT_TILE_K_BLOCKS", 0)
    # The grid of up to one CTA per SM, ranges crossing tiles (what tiles above half the SMs take); the
    # aligned grid (fp8.SPLIT_ALIGNED) has its own test below.
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", False)



def _run(monkeypatch, split: str, *args, **kwargs):
    """scaled_mm with the split "auto" (asserted to split) or "none"."""
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", split)
    e = gemm_ladder.explain_scaled_mm(*args, **kwargs)
    assert e["split"] == ("all" if split == "auto" else "none"), e["split_reason"]
    return gemm_ladder.scaled_mm(*args, **kwargs)




@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_split_matches_float64_and_unsplit(monkeypatch, mode, shape):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=m)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = da @ dw.T + bias.double()
    # The most one element's fp32 sum can move when its K blocks are added in another grouping: a rounding
    # of at most 2^-24 of a partial sum no larger than sum |a||w| per addition, k_blocks additions each way.
    k_blocks = math.ceil(k / 128)
    reassociation = k_blocks * 2.0**-22 * (da.abs() @ dw.abs().T)
    for out_dtype in (torch.bfloat16, torch.float32):
        ys = _run(monkeypatch, "auto", qa, qb, sa, sb, bias=bias, out_dtype=out_dtype)
        yu = _run(monkeypatch, "none", qa, qb, sa, sb, bias=bias, out_dtype=out_dtype)
        floor = _rel_err(ref.to(out_dtype), ref)
        extra = 2**-10 if out_dtype == torch.float32 else 1e-4  # as test_fp8_gpu.py's tails test allows
        assert _rel_err(ys, ref) <= 1.5 * floor + extra, (_rel_err(ys, ref), floor)
        assert _rel_err(yu, ref) <= 1.5 * floor + extra, (_rel_err(yu, ref), floor)
        # Split against unsplit: the reassociation, plus one rounding step of the output dtype (a value on
        # either side of a rounding boundary) and the scale's product rounded once more.
        step = 2.0**-7 if out_dtype == torch.bfloat16 else 2.0**-22
        diff = (ys.double() - yu.double()).abs()
        assert (diff <= reassociation + step * yu.double().abs() + 1e-30).all(), diff.max().item()


@pytest.mark.parametrize("mode", list(BLOCKS))
def test_split_bitwise_repeatable_on_poisoned_outputs(monkeypatch, mode):
    """Three launches into fresh NaN-filled outputs give the same bits: every element written, and the
    partials added in K order whichever contributor arrives last. MIN_SPLIT_K_BLOCKS = 1 puts some 15
    contributors on a tile here (9 tiles, 57 K blocks, 132 CTAs of 3-4 K blocks)."""
    monkeypatch.setattr(fp8, "MIN_SPLIT_K_BLOCKS", 1)
    m, n, k = 7, 576, 7184
    qa, qb, sa, sb, *_ = _problem(m, n, k, mode, seed=11)
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert e["split"] == "all" and e["contributors"] >= 8 and e["grid"] == 132, e
    assert_bitwise_repeatable(qa, qb, sa, sb)


@pytest.mark.parametrize("shape", [(64, 1024, 4000), (128, 2048, 7184)], ids=lambda s: "x".join(map(str, s)))
def test_split_quantized_output(monkeypatch, shape):
    """The e4m3 output with 1 x 128 scales, split: the last contributor's epilogue quantizes the reduced
    sum, as quantize_fp8 of the (split) fp32 product does; and it agrees with the unsplit quantized output
    up to a rounding boundary crossed. The quantized output runs 128-wide tiles and the fp32 one 64-wide,
    so their splits group the K blocks differently: the fp32 sums differ by the reassociation (far below
    an e4m3 step), hence scales equal to 2^-12 and a few values one e4m3 step apart."""
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "blockwise", seed=12)
    bias = torch.randn(n, device="cuda")
    values, scales = _run(monkeypatch, "auto", qa, qb, sa, sb, bias=bias, out_dtype=E4M3)
    assert_quantized_near_float64(values, scales, da.double() @ dw.double().T + bias.double())
    full = _run(monkeypatch, "auto", qa, qb, sa, sb, bias=bias, out_dtype=torch.float32)
    ref_v, ref_s = quantize_fp8(full, (1, 128))
    torch.testing.assert_close(scales, ref_s, rtol=2**-12, atol=0)
    v, rv = values.float(), ref_v.float()
    assert ((v - rv).abs() <= 2**-3 * rv.abs().clamp_min(2**-6)).all()
    assert (values.view(torch.uint8) != ref_v.view(torch.uint8)).float().mean().item() <= 1e-2
    uv, us = _run(monkeypatch, "none", qa, qb, sa, sb, bias=bias, out_dtype=E4M3)
    torch.testing.assert_close(scales, us, rtol=2**-12, atol=0)
    u = uv.float()
    assert ((v - u).abs() <= 2**-3 * u.abs().clamp_min(2**-6)).all()
    assert (values.view(torch.uint8) != uv.view(torch.uint8)).float().mean().item() <= 1e-2


def test_split_on_a_side_stream_and_back_to_back(monkeypatch):
    """Split launches on two streams, interleaved with unsplit ones: each stream's workspace and counters
    are its own, and a launch never sees counters another left behind."""
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "auto")
    qa, qb, sa, sb, da, dw = _problem(64, 4096, 7232, "rowwise", seed=13)
    ref = da @ dw.T
    expect = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    ys = []
    with torch.cuda.stream(s):
        for _ in range(4):
            ys.append(gemm_ladder.scaled_mm(qa, qb, sa, sb))
    for _ in range(4):
        ys.append(gemm_ladder.scaled_mm(qa, qb, sa, sb))
    torch.cuda.synchronize()
    for y in ys:
        assert torch.equal(y, expect)
    assert _rel_err(expect, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4


@pytest.mark.parametrize("shape", [(64, 2048, 7232), (1152, 4096, 1040)], ids=lambda s: "x".join(map(str, s)))
def test_explicit_split_builds_at_128_wide_tiles_and_whole(shape):
    """An explicit split build through the family (library/kernel.py's protocol): at 128-wide tiles on a
    decode shape (16 tiles, split), and where the tiles fill the SMs (9 x 32 = 288 tiles: the split build
    runs every tile whole, tail_first_unit = tiles); both against float64 and bitwise equal to the
    unsplit build of the same tile where nothing is split."""
    from gemm_ladder.library.kernel import Operands

    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "blockwise", seed=14)
    ref = da @ dw.T
    outs = {}
    for split in (True, False):
        config = fp8.FP8_GEMM.config("blockwise", bn=128, store="tma", split=split)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        fp8.FP8_GEMM.launch(fp8.FP8_GEMM.bind(config, Operands(qa, qb, out, more=(sa, sb, None))))
        outs[split] = out
        assert _rel_err(out, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
    plan, _ = fp8.split_plan(m, n, k, 128, torch.cuda.get_device_properties(0).multi_processor_count)
    if not plan.tail_units:
        assert torch.equal(outs[True].view(torch.int16), outs[False].view(torch.int16))


@pytest.mark.parametrize("mode", ["rowwise", "blockwise"])
def test_a_shape_called_eagerly_then_captured_in_a_cuda_graph(monkeypatch, mode):
    """The documented workflow: one eager call of a shape (the split build is loaded), then a capture of
    the same call. The capture runs that build whole (no workspace may be baked into a graph) instead of
    needing a build the eager call never loaded (the reviewer's defect, 866a2b2); the replay matches the
    eager split result within the split's bound and float64."""
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "auto")
    m, n, k = 64, 4096, 14336
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=21)
    assert gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)["split"] == "all"
    eager = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        gemm_ladder.scaled_mm(qa, qb, sa, sb, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    ref = da @ dw.T
    assert torch.isfinite(out).all()
    assert _rel_err(out, ref) < 2e-2 and _rel_err(eager, ref) < 2e-2
    assert _rel_err(out, eager.double()) < 1e-2


@pytest.mark.parametrize("mode", list(BLOCKS))
def test_the_aligned_split_matches_float64_and_the_crossing_one(monkeypatch, mode):
    """fp8.SPLIT_ALIGNED: 64 tiles of a 64 x 4096 x 7232 call split over 128 CTAs, two per tile, no range
    crossing tiles; against float64, and against the crossing split (132 CTAs) within the reassociation
    bound of their K-block groupings; bitwise repeatable on poisoned outputs."""
    m, n, k = 64, 4096, 7232
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=31)
    ref = da @ dw.T
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", True)
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert (e["split"], e["grid"], e["contributors"]) == ("all", 2 * e["tiles"], 2), e["split_reason"]
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        gemm_ladder.scaled_mm(qa, qb, sa, sb, out_dtype=torch.float32, out=out)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert _rel_err(outs[0], ref) <= 1.5 * _rel_err(ref.float(), ref) + 2**-10
    monkeypatch.setattr(fp8, "SPLIT_ALIGNED", False)
    crossing = gemm_ladder.scaled_mm(qa, qb, sa, sb, out_dtype=torch.float32)
    reassociation = math.ceil(k / 128) * 2.0**-22 * (da.abs() @ dw.abs().T)
    diff = (outs[0].double() - crossing.double()).abs()
    assert (diff <= reassociation + 2.0**-22 * crossing.double().abs() + 1e-30).all(), diff.max().item()
