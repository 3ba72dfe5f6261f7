"""The performance gate: the roofline, and each level's promise about its own speed.

Timing (``time_fn``, ``time_fns``, ``Timing``) lives in :mod:`gemm_ladder.timing`, re-exported here:
warm-up calls, then many timed repeats, L2 flushed before each, the host's launch latency hidden by a
spin; medians with the 10th and 90th percentiles.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gemm_ladder.gpu import MIN_TIMED_FLOPS, PEAK_TFLOPS
from gemm_ladder.shapes import gemm_flops, gemm_min_bytes
from gemm_ladder.timing import SPIN_CLOCK_HZ, Fn, Timing, _percentile, time_fn, time_fns  # noqa: F401 (the gate's timing)


def measure_dram_bandwidth(device: str | torch.device = "cuda", nbytes: int = 1 << 30, repeats: int = 20) -> float | None:
    """Device memory bandwidth in GB/s (1e9 bytes/s) from a ``nbytes`` device-to-device copy.

    Counts bytes read plus bytes written (2 x nbytes) per copy; median of ``repeats``. The copy is
    far larger than L2, so it measures DRAM (the H200's figure: docs/measured-choices.md). None without
    a GPU.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    t = time_fn(lambda x, y: y.copy_(x), src, dst, warmup=3, min_repeats=repeats, max_repeats=repeats, flush_l2=False)
    return 2 * nbytes / (t.median_ms * 1e-3) / 1e9


def arithmetic_intensity(m: int, n: int, k: int, elem_bytes: int = 2) -> float:
    """FLOP per byte of the minimal traffic: 2MNK / (elem_bytes (MK + NK + MN))."""
    nbytes = gemm_min_bytes(m, n, k, elem_bytes)
    return gemm_flops(m, n, k) / nbytes if nbytes else 0.0


def roofline_tflops(m: int, n: int, k: int, dtype: str, dram_gbs: float | None) -> float:
    """min(peak, intensity x bandwidth) in TFLOP/s; the peak alone when bandwidth is unknown."""
    peak = PEAK_TFLOPS[dtype]
    if dram_gbs is None:
        return peak
    return min(peak, arithmetic_intensity(m, n, k) * dram_gbs / 1e3)


@dataclass
class PerformanceResult:
    """The ``performance`` object of a result row (docs/results-schema.md)."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    tflops: float
    vs_cublas: float | None
    vs_previous: float | None
    roofline_fraction: float
    intensity_flop_per_byte: float
    passed: bool
    messages: list[str] = field(default_factory=list)
    repeats: int | None = None
    host_enqueue_ms: float | None = None  # host time to enqueue one call (not part of median_ms)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge_performance(
    timing: Timing,
    m: int,
    n: int,
    k: int,
    dtype: str,
    *,
    perf: Any = None,
    cublas: Timing | None = None,
    previous: Timing | None = None,
    dram_gbs: float | None = None,
) -> PerformanceResult:
    """Turn timings into TFLOP/s, ratios and the roofline fraction, and apply ``perf``.

    Args:
        timing: this kernel's timing on (m, n, k).
        perf: a :class:`~gemm_ladder.levels.base.PerfExpectation` (None: report only, never fail).
        cublas: cuBLAS's timing on the same tensors in the same run (``vs_cublas`` = its time / ours).
        previous: the previous level's timing on the same shape in the same run.
        dram_gbs: measured bandwidth for the roofline.

    The ratios must reach ``min_vs_cublas`` and ``min_vs_previous`` less the tolerance
    ``max(perf.noise, measured spread of both timings)``. Shapes under gpu.MIN_TIMED_FLOPS (2MNK < 1e11) are
    launch-bound and never judged: their ratios compare launch overheads, not kernels.
    """
    flops = gemm_flops(m, n, k)
    tflops = flops / (timing.median_ms * 1e-3) / 1e12 if timing.median_ms > 0 else 0.0
    roof = roofline_tflops(m, n, k, dtype, dram_gbs)
    vs_cublas = cublas.median_ms / timing.median_ms if cublas and timing.median_ms > 0 else None
    vs_prev = previous.median_ms / timing.median_ms if previous and timing.median_ms > 0 else None
    msgs: list[str] = []
    if flops < MIN_TIMED_FLOPS:
        msgs.append(f"launch-bound (2MNK = {flops:.2g} < {MIN_TIMED_FLOPS:.0g}): timed, not judged")
    elif perf is not None:
        for what, ratio, want, other in (
            ("cuBLAS", vs_cublas, perf.min_vs_cublas, cublas),
            ("previous level", vs_prev, perf.min_vs_previous, previous),
        ):
            if ratio is None or not want:
                continue
            tol = max(perf.noise, timing.spread, other.spread if other else 0.0)
            if ratio < want * (1 - tol):
                msgs.append(f"{ratio:.2f}x {what} < required {want:.2f}x (tolerance {tol:.0%})")
    failed = any("required" in m for m in msgs)
    return PerformanceResult(
        median_ms=timing.median_ms, p10_ms=timing.p10_ms, p90_ms=timing.p90_ms, tflops=tflops,
        vs_cublas=vs_cublas, vs_previous=vs_prev, roofline_fraction=tflops / roof if roof else 0.0,
        intensity_flop_per_byte=arithmetic_intensity(m, n, k), passed=not failed, messages=msgs,
        repeats=timing.repeats, host_enqueue_ms=timing.host_ms,
    )


def is_timed_shape(m: int, n: int, k: int) -> bool:
    """True for shapes worth judging against expectations (2MNK >= gpu.MIN_TIMED_FLOPS)."""
    return gemm_flops(m, n, k) >= MIN_TIMED_FLOPS
