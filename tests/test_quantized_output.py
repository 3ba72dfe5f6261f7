"""The 16-bit GEMM's quantized output (issue 25: ``linear(..., out_dtype=torch.float8_e4m3fn)``) without a
GPU: the build's config and refusals, its routes and explanation on meta tensors, the op and its fake, the
API's refusals before any launch, and the builds compiled with nvcc through the resource gate (no spill, the
e4m3 conversions and byte-pair stores in SASS, no TMA store). tests/test_quantized_output_gpu.py runs it."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import gate_reports, needs_nvcc

import gemm_ladder
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError
from gemm_ladder.dispatch import decide
from gemm_ladder.dispatch.route import QUANTIZED_NARROW_MAX_BN
from gemm_ladder.library.gemm import library_gemm, scales_refusal
from gemm_ladder.library.kernel import KernelConfig
from gemm_ladder.library.quantized import QUANT_OUT, kernel_views, quantized_buffers

BF16 = torch.bfloat16
META = "meta"


def _meta(*shape, dtype=BF16, **kw):
    return torch.empty(shape, dtype=dtype, device=META, **kw)


# --- the build -----------------------------------------------------------------------------------


def test_the_e4m3_build_is_the_register_store_with_its_define():
    g = library_gemm("k", "k", 256, c_from_registers=True, out_e4m3=True)
    assert g.name == "sm90_gemm_kk_bn256_creg_e4m3" and g.out_e4m3 and g.output_store == "C from registers"
    config = g.config("bf16")
    assert config.out_dtype == "e4m3" and config.out_e4m3 and config.c_from_registers
    d = config.defines()
    assert d["GL_OUT_E4M3"] == 1 and d["GL_C_FROM_REGISTERS"] == 1 and "GL_OUT_FP32" not in d
    # The stages are the register store's: no C staged in shared memory.
    assert g.stages == library_gemm("k", "k", 256, c_from_registers=True).stages
    assert "GL_OUT_E4M3" not in library_gemm("k", "k", 256, c_from_registers=True).config("bf16").defines()


@pytest.mark.parametrize("kwargs,match", [
    (dict(bn=256), "register store"),                                     # not from registers
    (dict(bn=256, c_from_registers=True, out_fp32=True), "not float32"),  # both outputs
    (dict(bn=64, c_from_registers=True), "BN 128 or 256"),                # half a scale block
    (dict(bn=192, c_from_registers=True), "BN 128 or 256"),
])
def test_e4m3_builds_it_cannot_make_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        library_gemm("k", "k", out_e4m3=True, **kwargs)


def test_kernel_config_takes_e4m3_output_of_16_bit_inputs_only_from_registers():
    KernelConfig("sm90_gemm", out_dtype="e4m3", store="registers")
    with pytest.raises(ValueError, match="from registers"):
        KernelConfig("sm90_gemm", out_dtype="e4m3", store="tma")
    with pytest.raises(ValueError, match="scales are an fp8 build"):
        KernelConfig("sm90_gemm", scale="rowwise")


def test_scales_refusal_names_each_rule():
    g = library_gemm("k", "k", 128, c_from_registers=True, out_e4m3=True)
    values, scales = quantized_buffers(300, 296, torch.device("cpu"))
    c, buf = kernel_views(values, scales)
    assert buf.shape == (3, 300) and buf.stride() == (300, 1) and c.stride() == (304, 1) and scales.shape == (300, 3)
    assert scales_refusal(g, c, buf) is None
    assert "pass scales" in scales_refusal(g, c, None)
    assert "float32 of shape (3, >= 300)" in scales_refusal(g, c, buf[:2])
    assert "float32 of shape" in scales_refusal(g, c, buf.double())
    assert "strides" in scales_refusal(g, c, torch.empty(300, 3).T)
    assert "overlap" in scales_refusal(g, c, _overlapping(c))
    plain = library_gemm("k", "k", 128, c_from_registers=True)
    assert "writes no quantized output" in scales_refusal(plain, c, buf)
    assert scales_refusal(plain, c, None) is None


def _overlapping(c: torch.Tensor) -> torch.Tensor:
    """A float32 (3, 300) tensor over c's own bytes."""
    return torch.empty(0, dtype=torch.float32).set_(c.untyped_storage(), 0, (3, 300), (300, 1))


# --- the route and explain (meta) ----------------------------------------------------------------


@pytest.mark.parametrize("m,n,k", [(4096, 7168, 4096), (300, 296, 272), (7, 4096, 4096), (8192, 768, 3072)])
def test_the_route_is_the_e4m3_register_store_build(m, n, k):
    x, w = _meta(m, k), _meta(n, k)
    values = quantized_buffers(m, n, torch.device(META))[0]
    route = decide(x, w.T, values, given=False)
    assert route.kind == "general" and route.config.out_dtype == "e4m3" and route.config.c_from_registers
    assert route.bn in (128, 256) and not route.c_path.transposed and route.c_path.workspace is None
    assert route.config.tile[0] == 128 and route.config.cluster == 2
    narrow = decide(x, w.T, values, given=False, narrow=True)
    assert narrow.bn <= QUANTIZED_NARROW_MAX_BN and narrow.config.out_dtype == "e4m3"


def test_explain_says_the_quantized_route():
    e = gemm_ladder.explain(_meta(4096, 4096), _meta(7168, 4096).T, out_dtype=QUANT_OUT)
    assert e.out_dtype == "float8_e4m3fn" and e.kernel["name"].endswith("_creg_e4m3")
    assert e.output["store"] == "C from registers" and e.host.startswith("python")
    with pytest.raises(NotSupportedError, match="out="):
        gemm_ladder.explain(_meta(64, 64), _meta(64, 64), out_dtype=QUANT_OUT, out=_meta(64, 64, dtype=QUANT_OUT))


# --- the API and the op (meta) --------------------------------------------------------------------


def test_linear_and_mm_on_meta_give_the_layouts():
    values, scales = gemm_ladder.linear(_meta(2, 50, 4096), _meta(7000, 4096), _meta(7000), activation="gelu",
                                        out_dtype=QUANT_OUT)
    assert values.shape == (2, 50, 7000) and values.dtype == QUANT_OUT
    assert scales.shape == (2, 50, 55) and scales.dtype == torch.float32
    # The documented layouts on the op's path too: rows pitched to 16 elements, scales column-major in the
    # merged rows with a pitch of M rounded up to 4 (what scaled_mm reads without a copy).
    assert values.stride() == (50 * 7008, 7008, 1) and scales.stride() == (50, 1, 100)
    values, scales = gemm_ladder.mm(_meta(33, 256), _meta(256, 129), out_dtype=QUANT_OUT)
    assert values.shape == (33, 129) and scales.shape == (33, 2)
    values, scales = gemm_ladder.linear(_meta(256), _meta(384, 256), out_dtype=QUANT_OUT)  # a 1-D x
    assert values.shape == (384,) and scales.shape == (3,)


def test_the_op_is_registered_with_a_fake():
    op = torch.ops.gemm_ladder.linear_e4m3
    values, scales = op(_meta(5, 3, 512), _meta(300, 512), None, _meta(5, 3, 300), "silu", 2.0, 0.5)
    assert values.shape == (5, 3, 300) and values.dtype == QUANT_OUT and scales.shape == (5, 3, 3)
    with pytest.raises(GemmInputError, match="bias"):
        op(_meta(5, 512), _meta(300, 512), _meta(299), None, None, 1.0, 1.0)


def test_the_op_traces_into_a_graph():
    """Traced with FakeTensors (what torch.compile's tracing sees), the call is the op, run by its fake."""
    def f(x, w, b):
        values, scales = gemm_ladder.linear(x, w, b, activation="relu", out_dtype=QUANT_OUT)
        return values, scales * 2

    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(_meta(64, 256), _meta(384, 256), _meta(384))
    assert any(n.target is torch.ops.gemm_ladder.linear_e4m3.default for n in gm.graph.nodes)


@pytest.mark.parametrize("call,error,match", [
    (lambda: gemm_ladder.linear(_meta(8, 64), _meta(16, 64), out_dtype=torch.float8_e5m2), GemmInputError, "e4m3fn"),
    (lambda: gemm_ladder.mm(_meta(8, 64), _meta(64, 16), out_dtype=QUANT_OUT, out=_meta(8, 16, dtype=QUANT_OUT)),
     NotSupportedError, "out="),
    (lambda: gemm_ladder.linear(_meta(8, 64, requires_grad=True), _meta(16, 64), out_dtype=QUANT_OUT),
     NotSupportedError, "no backward"),
    (lambda: gemm_ladder.linear(_meta(8, 64), _meta(16, 64, dtype=torch.float16), out_dtype=QUANT_OUT),
     GemmInputError, "share a dtype"),
    (lambda: gemm_ladder.linear(torch.empty(8, 64, dtype=BF16), torch.empty(16, 64, dtype=BF16), out_dtype=QUANT_OUT),
     GemmInputError, "cuda"),
    (lambda: gemm_ladder.linear(_meta(8, 64), _meta(16, 64), activation="tanh", out_dtype=QUANT_OUT),
     GemmInputError, "activation"),
    (lambda: gemm_ladder.linear(_meta(8, 64), _meta(16, 64), alpha=True, out_dtype=QUANT_OUT), GemmTypeError, "alpha"),
    (lambda: gemm_ladder.mm(_meta(8, 64), _meta(63, 16), out_dtype=QUANT_OUT), GemmInputError, "b.shape"),
])
def test_bad_calls_are_refused_before_any_launch(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_user_epilogue_with_the_quantized_output_is_refused():
    from gemm_ladder.library.epilogue import Epilogue

    ep = Epilogue(name="twice", cuda="return 2.0f * acc;", reference=lambda acc: 2 * acc)
    with pytest.raises(NotSupportedError, match="built-in"):
        gemm_ladder.linear(_meta(8, 64), _meta(16, 64), out_dtype=QUANT_OUT, epilogue=ep)


# --- the builds (nvcc) -----------------------------------------------------------------------------

#: (a_major, b_major, bn, epilogue, dtype): both widths, the other operand order, fp16, and the fused
#: epilogues the route builds: bias + gelu (erf's polynomial: the most live values) at both widths, and
#: with a residual and alpha at BN 128, SiLU with a float32 bias at BN 128 (a residual, or SiLU with a
#: float32 bias, at BN 256 spilled: the route's QUANTIZED_NARROW_MAX_BN).
JOBS = [("k", "k", 128, None, "bf16"), ("k", "k", 256, None, "bf16"), ("mn", "mn", 256, None, "fp16"),
        ("k", "k", 256, "bias_gelu", "bf16"), ("k", "k", 128, "all", "bf16"), ("k", "k", 128, "silu_f32_bias", "bf16")]


def _epilogue_source(which: str | None) -> str | None:
    from gemm_ladder.library.epilogue import linear_epilogue

    if which is None:
        return None
    full = which == "all"
    silu = which == "silu_f32_bias"
    ep = linear_epilogue(bias=True, activation="silu" if silu else "gelu", residual=full, alpha=full)
    dts = {"gl_bias_": torch.float32 if silu else BF16, "gl_residual_": BF16}
    return ep.source(dts, False, pairs={n: (True, False) for n in dts})


class _WithEpilogue:
    """A LibraryGemm whose build() carries an epilogue source (check_level_resources builds ``level.build(dtype)``)."""

    def __init__(self, job):
        self.kernel = library_gemm(job[0], job[1], job[2], c_from_registers=True, out_e4m3=True)
        self.source = _epilogue_source(job[3])

    def build(self, dtype, arch="sm_90a"):
        return self.kernel.build(dtype, arch, epilogue_source=self.source)

    def geometry(self, dtype):
        return self.kernel.geometry(dtype)


@pytest.fixture(scope="module")
def reports(nvcc_cache):
    return gate_reports(nvcc_cache, JOBS, _WithEpilogue)


@needs_nvcc
@pytest.mark.parametrize("job", JOBS, ids=lambda v: str(v))
def test_e4m3_builds_pass_the_resource_gate(reports, job):
    """No spill, no stack, no local memory; the register split kept; no TMA store; the e4m3 conversions
    (F2FP.SATFINITE.E4M3, saturating: BN / 4 pairs a consumer thread at each store site); the values stored
    8 bytes at a time (a quad's transposed pairs), never in 2-byte pieces, and byte stores only for a
    row's N edge; no IEEE division's slow path per value (one call per scale at most: amax / 448 and the
    reciprocal), and the shuffles (amax and the transposes)."""
    bn = job[2]
    report, sass = reports[job]
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["UTMASTG"] == 0 and report.sass["UTMALDG"] > 0 and "USETMAXREG" in sass
    cvt = len(re.findall(r"F2FP\.SATFINITE\.E4M3\.F32\.PACK_AB", sass))
    assert cvt and cvt % (bn // 4) == 0, cvt
    assert re.search(r"\bSTG\.E\.64 ", sass) and re.search(r"\bSTG\.E\.U8 ", sass)
    assert not re.search(r"\bSTG\.E\.U16 ", sass)
    assert len(re.findall(r"\bFCHK\b", sass)) <= cvt // (bn // 4) * 2 * (bn // 128)
    assert sass.count("SHFL.BFLY") >= 20 * (bn // 128)


# --- swiglu's quantized output -----------------------------------------------------------------------


def test_the_quantized_swiglu_build_and_its_plan():
    from gemm_ladder.library.swiglu import kernel_for, swiglu_kernel

    k = swiglu_kernel(quantized=True)
    config = k.config("bf16")
    d = config.defines()
    assert k.name == "sm90_swiglu_e4m3" and config.out_dtype == "e4m3" and config.store == "registers"
    assert d["GL_OUT_E4M3"] == 1 and d["GL_C_PANELS"] == d["GL_C_RING"] == 0 and d["GL_SMEM_BYTES"] <= 232448
    assert kernel_for(config) is k and kernel_for(swiglu_kernel().config("bf16")) is swiglu_kernel()
    assert "GL_OUT_E4M3" not in swiglu_kernel().config("bf16").defines()
    assert list(k.plan(4096, 14336, 4096, "bf16").tensor_maps) == ["x", "w_gate", "w_up"]  # no output map
    from gemm_ladder.audit import audit

    s = d["GL_STAGES"]
    for k_iters, tiles in [(1, 3), (s + 1, 2)]:
        result = audit(k.ring_protocol(k_iters, tiles))
        assert result.ok, result.render()
    # ... and the same model with a seeded fault is refused (the audit above can fail).
    assert "handoff_roles" in {v.kind for v in audit(k.ring_protocol(empty_wait=False, k_iters=3, tiles=1)).violations}


def test_swiglu_with_the_quantized_output_on_meta_and_its_refusals():
    values, scales = gemm_ladder.swiglu(_meta(2, 33, 4096), _meta(14336, 4096), _meta(14336, 4096), out_dtype=QUANT_OUT)
    assert values.shape == (2, 33, 14336) and values.stride() == (33 * 14336, 14336, 1)
    assert scales.shape == (2, 33, 112) and scales.stride() == (33, 1, 68)
    v, s = torch.ops.gemm_ladder.swiglu_e4m3(_meta(5, 64), _meta(200, 64), _meta(200, 64))
    assert v.shape == (5, 200) and s.shape == (5, 2) and s.stride() == (1, 8)
    with pytest.raises(GemmInputError, match="float8_e4m3fn"):
        gemm_ladder.swiglu(_meta(4, 64), _meta(128, 64), _meta(128, 64), out_dtype=torch.float32)
    with pytest.raises(GemmTypeError, match="out_dtype"):
        gemm_ladder.swiglu(_meta(4, 64), _meta(128, 64), _meta(128, 64), out_dtype="e4m3")
    with pytest.raises(NotSupportedError, match="no backward"):
        gemm_ladder.swiglu(_meta(4, 64, requires_grad=True), _meta(128, 64), _meta(128, 64), out_dtype=QUANT_OUT)
    with pytest.raises(GemmInputError, match="cuda"):
        gemm_ladder.swiglu(torch.empty(4, 64, dtype=BF16), torch.empty(128, 64, dtype=BF16),
                           torch.empty(128, 64, dtype=BF16), out_dtype=QUANT_OUT)


@needs_nvcc
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_quantized_swiglu_build_passes_the_resource_gate(use_cache, dtype):
    from gemm_ladder.gates.resources import check_cubin_resources
    from gemm_ladder.library.swiglu import swiglu_kernel

    built = swiglu_kernel(quantized=True).build(dtype)
    report = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype=dtype)
    assert report.passed, report.messages
    assert (report.spill_stores, report.stack_bytes) == (0, 0) and report.sass["UTMASTG"] == 0


def test_swiglu_quantized_refuses_what_the_plain_call_refuses_on_meta():
    """The op's fake runs the eager call's layout and extent rules (columns-major weights, a pitch TMA cannot
    take), as the plain swiglu's fake does: the error comes at trace time, not at run time."""
    col_major = torch.empty(64, 128, dtype=BF16, device=META).T  # (128, 64) column-major
    with pytest.raises(NotSupportedError):
        gemm_ladder.swiglu(_meta(4, 64), col_major, col_major, out_dtype=QUANT_OUT)
    odd_pitch = torch.empty_strided((4, 64), (65, 1), dtype=BF16, device=META)
    with pytest.raises(NotSupportedError):
        gemm_ladder.swiglu(odd_pitch, _meta(128, 64), _meta(128, 64), out_dtype=QUANT_OUT)
    assert gemm_ladder.swiglu(_meta(4, 64), _meta(128, 64), _meta(128, 64), out_dtype=BF16).dtype == BF16  # x's dtype


def test_the_quantized_error_rule_passes_a_right_answer_and_fails_wrong_ones():
    """library/quantized.py's quantized_error, by which the GPU tests and the bench judge an output: quantize_fp8
    of the reference (rounded through fp32, as a kernel's accumulator is) passes; a value one e4m3 step off in
    its top bits, or scales 0.2% off, fail."""
    from gemm_ladder.library.quantized import quantize_fp8
    from gemm_ladder.library.quantized import quantized_error

    g = torch.Generator().manual_seed(3)
    for shape in ((300, 296), (2, 50, 1001), (4, 128)):
        ref = torch.randn(shape, generator=g, dtype=torch.float64) * 3
        values, scales = quantize_fp8(ref.float().reshape(-1, shape[-1]), (1, 128))
        values, scales = values.reshape(shape), scales.reshape(*shape[:-1], -1)
        assert quantized_error(values, scales, ref)[:2] == (True, True)
        bad = values.clone()
        bad.view(torch.uint8).view(-1)[7] ^= 0x08  # an exponent bit of one value
        assert quantized_error(bad, scales, ref)[1] is False
        assert quantized_error(values, scales * 1.002, ref)[0] is False


def test_the_fp8_product_rule_passes_a_right_answer_and_fails_wrong_ones():
    """library/quantized.py's quantized_product_error, by which bench/fp8.py and the fp8 GPU tests judge the fp8
    GEMM's quantized output: quantize_fp8 of the product passes (and with its scales 0.2% off, which it takes as
    they are); a value with an exponent bit flipped, or a NaN, fails."""
    from gemm_ladder.library.quantized import quantize_fp8, quantized_product_error

    ref = torch.randn((8, 300), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    values, scales = quantize_fp8(ref.float(), (1, 128))
    assert quantized_product_error(values, scales, ref) <= 1
    assert quantized_product_error(values, scales * 1.002, ref) <= 1
    bad = values.clone()
    bad.view(torch.uint8)[3, 17] ^= 0x40  # the top exponent bit of one value
    assert quantized_product_error(bad, scales, ref) > 1
    bad = values.float()
    bad[0, 0] = float("nan")
    assert not quantized_product_error(bad.to(values.dtype), scales, ref) <= 1


@pytest.mark.parametrize("lead", ((5,), (2, 3)), ids=("2-D", "batch dims"))
def test_quantize_fp8_into_writes_the_quantized_layouts(lead):
    """What an empty-K call returns (library/fp8.py quantize_fp8_into): quantize_fp8 of the result, bit for bit,
    in quantized_buffers' own tensors (strides unchanged), here on the CPU."""
    from gemm_ladder.library.quantized import quantize_fp8, quantize_fp8_into

    m, n = 1, 300
    for size in lead:
        m *= size
    full = torch.randn(m, n) * 3
    full[1, :128] = 0  # a zero block: the floor scale
    values, scales = quantized_buffers(lead, n, "cpu")
    strides = values.stride(), scales.stride()
    got_v, got_s = quantize_fp8_into(full, values, scales)
    ref_v, ref_s = quantize_fp8(full, (1, 128))
    assert got_v is values and got_s is scales and (values.stride(), scales.stride()) == strides
    assert torch.equal(values.reshape(m, n).view(torch.uint8), ref_v.view(torch.uint8))
    assert torch.equal(scales.reshape(m, -1), ref_s)
