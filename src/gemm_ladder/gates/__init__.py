"""The gates every level, and any user kernel, is held to.

- :mod:`~gemm_ladder.gates.correctness`: ``check_correctness(fn, m, n, k, dtype, device=...)``.
- :mod:`~gemm_ladder.gates.performance`: ``time_fn``, ``time_fns``, ``measure_dram_bandwidth``, ``judge_performance``.
- :mod:`~gemm_ladder.gates.resources`: ``parse_ptxas_log``, ``sass_census``, ``check_cubin_resources``,
  ``check_level_resources``.
- :mod:`~gemm_ladder.gates.climb`: ``run_gates`` over targets x dtypes x shapes, ``parse_level_range``.
- :mod:`~gemm_ladder.gates.verdict`: which gates ran, the summary line and the exit status.

Writing and reading result JSON lives in :mod:`gemm_ladder.results`.
"""

from gemm_ladder.gates.climb import Target, parse_level_range, run_gates
from gemm_ladder.gates.correctness import CorrectnessResult, check_correctness
from gemm_ladder.gates.performance import Timing, judge_performance, measure_dram_bandwidth, time_fn, time_fns
from gemm_ladder.gates.resources import (
    ResourceReport,
    check_cubin_resources,
    check_level_resources,
    parse_ptxas_log,
    sass_census,
)

__all__ = [
    "CorrectnessResult", "ResourceReport", "Target", "Timing", "check_correctness", "check_cubin_resources",
    "check_level_resources", "judge_performance", "measure_dram_bandwidth", "parse_level_range",
    "parse_ptxas_log", "run_gates", "sass_census", "time_fn", "time_fns",
]
