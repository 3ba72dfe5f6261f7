"""Correctness gate logic on CPU: torch's CPU matmul stands in for cuBLAS, callables for kernels."""

from __future__ import annotations

import math

import pytest
import torch

from gemm_ladder.contract import Domain, OutsideDomainError, check_operands, trivial_result
from gemm_ladder.gates.correctness import (
    UNIT_ROUNDOFF,
    check_correctness,
    check_nonfinite,
    error_bound,
)

SHAPES = [(64, 48, 40), (1, 8, 9), (33, 1, 130), (17, 24, 1)]


def good(a, b):
    """fp32 accumulation, rounded once to the dtype: what a correct kernel computes."""
    return (a.float() @ b.float().T).to(a.dtype)


def drops_last_k(a, b):
    return (a[:, :-1].float() @ b[:, :-1].float().T).to(a.dtype)


def writes_half(a, b):
    c = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=a.dtype)
    half = max(1, a.shape[0] // 2)
    c[:half] = good(a[:half], b)
    return c


def breaks_nan(a, b):
    """Correct on finite data, but flushes NaN/Inf to zero (e.g. a bad clamp in an epilogue)."""
    return torch.nan_to_num(good(a, b), nan=0.0, posinf=0.0, neginf=0.0)


def one_wrong_element(a, b):
    c = good(a, b)
    c[-1, -1] += 10
    return c


def accumulates_in_bf16(a, b):
    """Rounds the running sum to bf16 after every term: the error grows like K u, not sqrt(K) u32."""
    acc = torch.zeros((a.shape[0], b.shape[0]), dtype=torch.bfloat16)
    for kk in range(a.shape[1]):
        acc = (acc.float() + a[:, kk : kk + 1].float() * b[:, kk].float()).to(torch.bfloat16)
    return acc.to(a.dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_correct_callable_passes(shape, dtype):
    r = check_correctness(good, *shape, dtype, device="cpu")
    assert r.status == "pass", r.message
    assert r.unwritten == 0 and r.nonfinite_ok
    assert r.rel_err <= r.bound and r.max_abs_err <= r.abs_cap
    j = r.to_json()
    assert j["passed"] and set(j) >= {"rel_err", "cublas_rel_err", "bound", "max_abs_err", "abs_cap", "unwritten", "nonfinite_ok"}


@pytest.mark.parametrize("bad", [drops_last_k, writes_half, breaks_nan, one_wrong_element])
def test_wrong_callables_fail(bad):
    r = check_correctness(bad, 96, 80, 72, "bf16", device="cpu", seed=1)
    assert r.status == "fail" and not r.passed, (bad.__name__, r)


def test_failure_messages_name_the_fault():
    assert "unwritten" in check_correctness(writes_half, 96, 80, 72, "bf16", device="cpu").message
    assert "NaN/Inf" in check_correctness(breaks_nan, 96, 80, 72, "bf16", device="cpu").message
    assert "max |c - ref|" in check_correctness(one_wrong_element, 256, 256, 64, "bf16", device="cpu").message
    assert "relative error" in check_correctness(drops_last_k, 96, 80, 72, "bf16", device="cpu").message


def test_low_precision_accumulation_fails_on_long_k():
    r = check_correctness(accumulates_in_bf16, 32, 32, 2048, "bf16", device="cpu", seed=3)
    assert r.status == "fail" and "relative error" in r.message


def test_seed_is_fresh_unless_given_and_reproducible():
    r1 = check_correctness(good, 8, 8, 8, "bf16", device="cpu")
    r2 = check_correctness(good, 8, 8, 8, "bf16", device="cpu")
    assert r1.seed != r2.seed
    r3 = check_correctness(good, 8, 8, 8, "bf16", device="cpu", seed=r1.seed)
    assert r3.seed == r1.seed and r3.rel_err == r1.rel_err


@pytest.mark.parametrize("shape", [(0, 8, 8), (8, 0, 8), (8, 8, 0)])
def test_empty_shapes(shape):
    assert check_correctness(good, *shape, "bf16", device="cpu").status == "pass"
    ones = lambda a, b: torch.ones((a.shape[0], b.shape[0]), dtype=a.dtype)  # noqa: E731
    expect = "fail" if shape[2] == 0 else "pass"  # K = 0 must be zeros; empty outputs have no values
    assert check_correctness(ones, *shape, "bf16", device="cpu").status == expect


def test_exceptions_and_bad_outputs():
    def boom(a, b):
        raise RuntimeError("kernel crashed\nsecond line")

    r = check_correctness(boom, 8, 8, 8, "bf16", device="cpu")
    assert r.status == "error" and r.message == "RuntimeError: kernel crashed"
    r = check_correctness(lambda a, b: good(a, b).float(), 8, 8, 8, "bf16", device="cpu")
    assert r.status == "fail" and "dtype" in r.message
    r = check_correctness(lambda a, b: good(a, b)[:, :-1], 8, 8, 8, "bf16", device="cpu")
    assert r.status == "fail" and "shape" in r.message


class FakeLevel:
    """The exact protocol of a ladder Level on CPU: check() refuses outside the domain, launch()
    writes into the caller's buffer. ``rows`` limits how many output rows launch() writes."""

    def __init__(self, domain: Domain, rows: int | None = None, honour_domain: bool = True):
        self.domain, self.rows, self.honour_domain = domain, rows, honour_domain

    def check(self, a, b):
        m, n, k = check_operands(a, b, device_type=None)
        if self.honour_domain:
            self.domain.check(m, n, k, "bf16" if a.dtype == torch.bfloat16 else "fp16")
        return m, n, k

    def launch(self, a, b, c):
        rows = c.shape[0] if self.rows is None else self.rows
        c[:rows] = good(a[:rows], b)

    def __call__(self, a, b):
        self.check(a, b)
        trivial = trivial_result(a, b)
        if trivial is not None:
            return trivial
        c = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype)
        self.launch(a, b, c)
        return c


def test_exact_protocol_counts_every_unwritten_element():
    r = check_correctness(FakeLevel(Domain(), rows=5), 8, 16, 8, "bf16", device="cpu")
    assert r.status == "fail" and r.unwritten == 3 * 16
    assert check_correctness(FakeLevel(Domain()), 8, 16, 8, "bf16", device="cpu").status == "pass"


def test_domain_refusal_and_violations():
    small = Domain(max_m=128, max_n=128, max_k=64)
    r = check_correctness(FakeLevel(small), 129, 8, 8, "bf16", device="cpu")
    assert r.status == "refused" and r.passed and r.to_json() is None and "M = 129" in r.message
    # Computing a shape outside the declared domain is a failure: the declaration is a promise.
    r = check_correctness(FakeLevel(small, honour_domain=False), 129, 8, 8, "bf16", device="cpu")
    assert r.status == "fail" and "outside its declared domain" in r.message

    def refuses_everything(a, b):
        raise OutsideDomainError("nope")

    r = check_correctness(refuses_everything, 8, 8, 8, "bf16", device="cpu", domain=Domain())
    assert r.status == "fail" and "inside its declared domain" in r.message


def test_check_nonfinite():
    ref = torch.tensor([[1.0, math.nan], [math.inf, -math.inf]], dtype=torch.float64)
    assert check_nonfinite(ref.clone(), ref) is None
    assert "NaN" in check_nonfinite(torch.tensor([[1.0, 0.0], [math.inf, -math.inf]]), ref)
    assert "NaN where the reference is inf" in check_nonfinite(torch.tensor([[1.0, math.nan], [math.nan, -math.inf]]), ref)
    assert "+Inf where the reference is -inf" in check_nonfinite(torch.tensor([[1.0, math.nan], [math.inf, math.inf]]), ref)
    assert "NaN" in check_nonfinite(torch.tensor([[math.nan, math.nan], [math.inf, -math.inf]]), ref)


def test_cpu_baseline_keeps_ieee_nonfinite_semantics():
    """The CPU stand-in for cuBLAS must not spread a planted NaN to finite outputs: torch's CPU bf16
    matmul did at this seed and shape (519 NaN where the float64 reference is finite), which made
    test_gate_wrong_example_fails_with_exit_1 fail now and then."""
    from gemm_ladder.contract import cublas

    r = check_correctness(cublas, 513, 520, 520, "bf16", device="cpu", seed=1059302160)
    assert r.status == "pass" and r.nonfinite_ok, r.message


def test_error_bound_floor_admits_correct_rounding():
    # cuBLAS exact (error 0): the floor alone must admit a correctly rounded output's error <= u.
    assert error_bound(0.0, "bf16") == UNIT_ROUNDOFF["bf16"] == 2.0**-8
    assert error_bound(1e-3, "fp16") == pytest.approx(2e-3 + 2.0**-11)


# --- on the GPU: the real ladder and cuBLAS ---------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 128, 64), (200, 264, 192), (7, 8, 9), (128, 128, 0)])
def test_level3_passes_on_gpu(shape):
    from gemm_ladder.levels import LEVELS

    r = check_correctness(LEVELS[3], *shape, "bf16", device="cuda")
    assert r.status == "pass", r.message


@pytest.mark.gpu
def test_level1_refuses_outside_its_domain_on_gpu():
    from gemm_ladder.levels import LEVELS

    r = check_correctness(LEVELS[1], 129, 128, 64, "bf16", device="cuda")
    assert r.status == "refused" and r.passed


@pytest.mark.gpu
def test_poisoned_allocator_catches_unwritten_output_on_gpu():
    def skips_last_row(a, b):
        c = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
        c[:-1] = torch.nn.functional.linear(a[:-1], b)
        return c

    r = check_correctness(skips_last_row, 256, 256, 64, "bf16", device="cuda")
    assert r.status == "fail" and r.unwritten == 256, r
