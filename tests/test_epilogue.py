"""Fused epilogues without a GPU: declaration and argument rules, the float64 reference math of linear's
epilogue, the generated code and the cache key, builds into the library kernels with the resource
census (no spills, no local memory), and `gemm-ladder gate --epilogue` exit statuses."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import needs_nvcc
from gemm_ladder.dispatch.validate import GemmTypeError, NotSupportedError, check_linear, linear_call
from gemm_ladder.library.epilogue import (ACTIVATIONS, COORD_SLACK, Epilogue, EpilogueCompileError, EpilogueError,
                                          linear_epilogue)
from gemm_ladder.runtime.compiler import cache_key

ROOT = Path(__file__).resolve().parent.parent
CPU = ("cpu",)
BF16 = torch.bfloat16


def t(*shape, dtype=BF16):
    return torch.randn(shape).to(dtype)


def scale_clamp() -> Epilogue:
    return Epilogue(cuda="const float v = acc * scale; return v < lo ? lo : (v > hi ? hi : v);",
                    inputs={"scale": "row", "lo": "scalar", "hi": "scalar"},
                    reference=lambda acc, scale, lo, hi: torch.clamp(acc * scale, lo, hi), examples={"lo": -1.0})


# --- declaration rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, rule", [
    (dict(cuda=""), "non-empty"),
    (dict(reference=3), "callable"),
    (dict(inputs={"1x": "row"}), "C identifier"),
    (dict(inputs={"int": "row"}), "reserved"),
    (dict(inputs={"acc": "row"}), "reserved"),
    (dict(inputs={"gl_x": "row"}), "reserved"),
    (dict(inputs={"bias": "col"}), "parameter of gemm_ladder.linear"),
    (dict(inputs={"s": "matrix"}), "kind"),
    (dict(inputs={f"v{i}": "tile" for i in range(9)}), "at most"),
    (dict(inputs={"s": "row"}, examples={"s": 1.0}), "scalar inputs only"),
])
def test_epilogue_declaration_rules(kwargs, rule):
    base = dict(cuda="acc", reference=lambda acc, **k: acc)
    with pytest.raises(EpilogueError, match=rule):
        Epilogue(**{**base, **kwargs})


def test_bind_rules():
    ep = scale_clamp()
    cpu = torch.device("cpu")
    ok = {"scale": t(5), "lo": -1.0, "hi": 1}
    call = ep.bind(ok, 5, 7, cpu)
    assert call.scalars == (-1.0, 1.0) and call.tensors[0][1] == (1, 0)
    for values, rule in [
        ({"scale": t(5), "lo": 1.0}, "missing"),
        ({**ok, "extra": 1.0}, "unexpected"),
        ({**ok, "scale": t(7)}, r"shape \(7,\)"),
        ({**ok, "scale": t(5, dtype=torch.float64)}, "dtype"),
        ({**ok, "scale": [1.0] * 5}, "torch.Tensor"),
        ({**ok, "lo": True}, "int or float"),
        ({**ok, "lo": torch.tensor(1.0)}, "int or float"),
    ]:
        with pytest.raises(EpilogueError, match=rule):
            ep.bind(values, 5, 7, cpu)
    with pytest.raises(EpilogueError, match="meta"):
        ep.bind({**ok, "scale": torch.empty(5, device="meta")}, 5, 7, cpu)


# --- linear's argument rules ---------------------------------------------------------------------


def test_check_linear_rules():
    x, w = t(6, 8), t(4, 8)
    assert check_linear(x, w, t(4), activation="gelu_tanh", residual=t(6, 4), alpha=0.5, beta=2,
                        device_types=CPU) == (8, 4)
    assert check_linear(x, w, t(4, dtype=torch.float32), residual=t(6, 4, dtype=torch.float32),
                        out_dtype=torch.float32, device_types=CPU) == (8, 4)
    cases = [
        (dict(bias=t(5)), "bias has shape"),
        (dict(bias=t(4, dtype=torch.float16)), "bias has dtype"),
        (dict(bias=t(4, 1)), "bias has shape"),
        (dict(residual=t(4, 6)), "residual has shape"),
        (dict(residual=t(6, 4, dtype=torch.float64)), "residual has dtype"),
        (dict(activation="tanh"), "activation"),
        (dict(out_dtype=torch.float16), "out_dtype"),
        (dict(epilogue=scale_clamp(), bias=t(4)), "one epilogue per call"),
        (dict(epilogue=scale_clamp(), alpha=2.0), "one epilogue per call"),
        (dict(inputs={"scale": t(6)}), "only with epilogue"),
        (dict(epilogue=scale_clamp(), inputs={"scale": t(6)}), "missing"),
        (dict(epilogue=scale_clamp(), inputs={"scale": t(4), "lo": 0.0, "hi": 1.0}), "shape"),
    ]
    for kwargs, rule in cases:
        with pytest.raises(ValueError, match=rule):
            check_linear(x, w, device_types=CPU, **kwargs)
    for kwargs in (dict(alpha="2"), dict(beta=True), dict(alpha=torch.tensor(1.0)), dict(epilogue="relu"),
                   dict(bias=[1.0] * 4)):
        with pytest.raises(TypeError):
            check_linear(x, w, device_types=CPU, **kwargs)
    with pytest.raises(NotSupportedError, match="grad"):
        check_linear(x, w, t(4).requires_grad_(), device_types=CPU)
    check_linear(x, w, epilogue=scale_clamp(), inputs={"scale": t(6), "lo": 0.0, "hi": 1.0}, device_types=CPU)


def test_linear_call_takes_what_is_used():
    x, w, r = t(2, 3, 8), t(4, 8), t(2, 3, 4)
    assert linear_call(x, w) is None
    call = linear_call(x, w, residual=r, beta=0.0)  # beta = 0: the residual is not read at all
    assert call is None
    call = linear_call(x, w, t(4), activation="silu", residual=r, alpha=0.5, beta=2.0)
    assert set(call.epilogue.inputs) == {"gl_alpha_", "gl_bias_", "gl_residual_", "gl_beta_"}
    assert (call.rows, call.cols) == (6, 4) and call.scalars == (0.5, 2.0)
    assert "gl_alpha_" not in linear_call(x, w, t(4)).epilogue.inputs  # alpha = 1: no multiply
    assert linear_call(x, w, alpha=3).epilogue.cuda == "gl_alpha_ * acc"


@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
def test_linear_reference_math(activation):
    """linear's epilogue reference in float64 is act(alpha * acc + bias) + beta * residual, torch's formulas,
    non-finite values included."""
    acc = torch.randn(5, 6, dtype=torch.float64) * 3
    acc[0, 0], acc[1, 1], acc[2, 2] = math.nan, math.inf, -math.inf
    bias, res = torch.randn(6, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    ep = linear_epilogue(bias=True, activation=activation, residual=True, alpha=True)
    got = ep.reference(acc, gl_alpha_=0.5, gl_bias_=bias.view(1, -1), gl_residual_=res, gl_beta_=-2.0)
    v = 0.5 * acc + bias
    act = {None: lambda z: z, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
           "silu": F.silu}[activation]
    torch.testing.assert_close(got, act(v) - 2.0 * res, equal_nan=True)


# --- generated code and cache key -----------------------------------------------------------------


def test_generated_source_and_cache_key():
    ep = scale_clamp()
    direct = ep.source({"scale": BF16}, swap=False)
    swapped = ep.source({"scale": BF16}, swap=True)
    assert "#define GL_EPI_SWAP 0" in direct and "#define GL_EPI_SWAP 1" in swapped
    assert "float gl_user_epilogue(float acc, int row, int col, float scale, float lo, float hi)" in direct
    assert "kEpiBf16" in direct and "kEpiFp32" in ep.source({"scale": torch.float32}, swap=False)
    other = Epilogue(cuda="acc * scale * 2.0f", inputs=ep.inputs, reference=ep.reference)
    assert other.body() == "return (acc * scale * 2.0f);"
    keys = {cache_key(src, ["-O3"], "nvcc 13", "h") for src in
            (direct, swapped, other.source({"scale": BF16}, swap=False))}
    assert len(keys) == 3  # the epilogue's source, dtypes and orientation are part of the build's key
    narrow = ep.source({"scale": BF16}, swap=False, wide=False)
    paired = ep.source({"scale": BF16}, swap=False, wide=False, pairs={"scale": (False, True)})
    assert "using gl_off = long long;" in direct and "using gl_off = EpiNarrowOff;" in narrow
    assert "gl_scale_pair = kAlongCols ? false : false;" in narrow
    assert "gl_scale_pair = kAlongCols ? false : true;" in paired
    assert len({cache_key(src, ["-O3"], "nvcc 13", "h") for src in (direct, narrow, paired)}) == 3


def test_offset_width_and_pair_loads_are_decided_per_call():
    """32-bit offsets only where every input's largest element offset is below 2^31; a pair load only
    where stride 1, the other stride even, the base aligned and the extent along the pair even."""
    ep = Epilogue(cuda="acc + r + v", inputs={"r": "tile", "v": "col"}, reference=lambda acc, r, v: acc + r + v)
    cpu, meta = torch.device("cpu"), torch.device("meta")
    small = ep.bind({"r": torch.empty(4, 8, dtype=BF16), "v": torch.empty(8, dtype=BF16)}, 4, 8, cpu)
    assert not small.wide_offsets()
    assert small.pair_loads() == {"r": (True, False), "v": (True, False)}
    assert "using gl_off = EpiNarrowOff;" in small.source()
    # (rows - 1 + 256) 2^16 + (2^16 - 1 + 256) >= 2^31 exactly when rows >= 2^15 - 256 with 2^16 columns
    assert COORD_SLACK == 256
    wide_rows, narrow_rows = 2 ** 15 - 256, 2 ** 15 - 257
    vec = torch.empty(2 ** 16, dtype=BF16, device=meta)
    wide = ep.bind({"r": torch.empty(wide_rows, 2 ** 16, dtype=BF16, device=meta), "v": vec}, wide_rows, 2 ** 16, meta)
    narrow = ep.bind({"r": torch.empty(narrow_rows, 2 ** 16, dtype=BF16, device=meta), "v": vec}, narrow_rows, 2 ** 16, meta)
    assert wide.wide_offsets() and not narrow.wide_offsets()
    assert "using gl_off = long long;" in wide.source() and "using gl_off = EpiNarrowOff;" in narrow.source()
    colmajor = torch.empty(8, 4, dtype=BF16).T
    assert ep.bind({"r": colmajor, "v": torch.empty(8, dtype=BF16)}, 4, 8, cpu).pair_loads()["r"] == (False, True)
    odd_cols = ep.bind({"r": torch.empty(4, 7, dtype=BF16), "v": torch.empty(7, dtype=BF16)}, 4, 7, cpu)
    assert odd_cols.pair_loads() == {"r": (False, False), "v": (False, False)}  # a pair could straddle the edge
    odd_pitch = torch.empty(4, 9, dtype=BF16)[:, :8]
    assert ep.bind({"r": odd_pitch, "v": torch.empty(8, dtype=BF16)}, 4, 8, cpu).pair_loads()["r"] == (False, False)
    misaligned = torch.empty(33, dtype=BF16)[1:].view(4, 8)
    assert ep.bind({"r": misaligned, "v": torch.empty(8, dtype=BF16)}, 4, 8, cpu).pair_loads()["r"] == (False, False)
    strided_vec = torch.empty(16, dtype=BF16)[::2]
    assert ep.bind({"r": torch.empty(4, 8, dtype=BF16), "v": strided_vec}, 4, 8, cpu).pair_loads()["v"] == (False, False)


def test_prefetch_runs_are_decided_per_call_and_generated():
    """A tile input is prefetched along the output direction in which it is contiguous (stride 1, the other
    stride not 0); vectors, broadcast tiles and tiles without a unit stride are not; the decision is in
    the generated code and the build's key."""
    ep = Epilogue(cuda="acc + r + v", inputs={"r": "tile", "v": "col"}, reference=lambda acc, r, v: acc + r + v)
    cpu = torch.device("cpu")
    v = torch.empty(8, dtype=BF16)

    def runs(r):
        return ep.bind({"r": r, "v": v}, 4, 8, cpu).prefetch_runs()

    assert runs(torch.empty(4, 8, dtype=BF16)) == {"r": "cols"}
    assert runs(torch.empty(4, 9, dtype=BF16)[:, :8]) == {"r": "cols"}  # a padded pitch
    assert runs(torch.empty(8, 4, dtype=BF16).T) == {"r": "rows"}
    assert runs(torch.empty(1, 8, dtype=BF16).expand(4, 8)) == {}  # broadcast rows: the same bytes
    assert runs(torch.empty(8, 16, dtype=BF16)[::2, ::2]) == {}  # no unit stride
    call = ep.bind({"r": torch.empty(4, 8, dtype=torch.float32), "v": v}, 4, 8, cpu)
    src = call.source()
    assert "epi_prefetch_runs<kEpiFp32, kRows, kCols, kThreads>(gl_p.ptr[0], gl_p.stride_row[0]" in src
    rows = ep.source({"r": BF16, "v": BF16}, False, prefetch={"r": "rows"})
    assert "epi_prefetch_runs<kEpiBf16, kCols, kRows, kThreads>(gl_p.ptr[0], gl_p.stride_col[0]" in rows
    none = ep.source({"r": BF16, "v": BF16}, False)
    assert "epi_prefetch_runs" not in none and "nothing to prefetch" in none
    cols = ep.source({"r": BF16, "v": BF16}, False, prefetch={"r": "cols"})
    assert len({cache_key(x, ["-O3"], "nvcc 13", "h") for x in (none, rows, cols)}) == 3
    for bad in ({"v": "cols"}, {"r": "diagonal"}):
        with pytest.raises(EpilogueError, match="only tile inputs"):
            ep.source({"r": BF16, "v": BF16}, False, prefetch=bad)
    assert call.describe()["inputs"][0]["l2_prefetch"] == "cols" and call.describe()["inputs"][1]["l2_prefetch"] is None


def test_params_pair_rules():
    ep = Epilogue(cuda="acc + r", inputs={"r": "tile"}, reference=lambda acc, r: acc + r)
    cpu = torch.device("cpu")
    rowmajor = torch.empty(4, 8, dtype=BF16)
    call = ep.bind({"r": rowmajor}, 4, 8, cpu)
    assert call.params(pair_along_cols=True).pair_ok == 1
    assert call.params(pair_along_cols=False).pair_ok == 0  # the pair runs down a column: stride 8
    colmajor = torch.empty(8, 4, dtype=BF16).T
    assert ep.bind({"r": colmajor}, 4, 8, cpu).params(pair_along_cols=False).pair_ok == 1
    odd = torch.empty(4, 9, dtype=BF16)[:, :8]  # odd pitch: the pair is misaligned on odd rows
    assert ep.bind({"r": odd}, 4, 8, cpu).params(pair_along_cols=True).pair_ok == 0
    p = call.params(pair_along_cols=True)
    assert (p.stride_row[0], p.stride_col[0]) == (8, 1)


def test_reference_shapes_vectors_to_broadcast():
    ep = scale_clamp()
    call = ep.bind({"scale": torch.arange(3.0).to(BF16), "lo": -100.0, "hi": 100.0}, 3, 2, torch.device("cpu"))
    acc = torch.ones(3, 2, dtype=torch.float64)
    torch.testing.assert_close(call.reference(acc), torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]], dtype=torch.float64))


# --- builds and the resource census (nvcc, no GPU) -------------------------------------------------


def _census(built):
    from gemm_ladder.gates.resources import check_cubin_resources

    return check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype="bf16")


#: The builds a linear call makes of the layouts kernel (BN, swapped orientation, 64-bit offsets).
_VARIANTS = ((256, False, False), (256, True, False), (128, False, False), (256, False, True),
             (64, False, False), (64, True, False), (64, False, True))
#: The activation is a per-element function of one accumulator (fused_epilogue.cuh): its registers add
#: to what a variant's loads and stores hold, the same in each. So gelu (erf's polynomial: the most
#: live values of the four) is built in every variant, and each other activation in the variants
#: that bound the rest: both orientations at BN 256 (the most accumulators per thread, where its MUFU
#: count is checked) and the swapped BN 64 (one panel per tile, single loads), which cuts 12 of the
#: 28 builds (each 15-40 s of nvcc on a 2-core machine).
_ACTIVATION_VARIANTS = {a: _VARIANTS if a == "gelu" else ((256, False, False), (256, True, False), (64, True, False))
                        for a in ACTIVATIONS}


@needs_nvcc
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_general_kernel_builds_every_linear_epilogue_without_spills(use_cache, activation):
    from gemm_ladder.library.gemm import library_gemm

    from gemm_ladder.runtime.compiler import disassemble

    ep = linear_epilogue(bias=True, activation=activation, residual=True, alpha=True)
    dts = {"gl_bias_": BF16, "gl_residual_": BF16}
    # The builds a call makes (EpilogueCall.source): 32-bit offsets and a contiguous residual's pair
    # loads along rows (direct) or single loads (swapped), its L2 prefetch along the output's rows;
    # and the 64-bit fallback.
    paired = {n: (True, False) for n in dts}
    # BN 64 (one panel per tile): both orientations and the 64-bit offsets too (_VARIANTS).
    for bn, swap, wide in _ACTIVATION_VARIANTS[activation]:
        built = library_gemm("k", "k", bn).build("bf16", epilogue_source=ep.source(
            dts, swap, wide=wide, pairs=paired, prefetch={"gl_residual_": "cols"}))
        rep = _census(built)
        assert rep.passed, (bn, swap, wide, rep.messages)
        assert rep.sass["HGMMA"] and rep.sass["UTMASTG"]
        sass = disassemble(built.cubin)
        assert "CCTL.E.PF2" in sass  # the residual's L2 prefetch (prefetch.global.L2)
        # The activation's MUFU: BN / 2 accumulators per thread, epilogue code at two sites (whole tiles
        # and the stream-K tail): gelu_tanh one tanh.approx each and no ex2 (fused_epilogue.cuh), silu
        # an ex2 (and an rcp) each.
        if activation == "gelu_tanh":
            assert sass.count("MUFU.TANH") == bn and "MUFU.EX2" not in sass, (bn, swap)
        if activation == "silu":
            assert sass.count("MUFU.EX2") == bn and "MUFU.TANH" not in sass, (bn, swap)


#: The register-store builds a call makes (BN, swapped, 64-bit offsets, float32 output). gelu (the most live
#: values) in each; gelu_tanh in its two forms only, tanh.approx for a 16-bit output and the sigmoid form
#: for float32 (fused_epilogue.cuh): the activation's registers add the same in every variant (see
#: _ACTIVATION_VARIANTS), so its swapped and BN 128 builds repeated gelu's check (2 builds cut).
_REGISTER_VARIANTS = {"gelu": ((256, False, False, False), (256, True, False, False), (128, False, False, False),
                               (256, False, True, True)),
                      "gelu_tanh": ((256, False, False, False), (256, False, True, True))}


@needs_nvcc
@pytest.mark.parametrize("activation", list(_REGISTER_VARIANTS))
def test_register_store_build_takes_the_linear_epilogue_without_spills(use_cache, activation):
    """The layouts kernel's build that stores C from registers, with the epilogue applied per pair
    right before its store: the builds a call makes (as above) and the float32 output, no spill, no
    local memory, no TMA store."""
    from gemm_ladder.library.gemm import library_gemm

    ep = linear_epilogue(bias=True, activation=activation, residual=True, alpha=True)
    dts = {"gl_bias_": BF16, "gl_residual_": BF16}
    paired = {n: (True, False) for n in dts}
    for bn, swap, wide, fp32 in _REGISTER_VARIANTS[activation]:
        kernel = library_gemm("k", "k", bn, c_from_registers=True, out_fp32=fp32)
        rep = _census(kernel.build("bf16", epilogue_source=ep.source(dts, swap, wide=wide, pairs=paired)))
        assert rep.passed, (bn, swap, wide, fp32, rep.messages)
        assert rep.sass["HGMMA"] and not rep.sass["UTMASTG"]


@needs_nvcc
@pytest.mark.parametrize("parts", [dict(bias=True), dict(residual=True), dict(alpha=True), dict(activation="relu")])
def test_each_linear_epilogue_part_alone_without_spills(use_cache, parts):
    from gemm_ladder.library.gemm import library_gemm

    # 32-bit offsets only: ``wide`` changes one type alias (gl_off) that every part uses alike, and the
    # 64-bit build of all parts at once is gated above (4 builds cut).
    ep = linear_epilogue(**{"bias": False, "activation": None, "residual": False, "alpha": False, **parts})
    built = library_gemm("k", "mn", 256).build("fp16", epilogue_source=ep.source(
        {n: torch.float32 for n in ep.tensor_inputs}, False, wide=False,
        pairs={n: (True, False) for n in ep.tensor_inputs}))
    assert _census(built).passed


@needs_nvcc
def test_small_m_and_custom_epilogue_build_without_spills(use_cache):
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.small_m import small_m_gemm

    lin = linear_epilogue(bias=True, activation="gelu", residual=True, alpha=True)
    custom = scale_clamp()
    for ep, dts in ((lin, {"gl_bias_": BF16, "gl_residual_": BF16}), (custom, {"scale": BF16})):
        for swap in (False, True):
            for bucket, fp32 in ((8, False), (256, False), (256, True)):
                src = ep.source(dts, swap, wide=fp32, pairs={n: (True, True) for n in dts})
                built = small_m_gemm(bucket).build("bf16", out_fp32=fp32, epilogue_source=src)
                assert _census(built).passed, (ep, swap, bucket, fp32)
    built = library_gemm("k", "k", 256).build("bf16", epilogue_source=custom.source({"scale": BF16}, False))
    assert _census(built).passed


@needs_nvcc
def test_gelu_tanh_keeps_the_sigmoid_form_for_an_fp32_output(use_cache):
    """16-bit outputs: gelu_tanh is one tanh.approx (MUFU.TANH) per element; an fp32 output (the small-M
    kernel's GL_OUT_FP32) keeps ex2 + rcp, accurate to a few fp32 ulp (fused_epilogue.cuh)."""
    from gemm_ladder.library.small_m import small_m_gemm
    from gemm_ladder.runtime.compiler import disassemble

    ep = linear_epilogue(bias=True, activation="gelu_tanh", residual=False, alpha=False)
    src = ep.source({"gl_bias_": torch.float32}, False, wide=False, pairs={"gl_bias_": (True, False)})
    for fp32 in (False, True):
        built = small_m_gemm(8).build("bf16", out_fp32=fp32, epilogue_source=src)
        assert _census(built).passed, fp32
        sass = disassemble(built.cubin)
        if fp32:
            assert "MUFU.EX2" in sass and "MUFU.TANH" not in sass
        else:
            assert "MUFU.TANH" in sass and "MUFU.EX2" not in sass


@needs_nvcc
@pytest.mark.parametrize("swap", [False, True])
def test_residual_prefetch_along_rows_and_columns_without_spills(use_cache, swap):
    """BN 256, both orientations: a row-major residual (prefetched along the output's columns) and a
    column-major one (along its rows, single loads) build with no spill and prefetch; an epilogue with no
    tile input prefetches nothing."""
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.runtime.compiler import disassemble

    ep = linear_epilogue(bias=False, activation=None, residual=True, alpha=False)
    for how, pair in (("cols", (True, False)), ("rows", (False, True))):
        built = library_gemm("k", "k", 256).build("bf16", epilogue_source=ep.source(
            {"gl_residual_": BF16}, swap, wide=False, pairs={"gl_residual_": pair}, prefetch={"gl_residual_": how}))
        assert _census(built).passed, (swap, how)
        assert "CCTL.E.PF2" in disassemble(built.cubin), (swap, how)
    bias = linear_epilogue(bias=True, activation=None, residual=False, alpha=False)
    built = library_gemm("k", "k", 256).build("bf16", epilogue_source=bias.source({"gl_bias_": BF16}, swap, wide=False))
    assert "CCTL.E.PF2" not in disassemble(built.cubin)


@needs_nvcc
def test_plain_build_is_unchanged_by_the_hook(use_cache):
    """Without an epilogue the library kernel compiles to level 9's source's SASS under the same defines."""
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.runtime.compiler import compile_kernel, disassemble

    k = library_gemm("k", "k", 256)
    ours = k.build("bf16")
    level9 = compile_kernel('#include "gemm_ladder/tma_tile.cuh"\n#include "levels/level9_multi_consumer.cu"\n',
                            "gemm_kernel", defines=k.build_defines("bf16"))

    def body(cubin):
        return "\n".join(ln for ln in disassemble(cubin).splitlines() if "/*" in ln)

    assert body(ours.cubin) == body(level9.cubin)


@needs_nvcc
def test_bad_cuda_is_a_clear_error(use_cache):
    ep = Epilogue(cuda="return acc * undefined_thing;", inputs={}, reference=lambda acc: acc)
    with pytest.raises(EpilogueCompileError) as info:
        ep.compile_check()
    assert "undefined_thing" in str(info.value) and "epilogue(1)" in str(info.value)


# --- the gate CLI --------------------------------------------------------------------------------


def _gate(*args, cache):
    env = {"GEMM_LADDER_CACHE": str(cache), "PYTHONPATH": str(ROOT / "src"), "PATH": __import__("os").environ["PATH"]}
    return subprocess.run([sys.executable, "-m", "gemm_ladder", "gate", *args, "--device", "cpu"], cwd=ROOT,
                          capture_output=True, text=True, env=env)


@needs_nvcc
def test_gate_epilogue_without_gpu(use_cache, tmp_path):
    """Resources checked and passed, correctness 'not run' (it needs CUDA): exit 3; the JSON says so."""
    out = tmp_path / "g.json"
    proc = _gate("--epilogue", "examples/scale_clamp.py:epilogue", "--json", str(out), cache=use_cache)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "resources passed" in proc.stdout and "correctness not run" in proc.stdout
    assert "performance not run" in proc.stdout and "verdict: INCOMPLETE" in proc.stdout
    import json

    gates = json.loads(out.read_text())["gates"]
    assert gates == {"correctness": "not run", "performance": "not run", "resources": "passed"}


@needs_nvcc
def test_gate_epilogue_without_cuobjdump(use_cache, tmp_path, monkeypatch, capsys):
    """No disassembler (a machine without the toolkit or the nvidia-cuda-cuobjdump wheel): the resource
    gate is 'not run' with the reason, never a traceback; exit 3. In-process, cuobjdump made unfindable
    (the builds come from the shared cache when the test above ran first)."""
    from gemm_ladder import cli
    from gemm_ladder.errors import CompilerNotFoundError
    from gemm_ladder.runtime import compiler

    def gone():
        raise CompilerNotFoundError("cuobjdump not found: put the CUDA toolkit's bin on PATH")

    monkeypatch.setattr(compiler, "cuobjdump_path", gone)
    status = cli.main(["gate", "--epilogue", "examples/scale_clamp.py:epilogue", "--device", "cpu"])
    out = capsys.readouterr().out
    assert status == 3, out
    text = " ".join(out.split())  # rich wraps the verdict line at 160 columns
    assert "resources not run: CompilerNotFoundError: cuobjdump not found" in text and "correctness not run" in text


def test_cli_names_a_missing_tool_in_one_line(monkeypatch, capsys):
    """A command that meets a missing compiler or cuobjdump ends with one line naming it and exit 3."""
    from gemm_ladder import cli
    from gemm_ladder.commands import design
    from gemm_ladder.errors import CompilerNotFoundError

    def run(args):
        raise CompilerNotFoundError("no kernel compiler: nvcc not found")

    monkeypatch.setattr(design, "run", run)
    assert cli.main(["design", "--shape", "256x256x256"]) == 3
    err = capsys.readouterr().err
    assert err.strip() == "gemm-ladder design: no kernel compiler: nvcc not found"


@needs_nvcc
def test_gate_epilogue_usage_errors(use_cache, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import gemm_ladder, torch\nepilogue = gemm_ladder.Epilogue(cuda='return acc +* 2;', "
                   "reference=lambda acc: acc)\nnot_one = 3\n")
    proc = _gate("--epilogue", f"{bad}:epilogue", cache=use_cache)
    assert proc.returncode == 2 and "rejected its CUDA" in proc.stderr and "Traceback" not in proc.stderr
    proc = _gate("--epilogue", f"{bad}:not_one", cache=use_cache)
    assert proc.returncode == 2 and "not a gemm_ladder.Epilogue" in proc.stderr
    proc = _gate("examples/my_gemm.py:gemm", "--epilogue", "examples/scale_clamp.py:epilogue", cache=use_cache)
    assert proc.returncode == 2 and "one of the two" in proc.stderr


# --- the designer's plan of the extra loads, and its audit ---------------------------------------


def test_epilogue_load_plan_and_audit():
    from dataclasses import replace

    from gemm_ladder.audit.epilogue import audit_epilogue_plan, audit_text

    x, w = t(6, 8), t(4, 8)
    call = linear_call(x, w, t(4, dtype=torch.float32), activation="gelu", residual=t(6, 4), alpha=2.0)
    plan = call.load_plan(tile=(128, 256), out_bytes=2)
    by = {ld.name: ld for ld in plan.loads}
    assert by["gl_bias_"].bytes_per_tile == 256 * 4 and by["gl_residual_"].bytes_per_tile == 128 * 256 * 2
    assert by["gl_alpha_"].method == "parameter" and plan.barriers == ()
    assert plan.bytes_per_tile == 1024 + 65536 and "none added" in plan.text() and "program order" in plan.text()
    assert plan.to_json()["bytes_per_tile"] == plan.bytes_per_tile
    assert audit_epilogue_plan(plan) == [] and "no barrier added" in audit_text(plan)
    # the residual's L2 prefetch 8 K iterations before each tile's end: a hint on the tile input only, no barrier
    assert by["gl_residual_"].prefetch == "L2 along cols" and by["gl_bias_"].prefetch == "none"
    assert (by["gl_residual_"].method, by["gl_residual_"].staged_in) == ("direct", "registers")
    assert "prefetched to L2 along cols" in plan.text() and "gl_residual_ prefetched into L2" in audit_text(plan)
    colmajor = linear_call(x, w, residual=t(4, 6).T).load_plan()
    assert {ld.name: ld.prefetch for ld in colmajor.loads}["gl_residual_"] == "L2 along rows"
    assert all(ld.prefetch == "none" for ld in linear_call(x, w, residual=t(1, 4).expand(6, 4)).load_plan().loads)
    bias_pre = replace(plan, loads=(replace(by["gl_bias_"], prefetch="L2 along cols"),))
    assert any("tile inputs only" in p for p in audit_epilogue_plan(bias_pre))
    assert any("tile inputs only" in p for p in audit_epilogue_plan(
        replace(plan, loads=(replace(by["gl_residual_"], prefetch="L1"),))))
    from gemm_ladder.design.epilogue import plan_epilogue_loads

    with pytest.raises(ValueError, match="only tile inputs"):
        plan_epilogue_loads([("b", "col", 2)], (128, 256), 2, prefetch={"b": "cols"})
    staged = replace(plan, loads=(replace(plan.loads[1], staged_in="shared memory"),) + plan.loads[2:])
    assert any("registers" in p for p in audit_epilogue_plan(staged))
    assert any("barrier" in p for p in audit_epilogue_plan(replace(plan, barriers=("bar",))))
    wrong = replace(plan, loads=(replace(plan.loads[1], bytes_per_tile=3),))
    assert "REFUSED" in audit_text(wrong)


def test_same_device_compares_types_and_indices():
    from gemm_ladder.library.epilogue import _same_device

    assert _same_device(torch.device("cpu"), torch.device("cpu"))
    assert not _same_device(torch.device("cpu"), torch.device("meta"))
    assert _same_device(torch.device("cuda", 1), torch.device("cuda", 1))
    assert not _same_device(torch.device("cpu"), torch.device("cuda", 0))


def test_linear_out_view_of_an_empty_n_is_determined():
    # view(-1, 0) is ambiguous in torch; the (M, N) view of out is taken with M named
    from gemm_ladder.dispatch.validate import check_linear_out

    x = torch.empty(2, 3, 5, dtype=torch.bfloat16)
    out = torch.empty(2, 3, 0, dtype=torch.bfloat16)
    assert tuple(check_linear_out(out, x, 0, torch.bfloat16).shape) == (6, 0)
