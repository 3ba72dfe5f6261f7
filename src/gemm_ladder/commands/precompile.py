"""``gemm-ladder precompile``: build every kernel the dispatcher can pick, ahead of time.

    gemm-ladder precompile                                  # bf16 and fp16, every shape class
    gemm-ladder precompile --dtype bf16 --classes large,small_m
    gemm-ladder precompile --epilogues all                  # every built-in epilogue combination too
    GEMM_LADDER_CACHE=/srv/kcache gemm-ladder precompile --json builds.json

Fills the kernel cache (``GEMM_LADDER_CACHE``) so that no call compiles: deployment and CUDA-graph
capture need that (a capture that would need a build raises CaptureBuildError). Needs nvcc or NVRTC, not a
GPU; on a GPU it also loads each build (``--no-load`` to skip). Shape classes
(dispatch/precompile.py CLASSES): large, small_m, fp32_out, unaligned, quantized_out, or all. Epilogues
(dispatch/precompile.py EPILOGUE_LEVELS): linear's built-in fused epilogues compiled into each class's
kernels, none, common (default: bias, activation, residual in the input dtype) or all (also float32
bias and residual, alpha). The last line says how many builds are ready, how many were compiled now
and how many were already cached (and where: the cache folder), and how many the package ships built
(runtime/aot.py). A model's own set: gemm_ladder.precompile(model, example_inputs).

Exit status: 0 every build built (or is not a variant the kernel plans), 1 a build failed, 2 bad input
(one line on stderr, nothing built), 3 no kernel compiler (one line on stderr naming it), 4 the builds
ran but --json could not be written (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gemm_ladder.commands.argcheck import BadArgument, integer, writable_file

NAME = "precompile"
#: dispatch/precompile.py's CLASSES, named here so that --help does not import the library (a test keeps them equal).
CLASS_NAMES = "large, small_m, fp32_out, unaligned, quantized_out"
HELP = "Build every kernel the dispatcher can pick for the given dtypes and shape classes (no GPU needed)."
#: Builds kernels: the CLI refuses a bad GEMM_LADDER_COMPILER or GEMM_LADDER_CACHE first (cli.main).
COMPILES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="all", help="bf16, fp16 or all (default), or a comma list")
    parser.add_argument("--classes", default="all",
                        help=f"comma list of shape classes: {CLASS_NAMES}, or all (default)")
    parser.add_argument("--epilogues", default="common",
                        help="linear's built-in epilogues built into each kernel: none, common (default) or all")
    parser.add_argument("--levels", action="store_true", help="also build the ladder's nine levels")
    parser.add_argument("--workers", default=None, help="parallel builds (default: the CPU count)")
    parser.add_argument("--no-load", action="store_true", help="do not load the builds on the GPU")
    parser.add_argument("--json", type=Path, default=None, help="also write {label: outcome} here")


def run(args: argparse.Namespace) -> int:
    from gemm_ladder.gates.verdict import EXIT_UNWRITTEN
    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.dispatch.precompile import check_classes, epilogue_variants, library_builds, precompile
    from gemm_ladder.results import write_json
    from gemm_ladder.runtime.compiler import cache_root

    try:
        dtypes = tuple(parse_dtypes(args.dtype))
        classes = check_classes(args.classes)
        workers = integer(args.workers, "--workers", minimum=1) if args.workers is not None else None
        library_builds(dtypes, classes)  # every rule checked before anything is built
        epilogue_variants(args.epilogues)
        if args.json is not None:  # last: it creates a missing folder, so not for a refused command
            writable_file(args.json, "--json")
    except (BadArgument, ValueError) as exc:
        print(f"gemm-ladder precompile: {exc}", file=sys.stderr)
        return 2
    # A missing compiler propagates: the CLI ends the command with one line and exit 3 (cli.py).
    outcomes = precompile(dtypes, classes=classes, workers=workers, levels=args.levels,
                          load=False if args.no_load else None, epilogues=args.epilogues)
    failed = outcomes.failed
    for label, outcome in outcomes.items():
        print(f"{label}: {outcome}")
    in_cache = outcomes.compiled or outcomes.cached  # shipped builds stay in the package, not the cache
    print(f"{outcomes.summary()} (of {len(outcomes)})" + (f" in {cache_root()}" if in_cache else ""))
    if args.json is not None:
        try:
            write_json(dict(outcomes), args.json)
        except OSError as exc:  # the disk filled during the builds: they are done, the file is not
            print(f"gemm-ladder precompile: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_UNWRITTEN
    return 1 if failed else 0

