"""The fp8 kernel's one-panel staging for the TMA store (``Fp8Kernel(staging_panels=1)``) without a GPU: the
shared memory it frees (a 6-stage blockwise ring), its config round trip and refusals, its ring with a
one-panel buffer audited (and a seeded fault caught), and (nvcc) its SASS: no spill, one UTMASTG per panel,
the register count of the whole-tile staging build."""

from __future__ import annotations

import dataclasses

import pytest

from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import STORE_TMA as TMA
from gemm_ladder.library.fp8 import Fp8Kernel

from conftest import needs_nvcc

ONE = Fp8Kernel("blockwise", store=TMA, scale_b_ahead=True, staging_panels=1)
WHOLE = dataclasses.replace(ONE, staging_panels=0)


def test_one_panel_staging_fits_a_six_stage_blockwise_ring():
    assert WHOLE.ring_stages == 5 and ONE.ring_stages == 6
    # Each consumer's staging is one 64 x 64 panel of 2-byte outputs instead of BN / 64 of them.
    assert fp8.smem_bytes("blockwise", 6, 128, TMA, staging_panels=1) == \
        fp8.smem_bytes("blockwise", 6, 128, TMA) - 2 * 64 * 64 * 2
    assert ONE.dynamic_smem <= fp8.SMEM_LIMIT < dataclasses.replace(WHOLE, stages=6).dynamic_smem


def test_config_round_trips_and_names_it_only_when_on():
    assert fp8.kernel_for(ONE.config()) == ONE and fp8.kernel_for(WHOLE.config()) == WHOLE
    assert ONE.defines()["GL_FP8_STAGE_PANELS"] == 1 and "GL_FP8_STAGE_PANELS" not in WHOLE.defines()
    assert "staging_panels=1" in repr(ONE) and "staging_panels" not in repr(WHOLE)


@pytest.mark.parametrize("kernel", [Fp8Kernel("blockwise", staging_panels=1),  # the register store stages nothing
                                    Fp8Kernel("blockwise", bn=64, store=TMA, staging_panels=1),  # one panel already
                                    Fp8Kernel("tensorwise", store=TMA, staging_panels=2)],
                         ids=["registers", "bn64", "two"])
def test_refused_where_it_means_nothing(kernel):
    with pytest.raises(ValueError, match="no such configuration"):
        kernel.config()


def test_ring_with_one_panel_buffer_audited_and_a_fault_caught():
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = ONE.ring_config(k_iters=3, tiles=3)
    assert (ring.staging_buffers, ring.panels_per_tile, ring.staging_wait_pending) == (1, 2, 0)
    assert audit(build_ring_protocol(ring, name="fp8-tma-one-panel")).ok
    # The second panel written before the first one's store has read the buffer: caught.
    bad = dataclasses.replace(ring, drain_staging_before_reuse=False)
    assert not audit(build_ring_protocol(bad, name="fp8-tma-one-panel-fault"), stop_at_first=True).ok


@needs_nvcc
def test_one_panel_build_sass(use_cache):
    from gemm_ladder.gates.resources import parse_ptxas_log, sass_census
    from gemm_ladder.runtime.compiler import disassemble

    built, whole = ONE.build(), WHOLE.build()
    usage = parse_ptxas_log(built.ptxas_log)[fp8.KERNEL_NAME]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0), built.ptxas_log
    assert "C7514" not in built.ptxas_log and "C7517" not in built.ptxas_log, built.ptxas_log
    assert usage.registers <= parse_ptxas_log(whole.ptxas_log)[fp8.KERNEL_NAME].registers
    counts = sass_census(disassemble(built.cubin))[fp8.KERNEL_NAME].counts
    assert counts.get("STG", 0) == 0 and counts.get("UTMASTG") == ONE.bn // 64, counts
    assert counts.get("STS") == ONE.bn // 4, counts
