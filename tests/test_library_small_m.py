"""The small-M library kernel (library/small_m.py, kernels/library/sm90_gemm_small_m.cu), CPU part.

The designer's plan of its tile and ring, the resource gate of every bucket's build, an audit of its
ring, the split's arithmetic and the refusals; tests/test_library_small_m_gpu.py runs it.
"""

from __future__ import annotations

import pytest

from gemm_ladder.design import PlanRefused, plan_gemm


def test_the_designer_plans_a_narrow_tile_stored_from_registers():
    """BN = 16 has no 128-byte store panel: refused with staging, planned when c is stored from registers,
    with no output tensor map (C^T's row pitch of M elements need not be 16-byte aligned), no staging bytes
    and every other byte given to the stages."""
    kw = dict(tile=(128, 16, 64), stages=12, consumers=2, persistent=True, producer_warpgroup=True)
    with pytest.raises(PlanRefused, match="C panels"):
        plan_gemm(4096, 7, 4096, "bf16", **kw)
    plan = plan_gemm(4096, 7, 4096, "bf16", c_from_registers=True, **kw)
    assert set(plan.tensor_maps) == {"a", "b"}
    assert plan.smem.c_bytes == 0 and plan.kernel_defines()["GL_C_PANELS"] == 0
    assert plan.smem.full_bar_offset == 12 * (128 + 16) * 64 * 2
    assert plan.to_json()["problem"]["c_from_registers"] is True
    assert "st.global" in plan.to_markdown()
    with pytest.raises(PlanRefused, match="shared memory per block"):
        plan_gemm(4096, 7, 4096, "bf16", c_from_registers=True, **{**kw, "stages": 13})
