"""``gemm-ladder criteria --level N``: the acceptance criteria of level N, as the gates apply them.

    gemm-ladder criteria --level 5                 # a Markdown checklist: correctness, performance, resources
    gemm-ladder criteria --level 9 --dtype fp16 --format json

Every number is read from the gates' own constants and the level registry's Domain and PerfExpectation
(:mod:`gemm_ladder.advise.criteria`). No GPU, no nvcc needed. Exit status 0, or 2 on a bad input.
"""

from __future__ import annotations

import argparse
import sys

NAME = "criteria"
HELP = "Print the acceptance criteria of one level (correctness, performance, resources) as the gates apply them."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--level, --dtype, --format."""
    parser.add_argument("--level", required=True, help="the level number")
    parser.add_argument("--dtype", default="bf16", help="bf16 (default) or fp16")
    parser.add_argument("--format", default="md", help="md (default) or json")


def run(args: argparse.Namespace) -> int:
    """Print the checklist; 0, or 2 for an unknown level or dtype."""
    from gemm_ladder.advise.criteria import level_criteria
    from gemm_ladder.advise.render import criteria_json, criteria_markdown

    from gemm_ladder.levels import LEVELS

    if args.format not in ("md", "json"):
        print(f"gemm-ladder criteria: --format {args.format!r}: use md or json", file=sys.stderr)
        return 2
    try:
        criteria = level_criteria(int(args.level), args.dtype)
    except (KeyError, ValueError):
        bad = "--dtype" if args.level.strip().isdigit() and int(args.level) in LEVELS else "--level"
        rule = "bf16 or fp16" if bad == "--dtype" else f"the ladder has levels {sorted(LEVELS)}"
        print(f"gemm-ladder criteria: {bad} {getattr(args, bad[2:])!r}: {rule}", file=sys.stderr)
        return 2
    print(criteria_json(criteria) if args.format == "json" else criteria_markdown(criteria), end="")
    return 0
