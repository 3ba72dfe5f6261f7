"""The 16-bit GEMM's quantized output on the GPU (issue 25: ``linear``, ``mm`` and ``swiglu`` with ``out_dtype=torch.float8_e4m3fn``):
the e4m3 build is quantize_fp8 of the float32 build's result (the same kernel's fp32 values), the public
call against float64 with every epilogue, shape tails (M, N and K), batch dimensions and edge cases,
bitwise repeatable, split along K too, under torch.compile and CUDA-graph replay, and a bf16 layer chained
into an fp8 ``scaled_mm`` with no quantization kernel between them."""

from __future__ import annotations

import math

import pytest
import torch

import gemm_ladder
from gemm_ladder.library.activations import ACTIVATIONS
from gemm_ladder.library.quantized import quantize_fp8
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.quantized import QUANT_OUT, kernel_views, quantized_buffers, quantized_error

from fp8_cases import assert_chain_within_torchs, rel_frobenius

pytestmark = pytest.mark.gpu

#: (M, N, K): a partial last scale block and odd N (1001), M and K tails, several waves.
SHAPES = [(300, 296, 272), (1024, 2048, 1024), (129, 1001, 520), (2048, 4096, 4096)]


def _inputs(m, n, k, seed, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((m, k), device="cuda", generator=g).to(dtype)
    w = (torch.randn((n, k), device="cuda", generator=g) / math.sqrt(k)).to(dtype)
    return x, w


def _launch(kernel, x, w, *, split):
    """Run ``kernel`` on x @ w.T into NaN-poisoned outputs: (values, scales) or the fp32 result. The e4m3
    build's scales are written through a view of a buffer with one more block row, NaN, checked untouched:
    a block wholly past N (BN 256, N mod 256 in 1..128) has no scale to write."""
    va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    if kernel.out_e4m3:
        m, n = x.shape[0], w.shape[0]
        values, scales = quantized_buffers(m, n, x.device)
        c, rows = kernel_views(values, scales)
        canary = torch.full((rows.shape[0] + 1, rows.stride(0)), float("nan"), device=x.device)
        c.view(torch.uint8).fill_(0x7F)  # e4m3's NaN
        kernel.launch(va, vb, c, split=split, scales=canary[:-1, :m])
        assert canary[-1].isnan().all(), "a scale was written past the last block"
        scales.copy_(canary[:-1, :m].t())
        return values, scales
    out = torch.full((x.shape[0], w.shape[0]), float("nan"), device="cuda")
    kernel.launch(va, vb, out, split=split)
    return out


def _close_to_quantize_fp8(values, scales, full):
    """(values, scales) against quantize_fp8(full, (1, 128)) of the same fp32 values: scales within a few ulps
    and values within one e4m3 step, nearly all equal (ptxas may contract the two builds' stores apart)."""
    ref_v, ref_s = quantize_fp8(full, (1, 128))
    assert values.shape == ref_v.shape and scales.shape == ref_s.shape
    torch.testing.assert_close(scales, ref_s, rtol=2**-20, atol=0)
    v, rv = values.float(), ref_v.float()
    assert ((v - rv).abs() <= 2**-3 * rv.abs().clamp_min(2**-6)).all()
    assert (values.view(torch.uint8) != ref_v.view(torch.uint8)).float().mean().item() <= 1e-3


@pytest.mark.parametrize("bn", (128, 256))
@pytest.mark.parametrize("split", ("none", "all"))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_e4m3_build_is_quantize_fp8_of_the_float32_build(bn, split, shape):
    m, n, k = shape
    x, w = _inputs(m, n, k, seed=m + n)
    full = _launch(library_gemm("k", "k", bn, c_from_registers=True, out_fp32=True), x, w, split=split)
    values, scales = _launch(library_gemm("k", "k", bn, c_from_registers=True, out_e4m3=True), x, w, split=split)
    assert not full.isnan().any() and not scales.isnan().any()
    _close_to_quantize_fp8(values, scales, full)


@pytest.mark.parametrize("bn", (128, 256))
def test_extreme_blocks_divide_as_ieee_division(bn):
    """Rows whose scales leave the divisor's direct range (quantized_store.cuh's ScaleDivisor: scales below
    2^-90, the FLT_MIN floor, above 2^100, and an infinite one) are quantize_fp8 of the float32 build bit
    for bit, as the ordinary rows around them; the infinite scale's row is NaN where division gives NaN."""
    x, w = _inputs(96, 640, 128, seed=31)
    for row, factor in ((1, 2.0**-100), (2, 2.0**-118), (3, 2.0**-128), (4, 2.0**110), (5, 2.0**118)):
        x[row] *= factor
    x[6, 5] = float("inf")
    full = _launch(library_gemm("k", "k", bn, c_from_registers=True, out_fp32=True), x, w, split="none")
    values, scales = _launch(library_gemm("k", "k", bn, c_from_registers=True, out_e4m3=True), x, w, split="none")
    assert not full[:6].isnan().any() and not full[7:].isnan().any()
    ref_v, ref_s = quantize_fp8(full, (1, 128))
    assert torch.isinf(scales[6]).all() and torch.equal(values[6].float().isnan(), ref_v[6].float().isnan())
    for r in [r for r in range(96) if r != 6]:
        diff = (values[r].view(torch.uint8) != ref_v[r].view(torch.uint8)).nonzero().flatten().tolist()
        assert torch.equal(scales[r], ref_s[r]), f"row {r}: scales {scales[r].tolist()} != {ref_s[r].tolist()}"
        assert not diff, (f"row {r}: {len(diff)} values differ, first at column {diff[0]}: "
                          f"{values[r, diff[0]].float().item()} != {ref_v[r, diff[0]].float().item()} "
                          f"(float32 {full[r, diff[0]].item()!r}, scale {scales[r, diff[0] // 128].item()!r})")


def _reference(x, w, bias, activation, residual, alpha, beta):
    """The fused epilogue's result in float64 (linear's order: scale, bias, activation, residual)."""
    y = alpha * (x.double() @ w.double().T)
    if bias is not None:
        y = y + bias.double()
    if activation is not None:  # torch's forms (F.relu, F.gelu, ...), as library/activations.py names them
        y = ACTIVATIONS[activation].reference(y)
    if residual is not None and beta != 0:
        y = y + beta * residual.double()
    return y


def _check_against_float64(values, scales, ref):
    """Dequantized values within e4m3's rounding (2^-4 relative, 2^-9 x scale near zero) of the float64
    result, plus the fp32 accumulation's own error (about 1e-5 of the block's amax); scales within 1e-3."""
    scales_ok, values_ok, worst = quantized_error(values, scales, ref)
    assert scales_ok, "a scale is not max(amax / 448, FLT_MIN) of its block within 1e-3"
    assert values_ok, f"a dequantized value is past e4m3's rounding (worst {worst:.3g} of its block's scale)"
    assert values.shape == ref.shape


@pytest.mark.parametrize("activation", (None, "relu", "gelu", "gelu_tanh", "silu"))
@pytest.mark.parametrize("shape", [(300, 296, 272), (4096, 3072, 768)], ids=lambda s: "x".join(map(str, s)))
def test_linear_with_bias_and_activation_against_float64(activation, shape):
    m, n, k = shape
    x, w = _inputs(m, n, k, seed=11)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    values, scales = gemm_ladder.linear(x.view(2, m // 2, k) if m % 2 == 0 else x, w, bias, activation=activation,
                                        out_dtype=QUANT_OUT)
    _check_against_float64(values, scales, _reference(x, w, bias, activation, None, 1.0, 1.0).view(*values.shape))


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_linear_with_residual_alpha_and_beta_against_float64(dtype):
    m, n, k = 1000, 1536, 1040
    x, w = _inputs(m, n, k, seed=12, dtype=dtype)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    residual = torch.randn((m, n), device="cuda", dtype=dtype)
    e = gemm_ladder.explain(x, w.T, out_dtype=QUANT_OUT)
    assert e.kernel["name"].endswith("_creg_e4m3")
    values, scales = gemm_ladder.linear(x, w, bias, activation="gelu", residual=residual, alpha=0.5, beta=2.0,
                                        out_dtype=QUANT_OUT)
    _check_against_float64(values, scales, _reference(x, w, bias, "gelu", residual, 0.5, 2.0))


def test_mm_of_any_layout_and_edge_cases():
    x, w = _inputs(130, 520, 264, seed=13)
    values, scales = gemm_ladder.mm(x.T.contiguous().T, w.T, out_dtype=QUANT_OUT)  # a column-major a
    _check_against_float64(values, scales, _reference(x, w, None, None, None, 1.0, 1.0))
    v, s = gemm_ladder.linear(x[:0], w, out_dtype=QUANT_OUT)
    assert v.shape == (0, 520) and s.shape == (0, 5)
    bias = torch.randn(520, device="cuda", dtype=torch.bfloat16)
    v, s = gemm_ladder.linear(x[:, :0], w[:, :0], bias, activation="relu", out_dtype=QUANT_OUT)  # K = 0
    ref_v, ref_s = quantize_fp8(torch.relu(bias.float()).expand(130, 520), (1, 128))
    assert torch.equal(v.view(torch.uint8), ref_v.view(torch.uint8)) and torch.equal(s, ref_s)
    v, s = gemm_ladder.linear(x[0], w, out_dtype=QUANT_OUT)  # a 1-D x
    assert v.shape == (520,) and s.shape == (5,)


def test_nan_rows_keep_finite_scales_and_zero_rows_the_floor():
    x, w = _inputs(256, 512, 256, seed=14)
    x[3, 7] = float("nan")
    x[5] = 0
    values, scales = gemm_ladder.linear(x, w, out_dtype=QUANT_OUT)
    assert values[3].float().isnan().all() and scales[3].isfinite().all()
    assert (values[5].float() == 0).all() and (scales[5] == torch.finfo(torch.float32).tiny).all()
    assert not values[4].float().isnan().any()


def test_repeatable_bitwise_split_or_not():
    x, w = _inputs(257, 2048, 8192, seed=15)
    g = library_gemm("k", "k", 128, c_from_registers=True, out_e4m3=True)
    for split in ("none", "all"):
        first = _launch(g, x, w, split=split)
        for _ in range(3):
            again = _launch(g, x, w, split=split)
            assert torch.equal(first[0].view(torch.uint8), again[0].view(torch.uint8)) and torch.equal(first[1], again[1])


def test_compiled_and_graph_replayed_calls_match_eager():
    x, w = _inputs(512, 1024, 512, seed=16)
    bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)

    def layer(t):
        return gemm_ladder.linear(t, w, bias, activation="gelu_tanh", out_dtype=QUANT_OUT)

    eager = layer(x)
    compiled = torch.compile(layer, fullgraph=True)(x)
    for a, b in zip(eager, compiled):
        assert torch.equal(a.contiguous().view(torch.uint8) if a.dtype == QUANT_OUT else a.contiguous(),
                           b.contiguous().view(torch.uint8) if b.dtype == QUANT_OUT else b.contiguous())
    static = x.clone()
    layer(static)  # warm: the build loaded before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = layer(static)
    x2, _ = _inputs(512, 1024, 512, seed=17)
    static.copy_(x2)
    graph.replay()
    want = layer(x2)
    assert torch.equal(captured[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(captured[1], want[1])


def test_a_bf16_layer_chains_into_an_fp8_layer():
    """bf16 x -> linear(..., out_dtype=e4m3) -> scaled_mm with 128 x 128 weight scales: no quantization kernel
    between the layers, within 1.5x the error of torch's bf16 layer, quantize_fp8 and torch._scaled_mm."""
    m, d, h = 512, 1024, 2048
    x, w1 = _inputs(m, h, d, seed=18)
    w2 = torch.randn((d, h), device="cuda") / math.sqrt(h)
    q2, s2 = quantize_fp8(w2, (128, 128))
    hv, hs = gemm_ladder.linear(x, w1, activation="gelu", out_dtype=QUANT_OUT)
    y = gemm_ladder.scaled_mm(hv, q2.T, hs, s2.T)
    ref = torch.nn.functional.gelu(x.double() @ w1.double().T) @ w2.double().T
    err = rel_frobenius(y, ref)
    assert err < 0.1, err
    assert_chain_within_torchs(err, ref, lambda: torch.nn.functional.gelu(torch.nn.functional.linear(x, w1)), q2, s2)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("shape", [(300, 296, 272), (1000, 1408, 1040), (7, 520, 264)], ids=lambda s: "x".join(map(str, s)))
def test_swiglu_quantized_against_float64(dtype, shape):
    """swiglu(..., out_dtype=e4m3): tails (N = 296: a partial scale block; M = 7: one tile of mostly empty rows)."""
    m, n, k = shape
    x, wg = _inputs(m, n, k, seed=20, dtype=dtype)
    wu = _inputs(1, n, k, seed=21, dtype=dtype)[1]
    values, scales = gemm_ladder.swiglu(x, wg, wu, out_dtype=QUANT_OUT)
    ref = torch.nn.functional.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    _check_against_float64(values, scales, ref)


def test_a_bf16_swiglu_chains_into_an_fp8_down_projection():
    """The gated MLP's output quantized in its epilogue and read by an fp8 down projection (128 x 128 weight
    scales) as it is: within 1.5x the error of torch's chain (swiglu in bf16, quantize_fp8, torch._scaled_mm)."""
    m, d, h = 512, 1024, 2816
    x, wg = _inputs(m, h, d, seed=22)
    wu = _inputs(1, h, d, seed=23)[1]
    w_down = torch.randn((d, h), device="cuda") / math.sqrt(h)
    qd, sd = quantize_fp8(w_down, (128, 128))
    hv, hs = gemm_ladder.swiglu(x, wg, wu, out_dtype=QUANT_OUT)
    y = gemm_ladder.scaled_mm(hv, qd.T, hs, sd.T)
    ref = (torch.nn.functional.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)) @ w_down.double().T
    err = rel_frobenius(y, ref)
    assert err < 0.1, err
    F = torch.nn.functional
    assert_chain_within_torchs(err, ref, lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu), qd, sd)


def _launch_swiglu(x, wg, wu, *, split):
    """The quantized swiglu build on x, wg, wu into NaN-poisoned values and scales, the scales through a view
    of a buffer with a NaN canary block row after them (checked untouched): (values, scales)."""
    from gemm_ladder.library.swiglu import swiglu_kernel

    m, n = x.shape[0], wg.shape[0]
    values, scales = quantized_buffers(m, n, x.device)
    c, rows = kernel_views(values, scales)
    canary = torch.full((rows.shape[0] + 1, rows.stride(0)), float("nan"), device=x.device)
    c.view(torch.uint8).fill_(0x7F)
    swiglu_kernel(quantized=True).launch(*(operand_view(t, k_dim=1) for t in (x, wg, wu)), c, split=split,
                                         scales=canary[:-1, :m])
    assert canary[-1].isnan().all(), "a scale was written past the last block"
    scales.copy_(canary[:-1, :m].t())
    return values, scales


@pytest.mark.parametrize("split", ("none", "all"))
def test_swiglu_quantized_split_along_k_against_float64_and_repeatable(split):
    """The stream-K tail (partials reduced, then the quantized store) as well as whole tiles: 300 x 296 x 4096
    is 6 units; "all" splits each over 11 of the 66 clusters (at most 11 contributors), "none" none."""
    x, wg = _inputs(300, 296, 4096, seed=24)
    wu = _inputs(1, 296, 4096, seed=25)[1]
    values, scales = _launch_swiglu(x, wg, wu, split=split)
    assert not values.float().isnan().any() and not scales.isnan().any()
    ref = torch.nn.functional.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    _check_against_float64(values, scales, ref)
    again = _launch_swiglu(x, wg, wu, split=split)
    assert torch.equal(values.view(torch.uint8), again[0].view(torch.uint8)) and torch.equal(scales, again[1])


def test_swiglu_quantized_batch_dims_one_row_and_k_zero():
    x, wg = _inputs(64, 256, 128, seed=26)
    wu = _inputs(1, 256, 128, seed=27)[1]
    v, s = gemm_ladder.swiglu(x.view(4, 16, 128), wg, wu, out_dtype=QUANT_OUT)
    ref = torch.nn.functional.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    _check_against_float64(v, s, ref.view(4, 16, 256))
    v1, s1 = gemm_ladder.swiglu(x[0], wg, wu, out_dtype=QUANT_OUT)  # a 1-D x
    assert v1.shape == (256,) and s1.shape == (2,)
    assert torch.equal(v1.view(torch.uint8), v[0, 0].contiguous().view(torch.uint8))
    v0, s0 = gemm_ladder.swiglu(x[:, :0], wg[:, :0], wu[:, :0], out_dtype=QUANT_OUT)  # K = 0: silu(0) * 0
    assert (v0.float() == 0).all() and (s0 == torch.finfo(torch.float32).tiny).all()
