"""fp8 scaled_mm without a GPU: the generated fp8 wgmma header, the call checks, the registered ops and
their fakes, quantize_fp8's reference semantics, and (nvcc) the kernel's builds for each scale mode."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

import gemm_ladder
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError
from gemm_ladder.library import fp8, quantized
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm
from gemm_ladder.library.quantized import dequantize, quantize_fp8

from conftest import needs_nvcc
from fp8_cases import LaunchRecorder, assert_build_clean

ROOT = Path(__file__).resolve().parent.parent
E4M3 = torch.float8_e4m3fn


def _gen():
    spec = importlib.util.spec_from_file_location("gl_tool_gen_wgmma_fp8", ROOT / "tools" / "gen_wgmma.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_fp8_wgmma_header_is_the_generator_output():
    gen = _gen()
    assert gen.OUT_FP8.read_text() == gen.render_fp8(), "edit tools/gen_wgmma.py and run it, never the header"
    text = gen.render_fp8()
    # Every input pairing and tile width, k32, and no transpose immediates (fp8 wgmma is K-major only).
    for a in ("e4m3", "e5m2"):
        for b in ("e4m3", "e5m2"):
            for n in gen.FP8_SHAPES:
                assert f"m64n{n}k32.f32.{a}.{b} " in text
    assert "p, 1, 1;" in text and "TransA" not in text


def _operands(m=256, n=384, k=512, device="meta"):
    a = torch.empty((m, k), dtype=E4M3, device=device)
    b = torch.empty((n, k), dtype=E4M3, device=device).T
    return a, b


def _block_scales(m, n, k, device="meta"):
    kb = math.ceil(k / 128)
    return (torch.empty((kb, m), device=device).T, torch.empty((math.ceil(n / 128), kb), device=device).T)


@pytest.mark.parametrize("mode", ["tensorwise", "rowwise", "blockwise"])
def test_check_names_the_scale_mode(mode):
    m, n, k = 256, 384, 528
    a, b = _operands(m, n, k)
    sa, sb = {"tensorwise": (torch.empty(()), torch.empty(1)),
              "rowwise": (torch.empty(m, 1), torch.empty(1, n)),
              "blockwise": _block_scales(m, n, k, "cpu")}[mode]
    call = check_scaled_mm(a, b, sa.to("meta"), sb.to("meta"), device_type=None)
    assert (call.m, call.n, call.k, call.scale_mode, call.out_dtype) == (m, n, k, mode, torch.bfloat16)


def _bad_calls():
    a, b = _operands()
    sa, sb = torch.empty((), device="meta"), torch.empty((), device="meta")
    yield "dtype", dict(a=a.to(torch.bfloat16)), GemmInputError, "float8_e4m3fn"
    yield "row-major b", dict(b=torch.empty((512, 384), dtype=E4M3, device="meta")), GemmInputError, "column-major"
    yield "col-major a", dict(a=torch.empty((512, 256), dtype=E4M3, device="meta").T), GemmInputError, "row-major"
    yield "K % 16", dict(a=torch.empty((256, 500), dtype=E4M3, device="meta"),
                         b=torch.empty((384, 500), dtype=E4M3, device="meta").T), GemmInputError, "multiple of 16"
    yield "K differs", dict(b=torch.empty((384, 256), dtype=E4M3, device="meta").T), GemmInputError, "K differs"
    yield "scale dtype", dict(scale_a=torch.empty((), dtype=torch.float16, device="meta")), GemmInputError, "float32"
    yield "scale shape", dict(scale_a=torch.empty((256, 3), device="meta"),
                              scale_b=torch.empty((1, 384), device="meta")), GemmInputError, "match no scaling"
    yield "1x128 x 1x128", dict(scale_a=torch.empty((256, 4), device="meta"),
                                scale_b=torch.empty((4, 384), device="meta")), NotSupportedError, "not built"
    yield "bias shape", dict(bias=torch.empty(383, device="meta")), GemmInputError, "bias"
    yield "out dtype", dict(out_dtype=torch.float8_e5m2), GemmInputError, "out_dtype"
    yield "fp8 out=", dict(out_dtype=E4M3, out=torch.empty((256, 384), dtype=E4M3, device="meta")), NotSupportedError, "out="
    yield "out_dtype type", dict(out_dtype="bf16"), GemmTypeError, "torch.dtype"
    yield "out shape", dict(out=torch.empty((256, 383), dtype=torch.bfloat16, device="meta")), GemmInputError, "shape"
    yield "not a tensor", dict(scale_b=1.0), GemmTypeError, "torch.Tensor"
    yield "rank", dict(a=torch.empty((1, 256, 512), dtype=E4M3, device="meta")), GemmInputError, "2-D"
    base = dict(a=a, b=b, scale_a=sa, scale_b=sb)
    del base


@pytest.mark.parametrize("case", list(_bad_calls()), ids=lambda c: c[0])
def test_bad_calls_are_refused_with_the_rule(case):
    _, change, error, words = case
    a, b = _operands()
    args = dict(a=a, b=b, scale_a=torch.empty((), device="meta"), scale_b=torch.empty((), device="meta"))
    args.update(change)
    with pytest.raises(error, match=words):
        check_scaled_mm(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"), device_type=None,
                        **args)


def test_cpu_tensors_are_refused_before_launch():
    a, b = _operands(device="cpu")
    with pytest.raises(GemmInputError, match="cuda device"):
        gemm_ladder.scaled_mm(a, b, torch.ones(()), torch.ones(()))


def test_ops_are_registered_and_fakes_give_shape_and_dtype():
    assert hasattr(torch.ops.gemm_ladder, "scaled_mm") and hasattr(torch.ops.gemm_ladder, "scaled_mm_out")
    m, n, k = 200, 300, 272
    a, b = _operands(m, n, k)
    sa, sb = _block_scales(m, n, k)
    out = torch.ops.gemm_ladder.scaled_mm(a, b, sa, sb, None, torch.float32)
    assert out.shape == (m, n) and out.dtype == torch.float32 and out.device.type == "meta"
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fa = torch.empty((m, k), dtype=E4M3, device="cuda")
        fb = torch.empty((n, k), dtype=E4M3, device="cuda").T
        s1 = torch.empty((), device="cuda")
        y = torch.ops.gemm_ladder.scaled_mm(fa, fb, s1, s1, torch.empty(n, device="cuda"), torch.bfloat16)
        assert y.shape == (m, n) and y.dtype == torch.bfloat16
        with pytest.raises(GemmInputError):
            torch.ops.gemm_ladder.scaled_mm(fa, fb.T, s1, s1, None, torch.bfloat16)
        # CPU tensors: refused at trace time with the launch's rule, not when the compiled graph runs.
        ca, cb, c1 = torch.empty((m, k), dtype=E4M3), torch.empty((n, k), dtype=E4M3).T, torch.empty(())
        with pytest.raises(GemmInputError, match="a must be on a cuda device"):
            torch.ops.gemm_ladder.scaled_mm(ca, cb, c1, c1, None, torch.bfloat16)
        with pytest.raises(GemmInputError, match="a must be on a cuda device"):
            torch.ops.gemm_ladder.scaled_mm_fp8(ca, cb, c1, c1, None)
    o = torch.empty((m, n), dtype=torch.bfloat16, device="meta")
    torch.ops.gemm_ladder.scaled_mm_out(a, b, sa, sb, None, torch.bfloat16, o)
    # The functional op returns one tensor: the quantized output (two) is scaled_mm_fp8's, in the fake as in
    # the real op.
    with pytest.raises(NotSupportedError, match="scaled_mm_fp8"):
        torch.ops.gemm_ladder.scaled_mm(a, b, sa, sb, None, E4M3)


def test_quantized_output_compiles_with_dynamic_shapes():
    """The quantized output's fake with a symbolic M (dynamic=True): its buffers' layouts as in eager."""
    def f(a, b, s1, s2):
        return gemm_ladder.scaled_mm(a, b.t(), s1, s2, out_dtype=E4M3)

    s1 = torch.empty(1, device="meta")
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (32, 48):
        a = torch.empty((m, 32), dtype=E4M3, device="meta")
        values, scales = compiled(a, torch.empty((300, 32), dtype=E4M3, device="meta"), s1, s1)
        assert values.shape == (m, 300) and values.stride() == (304, 1)
        assert scales.shape == (m, 3) and scales.stride() == (1, -(-m // 4) * 4)


def test_linear_e4m3_fake_applies_the_extent_rule():
    from gemm_ladder.errors import OutsideDomainError

    x, w = torch.empty((2, 16), dtype=torch.bfloat16, device="meta"), torch.empty((2**31, 16), dtype=torch.bfloat16,
                                                                                   device="meta")
    with pytest.raises(OutsideDomainError):
        torch.ops.gemm_ladder.linear_e4m3(x, w, None, None, None, 1.0, 1.0)


def test_package_exports():
    assert gemm_ladder.scaled_mm is not None and gemm_ladder.quantize_fp8 is quantize_fp8
    assert {"scaled_mm", "quantize_fp8"} <= set(gemm_ladder.__all__)


# --- quantize_fp8 -----------------------------------------------------------------------------------

def _reference_quantize(x: torch.Tensor, br: int, bc: int, dtype=E4M3):
    """Element by element, in float64 for the amax and scale decisions (then fp32 as the function does)."""
    fmax = torch.finfo(dtype).max
    rows, cols = x.shape
    scales = torch.empty((math.ceil(rows / br), math.ceil(cols / bc)))
    values = torch.empty((rows, cols))
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            blk = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc].float()
            s = max(blk.abs().max().item() / fmax, torch.finfo(torch.float32).tiny)
            s = torch.tensor(s, dtype=torch.float32)
            scales[i, j] = s
            values[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (blk / s).clamp(-fmax, fmax)
    return values.to(dtype), scales


@pytest.mark.parametrize("block", [(1, 128), (128, 128), (1, -1), (-1, -1)])
@pytest.mark.parametrize("dtype", [E4M3, torch.float8_e5m2])
def test_quantize_matches_the_elementwise_reference(block, dtype):
    torch.manual_seed(0)
    x = torch.randn(130, 300) * torch.logspace(-3, 3, 300)  # a wide range across columns
    values, scales = quantize_fp8(x, block, dtype=dtype)
    br = x.shape[0] if block[0] == -1 else block[0]
    bc = x.shape[1] if block[1] == -1 else block[1]
    ref_v, ref_s = _reference_quantize(x, br, bc, dtype)
    assert values.dtype == dtype and values.shape == x.shape
    assert torch.equal(scales.reshape(ref_s.shape), ref_s)
    assert torch.equal(values.float(), ref_v.float())
    if block == (1, 128):
        assert scales.shape == (130, 3) and scales.stride() == (1, 130)  # torch._scaled_mm's 1x128 layout
    if block == (-1, -1):
        assert scales.shape == ()
    if block == (1, -1):
        assert scales.shape == (130, 1)
    # Each element within half an fp8 step of x (relative to its block's amax at worst).
    err = (dequantize(values, scales, block) - x.double()).abs()
    eps = 2.0 ** -(3 if dtype == E4M3 else 2)
    amax = dequantize(torch.ones_like(values, dtype=torch.float32).to(dtype), scales, block) * torch.finfo(dtype).max
    assert (err <= eps * amax + 1e-30).all()


def test_quantize_edge_blocks():
    x = torch.zeros(2, 256)
    x[0, 128:] = 1e-40  # a subnormal block
    x[1, :128] = float("inf")
    x[1, 128] = float("nan")
    values, scales = quantize_fp8(x)
    assert scales[0, 0] == torch.finfo(torch.float32).tiny and (values[0, :128].float() == 0).all()
    assert scales[0, 1] > 0 and torch.isfinite(values[0, 128:].float()).all()
    assert math.isinf(scales[1, 0]) and math.isnan(scales[1, 1])
    assert not torch.isfinite(dequantize(values, scales, (1, 128))[1]).any()


@pytest.mark.parametrize("shape", [(0, 0), (4, 0), (0, 256)])
def test_quantize_empty_input_has_the_layouts_scales(shape):
    """An empty tensor quantizes to empty values; a -1 block extent is still one block (one scale of the
    floor: the amax of nothing is 0), so tensorwise gives its one element and rowwise its (R, 1)."""
    rows = shape[0]
    want = {(1, 128): (rows, math.ceil(shape[1] / 128)), (128, 128): (math.ceil(rows / 128), math.ceil(shape[1] / 128)),
            (1, -1): (rows, 1), (-1, -1): ()}
    for block, scale_shape in want.items():
        values, scales = quantize_fp8(torch.zeros(*shape), block)
        assert values.shape == shape and tuple(scales.shape) == scale_shape, block
        assert (scales == torch.finfo(torch.float32).tiny).all()
        assert dequantize(values, scales, block).shape == shape


def test_quantize_refuses_bad_input():
    with pytest.raises(GemmTypeError):
        quantize_fp8([1.0])
    with pytest.raises(GemmInputError, match="2-D"):
        quantize_fp8(torch.zeros(3))
    with pytest.raises(GemmInputError, match="block"):
        quantize_fp8(torch.zeros(3, 3), (64, 64))
    with pytest.raises(GemmInputError, match="dtype"):
        quantize_fp8(torch.zeros(3, 3, dtype=torch.int32))


# --- the kernel's builds (nvcc, no GPU) -----------------------------------------------------------

BUILDS = [Fp8Kernel("tensorwise"), Fp8Kernel("rowwise", out_dtype="fp32"), Fp8Kernel("blockwise", bias=True),
          Fp8Kernel("blockwise", a_dtype="e5m2", out_dtype="fp16"), Fp8Kernel("blockwise", out_dtype="fp8", bias=True),
          Fp8Kernel("blockwise", bn=64), Fp8Kernel("rowwise", bn=64, bias=True), Fp8Kernel("blockwise", overlap=False),
          Fp8Kernel("tensorwise", store="tma"), Fp8Kernel("blockwise", out_dtype="fp16", bias=True, store="tma"),
          Fp8Kernel("rowwise", bn=64, store="tma"), Fp8Kernel("blockwise", overlap=False, store="tma")]


@needs_nvcc
@pytest.mark.parametrize("kernel", BUILDS, ids=lambda k: f"{k.scale_mode}-{k.a_dtype}-{k.out_dtype}-bias{int(k.bias)}-bn{k.bn}-ov{int(k.overlap)}-{k.store}")
def test_kernel_builds_for_sm90a_without_spills(use_cache, kernel):
    assert_build_clean(kernel)


# --- the launch's arguments, with the driver replaced (CPU tensors stand in for the GPU's) ----------

@pytest.mark.parametrize("mode", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("shape", [(130, 97, 272), (1, 256, 16), (1000, 1040, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_launch_arguments(monkeypatch, mode, shape):
    m, n, k = shape
    rec = LaunchRecorder()
    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: kwargs)  # the spec was validated by encode_kwargs
    monkeypatch.setattr(fp8, "_sm_count", lambda device: 132)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)
    monkeypatch.setattr(Fp8Kernel, "loaded", lambda self, device: rec)
    # The 128-row launch's arguments (the 64-row one's, which M <= 64 takes by default: test_fp8_64_rows_cpu.py).
    monkeypatch.setattr(fp8, "TILE_M_DEFAULT", "128")
    blocks = quantized.SCHEME_BLOCKS
    qa, sa = quantize_fp8(torch.randn(m, k), blocks[mode][0])
    qw, sw = quantize_fp8(torch.randn(n, k), blocks[mode][1])
    sb = sw.T if sw.dim() == 2 else sw
    bias = torch.randn(n, dtype=torch.bfloat16)
    call = check_scaled_mm(qa, qw.T, sa, sb, bias, device_type="cpu")
    out = fp8.scaled_mm_launch(qa, qw.T, sa, sb, bias, call)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    (grid, args), = rec.calls
    bn = fp8.tile_n(m, n, 132)
    assert bn == (64 if math.ceil(m / 128) * math.ceil(n / 128) < 132 else 128)
    tiles = math.ceil(m / 128) * math.ceil(n / bn)
    assert grid == (min(tiles, 132), 1, 1)
    map_a, map_b, map_sa, map_c = args[:4]
    if fp8.store_for("bf16", out, n)[0] == fp8.STORE_TMA:  # fp8.STORE_DEFAULT where the output allows it
        assert n % 8 == 0 and map_c["globalDim"] == [n, m] and map_c["boxDim"] == [64, 64]
        assert map_c["globalStrides"] == [out.stride(0) * 2]
    else:
        assert n % 8 and map_c is map_a  # the register store never reads it
    assert map_a["globalDim"] == [k, m] and map_a["boxDim"] == [128, 128] and map_a["globalStrides"] == [qa.stride(0)]
    assert map_b["globalDim"] == [k, n] and map_b["boxDim"] == [128, bn] and map_b["globalStrides"] == [qw.T.stride(1)]
    assert map_a["swizzle"] == map_b["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert [a.value for a in args[13:16]] == [m, n, k]
    # None of these splits (tiles fill the SMs, or too few K blocks): tail_first_unit = tiles, no workspace.
    assert [a.value for a in args[16:]] == [tiles, 1, None, None]
    assert args[10].value == out.stride(0) and args[9].value == out.data_ptr()
    assert (args[11].value, args[12].value) == (None, 0)  # no quantized output
    if mode == "blockwise":
        kb = math.ceil(k / 128)
        assert map_sa["tensorDataType"] == "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"
        assert map_sa["globalDim"] == [m, kb] and map_sa["boxDim"] == [128, 1]
        assert map_sa["globalStrides"][0] % 16 == 0 and map_sa["globalStrides"][0] >= 4 * m
        assert (args[6].value, args[7].value) == (sb.stride(0), sb.stride(1))
    else:
        assert map_sa is map_a
        assert args[4].value == sa.data_ptr() and args[5].value == sb.data_ptr()


def test_quantized_output_launch_and_fake(monkeypatch):
    m, n, k = 130, 296, 256  # N % 16 = 8: the values' pitch is padded to 304
    rec = LaunchRecorder()
    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(fp8, "_sm_count", lambda device: 132)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)
    monkeypatch.setattr(Fp8Kernel, "loaded", lambda self, device: rec)
    qa, sa = quantize_fp8(torch.randn(m, k), (1, 128))
    qw, sw = quantize_fp8(torch.randn(n, k), (128, 128))
    call = check_scaled_mm(qa, qw.T, sa, sw.T, None, E4M3, device_type="cpu")
    values, scales = fp8.scaled_mm_launch(qa, qw.T, sa, sw.T, None, call)
    assert values.shape == (m, n) and values.dtype == E4M3 and values.stride() == (304, 1)
    assert scales.shape == (m, 3) and scales.stride() == (1, 132)
    (grid, args), = rec.calls
    assert args[9].value == values.data_ptr() and args[10].value == 304
    assert args[11].value == scales.data_ptr() and args[12].value == 132
    # The outputs chain (when N is a multiple of 16, the next K): the next layer's blockwise call takes
    # them as they are (no rule broken, no copy of scale_a: its pitch is a multiple of 4).
    qw2, sw2 = quantize_fp8(torch.randn(64, 288), (128, 128))
    v2, s2 = values[:, :288], scales[:, :3]
    assert check_scaled_mm(v2, qw2.T, s2, sw2.T, device_type="cpu").scale_mode == "blockwise"
    fv, fs = torch.ops.gemm_ladder.scaled_mm_fp8(qa.to("meta"), qw.T.to("meta"), sa.to("meta"), sw.T.to("meta"), None)
    assert (fv.shape, fv.dtype, fs.shape) == ((m, n), E4M3, (m, 3))
    assert (fv.stride(), fs.stride()) == (values.stride(), scales.stride())  # the op's outputs: the same layouts


@pytest.mark.parametrize("kernel", [Fp8Kernel("blockwise"), Fp8Kernel("tensorwise", bn=64), Fp8Kernel("rowwise", overlap=False),
                                    Fp8Kernel("tensorwise", store="tma"), Fp8Kernel("blockwise", bn=64, store="tma"),
                                    Fp8Kernel("rowwise", overlap=False, store="tma")],
                         ids=["blockwise", "tensorwise-bn64", "rowwise-serial", "tensorwise-tma", "blockwise-bn64-tma",
                              "rowwise-serial-tma"])
def test_ring_audited(kernel):
    from gemm_ladder.audit import audit, build_ring_protocol

    assert audit(build_ring_protocol(kernel.ring_config(k_iters=4, tiles=3), name="fp8")).ok
    assert kernel.dynamic_smem <= 232448


def test_ring_audit_catches_a_seeded_fault():
    from dataclasses import replace

    from gemm_ladder.audit import audit, build_ring_protocol

    ring = Fp8Kernel("blockwise").ring_config(k_iters=4, tiles=2)
    # The scale_a box left out of expect_tx: the phase completes before (or never) the loads land.
    bad = replace(ring, expect_tx_bytes=ring.expect_tx_bytes - 512)
    assert not audit(build_ring_protocol(bad, name="fp8-fault"), stop_at_first=True).ok


def test_explain_scaled_mm_on_meta():
    m, n, k = 4096, 7168, 16400  # a K tail of 16
    a, b = _operands(m, n, k)
    sa, sb = _block_scales(m, n, k)
    e = gemm_ladder.explain_scaled_mm(a, b, sa, sb, bias=torch.empty(n, dtype=torch.bfloat16, device="meta"))
    assert e["scale_mode"] == "blockwise" and e["tile"] == {"BM": 128, "BN": 128, "BK": 128}
    assert e["promotion_interval_k"] == 128 and e["grid"] == 132 and e["tiles"] == 32 * 56
    assert e["expect_tx_bytes"] == 128 * 128 * 2 + 512 and "zero-filled" in e["k_tail"]
    assert e["copies"] == ["bias to float32"]
    small = gemm_ladder.explain_scaled_mm(*_operands(128, 7168, 2048), torch.empty((), device="meta"),
                                          torch.empty((), device="meta"))
    assert small["tile"]["BN"] == 64 and small["stages"] == 8 and small["copies"] == []
    with pytest.raises(GemmInputError):
        gemm_ladder.explain_scaled_mm(a, b.T, sa, sb)


def test_explain_with_scales_explains_the_scaled_mm():
    """gemm_ladder.explain(a, b, scale_a=, scale_b=) is explain_scaled_mm's answer (fp8 inputs); one scale, an
    activation, or fp8 inputs without scales are refused with the way to ask."""
    m, n, k = 4096, 7168, 16400
    a, b = _operands(m, n, k)
    sa, sb = _block_scales(m, n, k)
    assert gemm_ladder.explain(a, b, scale_a=sa, scale_b=sb) == gemm_ladder.explain_scaled_mm(a, b, sa, sb)
    e = gemm_ladder.explain(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float16)
    assert e["output"] == gemm_ladder.explain_scaled_mm(a, b, sa, sb, out_dtype=torch.float16)["output"]
    with pytest.raises(GemmInputError, match="both scale_a and scale_b"):
        gemm_ladder.explain(a, b, scale_a=sa)
    with pytest.raises(GemmInputError, match="no activation"):
        gemm_ladder.explain(a, b, scale_a=sa, scale_b=sb, activation="gelu")
    with pytest.raises(GemmInputError, match="gemm_ladder.scaled_mm"):
        gemm_ladder.explain(a, b)


def test_tensor_maps_are_encoded_once_per_address(monkeypatch):
    """The launch's tensor maps come from a cache keyed by every input of the encoding: a second call on
    the same tensors encodes nothing, a new activation address encodes only its own map, and a map of
    another box (another tile width) is another entry."""
    encoded = []
    monkeypatch.setattr(fp8, "_MAPS", {})
    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: encoded.append(kwargs) or kwargs)
    monkeypatch.setattr(fp8, "_sm_count", lambda device: 132)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)
    rec = LaunchRecorder()
    monkeypatch.setattr(Fp8Kernel, "loaded", lambda self, device: rec)
    qa, sa = quantize_fp8(torch.randn(1000, 1024), (1, 128))
    qw, sw = quantize_fp8(torch.randn(1040, 1024), (128, 128))
    call = check_scaled_mm(qa, qw.T, sa, sw.T, device_type="cpu")
    out = torch.empty((1000, 1040), dtype=torch.bfloat16)
    fp8.scaled_mm_launch(qa, qw.T, sa, sw.T, None, call, out)
    assert len(encoded) == 4  # a, b, scale_a, c
    fp8.scaled_mm_launch(qa, qw.T, sa, sw.T, None, call, out)
    assert len(encoded) == 4 and all(x is y for x, y in zip(rec.calls[0][1][:4], rec.calls[1][1][:4]))
    qa2 = qa.clone()  # a new activation at a new address: only a's map is new
    fp8.scaled_mm_launch(qa2, qw.T, sa, sw.T, None, call, out)
    assert len(encoded) == 5 and encoded[-1]["globalAddress"] == qa2.data_ptr()
    assert encoded[1]["boxDim"] == [128, 64]  # the launch's tile width here: 8 x 17 tiles of 64 (fewer than the SMs at 128)
    fp8.scaled_mm_launch(qa2, qw.T, sa, sw.T, None, call, out, kernel=Fp8Kernel("blockwise", bn=128, store="tma"))
    assert len(encoded) == 6 and encoded[-1]["boxDim"] == [128, 128]  # b's map at the other tile width
