"""KernelConfig, the Kernel protocol and the bind cache (library/kernel.py) without a GPU: a config is
the key of a build and gives its -D constants; each family implements the protocol; the route's
configs per shape class are what precompile builds; the bind cache keys what a launch depends on."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.precompile import config_label, library_builds
from gemm_ladder.dispatch.route import class_configs
from gemm_ladder.library.gemm import GEMM, library_gemm
from gemm_ladder.library.kernel import (
    GROUPED, SCHEDULES, STORE_REGISTERS, STREAM_K, BindCache, Kernel, KernelConfig, Operands,
)
from gemm_ladder.library.operand import OperandView
from gemm_ladder.library.small_m import SMALL_M, small_m_kernel
from gemm_ladder.library.swiglu import SWIGLU, swiglu_kernel

BF16 = torch.bfloat16


def test_a_config_is_frozen_hashable_and_the_key_of_its_build():
    c = library_gemm("k", "mn", 128).config("bf16")
    assert c == library_gemm("k", "mn", 128).config("bf16") and hash(c) == hash(library_gemm("k", "mn", 128).config("bf16"))
    assert c != library_gemm("k", "mn", 128).config("fp16") != library_gemm("mn", "mn", 128).config("fp16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.stages = 3
    assert c.with_epilogue("// e\n") != c and c.with_epilogue("// e\n").with_epilogue(None) == c
    assert c.with_epilogue("// e\n").epilogue_id and c.epilogue_id is None
    assert (c.tile, c.cluster, c.consumers, c.schedule, c.store) == ((128, 128, 64), 2, 2, STREAM_K, "tma")


def test_defines_are_the_kernels_build_defines():
    for kernel in (library_gemm("k", "k", 256), library_gemm("mn", "k", 64, c_from_registers=True, out_fp32=True)):
        for dtype in ("bf16", "fp16"):
            assert kernel.config(dtype).defines() == kernel.build_defines(dtype)
    d = library_gemm("k", "k", 128, c_from_registers=True).config("bf16").defines()
    assert d["GL_C_FROM_REGISTERS"] == 1 and "GL_OUT_FP32" not in d and d["GL_DTYPE_BF16"] == 1
    s = small_m_kernel(64).config("fp16", out_fp32=True, a_major="mn", b_major="k")
    assert s.swap_operands and s.defines()["GL_OUT_FP32"] == 1 and "GL_C_FROM_REGISTERS" not in s.defines()
    # the plan's operands are swapped: its A is the weight B (k-major here), its B is x (mn-major)
    assert (s.defines()["GL_A_MN_MAJOR"], s.defines()["GL_B_MN_MAJOR"]) == (0, 1)
    w = swiglu_kernel().config("bf16")
    assert w.defines() == {"GL_DTYPE_BF16": 1, **swiglu_kernel().defines("bf16")}


def test_bad_configs_are_refused():
    for bad in ({"dtype": "fp32"}, {"out_dtype": "int8"}, {"store": "smem"}, {"schedule": "random"},
                {"a_major": "row"}):
        with pytest.raises(ValueError):
            KernelConfig("sm90_gemm", **bad)
    assert GROUPED in SCHEDULES  # the grouped GEMM family's (tests/test_families.py)
    with pytest.raises(ValueError, match="builds no such configuration"):
        GEMM.build(dataclasses.replace(library_gemm("k", "k", 128).config("bf16"), stages=2))


def test_every_family_implements_the_protocol():
    for fam in (GEMM, SMALL_M, SWIGLU):
        assert isinstance(fam, Kernel) and K.family(fam.family) is fam
    config = K.general("k", "mn", 64, "fp16")
    assert K.family(config) is GEMM and K.kernel_object(config) is library_gemm("k", "mn", 64)
    assert K.kernel_splits(config) == ("none", "tail", "all", "wave") and K.kernel_splits(K.small_m(40)) == ()
    assert K.kernel_object(K.small_m(40, 16)).bn == 16 and K.small_m(300) is None


def test_supports_through_the_protocol_names_the_rule():
    a = torch.empty(64, 40, dtype=BF16)
    b = torch.empty(48, 40, dtype=BF16)
    problem = Operands(OperandView(a, 64, 40, 40, "k"), OperandView(b, 48, 40, 40, "k"), torch.empty(64, 48, dtype=BF16))
    assert "CUDA" in GEMM.supports(K.general("k", "k", 128), problem)
    assert "takes fp16 inputs" in GEMM.supports(K.general("k", "k", 128, "fp16"), problem)
    assert "mn-major" in GEMM.supports(K.general("k", "mn", 128), problem)


def test_the_routes_configs_per_class_are_what_precompile_builds():
    bns = (256, 128)
    large = class_configs("large", "bf16", bns)
    # 4 operand orders x 2 widths, each in 2-CTA clusters and with one CTA per cluster, with 128-row tiles;
    # and the 64-row builds of K-major A and B (the route offers them there only), 2 widths x 2 cluster sizes;
    # and the 128-row ping-pong build at 128 x 192 (K-major A and B, one CTA: dispatch/pingpong.py's 128-row rule)
    assert len(large) == 4 * 2 * 2 + 2 * 2 + 1 and all(c.family == "sm90_gemm" and c.store == "tma" for c in large)
    assert [(c.a_major, c.b_major, c.tile[:2], c.cluster) for c in large if c.pingpong] == [("k", "k", (128, 192), 1)]
    assert sorted(c.cluster for c in large) == [1] * 11 + [2] * 10
    assert sorted((c.a_major, c.b_major) for c in large if c.tile[0] == 64) == [("k", "k")] * 4
    fp32 = class_configs("fp32_out", "bf16", bns)
    assert all(c.out_fp32 for c in fp32) and {c.family for c in fp32} == {"sm90_gemm", "sm90_gemm_small_m"}
    assert all(c.store == STORE_REGISTERS for c in class_configs("unaligned", "bf16", bns))
    with pytest.raises(ValueError):
        class_configs("huge", "bf16", bns)
    from gemm_ladder.dispatch.precompile import _timed_bns

    for cls in ("large", "small_m", "fp32_out", "unaligned", "quantized_out"):
        labels = [b.label for b in library_builds(("bf16",), (cls,)) if not b.label.startswith("repack")]
        assert sorted(labels) == sorted(config_label(c) for c in class_configs(cls, "bf16", _timed_bns()))


def test_the_bind_cache_keys_what_a_launch_depends_on():
    a = OperandView(torch.zeros(64, 40, dtype=BF16), 64, 40, 40, "k")
    b = OperandView(torch.zeros(48, 40, dtype=BF16), 48, 40, 40, "k")
    c = torch.zeros(64, 48, dtype=BF16)
    cfg = K.general("k", "k", 128)
    key = BindCache.key(cfg, Operands(a, b, c), (("split", "tail"),), 7)
    assert key == BindCache.key(cfg, Operands(a, b, c), (("split", "tail"),), 7)
    others = [BindCache.key(K.general("k", "k", 64), Operands(a, b, c), (("split", "tail"),), 7),
              BindCache.key(cfg, Operands(a, b, c), (("split", "all"),), 7),
              BindCache.key(cfg, Operands(a, b, torch.zeros(64, 48, dtype=BF16)), (("split", "tail"),), 7),
              BindCache.key(cfg, Operands(a, b, c), (("split", "tail"),), 8)]
    assert key not in others and len(set(others)) == len(others)
    assert BindCache.key(cfg, Operands(a, b, c, epilogue=object()), (), 7) is None  # bound per call
    cache, made = BindCache(size=2), []
    for i in range(3):
        cache.get_or_bind(("k", i), lambda i=i: made.append(i) or i)
    assert cache.get_or_bind(("k", 2), lambda: made.append("again")) == 2 and len(cache) == 2 and made == [0, 1, 2]
    assert cache.get_or_bind(None, lambda: "unkept") == "unkept" and len(cache) == 2
