"""The blockwise fp8 builds' three ways of reading scale_b on the GPU, forced one by one on the same calls:
in the K block that uses it, one block ahead (``scale_b_ahead``), and from a shared copy of the tile's column
(``scale_b_shared``). They change where a value is loaded, not the arithmetic: bitwise equal outputs, each
within the float64 bound, on whole tiles with M, N and K tails, odd and even K-block counts, BN 64 and 128,
the 64-row tile, the stream-K split, the register store and the quantized output."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gemm_ladder.library import fp8

from fp8_cases import assert_quantized_near_float64, fp8_problem, rel_err

pytestmark = pytest.mark.gpu

#: (M, N, K): 128-row tiles at BN 128 with tails and 17 K blocks (odd; some CTAs get a second tile, so the
#: shared copy is made again), BN 64 with 3 blocks and a K tail, BN 64 at 16 blocks (even: the main loop's
#: two-blocks-left tail; the shared copy's threshold); the 64-row tile at 3 blocks; a split decode call
#: (64 rows, K = 7168: 56 blocks over the SMs).
SHAPES = [(1540, 1544, 2176), (200, 384, 272), (256, 1024, 2048), (64, 1536, 384), (64, 4096, 7168)]
SOURCES = {"in-block": dict(scale_b_ahead=False, scale_b_shared=False),
           "ahead": dict(scale_b_ahead=True, scale_b_shared=False),
           "shared": dict(scale_b_ahead=False, scale_b_shared=True)}


def _run(qa, qb, sa, sb, kernel, out_dtype=torch.bfloat16):
    call = fp8.check_scaled_mm(qa, qb, sa, sb, out_dtype=out_dtype)
    if out_dtype == fp8.QUANT_OUT:
        values, scales = fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, kernel=kernel)
        return torch.cat([values.view(torch.uint8).flatten(), scales.flatten().view(torch.uint8)])
    out = torch.full((call.m, call.n), float("nan"), dtype=out_dtype, device="cuda")
    return fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, out, kernel=kernel)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", [fp8.STORE_TMA, fp8.STORE_REGISTERS])
def test_every_scale_b_source_gives_the_same_bits(monkeypatch, shape, store):
    monkeypatch.setattr(fp8, "WIDE_TILE", False)  # the 128-wide build's sources (the 192-wide one's: test_fp8_bn192_gpu.py)
    m, n, k = shape
    qa, qb, sa, sb, a64, w64 = fp8_problem(m, n, k, "blockwise", seed=m + n + k)
    call = fp8.check_scaled_mm(qa, qb, sa, sb)
    base, _, _ = fp8.default_build(call, qa, qb, None, None, torch.cuda.get_device_properties(0).multi_processor_count)
    outs = {}
    for name, fields in SOURCES.items():
        kernel = dataclasses.replace(base, store=store, stages=0, **fields)
        outs[name] = _run(qa, qb, sa, sb, kernel)
    ref = a64 @ w64.T
    for name, out in outs.items():
        assert rel_err(out, ref) < 2e-2, name
        assert torch.equal(out, outs["in-block"]), name


def test_the_quantized_output_too():
    """The values and scales, bitwise alike, and right against float64 (tests/fp8_cases.py's
    assert_quantized_near_float64)."""
    qa, qb, sa, sb, a64, w64 = fp8_problem(520, 1024, 2432, "blockwise", seed=7)
    base = fp8.Fp8Kernel("blockwise", out_dtype="fp8")
    outs = [_run(qa, qb, sa, sb, dataclasses.replace(base, **fields), fp8.QUANT_OUT) for fields in SOURCES.values()]
    assert all(torch.equal(o, outs[0]) for o in outs[1:])
    call = fp8.check_scaled_mm(qa, qb, sa, sb, out_dtype=fp8.QUANT_OUT)
    values, scales = fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, kernel=base)
    assert_quantized_near_float64(values, scales, a64.double() @ w64.double().T)
