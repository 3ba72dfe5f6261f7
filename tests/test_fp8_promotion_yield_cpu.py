"""The fp8 kernel's promotion and the warp scheduler's yield hint, without a GPU (nvcc): in each K loop of
the default builds, ptxas already alternates the yield hint over the promotion's FFMAs, so the other
consumer warpgroup's warp on the same scheduler gets issue slots for its wgmmas during them.

DeepGEMM's README reports flipping that hint on every other promotion FFMA in its cubins (nvcc 12.x), 10%+
faster on some fine-grained fp8 GEMMs. nvcc 13.0's ptxas does it in the K loop by itself (docs/fp8.md, "Checked
and not built"); this test fails if a compiler stops doing so, which is when such a patch would be worth
measuring. The control bits' layout: gemm_ladder.advise.sass_structure."""

from __future__ import annotations

import pytest

from gemm_ladder.advise.sass_structure import SassStructure, parse_sass
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel

from conftest import needs_nvcc
from fp8_cases import assert_build_clean

#: A promotion: 64 FFMAs per consumer thread and K block at BN 128 (32 at BN 64), a few other instructions
#: among them. Runs this long occur only there.
MIN_RUN = 24


def promotion_runs(s: SassStructure) -> list[list]:
    """The runs of FFMAs (at most two other instructions between neighbours) inside the innermost loops
    that hold a wgmma (the K loops)."""
    loops = [(lo, hi) for lo, hi in s.loops
             if any(lo <= i.address <= hi and i.base == "QGMMA" for i in s.instructions)]
    innermost = [(lo, hi) for lo, hi in loops if not any((a, b) != (lo, hi) and lo <= a and b <= hi for a, b in loops)]
    runs = []
    for lo, hi in innermost:
        run, gap = [], 0
        for i in (i for i in s.instructions if lo <= i.address <= hi):
            if i.base == "FFMA":
                run, gap = run + [i], 0
            elif (gap := gap + 1) > 2:
                runs, run = runs + [run], []
        runs.append(run)
    return [r for r in runs if len(r) >= MIN_RUN]


@needs_nvcc
@pytest.mark.parametrize("kernel", [
    Fp8Kernel("blockwise", store=fp8.STORE_TMA, scale_b_shared=True),
    Fp8Kernel("blockwise", store=fp8.STORE_TMA, scale_b_ahead=True),
    Fp8Kernel("tensorwise", store=fp8.STORE_TMA),
    Fp8Kernel("rowwise", bn=64, store=fp8.STORE_TMA),
], ids=["blockwise-shared", "blockwise-ahead", "tensorwise", "rowwise-bn64"])
def test_the_k_loop_promotion_yields_every_other_ffma(use_cache, kernel):
    s = parse_sass(assert_build_clean(kernel))[fp8.KERNEL_NAME]
    runs = promotion_runs(s)
    assert len(runs) >= 2, [len(r) for r in runs]  # the two-block loop body promotes twice
    for run in runs:
        yields = sum(i.control.yields for i in run)
        # Every other one (a few neighbours with an instruction between them may both hold on).
        assert yields >= 0.4 * len(run), (hex(run[0].address), yields, len(run))
        assert not any(i.control.yields and i.control.reuse for i in run)  # no reuse across a yield
