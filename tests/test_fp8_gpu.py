"""fp8 scaled_mm on the GPU: error against float64 of the dequantized inputs, no worse than 1.5x
torch._scaled_mm's on the same inputs, per scale mode; tails, outputs, bias; edge scales; repeatability."""

from __future__ import annotations

import math

import pytest
import torch

import gemm_ladder
from gemm_ladder.library.quantized import SCHEME_BLOCKS, dequantize, quantize_fp8

from fp8_cases import assert_chain_within_torchs, assert_quantized_near_float64

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
BLOCKS = SCHEME_BLOCKS


def _problem(m, n, k, mode, *, seed=0, a_dtype=E4M3, b_dtype=E4M3):
    """Quantized a (M, K) and w (N, K) with their scales, in scaled_mm's argument layouts, and the float64
    dequantized operands (the reference's inputs)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=g) * torch.logspace(-1, 1, k, device="cuda")
    w = torch.randn((n, k), device="cuda", generator=g) / math.sqrt(k)
    ba, bw = BLOCKS[mode]
    qa, sa = quantize_fp8(a, ba, dtype=a_dtype)
    qw, sw = quantize_fp8(w, bw, dtype=b_dtype)
    da, dw = dequantize(qa, sa, ba), dequantize(qw, sw, bw)
    sb = sw.T if sw.dim() == 2 else sw  # rowwise (1, N); blockwise (K/128, N/128); tensorwise ()
    return qa, qw.T, sa, sb, da, dw


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def _torch_scaled_mm(qa, qb, sa, sb, bias, out_dtype):
    """torch._scaled_mm on the same inputs, or None with the reason when torch refuses them."""
    try:
        return torch._scaled_mm(qa, qb, sa, sb, bias=bias, out_dtype=out_dtype), None
    except (RuntimeError, ValueError) as e:  # e.g. cuBLAS layouts or tails it does not take
        return None, str(e).splitlines()[0]


SHAPES = [(128, 128, 128), (256, 384, 1024), (1000, 1040, 4096), (77, 256, 400), (4096, 4096, 4096), (1, 7168, 2048)]


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_error_no_worse_than_torch(mode, shape):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode)
    ref = da @ dw.T
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned: every element written
    y = gemm_ladder.scaled_mm(qa, qb, sa, sb, out=out)
    assert y is out and torch.isfinite(y).all()
    ours = _rel_err(y, ref)
    floor = _rel_err(ref.to(torch.bfloat16), ref)  # rounding the exact result once
    assert ours <= 1.5 * floor + 1e-4, (ours, floor)
    theirs, why = _torch_scaled_mm(qa, qb, sa, sb, None, torch.bfloat16)
    if theirs is not None:
        assert ours <= 1.5 * _rel_err(theirs, ref) + 1e-6, (ours, _rel_err(theirs, ref))
    else:
        print(f"torch._scaled_mm refused {mode} {shape}: {why}; checked against the rounded reference only")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mode", list(BLOCKS))
def test_output_dtypes_bias_and_tails(mode, out_dtype):
    m, n, k = 300, 333, 272  # M, N tails; K = 2 x 128 + 16
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=1)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = da @ dw.T + bias.double()
    y = gemm_ladder.scaled_mm(qa, qb, sa, sb, bias=bias, out_dtype=out_dtype)
    assert y.dtype == out_dtype and y.shape == (m, n)
    floor = _rel_err(ref.to(out_dtype), ref)
    # fp32 output: the floor is fp32 rounding, far below the fp8 tensor core's own accumulation inside a
    # 128-wide K block (not fp32-exact on Hopper), which the additive term allows for.
    assert _rel_err(y, ref) <= 1.5 * floor + (2**-10 if out_dtype == torch.float32 else 1e-4)


def test_out_with_row_pitch_and_odd_n():
    m, n, k = 130, 97, 256
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "blockwise", seed=2)
    big = torch.full((m, 112), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = big[:, :n]
    gemm_ladder.scaled_mm(qa, qb, sa, sb, out=out)
    assert torch.isfinite(out).all() and big[:, n:].isnan().all()  # the padding untouched
    ref = da @ dw.T
    assert _rel_err(out, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4


def test_e5m2_inputs():
    qa, qb, sa, sb, da, dw = _problem(256, 256, 512, "blockwise", a_dtype=torch.float8_e5m2, b_dtype=E4M3)
    ref = da @ dw.T
    y = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    assert _rel_err(y, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4


@pytest.mark.parametrize("mode", list(BLOCKS))
def test_bitwise_repeatable(mode):
    qa, qb, sa, sb, *_ = _problem(1024, 1536, 2048, mode, seed=3)
    y1 = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    y2 = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    torch.cuda.synchronize()
    assert torch.equal(y1, y2)


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("edge", ["zeros", "tiny_amax", "inf", "nan"])
def test_edge_scales(mode, edge):
    m, n, k = 256, 256, 512
    g = torch.Generator(device="cuda").manual_seed(4)
    a = torch.randn((m, k), device="cuda", generator=g)
    w = torch.randn((n, k), device="cuda", generator=g)
    if edge == "tiny_amax":
        a[:128] *= 1e-39  # rows whose amax is subnormal in fp32
    if edge == "zeros":
        a[:128] = 0
    ba, bw = BLOCKS[mode]
    qa, sa = quantize_fp8(a, ba)
    qw, sw = quantize_fp8(w, bw)
    if edge in ("inf", "nan"):
        value = float("inf") if edge == "inf" else float("nan")
        sa = sa.clone()
        if mode == "tensorwise":
            sa.fill_(value)
        else:
            sa[5] = value  # one row's scales (blockwise: every K block of row 5)
    sb = sw.T if sw.dim() == 2 else sw
    y = gemm_ladder.scaled_mm(qa, qw.T, sa, sb, out_dtype=torch.float32)
    ref = dequantize(qa, sa, ba) @ dequantize(qw, sw, bw).T
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(y), finite), "non-finite where and only where the reference is"
    if finite.any():
        yf, rf = y[finite].double(), ref[finite]
        assert ((yf - rf).abs().max() / rf.abs().max().clamp_min(1e-300)).item() <= 2**-10
    if edge == "zeros":
        assert (y[:128] == 0).all()


def test_current_stream_and_empty_shapes():
    qa, qb, sa, sb, da, dw = _problem(256, 256, 256, "rowwise", seed=5)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    s.synchronize()
    ref = da @ dw.T
    assert _rel_err(y, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
    e = gemm_ladder.scaled_mm(qa[:0], qb, sa[:0], sb)
    assert e.shape == (0, 256)


@pytest.mark.parametrize("block", [(1, 128), (128, 128), (1, -1), (-1, -1)], ids=str)
def test_quantize_fp8_on_cuda_divides_as_ieee_division(block):
    """The scales are amax / 448 rounded as IEEE division, on CUDA as on the CPU (CUDA torch divides by a
    Python scalar as a multiply by its reciprocal: 3.0097604 / 448 came out 1 ulp high), and the values
    follow bit for bit; an amax known to differ is planted in the first block."""
    g = torch.Generator(device="cuda").manual_seed(41)
    x = torch.randn((384, 640), device="cuda", generator=g) * torch.logspace(-3, 3, 640, device="cuda")
    x[0, 0] = 3.0097604
    x[0, 1:128] = x[0, 1:128].clamp(-3, 3)
    v, s = quantize_fp8(x, block)
    cv, cs = quantize_fp8(x.cpu(), block)
    assert torch.equal(s.cpu(), cs)
    assert torch.equal(v.cpu().view(torch.uint8), cv.view(torch.uint8))
    if block == (1, 128):
        assert s[0, 0].item() == torch.tensor(3.0097604).div(torch.tensor(448.0)).item()


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", [(300, 296, 272), (1024, 2048, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_quantized_output_is_quantize_fp8_of_the_fp32_product(mode, shape):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=6)
    bias = torch.randn(n, device="cuda")
    values, scales = gemm_ladder.scaled_mm(qa, qb, sa, sb, bias=bias, out_dtype=torch.float8_e4m3fn)
    assert_quantized_near_float64(values, scales, da.double() @ dw.double().T + bias.double())
    full = gemm_ladder.scaled_mm(qa, qb, sa, sb, bias=bias, out_dtype=torch.float32)
    ref_v, ref_s = quantize_fp8(full, (1, 128))
    assert values.shape == (m, n) and values.dtype == torch.float8_e4m3fn and scales.shape == ref_s.shape
    # The same fp32 values in both builds, up to how ptxas contracts the scale and bias into FMAs: scales
    # within a few ulps, values within one e4m3 step (a rounding boundary crossed), and nearly all equal.
    torch.testing.assert_close(scales, ref_s, rtol=2**-20, atol=0)
    v, rv = values.float(), ref_v.float()
    assert ((v - rv).abs() <= 2**-3 * rv.abs().clamp_min(2**-6)).all()
    assert (values.view(torch.uint8) != ref_v.view(torch.uint8)).float().mean().item() <= 1e-3


def test_two_fp8_layers_chain_against_bf16():
    m, d, h = 512, 1024, 2048
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn((m, d), device="cuda", generator=g)
    w1 = torch.randn((h, d), device="cuda", generator=g) / math.sqrt(d)
    w2 = torch.randn((d, h), device="cuda", generator=g) / math.sqrt(h)
    qx, sx = quantize_fp8(x, (1, 128))
    q1, s1 = quantize_fp8(w1, (128, 128))
    q2, s2 = quantize_fp8(w2, (128, 128))
    hv, hs = gemm_ladder.scaled_mm(qx, q1.T, sx, s1.T, out_dtype=torch.float8_e4m3fn)
    y = gemm_ladder.scaled_mm(hv, q2.T, hs, s2.T)
    ref = (x.double() @ w1.double().T) @ w2.double().T
    bf16 = torch.nn.functional.linear(torch.nn.functional.linear(x.bfloat16(), w1.bfloat16()), w2.bfloat16())
    err = ((y.double() - ref).norm() / ref.norm()).item()
    err_bf16 = ((bf16.double() - ref).norm() / ref.norm()).item()
    assert err < 0.1, (err, err_bf16)  # three fp8 roundings (x, h, weights) of 2^-4 at most each
    # the same chain through torch._scaled_mm and quantize_fp8 between the layers
    assert_chain_within_torchs(err, ref, lambda: torch._scaled_mm(qx, q1.T, sx, s1.T, out_dtype=torch.bfloat16), q2, s2)
