"""Every plan the designer emits for the ladder's levels and the library's kernels, proved by the auditor
at the depth it claims (every stage used three times per CTA: reused twice), through the plan's JSON
as `gemm-ladder design --format json` writes it, arithmetic included (:func:`check_plan`).

The plans are the kernels' own: ``get_level(n).plan`` (levels 4-9), ``library_gemm(a_major, b_major,
bn).plan`` (the layouts kernel at BN 64, 128 and 256, each operand K- or MN-major, and its build that
stores C from registers), ``small_m_kernel(bn).plan`` (every bucket, its ring as deep as shared memory
allows) and the swiglu kernel's plan (its ``gemm`` part with the swiglu epilogue). Shapes: a square
one with a long K, and one with tails in M, N and K and a short K.

State-space reduction: plans whose protocols are identical (the operand layouts change the boxes,
not the ring; both shapes of a persistent plan unroll the same tiles) are searched once, each plan's
arithmetic checked on its own; each search visits one state per orbit of the protocol's renamings
(the two consumer warpgroups of a CTA, the two CTAs of a cluster: gemm_ladder.audit.symmetry), which
brings the 7- and 8-stage rings of the layouts kernel at BN 64 and its register-store build at BN 64
and 128 within CI's budget. CPU only.
"""

from __future__ import annotations

import itertools
import json

import pytest

from gemm_ladder.audit import audit, check_plan, min_iterations, protocol_from_plan

#: A long K (64 K tiles) and a short one with tails everywhere (9 K tiles, K tail 8).
SHAPES = ((4096, 4096, 4096), (1000, 1032, 520))

#: States a search may visit here (the largest ring, the register-store build at BN 64, 9 stages over
#: 2 CTAs x 2 consumers, takes 92,015 with the symmetry reduction).
MAX_STATES = 150_000

_searched: dict[str, str] = {}  # protocol JSON -> what it was proved for


def _json(plan) -> dict:
    return json.loads(json.dumps(plan.to_json()))


def _proved(doc: dict, what: str) -> None:
    findings = check_plan(doc)
    assert not findings, f"{what}:\n" + "\n".join(v.render() for v in findings)
    p = protocol_from_plan(doc)
    b = p.bounds
    assert b["k_iters"] * b["tiles_per_cta"] >= min_iterations(b["stages"]), (what, b)
    key = json.dumps([r.to_json() for r in p.roles] + [x.to_json() for x in p.barriers + p.buffers])
    if key in _searched:
        return  # the same protocol, searched once (its arithmetic checked above)
    result = audit(p, max_states=MAX_STATES)
    assert result.ok, f"{what}:\n{result.render()}"
    assert result.reduction != "none" or len(p.roles) < 4, (what, result.reduction)
    _searched[key] = what


@pytest.mark.parametrize("level", [4, 5, 6, 7, 8, 9])
def test_every_levels_plan_is_proved(level):
    from gemm_ladder.levels import get_level

    for shape in SHAPES:
        _proved(_json(get_level(level).plan(*shape, "bf16")), f"level {level} at {shape}")


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_every_layouts_kernel_plan_is_proved(bn):
    from gemm_ladder.library.gemm import library_gemm

    for a_major, b_major in itertools.product(("k", "mn"), repeat=2):
        kernel = library_gemm(a_major, b_major, bn)
        for shape in SHAPES:
            _proved(_json(kernel.plan(*shape, "bf16")), f"{kernel.name} at {shape}")


class TestRegisterStoreBuild:
    """A class of its own: pytest-xdist's loadscope sends it to another worker than the layouts
    kernel's searches (at BN 64, 9 stages: 92,015 states, about 45 s of one core here)."""

    @pytest.mark.parametrize("bn", [64, 128, 256])
    def test_the_register_store_builds_plan_is_proved(self, bn):
        from gemm_ladder.library.gemm import library_gemm

        kernel = library_gemm("k", "k", bn, c_from_registers=True)
        _proved(_json(kernel.plan(4096, 4096, 4096, "bf16")), kernel.name)


def test_the_layouts_plans_beyond_budget_still_have_their_arithmetic_checked():
    from gemm_ladder.library.gemm import library_gemm

    for a_major, b_major in itertools.product(("k", "mn"), repeat=2):
        for kw in ({}, {"c_from_registers": True}):
            for bn in (64, 128):
                doc = _json(library_gemm(a_major, b_major, bn, **kw).plan(4096, 4096, 4096, "bf16"))
                assert check_plan(doc) == [], (a_major, b_major, bn, kw)


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
