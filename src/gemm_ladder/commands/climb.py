"""``gemm-ladder climb``: run the resource, correctness and performance gates over the ladder.

    gemm-ladder climb                                  # every level, bf16; on a GPU edge checked, square and 3 llm shapes timed
    gemm-ladder climb --levels 1-3 --dtype all --shapes edge,square --json bench/results/run.json

Without a GPU it compiles every level and runs the resource gate; correctness and performance are
"not run" (the levels are sm_90a kernels), and the exit status says so (3); see EPILOG.
"""

from __future__ import annotations

import argparse
import sys

NAME = "climb"
HELP = "Run the resource, correctness and performance gates over levels, dtypes and shapes."
#: Builds kernels: the CLI refuses a bad GEMM_LADDER_COMPILER or GEMM_LADDER_CACHE first (cli.main).
COMPILES = True
EPILOG = ("exit status: 0 every gate that applies ran and passed; 1 a gate failed (or a level did not build); "
          "2 bad input, nothing run (a --json found unwritable before the run, /dev/full included); 3 nothing "
          "failed but a gate did not run (no GPU: the levels' correctness and timing need an sm_90a GPU); 4 the "
          "run ended but --json (or stdout) could not be written (a full disk), whatever the gates found: one "
          "line on stderr, and the verdict line says both. The last line names each gate: passed, failed or not "
          "run (with the reason); so does the JSON's 'gates'.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--levels, --dtype, --shapes, --json, --arch, --budget."""
    parser.epilog = EPILOG
    parser.add_argument("--levels", default="all", help="levels to climb: 'all' (default), N, N-M or a comma list (1-3,5)")
    parser.add_argument("--dtype", default="bf16", help="bf16 (default), fp16, all, or a comma list")
    parser.add_argument("--shapes", default=None,
                        help="comma list of shape sets (edge, square, llm, unaligned) or MxNxK with 1 <= M, N, K < 2^31 "
                             "(default: on a GPU, edge checked and square plus three llm shapes timed, about two "
                             "minutes on an H200, ending with the stopping rule's verdict; without a GPU, edge)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the result JSON (docs/results-schema.md) here")
    parser.add_argument("--arch", default="sm_90a", help="target architecture for the builds (default and only choice: sm_90a)")
    parser.add_argument("--budget", type=float, default=0.5, metavar="SECONDS",
                        help="time budget of one timing measurement, > 0 (default: 0.5 s)")


def run(args: argparse.Namespace) -> int:
    """Climb; the exit status of :data:`EPILOG`."""
    from gemm_ladder.commands.argcheck import output_refusal
    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.gates.climb import Target, check_run_arguments, command_line, parse_level_range, run_gates
    from gemm_ladder.gates.verdict import EXIT_USAGE, finish
    from gemm_ladder.levels import LEVELS, arch_refusal
    from gemm_ladder import gpu
    from gemm_ladder.shapes import default_climb_shapes, parse_shape_sets

    try:
        numbers = parse_level_range(args.levels, list(LEVELS))
        dtypes = parse_dtypes(args.dtype)
        shapes = parse_shape_sets(args.shapes) if args.shapes is not None else default_climb_shapes(gpu.gpu_available())
        check_run_arguments(shapes, args.budget)
        if (refusal := arch_refusal(args.arch)) is not None:
            raise ValueError(refusal)
        if args.json and (why := output_refusal(args.json)):
            raise ValueError(f"--json: {why}")
    except ValueError as exc:
        print(f"gemm-ladder climb: {exc}", file=sys.stderr)
        return EXIT_USAGE
    targets = [Target.from_level(LEVELS[n]) for n in numbers]
    result = run_gates(targets, dtypes, shapes, arch=args.arch, command=command_line(), time_budget_s=args.budget,
                       verdict=False)
    return finish(result, args.json, "climb")
