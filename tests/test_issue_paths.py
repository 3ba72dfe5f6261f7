"""What a consumer issues between a stage's full-barrier wait and its group's last wgmma (no GPU: the
SASS of the builds). Guards the K loop's turnaround (docs/where-time-goes.md, "What the consumer issues
per K iteration"): where a K tile's group is short (BN <= 128) the descriptors stay in uniform registers
(no R2UR on the path) and are stepped, not rebuilt; the grouped kernel's TMA-store builds, whose loops are
not uniform (a unit's group decides its stores inside the loop), keep the stepped descriptors' shorter
path. (BN 192 and 256 keep their register-lean forms: the group hides the path there.)
"""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

from gemm_ladder.advise.sass_structure import parse_sass
from gemm_ladder.runtime.compiler import disassemble

#: Instructions from the wait to the group's last wgmma: 64-88 per K tile with per-step descriptors in
#: per-thread registers (2026-12-05, before), 31-50 uniform, 46 stepped but not uniform.
UNIFORM_PATH_MAX = 56
STEPPED_PATH_MAX = 60


def paths(build) -> list:
    return parse_sass(disassemble(build.cubin))[build.kernel_name].issue_paths


def uniform_builds():
    from gemm_ladder.library.fp8 import Fp8Kernel
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.grouped import grouped_gemm
    from gemm_ladder.library.small_m import small_m_kernel

    return {
        "general 64x64, one CTA": lambda: library_gemm("k", "k", 64, cluster=1, bm=64).build("bf16"),
        "general 128x128 pair": lambda: library_gemm("k", "k", 128).build("bf16"),
        "general 128x128 pair, A MN-major": lambda: library_gemm("mn", "k", 128).build("fp16"),
        "general from registers": lambda: library_gemm("k", "mn", 128, c_from_registers=True).build("bf16"),
        "small-M BN 64": lambda: small_m_kernel(64).build("bf16"),
        "grouped masked": lambda: grouped_gemm(bn=128, b_major="k", masked=True).build("bf16"),
        "fp8 blockwise": lambda: Fp8Kernel(scale_mode="blockwise").build(),
    }


@needs_nvcc
@pytest.mark.parametrize("name", list(uniform_builds()))
def test_k_loop_descriptors_stay_uniform(use_cache, name):
    found = paths(uniform_builds()[name]())
    assert found, "no wait-to-commit path found: the K loop's shape changed, re-read the SASS"
    assert all(p.r2ur == 0 for p in found), found
    if not name.startswith("fp8"):  # fp8 promotes the previous block's partial sums on the same path
        assert max(p.last_mma for p in found) <= UNIFORM_PATH_MAX, found


@needs_nvcc
@pytest.mark.parametrize("cfg", [dict(bn=128, b_major="k"), dict(bn=128, b_major="mn", cluster=2)], ids=str)
def test_grouped_tma_store_loop_keeps_the_stepped_descriptors(use_cache, cfg):
    from gemm_ladder.library.grouped import grouped_gemm

    found = paths(grouped_gemm(**cfg).build("bf16"))
    assert found and max(p.last_mma for p in found) <= STEPPED_PATH_MAX, found
