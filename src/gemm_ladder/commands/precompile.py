"""``gemm-ladder precompile``: build every kernel the dispatcher can pick, ahead of time.

    gemm-ladder precompile                                  # bf16 and fp16, every shape class
    gemm-ladder precompile --dtype bf16 --classes large,small_m
    GEMM_LADDER_CACHE=/srv/kcache gemm-ladder precompile --json builds.json

Fills the kernel cache (``GEMM_LADDER_CACHE``) so that no call compiles: deployment and CUDA-graph
capture need that (a capture that would need a build raises CaptureBuildError). Needs nvcc, not a
GPU; on a GPU it also loads each build (``--no-load`` to skip). Shape classes
(dispatch/precompile.py CLASSES): large, small_m, fp32_out, unaligned, or all.

Exit status: 0 every build built (or is not a variant the kernel plans), 1 a build failed or no nvcc,
2 bad input (one line on stderr, nothing built).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gemm_ladder.commands.argcheck import BadArgument, integer, writable_file

NAME = "precompile"
HELP = "Build every kernel the dispatcher can pick for the given dtypes and shape classes (no GPU needed)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="all", help="bf16, fp16 or all (default), or a comma list")
    parser.add_argument("--classes", default="all",
                        help="comma list of shape classes: large, small_m, fp32_out, unaligned, or all (default)")
    parser.add_argument("--levels", action="store_true", help="also build the ladder's nine levels")
    parser.add_argument("--workers", default=None, help="parallel builds (default: the CPU count)")
    parser.add_argument("--no-load", action="store_true", help="do not load the builds on the GPU")
    parser.add_argument("--json", type=Path, default=None, help="also write {label: outcome} here")


def run(args: argparse.Namespace) -> int:
    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.dispatch.precompile import check_classes, library_builds, precompile
    from gemm_ladder.runtime.compiler import CompilerNotFoundError, cache_root

    try:
        dtypes = tuple(parse_dtypes(args.dtype))
        classes = check_classes(args.classes)
        workers = integer(args.workers, "--workers", minimum=1) if args.workers is not None else None
        if args.json is not None:
            writable_file(args.json, "--json")
        library_builds(dtypes, classes)  # every rule checked before anything is built
    except (BadArgument, ValueError) as exc:
        print(f"gemm-ladder precompile: {exc}", file=sys.stderr)
        return 2
    try:
        outcomes = precompile(dtypes, classes=classes, workers=workers, levels=args.levels,
                              load=False if args.no_load else None)
    except CompilerNotFoundError as exc:
        print(f"gemm-ladder precompile: {exc}", file=sys.stderr)
        return 1
    for label, outcome in outcomes.items():
        print(f"{label}: {outcome}")
    print(summary(outcomes, str(cache_root())))
    failed = [v for v in outcomes.values() if v.startswith("failed")]
    if args.json is not None:
        args.json.write_text(json.dumps(outcomes, indent=1))
    return 1 if failed else 0


def summary(outcomes: dict[str, str], where: str) -> str:
    """The closing line: builds ready (built, or loaded too) out of the builds there are, then the
    entries that are no build (a variant the kernel does not plan) and the failures, each counted."""
    ready = sum(v.startswith("built") for v in outcomes.values())
    skipped = sum(v.startswith("not a variant") for v in outcomes.values())
    failed = sum(v.startswith("failed") for v in outcomes.values())
    line = f"{ready} of {ready + failed} builds ready in {where}"
    if failed:
        line += f"; {failed} failed"
    if skipped:
        line += f"; {skipped} of the {len(outcomes)} entries are not a variant the kernels plan (nothing to build)"
    return line
