"""bench/experiments/fp8_epilogue_cost.py on the CPU: its edit of sm90_fp8_gemm.cu still applies (once),
and its build is keyed apart from the real one (a config and a translation unit of its own)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gemm_ladder.library import fp8
from gemm_ladder.runtime.compiler import KERNEL_ROOT

_PATH = Path(__file__).resolve().parent.parent / "bench" / "experiments" / "fp8_epilogue_cost.py"
_spec = importlib.util.spec_from_file_location("fp8_epilogue_cost", _PATH)
cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cost)


def test_the_edit_guards_the_epilogues_one_store():
    source = (KERNEL_ROOT / fp8.SOURCE).read_text()
    edited = cost.no_store_source(source)
    assert edited.count(cost.GUARDED) == 1 and edited.replace(cost.GUARDED, "").count(cost.STORE) == 0
    with pytest.raises(ValueError, match="not 1"):
        cost.no_store_source(source.replace(cost.STORE, "/* gone */"))


def test_the_no_store_build_is_keyed_apart_from_the_real_one():
    real = fp8.Fp8Kernel("tensorwise", bn=128, overlap=fp8.OVERLAP_PROMOTION)
    edited = cost.no_store_kernel(real)
    assert edited.config() != real.config() and edited != real
    assert dict(edited.config().extra)["GL_FP8_EXPERIMENT_NO_STORES"] == 1
    included = edited.translation_unit().split('#include "')[1].rstrip('"\n')
    assert Path(included).read_text() == cost.no_store_source((KERNEL_ROOT / fp8.SOURCE).read_text())
    assert real.translation_unit() != edited.translation_unit()


def test_the_edit_leaves_the_tma_store_build_alone():
    """The third build (tma_store) is the family's own TMA-store config, untouched by the edit: its
    epilogue has no store_pair, so the guarded and unguarded sources give it the same code."""
    real = fp8.Fp8Kernel("tensorwise", bn=128, overlap=fp8.OVERLAP_PROMOTION)
    tma = fp8.Fp8Kernel("tensorwise", bn=128, overlap=fp8.OVERLAP_PROMOTION, store=fp8.STORE_TMA)
    assert tma.config() not in (real.config(), cost.no_store_kernel(real).config())
    assert dict(tma.config().extra)["GL_FP8_TMA_STORE"] == 1 and tma.config().store == fp8.STORE_TMA
    # The edited statement sits in the branch a TMA-store build does not compile: the `else` right after
    # the `if constexpr (Cfg::kTmaStore)` branch, with no other compile-time branch between them.
    source = (KERNEL_ROOT / fp8.SOURCE).read_text()
    at = source.index(cost.STORE)
    tma_branch = source.rindex("else if constexpr (Cfg::kTmaStore)", 0, at)
    between = source[tma_branch + len("else if constexpr (Cfg::kTmaStore)"):at]
    assert "} else {" in between and "constexpr" not in between, between
