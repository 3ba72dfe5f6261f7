"""``gemm-ladder climb``: run the resource, correctness and performance gates over the ladder.

    gemm-ladder climb                                  # every level, bf16, edge shapes
    gemm-ladder climb --levels 1-3 --dtype all --shapes edge,square --json bench/results/run.json

Without a GPU it compiles every level and prints the resource gate only ("no GPU: compile-only").
Exit status 1 when any gate fails or a level does not compile, else 0.
"""

from __future__ import annotations

import argparse
import sys

NAME = "climb"
HELP = "Run the resource, correctness and performance gates over levels, dtypes and shapes."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--levels, --dtype, --shapes, --json, --arch, --budget."""
    parser.add_argument("--levels", default="all", help="levels to climb: 'all' (default), N, N-M or a comma list (1-3,5)")
    parser.add_argument("--dtype", default="bf16", help="bf16 (default), fp16, all, or a comma list")
    parser.add_argument("--shapes", default="edge",
                        help="comma list of shape sets (edge, square, llm, unaligned) or MxNxK (default: edge)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the result JSON (docs/results-schema.md) here")
    parser.add_argument("--arch", default="sm_90a", help="target architecture for the builds (default: sm_90a)")
    parser.add_argument("--budget", type=float, default=0.5, metavar="SECONDS",
                        help="time budget of one timing measurement (default: 0.5 s)")


def run(args: argparse.Namespace) -> int:
    """Climb; 0 when every gate passed, 1 on a gate failure, 2 on a usage error."""
    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.gates.climb import Target, command_line, exit_status, parse_level_range, run_gates, write_json
    from gemm_ladder.levels import LEVELS
    from gemm_ladder.shapes import parse_shape_sets

    try:
        numbers = parse_level_range(args.levels, list(LEVELS))
        dtypes = parse_dtypes(args.dtype)
        shapes = parse_shape_sets(args.shapes)
    except ValueError as exc:
        print(f"gemm-ladder climb: {exc}", file=sys.stderr)
        return 2
    targets = [Target.from_level(LEVELS[n]) for n in numbers]
    result = run_gates(targets, dtypes, shapes, arch=args.arch, command=command_line(), time_budget_s=args.budget)
    if args.json:
        print(f"wrote {write_json(result, args.json)}")
    return exit_status(result)
