"""The bench's measuring kernels stay valid: the math-alone kernel keeps full-size wgmma, and the
one-knob source edits the bench applies to levels still find what they edit.

The math-alone kernel (bench/tensor_pipe_sol.py) measures level 9's math only while every HGMMA in
it is the m64n256k16 that level 9 issues: an accumulator ptxas sees as dead lets it shrink the
instruction (it did once, to 64x8, in an earlier bound). The first test compiles it for the H200 and
reads its SASS; the second applies each source edit to level 9's file. No GPU needed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import needs_nvcc

from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import KERNEL_ROOT, disassemble

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import l9_timeline  # noqa: E402
import ladder_variants  # noqa: E402
import tensor_pipe_sol  # noqa: E402
import variants  # noqa: E402


@needs_nvcc
@pytest.mark.parametrize("pending", [1, -1], ids=["wait_group_1", "no_wait"])
def test_math_alone_kernel_keeps_full_size_wgmma(use_cache, pending):
    level = variants.with_defines(variants.with_source(LEVELS[9], tensor_pipe_sol.SOL_SOURCE),
                                  {"GL_SOL_PENDING": pending})
    kernel = level.build("bf16")
    hgmma = re.findall(r"HGMMA\.(\d+x\d+x\d+)", disassemble(kernel.cubin))
    assert hgmma, "no wgmma left in the math-alone kernel"
    assert set(hgmma) == {"64x256x16"}, f"ptxas changed the math-alone kernel's wgmma: {sorted(set(hgmma))}"
    usage = parse_ptxas_log(kernel.ptxas_log)["gemm_kernel"]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0)


@pytest.mark.parametrize("edit", [ladder_variants._no_stores, tensor_pipe_sol._all_panels_deferred,
                                  variants.no_multicast_edit, l9_timeline.traced_edit], ids=lambda f: f.__name__)
def test_level9_edits_still_apply(edit):
    src = (KERNEL_ROOT / LEVELS[9].source).read_text()
    assert edit(src) != src
