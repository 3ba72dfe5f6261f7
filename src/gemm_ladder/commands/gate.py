"""``gemm-ladder gate FILE.py:FUNC``: hold your own GEMM to the ladder's gates.

    gemm-ladder gate examples/my_gemm.py:gemm --shapes edge,square --json my_gemm.json
    gemm-ladder gate my_kernel.py:gemm --cubin build/gemm.cubin --kernel-name gemm_kernel

``FUNC`` is ``f(a, b) -> c`` computing ``a @ b.T`` (a: (M, K), b: (N, K), both row-major, bf16 or
fp16, on CUDA; c: (M, N) in the same dtype). Optional attributes the gate uses when present:
``domain`` (a :class:`gemm_ladder.contract.Domain`: shapes outside it must raise
OutsideDomainError), ``perf`` (a PerfExpectation), ``check(a, b)`` + ``launch(a, b, c)`` (exact
coverage check), ``build(dtype, arch)`` (+ ``geometry(dtype)``) for the resource gate. Same
tables and JSON as ``climb``; exit statuses in EPILOG.

Without a GPU the callable is tried on CPU tensors: if it runs there, the correctness gate runs on
CPU; if it raises a device error (it needs CUDA), correctness is "not run" and the exit status is 3.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

NAME = "gate"
HELP = "Run the correctness, performance and resource gates on your own f(a, b) -> a @ b.T."
EPILOG = ("exit status: 0 every gate that applies ran and passed; 1 a gate failed (a wrong result, an "
          "exception, a refusal inside the declared domain, a speed or resource limit); 2 bad input (FILE.py "
          "that does not import, no FUNC, a bad option), nothing run; 3 nothing failed but a gate did not run "
          "(no GPU: FUNC needs CUDA, or a shape to time). Without a GPU, FUNC is checked on CPU tensors when it "
          "runs on them. The last line names each gate: passed, failed or not run (with the reason); so does "
          "the JSON's 'gates'.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """SPEC (FILE.py:FUNC), --shapes, --dtype, --json, --cubin, --kernel-name, --arch, hidden --device."""
    parser.epilog = EPILOG
    parser.add_argument("spec", metavar="FILE.py:FUNC", help="the Python file and the callable in it")
    parser.add_argument("--shapes", default="edge",
                        help="shape sets (edge, square, llm, unaligned) or MxNxK with 1 <= M, N, K < 2^31 (default: edge)")
    parser.add_argument("--dtype", default="bf16", help="bf16 (default), fp16, all, or a comma list")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the result JSON here")
    parser.add_argument("--cubin", metavar="PATH", type=Path, default=None, help="your kernel's cubin, for the resource gate")
    parser.add_argument("--kernel-name", default=None, help="entry point in --cubin (default: FUNC)")
    parser.add_argument("--arch", default="sm_90a", help="architecture for a callable's build() (default: sm_90a)")
    parser.add_argument("--budget", type=float, default=0.5, metavar="SECONDS", help="time budget per measurement, > 0")
    # Hidden: 'cpu' runs the gate as on a machine without a GPU (the tests use it).
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)


class SpecError(ValueError):
    """FILE.py:FUNC cannot be loaded."""


def load_callable(spec: str) -> tuple[Any, str]:
    """'path/to/file.py:func' -> (the callable, its name); raises SpecError naming what is wrong."""
    file, sep, func = spec.rpartition(":")
    if not sep or not file or not func:
        raise SpecError(f"{spec!r}: expected FILE.py:FUNC")
    path = Path(file)
    if not path.is_file():
        raise SpecError(f"{file}: no such file")
    module_name = f"_gemm_ladder_user_{path.stem}"
    mod_spec = importlib.util.spec_from_file_location(module_name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise SpecError(f"{file}: not a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        mod_spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise SpecError(f"{file}:{exc.lineno}: SyntaxError: {exc.msg}") from exc
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module is not ours to crash on
        sys.modules.pop(module_name, None)
        raise SpecError(f"{file} failed to import: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    fn = getattr(module, func, None)
    if fn is None or not callable(fn):
        raise SpecError(f"{file} has no callable {func!r}")
    return fn, func


def run(args: argparse.Namespace) -> int:
    """Gate the callable; the exit status of :data:`EPILOG`."""
    from gemm_ladder.contract import Domain, parse_dtypes
    from gemm_ladder.gates.climb import Target, check_run_arguments, command_line, run_gates
    from gemm_ladder.gates.verdict import EXIT_USAGE, exit_status
    from gemm_ladder.results import check_writable, write_json
    from gemm_ladder.shapes import parse_shape_sets

    try:
        dtypes = parse_dtypes(args.dtype)
        shapes = parse_shape_sets(args.shapes)
        check_run_arguments(shapes, args.budget)
        if args.device not in ("cuda", "cpu"):
            raise ValueError(f"--device {args.device!r}: use cuda or cpu")
        if args.cubin is not None and not args.cubin.is_file():
            raise ValueError(f"--cubin {args.cubin}: no such file")
        if args.json and (why := check_writable(args.json)):
            raise ValueError(f"--json: {why}")
        fn, name = load_callable(args.spec)
    except (SpecError, ValueError) as exc:
        print(f"gemm-ladder gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    domain = getattr(fn, "domain", None)
    target = Target(
        fn=fn, number=None, name=name, idea=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "",
        source=args.spec.rpartition(":")[0], domain=domain if isinstance(domain, Domain) else None,
        perf=getattr(fn, "perf", None), builder=fn if callable(getattr(fn, "build", None)) else None,
        cubin=args.cubin, kernel_name=args.kernel_name or name,
    )
    result = run_gates([target], dtypes, shapes, arch=args.arch, device=args.device, command=command_line(),
                       time_budget_s=args.budget)
    if args.json:
        try:
            print(f"wrote {write_json(result, args.json)}")
        except OSError as exc:
            print(f"gemm-ladder gate: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
    return exit_status(result)
