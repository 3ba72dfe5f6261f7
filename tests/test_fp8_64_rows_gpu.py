"""The fp8 kernel's 64-row tile (issue 25, decode's M <= 64) on the GPU: against float64 of the dequantized
inputs per scale mode, with M from 1 to 130 (several 64-row tiles, tails), N and K tails, a bias, the TMA
and register stores, fp32 and quantized outputs, into NaN-poisoned outputs; bitwise equal to the 128-row
build where neither splits (each row's products and promotions are the same instructions); split along K
within the reassociation bound; and the public call taking it under fp8.TILE_M_DEFAULT = "auto"."""

from __future__ import annotations

import math

import pytest
import torch

import gemm_ladder
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm

from fp8_cases import BLOCKS
from fp8_cases import fp8_problem as _problem
from fp8_cases import rel_err as _rel_err

pytestmark = pytest.mark.gpu

#: (M, N, K): decode rows (1, 7, 64), two and three 64-row tiles with a tail (100, 130); N with and without a
#: multiple of 8 (the TMA and register stores); K with a 16-element tail.
SHAPES = [(1, 1024, 2064), (7, 1036, 1040), (64, 4096, 2048), (100, 2056, 528), (130, 1040, 1040)]


def _launch(kernel: Fp8Kernel, qa, qb, sa, sb, bias, out_dtype):
    call = check_scaled_mm(qa, qb, sa, sb, bias, out_dtype)
    if out_dtype == fp8.QUANT_OUT:
        return fp8.scaled_mm_launch(qa, qb, sa, sb, bias, call, kernel=kernel)
    out = torch.full((call.m, call.n), float("nan"), device="cuda", dtype=out_dtype)
    return fp8.scaled_mm_launch(qa, qb, sa, sb, bias, call, out, kernel=kernel)


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_64_rows_match_float64_and_128_rows_bitwise(mode, shape):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=m + 3)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = da @ dw.T + bias.double()
    store = fp8.store_for("bf16", None, n)[0]
    for bn in (64, 128):
        for out_dtype, st in ((torch.bfloat16, store), (torch.float32, fp8.STORE_REGISTERS)):
            outs = {bm: _launch(Fp8Kernel(mode, out_dtype=fp8._short_out(out_dtype), bias=True, bn=bn, store=st, bm=bm),
                                qa, qb, sa, sb, bias, out_dtype) for bm in (64, 128)}
            floor = _rel_err(ref.to(out_dtype), ref)
            extra = 2**-10 if out_dtype == torch.float32 else 1e-4  # as test_fp8_gpu.py's tails test allows
            assert _rel_err(outs[64], ref) <= 1.5 * floor + extra, (bn, out_dtype, _rel_err(outs[64], ref), floor)
            assert not outs[64].isnan().any()
            assert torch.equal(outs[64], outs[128]), (bn, out_dtype)


@pytest.mark.parametrize("shape", [(7, 1024, 1024), (100, 2048, 4000)], ids=lambda s: "x".join(map(str, s)))
def test_64_rows_quantized_output_equals_128_rows(shape):
    m, n, k = shape
    qa, qb, sa, sb, _, _ = _problem(m, n, k, "blockwise", seed=5)
    got = {bm: _launch(Fp8Kernel("blockwise", out_dtype="fp8", bm=bm), qa, qb, sa, sb, None, fp8.QUANT_OUT)
           for bm in (64, 128)}
    assert torch.equal(got[64][0].view(torch.uint8), got[128][0].view(torch.uint8))
    assert torch.equal(got[64][1], got[128][1])


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", [(64, 4096, 14336), (7, 1536, 7232)], ids=lambda s: "x".join(map(str, s)))
def test_64_rows_split_k(monkeypatch, mode, shape):
    """The split build at 64 rows (one consumer's partial slots and counters): against float64 and within
    the reassociation bound of the unsplit 64-row launch; bitwise repeatable into poisoned outputs."""
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=17)
    ref = da @ dw.T
    split = Fp8Kernel(mode, bn=64, store="tma", split=True, bm=64)
    plan, _ = fp8.split_plan(m, n, k, 64, torch.cuda.get_device_properties(0).multi_processor_count, "auto", 64)
    assert plan.tail_units and plan.max_contributors > 1, "the shape must split"
    ys = _launch(split, qa, qb, sa, sb, None, torch.bfloat16)
    yu = _launch(Fp8Kernel(mode, bn=64, store="tma", bm=64), qa, qb, sa, sb, None, torch.bfloat16)
    assert _rel_err(ys, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
    reassociation = math.ceil(k / 128) * 2.0**-22 * (da.abs() @ dw.abs().T)
    assert ((ys.double() - yu.double()).abs() <= reassociation + 2.0**-7 * yu.double().abs() + 1e-30).all()
    for _ in range(3):
        assert torch.equal(_launch(split, qa, qb, sa, sb, None, torch.bfloat16).view(torch.int16), ys.view(torch.int16))


def test_public_call_takes_64_rows_under_auto(monkeypatch):
    qa, qb, sa, sb, da, dw = _problem(64, 4096, 2048, "tensorwise", seed=23)
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "auto")
    assert gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)["tile"]["BM"] == 64
    y = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "128")
    assert torch.equal(y, gemm_ladder.scaled_mm(qa, qb, sa, sb))
    ref = da @ dw.T
    assert _rel_err(y, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
