"""The general kernel's 64-row tile with two CTAs per SM (library_gemm(..., ctas_per_sm=2), a measuring build),
CPU part: what it is built as, its refusals, its resource gate. tests/test_two_ctas_per_sm_gpu.py runs it."""

from __future__ import annotations

import pytest

from gemm_ladder.library.gemm import kernel_for, library_gemm

from conftest import needs_nvcc


def test_the_build_and_its_refusals():
    """BN 64, one CTA per cluster, TMA store: launch bounds of two CTAs (GL_CTAS_PER_SM 2 in the config's
    constants), a ring in half the SM's shared memory, its own name; every other build refused."""
    one = library_gemm("k", "k", 64, cluster=1, bm=64)
    two = library_gemm("k", "k", 64, cluster=1, bm=64, ctas_per_sm=2)
    assert two is not one and two.name == one.name + "_x2" and two.ctas_per_sm == 2
    config = two.config("bf16")
    assert config.defines()["GL_CTAS_PER_SM"] == 2 and "GL_CTAS_PER_SM" not in one.config("bf16").defines()
    assert kernel_for(config) is two
    assert 2 * (two.geometry("bf16").dynamic_smem + 1024) <= 233472 < 2 * (one.geometry("bf16").dynamic_smem + 1024)
    assert 4 <= two.stages < one.stages
    for kw in (dict(bn=128, cluster=1, bm=64), dict(bn=64, cluster=2, bm=64), dict(bn=64, cluster=1, bm=128),
               dict(bn=64, cluster=1, bm=64, c_from_registers=True)):
        with pytest.raises(ValueError, match="ctas_per_sm = 2"):
            library_gemm("k", "k", kw.pop("bn"), ctas_per_sm=2, **kw)
    with pytest.raises(ValueError, match="1 or 2"):
        library_gemm("k", "k", 64, cluster=1, bm=64, ctas_per_sm=3)


@needs_nvcc
@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
def test_resource_gate(dtype, use_cache):
    """It compiles within two CTAs' registers (128 a thread) with no spill, stack or local memory."""
    from gemm_ladder.gates.resources import check_cubin_resources

    g = library_gemm("k", "k", 64, cluster=1, bm=64, ctas_per_sm=2)
    kernel = g.build(dtype)
    geo = g.geometry(dtype)
    report = check_cubin_resources(kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=9, dtype=dtype,
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=1)
    assert report.passed, report.messages
    assert report.stack_bytes == report.spill_stores == report.spill_loads == 0 and report.registers <= 128
    assert report.sass["LDL"] == report.sass["STL"] == 0
