"""Timing GPU work: several callables interleaved, each call between two CUDA events.

Warm-up calls, then many timed repeats (adaptive to a time budget), each preceded by a write of twice
the L2 size so no operand is served from L2 (unless asked not to), each timed alone between two CUDA
events; the result is the median with the 10th and 90th percentiles.

The events measure GPU time only if the GPU is still busy when the host enqueues the call: an idle
GPU records the start event at once and then waits for the host to finish launching, so the host's
launch latency (tens of microseconds from Python, less from cuBLAS's C++) would be counted as kernel
time. A spin kernel (``torch.cuda._sleep``) enqueued before the start event keeps the GPU busy for
four times the measured host enqueue time (at least 20 us); the host time is reported apart (``host_ms``).

In the contract layer (below dispatch and the gates): the performance gate times with it, and so does the
dispatcher's autotune (dispatch/autotune.py).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from gemm_ladder.gpu import l2_bytes

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Upper bound on the SM clock used to turn a spin duration into cycles: the H100/H200 SXM boost
#: clock is 1980 MHz (nvidia-smi clocks.max.sm on our H200), so 2 GHz never makes a spin too short.
SPIN_CLOCK_HZ = 2.0e9


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds over ``repeats`` timed calls."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int
    host_ms: float | None = None  # median wall time the host took to enqueue one call (None: not measured)

    @property
    def spread(self) -> float:
        """Half the p10-p90 range relative to the median: the run's own noise (dimensionless)."""
        return (self.p90_ms - self.p10_ms) / (2 * self.median_ms) if self.median_ms > 0 else 0.0


def _percentile(sorted_values: list[float], q: float) -> float:
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


def time_fn(
    fn: Fn,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    budget_s: float = 0.5,
    warmup: int = 3,
    min_repeats: int = 10,
    max_repeats: int = 500,
    flush_l2: bool | str = True,
    hide_launch: bool = True,
) -> Timing:
    """Time ``fn(a, b)``: median, p10 and p90 in ms (one callable of :func:`time_fns`).

    Args:
        fn: the callable timed, ``fn(a, b)``; its result is discarded.
        a, b: operands (on CUDA for event timing; on CPU wall-clock time is used, for tests).
        budget_s: aim for about this much total timed work; the repeat count is the budget over a
            probe's per-call time, clamped to [min_repeats, max_repeats].
        warmup: untimed calls first (JIT load, clocks ramping, allocator warm).
        flush_l2: before each timed call, write a buffer twice the L2 size (H200: 2 x 60 MB), so the
            operands come from DRAM as in a real model; the write is not timed. It leaves L2 full of
            dirty lines, which the timed call's own reads must write back to DRAM first: a cost a
            memory-bound kernel feels. ``"read"`` flushes by reading the buffer instead (L2 left
            clean); True and ``"write"`` are the write flush; False none.
        hide_launch: on CUDA, spin the GPU before each timed call for max(20 us, 4 x the host's
            enqueue time) so the events bracket the call's GPU work and not the host's launch
            latency (see the module docstring). The spin assumes at most SPIN_CLOCK_HZ, so a slower
            clock only lengthens it.
    """
    return time_fns({"fn": fn}, a, b, budget_s=budget_s, warmup=warmup, min_repeats=min_repeats,
                    max_repeats=max_repeats, flush_l2=flush_l2, hide_launch=hide_launch)["fn"]


def time_fns(
    fns: dict[str, Fn],
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    budget_s: float = 0.5,
    rounds: int = 1,
    warmup: int = 3,
    min_repeats: int = 10,
    max_repeats: int = 500,
    flush_l2: bool | str = True,
    hide_launch: bool = True,
) -> dict[str, Timing]:
    """Time several callables on the same operands, interleaved: ``{name: Timing}``.

    Each callable gets about ``budget_s`` of timed calls (see :func:`time_fn` for the other
    arguments), split into ``rounds`` rounds; each round times every callable in turn, the first one
    rotating from round to round. The repeat count is sized from an unspun probe (so it errs short). A GPU that
    warms up and lowers its clock during a run then slows every callable alike, instead of the ones
    timed last (a drift measured on the H200: docs/measured-choices.md), so ratios between them hold.
    """
    if not fns:
        return {}
    cuda = a.device.type == "cuda"
    if flush_l2 not in (True, False, "write", "read"):
        raise ValueError(f"flush_l2 = {flush_l2!r}: use True / 'write', 'read' or False")
    flush = torch.zeros(2 * l2_bytes(a.device) // 8, dtype=torch.int64, device=a.device) if flush_l2 and cuda else None
    flush_by_read = flush_l2 == "read"
    host: dict[str, list[float]] = {name: [] for name in fns}
    spin: dict[str, int] = {name: 0 for name in fns}

    def one(name: str) -> float:
        fn = fns[name]
        if flush is not None:
            if flush_by_read:
                flush.max()  # reads every line: L2 ends holding clean lines of the buffer
            else:
                flush.fill_(1)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if spin[name]:
                torch.cuda._sleep(spin[name])
            start.record()
            t0 = time.perf_counter()
            fn(a, b)
            host[name].append((time.perf_counter() - t0) * 1e3)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn(a, b)
        return (time.perf_counter() - t0) * 1e3

    per_round: dict[str, int] = {}
    for name in fns:
        for _ in range(warmup):
            one(name)
        probe = statistics.median(one(name) for _ in range(3))
        if cuda and hide_launch:
            spin[name] = int(SPIN_CLOCK_HZ * max(2e-5, 4e-3 * statistics.median(host[name])))
        host[name].clear()
        repeats = int(min(max_repeats, max(min_repeats, budget_s * 1e3 / max(probe, 1e-3))))
        per_round[name] = max(1, repeats // max(1, rounds))
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(max(1, rounds)):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first each round
            times[name] += [one(name) for _ in range(per_round[name])]
    out = {}
    for name, ts in times.items():
        ts.sort()
        out[name] = Timing(statistics.median(ts), _percentile(ts, 0.1), _percentile(ts, 0.9), len(ts),
                           host_ms=statistics.median(host[name]) if host[name] else None)
    return out
