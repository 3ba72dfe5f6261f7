"""The grouped GEMM and fp8 kernels as KernelConfig families (library/grouped.py, library/fp8.py) without
a GPU: the config values they add (fp8 input dtypes with a scale granularity, the grouped schedule with a
grouping) are validated; both families are registered and implement the Kernel protocol; every config
they make maps back to its per-configuration object; their builds give the compiler the inputs recorded
before they became families (tests/data/build_inputs_grouped_fp8.json, tools/build_inputs.py
grouped_fp8: same kernel, translation unit and -D constants, so the same cubin); builds are kept by
config in library/kernel.py. Nothing is compiled."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gemm_ladder.dispatch import kernels as K
from gemm_ladder.library import kernel as KK
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import FP8_GEMM, Fp8Kernel
from gemm_ladder.library.fp8 import kernel_for as fp8_kernel_for
from gemm_ladder.library.grouped import GROUPED_GEMM, grouped_gemm
from gemm_ladder.library.grouped import kernel_for as grouped_kernel_for
from gemm_ladder.library.kernel import (
    DATA_PARALLEL, GROUP_K, GROUP_M, GROUP_M_MASKED, GROUPED, GROUPINGS, SCALES, STREAM_K, Kernel, KernelConfig, Operands,
)

ROOT = Path(__file__).resolve().parent.parent


def test_fp8_dtypes_need_a_scale_and_16_bit_dtypes_take_none():
    c = KernelConfig("sm90_fp8_gemm", dtype="e4m3", b_dtype="e5m2", out_dtype="e4m3", scale="rowwise",
                     schedule=DATA_PARALLEL)
    assert c.is_fp8 and c.describe()["scale"] == "rowwise" and c.describe()["b_dtype"] == "e5m2"
    assert c == dataclasses.replace(c) and hash(c) == hash(dataclasses.replace(c))
    for bad in (dict(dtype="e4m3"), dict(dtype="e4m3", scale="per_channel"), dict(dtype="e4m3", scale="rowwise",
                b_dtype="bf16"), dict(dtype="bf16", scale="rowwise"), dict(dtype="bf16", out_dtype="e4m3"),
                dict(dtype="bf16", b_dtype="fp16"), dict(dtype="fp8")):
        with pytest.raises(ValueError):
            KernelConfig("sm90_fp8_gemm", **bad)
    plain = KernelConfig("sm90_gemm")  # the fields added last keep the existing configs as they were
    assert not plain.is_fp8 and {"b_dtype", "scale", "grouping"}.isdisjoint(plain.describe())


def test_the_grouped_schedule_names_its_grouping():
    for g in GROUPINGS:
        assert KernelConfig("sm90_grouped_gemm", schedule=GROUPED, grouping=g).describe()["grouping"] == g
    for bad in (dict(schedule=GROUPED), dict(schedule=STREAM_K, grouping=GROUP_M), dict(schedule=GROUPED, grouping="n")):
        with pytest.raises(ValueError, match="grouping"):
            KernelConfig("sm90_grouped_gemm", **bad)


def test_both_families_are_registered_and_implement_the_protocol():
    for fam in (GROUPED_GEMM, FP8_GEMM):
        assert isinstance(fam, Kernel) and K.family(fam.family) is fam and fam.splits == ()
    c = grouped_gemm(256, "mn", True, False, True).config("fp16")
    assert (c.family, c.schedule, c.grouping, c.a_major, c.out_dtype) == ("sm90_grouped_gemm", GROUPED, GROUP_K, "mn", "fp32")
    assert K.family(c) is GROUPED_GEMM and K.kernel_object(c) is grouped_gemm(256, "mn", True, False, True)
    assert K.describe(c)["name"] == "sm90_grouped_gemm_256_kgrouped_f32"
    f = Fp8Kernel("blockwise", b_dtype="e5m2", out_dtype="fp8").config()
    assert (f.dtype, f.b_dtype, f.out_dtype, f.scale, f.tile) == ("e4m3", "e5m2", "e4m3", "blockwise", (128, 128, 128))
    assert K.family(f) is FP8_GEMM and K.kernel_object(f) == Fp8Kernel("blockwise", b_dtype="e5m2", out_dtype="fp8")
    # The family's blockwise build reads scale_b as the launch's does (fp8.scale_b_source).
    assert FP8_GEMM.config("blockwise", b_dtype="e5m2", out_dtype="e4m3") == \
        Fp8Kernel("blockwise", b_dtype="e5m2", out_dtype="fp8", **fp8.scale_b_source("blockwise", None)).config()
    assert GROUPED_GEMM.config(128, "k", "bf16", grouping=GROUP_M_MASKED) == grouped_gemm(128, masked=True).config("bf16")


def test_every_config_maps_back_to_its_build_and_others_are_refused():
    for bn, major, f32, bias, kg, masked in itertools.product((128, 256), ("k", "mn"), (False, True), (False, True),
                                                             (False, True), (False, True)):
        try:
            g = grouped_gemm(bn, major, f32, bias, kg, masked)
        except ValueError:
            continue
        for d in ("bf16", "fp16"):
            assert grouped_kernel_for(g.config(d)) is g
            assert g.config(d).defines() == {"GL_DTYPE_" + d.upper(): 1, **g.defines(d)}
    for mode, a, b, out, bias, bn in itertools.product(SCALES, ("e4m3", "e5m2"), ("e4m3", "e5m2"),
                                                       ("bf16", "fp16", "fp32", "fp8"), (False, True), (128, 64)):
        k = Fp8Kernel(mode, a, b, out, bias, bn)
        assert fp8_kernel_for(k.config()) == k and k.config().defines() == k.defines()
    g = grouped_gemm(128).config("bf16")
    # fewer stages than fit: the measuring build with that cap (grouped_gemm(stages=)); more: none
    assert grouped_kernel_for(dataclasses.replace(g, stages=2)) is grouped_gemm(128, stages=2)
    for bad in (dataclasses.replace(g, stages=g.stages + 1), dataclasses.replace(g, grouping=GROUP_K),
                dataclasses.replace(g, family="sm90_fp8_gemm")):
        with pytest.raises(ValueError, match="no such configuration|given to"):
            grouped_kernel_for(bad)
    with pytest.raises(ValueError, match="no such configuration"):
        fp8_kernel_for(dataclasses.replace(Fp8Kernel().config(), tile=(128, 256, 128)))


def test_every_build_receives_the_inputs_recorded_before_the_families():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "build_inputs.py"), "grouped_fp8"], capture_output=True,
                         text=True, env=env, check=True, timeout=300).stdout
    now, before = json.loads(out), json.loads((ROOT / "tests" / "data" / "build_inputs_grouped_fp8.json").read_text())
    # 56 grouped, 336 fp8 register-store and 192 fp8 TMA-store builds (bf16 and fp16 outputs), 144 fp8
    # split-K builds (24 scale/dtype/bias combinations x bf16 and fp16 by both stores, fp32, fp8), and 176
    # blockwise whole-tile builds with the launch's scale_b sources (2 sources x 4 dtype pairs x 22)
    assert set(now["builds"]) == set(before["builds"]) and len(before["builds"]) == 56 + 336 + 192 + 144 + 176
    changed = [label for label, b in before["builds"].items() if now["builds"][label] != b]
    assert not changed, f"{len(changed)} builds changed inputs, e.g. {changed[:3]}"
    assert now["defines"] == before["defines"]


def test_builds_are_kept_by_config(monkeypatch):
    import gemm_ladder.library.fp8 as fp8
    import gemm_ladder.library.grouped as grouped

    calls = []
    fake = lambda unit, name, **kw: calls.append((unit, name, kw["defines"])) or object()  # noqa: E731
    monkeypatch.setattr(grouped, "compile_kernel", fake)
    monkeypatch.setattr(fp8, "compile_kernel", fake)
    KK.clear()
    try:
        g = grouped_gemm(256, "k", bias=True)
        assert g.build("bf16") is GROUPED_GEMM.build(g.config("bf16")) is g.build("bf16")
        k = Fp8Kernel("rowwise", out_dtype="fp32")
        assert k.build() is FP8_GEMM.build(k.config()) is Fp8Kernel("rowwise", out_dtype="fp32").build()
        assert len(calls) == 2 and calls[0][2]["GL_BIAS"] == 1 and calls[1][2]["GL_FP8_OUT"] == 2
    finally:
        KK.clear()


def test_supports_through_the_protocol_names_the_rule(monkeypatch):
    x, w = torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(4, 48, 32, dtype=torch.bfloat16)
    offs, out = torch.tensor([16, 32, 48, 64], dtype=torch.int32), torch.empty(64, 48, dtype=torch.bfloat16)
    problem = Operands(x, w, out, more=(offs,))
    assert "CUDA" in GROUPED_GEMM.supports(grouped_gemm(128).config("bf16"), problem)
    assert "takes fp16 inputs" in GROUPED_GEMM.supports(grouped_gemm(128).config("fp16"), problem)
    assert "out (E, M, N) expected" in GROUPED_GEMM.supports(grouped_gemm(128, "mn", k_grouped=True).config("bf16"), problem)
    with pytest.raises(TypeError):
        GROUPED_GEMM.bind(grouped_gemm(128).config("bf16"), problem, split="tail")
    a = torch.empty(32, 64, dtype=torch.float8_e4m3fn)
    b = torch.empty(48, 64, dtype=torch.float8_e4m3fn).t()
    one = torch.ones((), dtype=torch.float32)
    fp8_problem = Operands(a, b, None, more=(one, one, None))
    assert "cuda" in FP8_GEMM.supports(FP8_GEMM.config("tensorwise"), fp8_problem)
    import gemm_ladder.library.fp8 as fp8

    check = fp8.check_scaled_mm  # the rest of the rules, on CPU tensors
    monkeypatch.setattr(fp8, "check_scaled_mm", lambda *args: check(*args, device_type=None))
    assert FP8_GEMM.supports(FP8_GEMM.config("tensorwise"), fp8_problem) is None
    reason = FP8_GEMM.supports(FP8_GEMM.config("rowwise"), fp8_problem)
    assert "tensorwise" in reason and "rowwise" in reason  # tensorwise scales given to a rowwise build
    assert "float32" in FP8_GEMM.supports(FP8_GEMM.config("tensorwise", out_dtype="fp32"),
                                          Operands(a, b, torch.empty(32, 48, dtype=torch.bfloat16), more=(one, one, None)))


@pytest.mark.parametrize("kwargs", [dict(out_dtype="fp16"), dict(out_dtype="bf16x"), dict(grouping="n"),
                                    dict(grouping=None)])
def test_the_grouped_familys_config_refuses_what_it_does_not_build(kwargs):
    """An output dtype other than the inputs' or fp32, or an unknown grouping, is a ValueError, not the
    bf16-output, M-grouped build (the flags the config is made from used to drop them silently)."""
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        GROUPED_GEMM.config(128, "k", "bf16", **kwargs)
    with pytest.raises(ValueError, match="dtype = 'e4m3'"):
        GROUPED_GEMM.config(128, "k", "e4m3")
    assert GROUPED_GEMM.config(128, "k", "bf16", out_dtype="bf16") == GROUPED_GEMM.config(128, "k", "bf16")
    assert GROUPED_GEMM.config(128, "k", "bf16", out_dtype="fp32").out_dtype == "fp32"


@pytest.mark.parametrize("kwargs", [dict(a_dtype="bf16"), dict(b_dtype="fp16"), dict(a_dtype="e4m3fn")])
def test_the_fp8_familys_config_names_the_build_for_a_non_fp8_dtype(kwargs):
    """A 16-bit (or misspelled) input dtype is refused as a build this family does not make, not with
    KernelConfig's rule for 16-bit builds ("a bf16 build reads A and B in one dtype")."""
    with pytest.raises(ValueError, match="sm90_fp8_gemm builds no such configuration"):
        FP8_GEMM.config("tensorwise", **kwargs)
