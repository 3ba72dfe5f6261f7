"""Every plan the designer emits for the ladder's levels and the library's kernels, proved by the auditor
at the depth it claims (every stage used three times per CTA: reused twice), through the plan's JSON
as `gemm-ladder design --format json` writes it, arithmetic included (:func:`audit_plan`).

The plans are the kernels' own: ``get_level(n).plan`` (levels 4-9), ``library_gemm(a_major, b_major,
bn).plan`` (the layouts kernel at BN 64, 128 and 256, each operand K- or MN-major, and its build that
stores C from registers), ``small_m_kernel(bn).plan`` (every bucket, its ring as deep as shared memory
allows) and the swiglu kernel's plan (its ``gemm`` part with the swiglu epilogue). Shapes: a square
one with a long K, and one with tails in M, N and K and a short K. CPU only.
"""

from __future__ import annotations

import itertools
import json
import time

import pytest

from gemm_ladder.audit import audit_plan, min_iterations

#: A long K (64 K tiles) and a short one with tails everywhere (9 K tiles, K tail 8).
SHAPES = ((4096, 4096, 4096), (1000, 1032, 520))


def _json(plan) -> dict:
    return json.loads(json.dumps(plan.to_json()))


def _proved(doc: dict, what: str) -> None:
    t0 = time.perf_counter()
    result = audit_plan(doc)
    assert result.ok, f"{what}:\n{result.render()}"
    b = result.bounds
    assert b["k_iters"] * b["tiles_per_cta"] >= min_iterations(b["stages"]), (what, b)
    # each audit is bounded: the whole file runs in CI on 2 cores in well under a minute
    assert time.perf_counter() - t0 < 60, (what, result.seconds)


@pytest.mark.parametrize("level", [4, 5, 6, 7, 8, 9])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_levels_plan_is_proved(level, shape):
    from gemm_ladder.levels import get_level

    _proved(_json(get_level(level).plan(*shape, "bf16")), f"level {level} at {shape}")


LAYOUTS = [(a, b, bn) for a, b in itertools.product(("k", "mn"), repeat=2) for bn in (64, 128, 256)]


@pytest.mark.parametrize("a_major,b_major,bn", LAYOUTS, ids=lambda v: str(v))
def test_every_layouts_kernel_plan_is_proved(a_major, b_major, bn):
    from gemm_ladder.library.gemm import library_gemm

    kernel = library_gemm(a_major, b_major, bn)
    for shape in SHAPES:
        _proved(_json(kernel.plan(*shape, "bf16")), f"{kernel.name} at {shape}")


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_the_register_store_builds_plan_is_proved(bn):
    from gemm_ladder.library.gemm import library_gemm

    kernel = library_gemm("k", "k", bn, c_from_registers=True)
    _proved(_json(kernel.plan(4096, 4096, 4096, "bf16")), kernel.name)


def test_every_small_m_buckets_plan_is_proved():
    from gemm_ladder.library.small_m import BUCKETS, small_m_kernel

    for bn in BUCKETS:
        kernel = small_m_kernel(bn)
        for n, k in ((4096, 4096), (1032, 520)):
            _proved(_json(kernel.plan(bn, n, k, "bf16")), f"small-M bucket {bn} at ({bn}, {n}, {k})")


def test_the_swiglu_kernels_plan_is_proved():
    from gemm_ladder.library.swiglu import swiglu_kernel

    for m, n, k in ((4096, 11008, 4096), (1000, 1032, 520)):
        doc = _json(swiglu_kernel().plan(m, n, k, "bf16"))
        assert doc["schema"] == "gemm-ladder/swiglu-plan/1"
        _proved(doc, f"swiglu at {(m, n, k)}")
