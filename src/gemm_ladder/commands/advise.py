"""``gemm-ladder advise TARGET``: where a kernel stands on the ladder, and its next step or the stop.

    gemm-ladder advise --level 5                          # a ladder level, from its SASS and build
    gemm-ladder advise examples/my_gemm.py:gemm           # your f(a, b) -> a @ b.T (its build() if any)
    gemm-ladder advise my_kernel.cu --kernel-name gemm    # compiled here for sm_90a
    gemm-ladder advise build/gemm.cubin --kernel-name gemm
    gemm-ladder advise bench/results/RESULT.json          # the stopping rule over a climb
    gemm-ladder advise --level 7 --format json --results bench/results/OTHER_climb.json

The answer has the five parts of the ladder's method (gemm_ladder.advise): conclusion, evidence or assumptions (each labelled measured,
inferred or assumed, with its source), the designer's plan for the next step, the one falsifiable
experiment with its expected figure, risks and fallback. Expected gains come from the ladder's own
climb (default: the newest ``bench/results/*climb*<dtype>*.json`` with timed rows; ``--results``).
With a GPU, a level or a callable is also gated now against the level below (``--no-measure`` skips it).
Needs nvcc and cuobjdump to read SASS, not a GPU. Exit status 0 with an answer, 1 when the target's own
build fails (nvcc rejects the .cu, its build() raises), 2 on a bad input, 3 when a level, a .cu or a
.cubin is to be read and cuobjdump is missing (one line naming it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

from gemm_ladder.design.problem import parse_triple

NAME = "advise"
HELP = "Place a kernel on the ladder from its SASS, build and launch, and give its next step (with its plan) or the stop."
#: Builds kernels: the CLI refuses a bad GEMM_LADDER_COMPILER or GEMM_LADDER_CACHE first (cli.main).
COMPILES = True

#: What the GPU measurement times by default (the edge set is always checked for correctness).
DEFAULT_MEASURE_SHAPES = "4096x4096x4096,8192x8192x8192"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """TARGET or --level, --dtype, --arch, --shape, --results, --kernel-name, --cubin, --format, measuring."""
    parser.add_argument("target", nargs="?", metavar="TARGET",
                        help="FILE.py:FUNC, a .cubin, a .cu file, or a results .json (or use --level N)")
    parser.add_argument("--level", help="one of the ladder's own levels")
    parser.add_argument("--dtype", default=None,
                        help="bf16 or fp16 (default: bf16; for a results JSON, the dtype its timed rows have)")
    parser.add_argument("--arch", default="sm_90a", help="architecture to build for: sm_90a, the ladder's (default)")
    parser.add_argument("--shape", default="4096x4096x4096",
                        help="MxNxK the next step's plan is drawn for, 1 <= M, N, K < 2^31 (default: 4096x4096x4096)")
    parser.add_argument("--results", metavar="JSON", type=Path,
                        help="the climb the expected gains come from (default: the newest bench/results/*climb*<dtype>*.json with timed rows)")
    parser.add_argument("--kernel-name", help="entry point in a cubin or .cu (default: its only one)")
    parser.add_argument("--cubin", type=Path, help="with FILE.py:FUNC: the cubin its kernel runs, when it has no build()")
    parser.add_argument("--format", default="md", help="md (default) or json")
    parser.add_argument("--no-measure", action="store_true", help="on a GPU, do not run the gates now")
    parser.add_argument("--measure-shapes", default=DEFAULT_MEASURE_SHAPES,
                        help=f"shapes timed on a GPU, besides the edge set: shape sets or MxNxK with 1 <= M, N, K < "
                             f"2^31, as climb's --shapes (default: {DEFAULT_MEASURE_SHAPES})")


class UsageError(ValueError):
    """A bad command line: one line on stderr, exit status 2."""


def _level_number(text: str) -> int:
    """'5' -> 5; a UsageError naming the levels that exist otherwise."""
    from gemm_ladder.levels import LEVELS

    try:
        number = int(text)
    except ValueError:
        number = None
    if number not in LEVELS:
        raise UsageError(f"--level {text!r}: the ladder has levels {sorted(LEVELS)}")
    return number


def _kind(target: str) -> str:
    file, sep, func = target.rpartition(":")
    if sep and file.endswith(".py") and func:
        return "callable"
    for suffix, kind in ((".cubin", "cubin"), (".cu", "cu"), (".json", "results")):
        if target.endswith(suffix):
            return kind
    raise UsageError(f"TARGET {target!r}: expected FILE.py:FUNC, a .cubin, a .cu file or a results .json (or --level N)")


def _default_dtype(target: str | None) -> str:
    """bf16, or for a results JSON the one dtype of its timed rows (bf16 when it has both or none)."""
    from gemm_ladder.gates.climb_data import ResultError, load_result, timed_rows

    if target is None or not target.endswith(".json"):
        return "bf16"
    try:
        dtypes = sorted({r.dtype for r in timed_rows(load_result(target))})
    except ResultError:
        return "bf16"  # the file's own error is reported where it is read
    return dtypes[0] if len(dtypes) == 1 else "bf16"


def _climb(args: argparse.Namespace, dtype: str):
    """(the climb result, its description) the gains come from, or (None, None) when there is none."""
    from gemm_ladder.gates.climb_data import describe_source, find_climb_results, load_result

    path = args.results or find_climb_results(dtype)
    if path is None:
        return None, None
    result = load_result(path)
    return result, describe_source(path, result)


def _measure(args, ev, targets, level_number, reference, shapes, level=None) -> None:
    """Run the gates now when there is a GPU (and the user did not say --no-measure); else say so."""
    from gemm_ladder.advise.measure import (
        add_grid_fact, add_level_result_facts, add_user_result_facts, run_gates_now,
    )
    from gemm_ladder.gpu import gpu_available

    if args.no_measure:
        ev.add("measured.gpu", None, "gates not run now (--no-measure)", "not run", "the command line")
        return
    if not gpu_available():
        ev.add("measured.gpu", None, "gates not run now: no GPU here (correctness and speed need an sm_90a GPU)",
               "not run", "gemm_ladder.gpu.gpu_available()")
        return
    result = run_gates_now(targets, ev.dtype, shapes, ev.arch)
    gpu = ((result.get("meta") or {}).get("gpu") or {}).get("name") or "this GPU"
    source = f"the gates run now on {gpu} ({(result.get('meta') or {}).get('date')})"
    if level_number is not None:
        add_level_result_facts(ev, result, level_number, source, prefix="measured")
    else:
        add_user_result_facts(ev, result, source, reference=reference)
    if level is not None:
        add_grid_fact(ev, level, parse_triple(args.shape, "--shape"))


def _advise(args: argparse.Namespace):
    """Check the command line, gather the target's evidence, and build the answer (an Advice)."""
    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.shapes import parse_shape_sets

    if (args.target is None) == (args.level is None):
        raise UsageError("give either TARGET or --level N")
    if args.format not in ("md", "json"):
        raise UsageError(f"--format {args.format!r}: use md or json")
    from gemm_ladder.levels import arch_refusal

    if (refusal := arch_refusal(args.arch)) is not None:  # the rungs are sm_90a's (wgmma, TMA, setmaxnreg)
        raise UsageError(refusal)
    level = _level_number(args.level) if args.level is not None else None
    kind = _kind(args.target) if args.target is not None else "level"
    dtypes = parse_dtypes(args.dtype or _default_dtype(args.target))
    if len(dtypes) != 1:
        raise UsageError(f"--dtype {args.dtype!r}: advise one dtype at a time (bf16 or fp16)")
    if args.cubin is not None and kind != "callable":
        raise UsageError("--cubin goes with a FILE.py:FUNC target")
    from gemm_ladder.gates.climb import check_shapes

    shape = parse_triple(args.shape, "--shape")  # design's parser, climb's and gate's rule (1 <= M, N, K < 2^31)
    check_shapes([("custom", shape)], "--shape")
    measure_shapes = parse_shape_sets("edge," + args.measure_shapes)
    check_shapes(measure_shapes, "--measure-shapes")
    if kind in ("level", "cubin", "cu") or args.cubin is not None:
        from gemm_ladder.runtime import compiler

        compiler.cuobjdump_path()  # its SASS is the evidence: no cuobjdump is the CLI's one line and exit 3
    ctx = SimpleNamespace(args=args, dtype=dtypes[0], shape=shape, shapes=measure_shapes)
    ctx.climb_result, ctx.climb_source = _climb(args, ctx.dtype)
    if kind == "level":
        return _advise_level(ctx, level)
    if kind == "results":
        return _advise_results(ctx)
    if kind == "callable":
        return _advise_callable(ctx)
    return _advise_binary(ctx, kind)


def _answer(ctx, ev):
    from gemm_ladder.advise.advice import advise_kernel

    return advise_kernel(ev, climb_result=ctx.climb_result, climb_source=ctx.climb_source, shape=ctx.shape)


def _advise_level(ctx, number: int):
    from gemm_ladder.advise.measure import add_level_result_facts
    from gemm_ladder.advise.targets import level_evidence
    from gemm_ladder.gates.climb import Target
    from gemm_ladder.levels import LEVELS

    level = LEVELS[number]
    ev = level_evidence(level, ctx.dtype, ctx.args.arch, ctx.shape)
    if ctx.climb_result is not None:
        add_level_result_facts(ev, ctx.climb_result, number, ctx.climb_source)
    below = [Target.from_level(LEVELS[number - 1])] if number - 1 in LEVELS else []
    _measure(ctx.args, ev, below + [Target.from_level(level)], number, None, ctx.shapes, level)
    return _answer(ctx, ev)


def _advise_results(ctx):
    from gemm_ladder.advise.climb_advice import advise_climb
    from gemm_ladder.gates.climb_data import describe_source, load_result
    from gemm_ladder.advise.measure import add_user_result_facts
    from gemm_ladder.advise.targets import result_kernel_evidence

    result = load_result(ctx.args.target)
    source = describe_source(ctx.args.target, result)
    users = [lv for lv in result.get("levels") or [] if lv.get("number") is None]
    if not users:  # a climb of the ladder's levels: the stopping rule over it
        return advise_climb(result, source, ctx.dtype, shape=ctx.shape, arch=ctx.args.arch)
    ev = result_kernel_evidence(result, users[0], source, ctx.dtype, ctx.args.arch)
    add_user_result_facts(ev, result, source)
    return _answer(ctx, ev)


def _advise_callable(ctx):
    from gemm_ladder.advise.ladder_position import place
    from gemm_ladder.advise.targets import callable_evidence
    from gemm_ladder.commands.gate import SpecError, load_callable
    from gemm_ladder.contract import Domain
    from gemm_ladder.gates.climb import Target
    from gemm_ladder.levels import LEVELS

    args = ctx.args
    try:
        fn, name = load_callable(args.target)
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: a bad input, not our crash
        raise UsageError(f"{args.target}: importing it raised {type(exc).__name__}: {exc}".splitlines()[0]) from None
    ev = callable_evidence(fn, args.target, ctx.dtype, args.arch, cubin=args.cubin, kernel_name=args.kernel_name)
    pos = place(ev)
    reference = [Target.from_level(LEVELS[pos.level])] if pos.level in LEVELS else []  # the ladder at its rung
    domain = getattr(fn, "domain", None)
    user = Target(fn=fn, number=None, name=name, source=args.target.rpartition(":")[0],
                  domain=domain if isinstance(domain, Domain) else None, perf=getattr(fn, "perf", None))
    _measure(args, ev, reference + [user], None, pos.level if reference else None, ctx.shapes)
    return _answer(ctx, ev)


def _advise_binary(ctx, kind: str):
    from gemm_ladder.advise.targets import cu_evidence, cubin_evidence

    args = ctx.args
    evidence = cubin_evidence if kind == "cubin" else cu_evidence
    ev = evidence(Path(args.target), args.kernel_name, ctx.dtype, args.arch)
    ev.add("measured.gpu", None, "gates not run: a bare kernel has no launcher the gates could call (wrap it as "
           "FILE.py:FUNC to measure it)", "not run", args.target)
    return _answer(ctx, ev)


def run(args: argparse.Namespace) -> int:
    """Print the advice; 0 with an answer, 1 when the target's own build fails, 2 on a bad input (one line on
    stderr each)."""
    from gemm_ladder.gates.climb_data import ResultError
    from gemm_ladder.advise.render import advice_json, advice_markdown
    from gemm_ladder.advise.targets import BuildFailed, TargetError

    try:
        advice = _advise(args)
    except BuildFailed as exc:  # the target's own build failed: a finding, as climb and gate report it
        print(f"gemm-ladder advise: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    except (UsageError, TargetError, ResultError, ValueError) as exc:
        print(f"gemm-ladder advise: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(advice_json(advice) if args.format == "json" else advice_markdown(advice), end="")
    return 0
