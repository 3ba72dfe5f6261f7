"""The fp8 kernel's scale_b_shared build option (blockwise scale_b read from a shared copy of the tile's
column, made at the start of each K loop) without a GPU: its config round trip and refusals, the shared
memory it takes, which build the launch's rule picks by K, and (nvcc) its builds: no spill, no serialised
wgmma, no global load in the K loop (the load ahead's R2UR / release waited on one), and the promotion
scales read before each block's wgmmas (after them in the load ahead's build); bench/experiments/
fp8_variants.py's edits of that order still apply to the kernel's source."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel

from conftest import needs_nvcc
from fp8_cases import assert_build_clean
from test_fp8_scale_b_ahead_cpu import k_loops

SHARED = Fp8Kernel("blockwise", store=fp8.STORE_TMA, scale_b_shared=True)


def test_config_round_trips_and_names_it_only_when_on():
    assert fp8.kernel_for(SHARED.config()) == SHARED
    assert SHARED.defines()["GL_FP8_SB_SHARED"] == 1
    plain = dataclasses.replace(SHARED, scale_b_shared=False)
    assert "GL_FP8_SB_SHARED" not in plain.defines() and "scale_b_shared" not in repr(plain)


@pytest.mark.parametrize("kernel", [Fp8Kernel("tensorwise", scale_b_shared=True),
                                    Fp8Kernel("rowwise", scale_b_shared=True),
                                    Fp8Kernel("blockwise", scale_b_shared=True, scale_b_ahead=True)],
                         ids=["tensorwise", "rowwise", "both"])
def test_refused_where_it_means_nothing(kernel):
    with pytest.raises(ValueError, match="no such configuration"):
        kernel.config()


def test_each_consumer_holds_a_copy_of_max_blocks():
    for bm in (64, 128):
        assert fp8.smem_bytes("blockwise", 5, 128, fp8.STORE_TMA, bm, True) - fp8.smem_bytes(
            "blockwise", 5, 128, fp8.STORE_TMA, bm) == (bm // 64) * fp8.MAX_SHARED_SCALE_B_BLOCKS * 4
    # The copies fit beside the rings the launch builds: no stage is lost at BN 128 and 64.
    for bn, bm in ((128, 128), (64, 128), (64, 64), (128, 64)):
        for store in (fp8.STORE_TMA, fp8.STORE_REGISTERS):
            k = Fp8Kernel("blockwise", bn=bn, bm=bm, store=store)
            assert dataclasses.replace(k, scale_b_shared=True).ring_stages == k.ring_stages, (bn, bm, store)


def test_the_launch_rule_by_k_and_split(monkeypatch):
    monkeypatch.setattr(fp8, "SCALE_B_SHARED", True)
    shared, ahead = {"scale_b_shared": True, "scale_b_ahead": False}, {"scale_b_shared": False, "scale_b_ahead": True}
    limit = fp8.MAX_SHARED_SCALE_B_BLOCKS * fp8.BK
    assert fp8.scale_b_source("blockwise", limit) == shared
    assert fp8.scale_b_source("blockwise", limit + 16) == ahead  # more K blocks than the copy holds
    low = (fp8.MIN_SHARED_SCALE_B_BLOCKS - 1) * fp8.BK  # 12 blocks measured slower with the copy
    assert fp8.scale_b_source("blockwise", low) == ahead and fp8.scale_b_source("blockwise", low + 16) == shared
    assert fp8.scale_b_source("blockwise", 1536) == ahead  # 4096 x 24576 x 1536: 0.966x with the copy
    assert fp8.scale_b_source("blockwise", 8192, split=True) == ahead
    assert fp8.scale_b_source("tensorwise", 8192) == {}
    monkeypatch.setattr(fp8, "SCALE_B_SHARED", False)
    assert fp8.scale_b_source("blockwise", 8192) == ahead


def _meta_call(m, n, k):
    import torch

    a = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn, device="meta").T
    sa = torch.empty((-(-k // 128), m), device="meta").T
    sb = torch.empty((-(-k // 128), -(-n // 128)), device="meta")
    return a, b, sa, sb, fp8.check_scaled_mm(a, b, sa, sb, device_type=None)


def test_a_longer_k_than_the_copy_holds_is_refused_before_anything_runs():
    from gemm_ladder.errors import GemmInputError

    k = (fp8.MAX_SHARED_SCALE_B_BLOCKS + 1) * fp8.BK
    a, b, sa, sb, call = _meta_call(256, 1024, k)
    with pytest.raises(GemmInputError, match=f"holds {fp8.MAX_SHARED_SCALE_B_BLOCKS} K blocks"):
        fp8.scaled_mm_launch(a, b, sa, sb, None, call, kernel=SHARED)  # meta tensors: no device is asked
    assert fp8.shared_scale_b_refusal(SHARED, k - fp8.BK) is None
    assert fp8.shared_scale_b_refusal(dataclasses.replace(SHARED, scale_b_shared=False), k) is None


def test_the_family_config_follows_the_rule_by_k():
    shared = fp8.FP8_GEMM.config("blockwise", k=8192)
    assert fp8.kernel_for(shared).scale_b_shared == fp8.SCALE_B_SHARED
    short = fp8.kernel_for(fp8.FP8_GEMM.config("blockwise", k=1536))
    assert not short.scale_b_shared and short.scale_b_ahead == fp8.SCALE_B_AHEAD


def test_explain_says_how_scale_b_is_read_and_why(monkeypatch):
    import gemm_ladder

    def explain(m, n, k):
        a, b, sa, sb, _ = _meta_call(m, n, k)
        return gemm_ladder.explain_scaled_mm(a, b, sa, sb)

    monkeypatch.setattr(fp8, "SCALE_B_SHARED", True)  # the shipped default (GL_FP8_SCALE_B_SHARED may turn it off)
    monkeypatch.setattr(fp8, "WIDE_TILE", False)  # the 128-wide build's reads (the 192-wide one's: test_fp8_bn192_cpu.py)
    big = explain(4096, 7168, 16384)
    assert big["scale_b_read"] == "shared" and "128 K blocks" in big["scale_b_read_reason"]
    short = explain(4096, 24576, 1536)
    assert short["scale_b_read"] == "ahead" and "12 K blocks" in short["scale_b_read_reason"]
    assert "split" in explain(64, 4096, 14336)["scale_b_read_reason"]
    a, b, _, _, _ = _meta_call(256, 1024, 2048)
    import torch
    one = torch.ones((), device="meta")
    assert gemm_ladder.explain_scaled_mm(a, b, one, one)["scale_b_read"] is None  # tensorwise
    monkeypatch.setattr(fp8, "SCALE_B_SHARED", False)
    off = explain(4096, 7168, 16384)
    assert off["scale_b_read"] == "ahead" and "turned off" in off["scale_b_read_reason"]


def test_the_launch_takes_it_where_the_rule_does(monkeypatch):
    """default_build (what scaled_mm runs) on meta-sized calls: shared at K = 16384, ahead at K = 1536 and
    on a split decode call (the 128-wide build's; the 192-wide one's: test_fp8_bn192_cpu.py)."""
    import torch

    monkeypatch.setattr(fp8, "WIDE_TILE", False)

    def kernel(m, n, k):
        a = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="meta")
        b = torch.empty((n, k), dtype=torch.float8_e4m3fn, device="meta").T
        sa = torch.empty((k // 128, m), device="meta").T
        sb = torch.empty((k // 128, n // 128), device="meta")
        call = fp8.check_scaled_mm(a, b, sa, sb, device_type=None)
        return fp8.default_build(call, a, b, None, None, 132)[0]

    assert kernel(4096, 7168, 16384).scale_b_shared == fp8.SCALE_B_SHARED
    assert not kernel(4096, 24576, 1536).scale_b_shared and kernel(4096, 24576, 1536).scale_b_ahead
    decode = kernel(64, 4096, 14336)
    assert decode.split and not decode.scale_b_shared and decode.scale_b_ahead


@needs_nvcc
@pytest.mark.parametrize("kw", [dict(), dict(bn=64), dict(bn=64, bm=64), dict(bn=64, split=True),
                                dict(store=fp8.STORE_REGISTERS), dict(overlap=False)],
                         ids=["tma", "bn64", "64rows", "split", "registers", "serial"])
def test_builds_with_no_global_load_in_the_k_loop(use_cache, kw):
    kernel = dataclasses.replace(SHARED, **kw)
    loops = k_loops(assert_build_clean(kernel))  # no stack or spill, no C7514/C7517, only 64 x BN x 32 wgmma
    assert loops, "no K loop found"
    for body in loops:
        assert not any(re.search(r"\bLDG\b|LDG\.", op) for op in body), [op for op in body if "LDG" in op]
        assert any(re.search(r"\bLDS\b", op) for op in body)  # scale_b from the shared copy


def _reads_before_first_wgmma(body: list[str]) -> list[bool]:
    """For each wgmma group of a K loop body (its first wgmma: scale-d 0, "RZ, !UPT"), whether a shared-memory
    read (LDS, or a generic LD) lies between the stage's full-barrier wait and that wgmma."""
    out, wait = [], None
    for i, op in enumerate(body):
        if "TRYWAIT" in op:
            wait = i
        elif "QGMMA" in op and "RZ, !UPT" in op and wait is not None:
            out.append(any(re.search(r"\b(LDS|LD)(\.\S+)? R\d+,", x) for x in body[wait:i]))
    return out


@needs_nvcc
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "ahead"])
def test_scales_read_before_the_wgmmas_only_from_the_shared_copy(use_cache, shared):
    kernel = SHARED if shared else dataclasses.replace(SHARED, scale_b_shared=False, scale_b_ahead=True)
    loops = k_loops(assert_build_clean(kernel))
    flags = [f for body in loops for f in _reads_before_first_wgmma(body)]
    assert flags and (all(flags) if shared else not any(flags)), flags


def test_fp8_variants_edits_apply_to_the_kernel_source():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "experiments"))
    import fp8_variants
    from gemm_ladder.runtime.compiler import KERNEL_ROOT

    source = (KERNEL_ROOT / fp8.SOURCE).read_text()
    for name, edit in fp8_variants.EDITS.items():
        edits = edit if isinstance(edit, list) else [(fp8_variants.PROMOTION_SCALES, edit, 1)]
        assert all(source.count(old) == count for old, _, count in edits), name
