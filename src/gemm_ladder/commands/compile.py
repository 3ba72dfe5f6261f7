"""``gemm-ladder compile --level N``: build one level and print its resource gate and SASS census.

    gemm-ladder compile --level 3 --dtype bf16          # registers, shared memory, spills, census
    gemm-ladder compile --level 3 --sass | less          # ... and the whole SASS

Needs nvcc or NVRTC, and cuobjdump, not a GPU. Exit status 1 when the build fails (no compiler included) or the
resource gate fails, 2 on a usage error (a level or dtype that does not exist, an architecture the
ladder is not built for).
"""

from __future__ import annotations

import argparse
import sys

NAME = "compile"
HELP = "Compile one level and print its resource report and SASS census (no GPU needed)."
#: Builds kernels: the CLI refuses a bad GEMM_LADDER_COMPILER or GEMM_LADDER_CACHE first (cli.main).
COMPILES = True

#: The one architecture the ladder's kernels are written for: they issue wgmma, which exists on
#: sm_90a only (PTX ISA, wgmma.mma_async, "Target ISA notes").
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--level, --dtype, --arch, --sass."""
    parser.add_argument("--level", type=int, required=True, help="the level number")
    parser.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or all")
    parser.add_argument("--arch", default="sm_90a", help="target architecture (default and only choice: sm_90a)")
    parser.add_argument("--sass", action="store_true", help="also print the full SASS")


def run(args: argparse.Namespace) -> int:
    """Build, judge and print; 0 when the resource gate passes, 1 when it fails, 2 on a usage error.
    A missing compiler or cuobjdump propagates (the CLI's one line and exit 3)."""
    from rich.table import Table

    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.gates.climb import Target
    from gemm_ladder.gates.resources import sass_census
    from gemm_ladder.gates.tables import make_console, print_resources
    from gemm_ladder.levels import LEVELS, arch_refusal
    from gemm_ladder.runtime.compiler import CompileError

    if args.level not in LEVELS:
        print(f"gemm-ladder compile: no level {args.level}: the ladder has levels {sorted(LEVELS)}", file=sys.stderr)
        return 2
    refusal = arch_refusal(args.arch)
    if refusal:
        print(f"gemm-ladder compile: {refusal}", file=sys.stderr)
        return 2
    try:
        dtypes = parse_dtypes(args.dtype)
    except ValueError as exc:
        print(f"gemm-ladder compile: {exc}", file=sys.stderr)
        return 2
    console = make_console()
    target = Target.from_level(LEVELS[args.level])
    status = 0
    for dtype in dtypes:
        try:
            report, sass = target.resources(dtype, args.arch)
        except CompileError as exc:
            console.print(f"[bold red]{target.title} {dtype}: build failed[/]")
            print(exc.log, file=sys.stderr)
            status = 1
            continue
        kernel = LEVELS[args.level].build(dtype, args.arch)
        console.print(f"[bold]{target.title}[/] {dtype} {args.arch}: {kernel.cubin}")
        print_resources([report.to_json()], [target], console)
        census = sass_census(sass)[report.kernel_name]
        table = Table(title=f"SASS census of {report.kernel_name} ({census.total} instructions)")
        table.add_column("opcode")
        table.add_column("count", justify="right")
        for op, count in sorted(census.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            table.add_row(op, str(count))
        console.print(table)
        if args.sass:
            print(sass)
        status = max(status, 0 if report.passed else 1)
    return status
