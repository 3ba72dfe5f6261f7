"""The fp8 kernel's 2-CTA cluster build (issue 25) on the GPU: against float64 of the dequantized inputs and
bitwise equal to the one-CTA build (each tile's arithmetic is the same: only where B comes from differs),
per scale mode, with an odd M-tile count (the last pair's idle twin), M, N and K tails, more units than
resident clusters (the persistent loop), a bias, the TMA and register stores, fp32 and quantized outputs,
into NaN-poisoned outputs; and the public call taking the pair under fp8.CLUSTER_DEFAULT = "auto"."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm

from fp8_cases import BLOCKS
from fp8_cases import fp8_problem as _problem
from fp8_cases import rel_err as _rel_err

pytestmark = pytest.mark.gpu

#: (M, N, K): M tiles even and odd (17: the last pair's second CTA has no tile), N with and without a
#: multiple of 8 (TMA and register stores), K with a 16-element tail; units above the 66 clusters.
SHAPES = [(256, 1024, 512), (2179, 2048, 528), (1000, 1036, 1040), (4096, 4096, 1024)]


def _launch(kernel: Fp8Kernel, qa, qb, sa, sb, bias, out_dtype):
    call = check_scaled_mm(qa, qb, sa, sb, bias, out_dtype)
    if out_dtype == fp8.QUANT_OUT:
        return fp8.scaled_mm_launch(qa, qb, sa, sb, bias, call, kernel=kernel)
    out = torch.full((call.m, call.n), float("nan"), device="cuda", dtype=out_dtype)
    return fp8.scaled_mm_launch(qa, qb, sa, sb, bias, call, out, kernel=kernel)


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pair_matches_float64_and_one_cta_bitwise(mode, shape):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=m + n)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = da @ dw.T + bias.double()
    store = fp8.store_for("bf16", None, n)[0]
    for out_dtype, st in ((torch.bfloat16, store), (torch.float32, fp8.STORE_REGISTERS)):
        outs = {}
        for cluster in (1, 2):
            kernel = Fp8Kernel(mode, out_dtype=fp8._short_out(out_dtype), bias=True, store=st, cluster=cluster)
            outs[cluster] = _launch(kernel, qa, qb, sa, sb, bias, out_dtype)
        floor = _rel_err(ref.to(out_dtype), ref)
        extra = 2**-10 if out_dtype == torch.float32 else 1e-4  # as test_fp8_gpu.py's tails test allows
        assert _rel_err(outs[2], ref) <= 1.5 * floor + extra, (_rel_err(outs[2], ref), floor)
        assert not outs[2].isnan().any()
        assert torch.equal(outs[2], outs[1])


@pytest.mark.parametrize("bn", [64, 128])
def test_pair_at_both_widths_and_serial_promotion(bn):
    m, n, k = 1152, 4160, 2048
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "blockwise", seed=bn)
    ref = da @ dw.T
    outs = {}
    for overlap in (True, False):
        for cluster in (1, 2):
            kernel = Fp8Kernel("blockwise", bn=bn, store="tma", overlap=overlap, cluster=cluster)
            outs[overlap, cluster] = _launch(kernel, qa, qb, sa, sb, None, torch.bfloat16)
    assert _rel_err(outs[True, 2], ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
    assert torch.equal(outs[True, 2], outs[True, 1]) and torch.equal(outs[False, 2], outs[False, 1])


@pytest.mark.parametrize("shape", [(384, 1024, 1024), (1152, 2048, 4000)], ids=lambda s: "x".join(map(str, s)))
def test_pair_quantized_output_equals_one_cta(shape):
    m, n, k = shape
    qa, qb, sa, sb, _, _ = _problem(m, n, k, "blockwise", seed=3)
    got = {c: _launch(Fp8Kernel("blockwise", out_dtype="fp8", cluster=c), qa, qb, sa, sb, None, fp8.QUANT_OUT)
           for c in (1, 2)}
    assert torch.equal(got[2][0].view(torch.uint8), got[1][0].view(torch.uint8))
    assert torch.equal(got[2][1], got[1][1])


def test_pair_bitwise_repeatable_into_poisoned_outputs():
    m, n, k = 2179, 2048, 528
    qa, qb, sa, sb, _, _ = _problem(m, n, k, "rowwise", seed=9)
    kernel = Fp8Kernel("rowwise", store="tma", cluster=2)
    first = _launch(kernel, qa, qb, sa, sb, None, torch.bfloat16)
    for _ in range(3):
        assert torch.equal(_launch(kernel, qa, qb, sa, sb, None, torch.bfloat16).view(torch.int16), first.view(torch.int16))


def test_public_call_takes_the_pair_under_auto(monkeypatch):
    m, n, k = 2048, 8192, 1024  # 16 x 64 tiles fill the SMs, two M tiles and more
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "tensorwise", seed=11)
    monkeypatch.setattr(fp8, "CLUSTER_DEFAULT", "auto")
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert e["cluster"] == 2, e["cluster_reason"]
    y = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    monkeypatch.setattr(fp8, "CLUSTER_DEFAULT", "1")
    assert gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)["cluster"] == 1
    assert torch.equal(y, gemm_ladder.scaled_mm(qa, qb, sa, sb))
    ref = da @ dw.T
    assert _rel_err(y, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
