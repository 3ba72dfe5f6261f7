"""``gemm-ladder gate FILE.py:FUNC``: hold your own GEMM to the ladder's gates.

    gemm-ladder gate examples/my_gemm.py:gemm --shapes edge,square --json my_gemm.json
    gemm-ladder gate my_kernel.py:gemm --cubin build/gemm.cubin --kernel-name gemm_kernel
    gemm-ladder gate --epilogue examples/scale_clamp.py:epilogue

With ``--epilogue FILE.py:NAME`` (a :class:`gemm_ladder.Epilogue`), the gated kernel is the library's
top kernel with that epilogue fused (``gemm_ladder.linear(a, b, epilogue=NAME, **inputs)``): the
resource gate compiles it into the general kernel (both orientations) and the small-M kernel and
counts spills and local memory (no GPU needed); the correctness gate (gates/epilogue.py) compares
every shape with the epilogue's reference on the float64 product. A CUDA body nvcc rejects is bad
input (exit 2, nvcc's message printed).

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
#: Builds kernels: the CLI refuses a bad GEMM_LADDER_COMPILER or GEMM_LADDER_CACHE first (cli.main).
COMPILES = True
EPILOG = ("exit status: 0 every gate that applies ran and passed; 1 a gate failed (a wrong result, an "
          "exception, a refusal inside the declared domain, a speed or resource limit); 2 bad input (FILE.py "
          "that does not import, no FUNC, a bad option, a --json found unwritable before the run), nothing run; "
          "3 nothing failed but a gate did not run (no GPU: FUNC needs CUDA, or a shape to time); 4 the run "
          "ended but --json (or stdout) could not be written (a full disk), whatever the gates found: one line "
          "on stderr, and the verdict line says both. "
          "--arch is the architecture of FUNC's own build(); with --epilogue it must be sm_90a, the library's. "
          "Without a GPU, FUNC is checked on CPU tensors when it runs on them. The last line names each gate: "
          "passed, failed or not run (with the reason); so does the JSON's 'gates'.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """SPEC (FILE.py:FUNC), --shapes, --dtype, --json, --cubin, --kernel-name, --arch, hidden --device."""
    parser.epilog = EPILOG
    parser.add_argument("spec", metavar="FILE.py:FUNC", nargs="?", default=None,
                        help="the Python file and the callable in it (or use --epilogue)")
    parser.add_argument("--epilogue", metavar="FILE.py:NAME", default=None,
                        help="gate the library's top kernel with this gemm_ladder.Epilogue fused instead of FUNC")
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


def load_callable(spec: str, *, want_callable: bool = True) -> tuple[Any, str]:
    """'path/to/file.py:func' -> (the callable, its name); raises SpecError naming what is wrong.
    ``want_callable`` False: any attribute (an Epilogue)."""
    file, sep, func = spec.rpartition(":")
    if not sep or not file or not func:
        raise SpecError(f"{spec!r}: expected FILE.py:FUNC")
    path = Path(file)
    if path.is_dir():
        raise SpecError(f"{file} is a folder, not a Python file")
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
    if fn is None or (want_callable and not callable(fn)):
        raise SpecError(f"{file} has no {'callable ' if want_callable else ''}{func!r}")
    return fn, func


def run(args: argparse.Namespace) -> int:
    """Gate the callable; the exit status of :data:`EPILOG`."""
    from gemm_ladder.commands.argcheck import output_refusal
    from gemm_ladder.contract import Domain, parse_dtypes
    from gemm_ladder.gates.climb import Target, check_run_arguments, command_line, run_gates
    from gemm_ladder.gates.verdict import EXIT_USAGE, finish
    from gemm_ladder.levels import arch_refusal
    from gemm_ladder.shapes import parse_shape_sets

    try:
        dtypes = parse_dtypes(args.dtype)
        shapes = parse_shape_sets(args.shapes)
        check_run_arguments(shapes, args.budget)
        if args.device not in ("cuda", "cpu"):
            raise ValueError(f"--device {args.device!r}: use cuda or cpu")
        if args.cubin is not None and (why := cubin_refusal(args.cubin)):
            raise ValueError(f"--cubin {args.cubin}{why}")
        if (args.spec is None) == (args.epilogue is None):
            raise ValueError("give FILE.py:FUNC or --epilogue FILE.py:NAME (one of the two)")
        if args.epilogue is None:
            fn, name = load_callable(args.spec)
        elif (refusal := arch_refusal(args.arch)) is not None:  # the library's kernels are sm_90a (wgmma)
            raise ValueError(refusal)
        if args.json and (why := output_refusal(args.json)):  # last: it creates a missing folder
            raise ValueError(f"--json: {why}")
        if args.epilogue is not None:
            return run_epilogue(args, dtypes, shapes)
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
                       time_budget_s=args.budget, verdict=False)
    return finish(result, args.json, "gate")


def cubin_refusal(path: Path) -> str | None:
    """Why ``path`` is not a cubin --cubin can take (its words follow the path), or None: bad input,
    refused before any build, as ``advise`` refuses it; a cubin is an ELF file."""
    if path.is_dir():
        return " is a folder, not a cubin"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        return ": no such file"
    except OSError as exc:
        return f": cannot be read: {exc.strerror or exc}"
    return None if head == b"\x7fELF" else ": not a cubin (no ELF header)"


#: Why ``gate --epilogue`` has no performance gate: it times nothing.
EPILOGUE_UNTIMED = ("gate --epilogue times nothing: an epilogue is judged by its correctness and resources "
                    "(python3 bench/epilogues.py times fused epilogues against the plain kernel)")


def run_epilogue(args: argparse.Namespace, dtypes: list[str], shapes: list) -> int:
    """``gate --epilogue``: the resource and correctness gates of the top kernel with the epilogue fused; the
    performance gate does not apply (nothing is timed: :data:`EPILOGUE_UNTIMED`). Ends as the plain gate does: the
    failures, then the verdict line naming each gate (gates/verdict.py), and its exit status."""
    from gemm_ladder.gates.tables import make_console
    from gemm_ladder.gates.verdict import (
        EXIT_UNWRITTEN, EXIT_USAGE, exit_status, new_tallies, print_summary, summarize, write_result,
    )
    from gemm_ladder.library.epilogue import Epilogue, EpilogueCompileError

    try:
        ep, name = load_callable(args.epilogue, want_callable=False)
        if not isinstance(ep, Epilogue):
            raise SpecError(f"{args.epilogue}: {name} is a {type(ep).__name__}, not a gemm_ladder.Epilogue")
        ep.compile_check(arch=args.arch)
    except SpecError as exc:
        print(f"gemm-ladder gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EpilogueCompileError as exc:
        print(f"gemm-ladder gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from gemm_ladder.errors import CompileError, CompilerNotFoundError

    tallies, failures = new_tallies(), []
    tallies["performance"].idle_reason = EPILOGUE_UNTIMED
    try:
        resources = epilogue_resources(ep, dtypes, args.arch)
    except CompilerNotFoundError as exc:  # no compiler or no cuobjdump: the census cannot be read
        resources = []
        tallies["resources"].skip(f"{type(exc).__name__}: {exc}".splitlines()[0])
    except CompileError as exc:  # the top kernel with the epilogue fused did not build: the gate fails
        resources = []
        tallies["resources"].record(False)
        failures.append(f"{args.epilogue} build: " + f"{type(exc).__name__}: {exc}".splitlines()[0])
    for r in resources:
        print(f"resources {r['kernel']:<34} {r['dtype']} {r['orientation']:<8} "
              + ("passed" if r["passed"] else "FAILED: " + "; ".join(r["messages"])))
        tallies["resources"].record(r["passed"])
        if not r["passed"]:
            failures.append(f"{r['kernel']} {r['dtype']} {r['orientation']} resources: {'; '.join(r['messages'])}")
    import torch

    # No GPU: the operands go to the CPU, where linear refuses them ("not run"), as the plain gate does.
    device = args.device if args.device == "cpu" or torch.cuda.is_available() else "cpu"
    rows = epilogue_correctness(ep, dtypes, shapes, device)
    for r in rows:
        print(f"correctness {r['m']}x{r['n']}x{r['k']:<8} {r['dtype']} {r['status']:<8} {r['message']}")
        if r["status"] == "not run":  # the rest of its dtype's shapes were not run either (epilogue_correctness)
            done = sum(1 for q in rows if q["dtype"] == r["dtype"] and q["status"] != "not run")
            tallies["correctness"].skip(r["message"], len(shapes) - done)
            continue
        tallies["correctness"].record(r["status"] not in ("fail", "error"))
        if r["status"] in ("fail", "error"):
            failures.append(f"{args.epilogue} {r['dtype']} {r['m']}x{r['n']}x{r['k']}: {r['message']}")
    gates, summary = summarize(tallies, failures)
    document = {"epilogue": args.epilogue, "gates": {gate: g["state"] for gate, g in gates.items()},
                "summary": summary, "resources": resources, "correctness": rows}
    status = exit_status({"summary": summary}) if write_result(document, args.json, "gate") else EXIT_UNWRITTEN
    print_summary({"gates": gates, "summary": summary}, make_console(), status)
    return status


def epilogue_resources(ep, dtypes: list[str], arch: str) -> list[dict]:
    """The resource gate (spills, stack, local memory) of ``ep`` built into the top kernels: the general
    kernel (A and B K-major, BN 256) in both orientations and the small-M kernel's widest bucket;
    tensor inputs in each dtype, tile inputs with the L2 prefetch a row-major one builds ("cols":
    EpilogueCall.prefetch_runs)."""
    from gemm_ladder.contract import DTYPES
    from gemm_ladder.gates.resources import check_cubin_resources
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.small_m import small_m_gemm

    out = []
    for dtype in dtypes:
        dts = {n: DTYPES[dtype] for n in ep.tensor_inputs}
        for swap in (False, True):
            src = ep.source(dts, swap, prefetch={n: "cols" for n, k in ep.inputs.items() if k == "tile"})
            for label, kernel, build in (
                    ("sm90_gemm_kk_bn256", library_gemm("k", "k", 256),
                     lambda k=library_gemm("k", "k", 256): k.build(dtype, arch, epilogue_source=src)),
                    ("sm90_gemm_small_m bucket 256", small_m_gemm(256),
                     lambda k=small_m_gemm(256): k.build(dtype, arch, epilogue_source=src))):
                built = build()
                rep = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype=dtype)
                out.append({"kernel": label, "dtype": dtype, "orientation": "swapped" if swap else "direct",
                            "passed": rep.passed, "messages": rep.messages, "registers": rep.registers,
                            "spill_stores": rep.spill_stores, "spill_loads": rep.spill_loads,
                            "stack_bytes": rep.stack_bytes})
    return out


def epilogue_correctness(ep, dtypes: list[str], shapes: list, device: str) -> list[dict]:
    """The epilogue correctness gate on every shape and dtype, through gemm_ladder.linear."""
    import gemm_ladder
    from gemm_ladder.gates.epilogue import check_epilogue_correctness

    def fn(a, b, **inputs):
        return gemm_ladder.linear(a, b, epilogue=ep, **inputs)

    rows = []
    for dtype in dtypes:
        for _, (m, n, k) in shapes:
            res = check_epilogue_correctness(fn, ep, m, n, k, dtype, device=device)
            rows.append({"m": m, "n": n, "k": k, "dtype": dtype, "status": res.status, "message": res.message,
                         "rel_err": res.rel_err, "bound": res.bound, "seed": res.seed})
            if res.status == "not run":  # no GPU: every other shape would say the same
                break
    return rows
