"""Performance gate logic: ratios, tolerance, the launch-bound rule and the roofline (no GPU)."""

from __future__ import annotations

import pytest
import torch

from gemm_ladder.gates.performance import (
    Timing,
    arithmetic_intensity,
    judge_performance,
    measure_dram_bandwidth,
    roofline_tflops,
    time_fn,
    time_fns,
)
from gemm_ladder.gpu import PEAK_TFLOPS
from gemm_ladder.levels.base import PerfExpectation

BIG = (4096, 4096, 4096)


def t(ms: float, spread: float = 0.0) -> Timing:
    return Timing(ms, ms * (1 - spread), ms * (1 + spread), 100)


def test_tflops_and_ratios():
    r = judge_performance(t(0.2), *BIG, "bf16", cublas=t(0.18), previous=t(0.3))
    assert r.tflops == pytest.approx(2 * 4096**3 / 0.2e-3 / 1e12)
    assert r.vs_cublas == pytest.approx(0.9) and r.vs_previous == pytest.approx(1.5)
    assert r.passed and r.messages == []


def test_expectations_fail_and_pass_with_noise():
    perf = PerfExpectation(min_vs_cublas=0.8, min_vs_previous=1.0, noise=0.03)
    assert judge_performance(t(0.2), *BIG, "bf16", perf=perf, cublas=t(0.17), previous=t(0.2)).passed
    slow = judge_performance(t(0.2), *BIG, "bf16", perf=perf, cublas=t(0.15), previous=t(0.2))
    assert not slow.passed and "cuBLAS" in slow.messages[0]
    # 2% slower than the previous level is within the 3% noise allowance; 10% slower is not.
    assert judge_performance(t(0.204), *BIG, "bf16", perf=perf, previous=t(0.2)).passed
    regress = judge_performance(t(0.22), *BIG, "bf16", perf=perf, previous=t(0.2))
    assert not regress.passed and "previous level" in regress.messages[0]
    # A noisy measurement widens the tolerance to its own spread.
    assert judge_performance(t(0.22, spread=0.15), *BIG, "bf16", perf=perf, previous=t(0.2)).passed


def test_launch_bound_shapes_are_not_judged():
    perf = PerfExpectation(min_vs_cublas=0.9)
    r = judge_performance(t(0.05), 128, 128, 64, "bf16", perf=perf, cublas=t(0.005))
    assert r.passed and "launch-bound" in r.messages[0]


def test_roofline():
    # Square 4096: intensity 4096/3 FLOP/B; at 4240 GB/s that is 5.8 PFLOP/s: compute-bound.
    assert arithmetic_intensity(*BIG) == pytest.approx(2 * 4096**3 / (2 * 3 * 4096**2))
    assert roofline_tflops(*BIG, "bf16", 4240.0) == PEAK_TFLOPS["bf16"]
    # M = 1 (a GEMV): intensity ~1 FLOP/B, memory-bound at bandwidth x intensity.
    gemv = roofline_tflops(1, 8192, 8192, "bf16", 4240.0)
    assert gemv == pytest.approx(arithmetic_intensity(1, 8192, 8192) * 4.24)
    assert roofline_tflops(*BIG, "bf16", None) == PEAK_TFLOPS["bf16"]
    r = judge_performance(t(0.2), *BIG, "bf16", dram_gbs=4240.0)
    assert r.roofline_fraction == pytest.approx(r.tflops / PEAK_TFLOPS["bf16"])


def test_time_fn_on_cpu_counts_repeats_and_orders_percentiles():
    a = torch.randn(64, 64)
    calls = []
    timing = time_fn(lambda x, y: calls.append(1), a, a, budget_s=0.01, warmup=2, min_repeats=7, max_repeats=9)
    assert 7 <= timing.repeats <= 9 and len(calls) == 2 + 3 + timing.repeats
    assert timing.p10_ms <= timing.median_ms <= timing.p90_ms


def test_bandwidth_is_none_without_a_gpu():
    assert measure_dram_bandwidth("cpu") is None


@pytest.mark.gpu
def test_bandwidth_and_timing_on_gpu():
    bw = measure_dram_bandwidth()
    assert 1000 < bw < 10000  # GB/s: H100/H200 HBM is 3.3-4.8 TB/s
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timing = time_fn(torch.nn.functional.linear, a, a, budget_s=0.2)
    assert timing.repeats >= 10 and 0 < timing.p10_ms <= timing.median_ms <= timing.p90_ms


def test_time_fns_interleaves_rounds_and_times_each_callable():
    a = torch.randn(8, 8)
    order = []
    fns = {"x": lambda p, q: order.append("x"), "y": lambda p, q: order.append("y")}
    out = time_fns(fns, a, a, budget_s=0.001, rounds=3, warmup=1, min_repeats=6, max_repeats=6)
    assert set(out) == {"x", "y"} and all(t.repeats == 6 for t in out.values())
    timed = order[2 * (1 + 3):]  # after each callable's warm-up and probe calls
    # three rounds of 2 calls each, the first callable rotating: x y, y x, x y
    assert timed == ["x"] * 2 + ["y"] * 4 + ["x"] * 4 + ["y"] * 2
    assert time_fns({}, a, a) == {}
