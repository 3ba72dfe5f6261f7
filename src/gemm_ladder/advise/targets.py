"""Gather the evidence of one target: a ladder level, a user's callable, a cubin, a ``.cu`` file.

Each builds what there is to build (nvcc, no GPU), disassembles it, runs the resource gate on it, and
turns all of it into labelled facts (:mod:`gemm_ladder.advise.evidence`). Nothing is launched here:
measurements on a GPU are :mod:`gemm_ladder.advise.measure`'s.

Errors a user can fix (a missing file, an unknown entry point, nvcc rejecting the source) raise
:class:`TargetError` with one line naming the target and the problem.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from gemm_ladder.advise.evidence import (
    Evidence, add_build_facts, add_elf_facts, add_resource_facts, add_sass_facts,
)
from gemm_ladder.advise.sass_structure import dump_elf, parse_elf_attributes, parse_sass


class TargetError(ValueError):
    """The target cannot be inspected; the message is one line naming it and the reason."""


class BuildFailed(TargetError):
    """The target's own build failed (nvcc rejected it, or its build() raised): a finding about the target,
    exit status 1 on the command line (cli.EXIT_STATUS), not a usage error."""


def _no_tools(ev: Evidence, exc: Exception) -> None:
    ev.add("sass.available", False, f"no SASS: {str(exc).splitlines()[0]}", "not run", "gemm_ladder.runtime.compiler")


def _inspect_cubin(ev: Evidence, cubin: Path, ptxas_log: str | None, kernel_name: str | None, *,
                   level: int | None, geometry: Any = None) -> str:
    """SASS, ELF and resource facts of one entry function of ``cubin``; returns the function's name."""
    from gemm_ladder.gates.resources import check_cubin_resources
    from gemm_ladder.runtime.compiler import disassemble

    sass = disassemble(cubin)
    functions = parse_sass(sass)
    if kernel_name is None:
        if len(functions) != 1:
            raise TargetError(f"{cubin}: {len(functions)} entry functions ({', '.join(functions) or 'none'}): "
                              "name one with --kernel-name")
        kernel_name = next(iter(functions))
    hits = [f for f in functions if f == kernel_name] or [f for f in functions if kernel_name in f]
    if len(hits) != 1:
        raise TargetError(f"{cubin}: no single entry function {kernel_name!r} (found: {', '.join(functions) or 'none'})")
    function = hits[0]
    src = f"cuobjdump --dump-sass {cubin}"
    add_sass_facts(ev, functions[function], src)
    try:
        add_elf_facts(ev, parse_elf_attributes(dump_elf(cubin)).get(function, {}), f"cuobjdump --dump-elf {cubin}")
    except Exception as exc:  # noqa: BLE001 - the ELF attributes corroborate; their absence is reported
        ev.add("elf.available", False, f"ELF attributes not read: {str(exc).splitlines()[0]}", "not run", str(cubin))
    report = check_cubin_resources(
        cubin, ptxas_log, function, level=level, dtype=ev.dtype, threads=geometry.threads if geometry else None,
        dynamic_smem=geometry.dynamic_smem if geometry else 0, cluster=geometry.cluster if geometry else None, sass=sass)
    add_resource_facts(ev, report, ("ptxas -v of the build" if ptxas_log else "cuobjdump --dump-resource-usage")
                       + f" and the SASS of {cubin}")
    return function


def _add_launch_facts(ev: Evidence, level: Any, shape: tuple[int, int, int]) -> None:
    """How the level's launcher sizes its grid, and what that gives on ``shape`` (from the designer's plan)."""
    from gemm_ladder.design.problem import PlanRefused, ceil_div

    m, n, k = shape
    where = f"gemm_ladder.levels: {type(level).__name__} of level {level.number}"
    from gemm_ladder.levels.tma import TmaLevel

    if not isinstance(level, TmaLevel):  # the thread-copy levels: one CTA per tile, or a single CTA
        tiled = bool(getattr(level, "tiled", False))
        from gemm_ladder.levels.thread_copy import TILE_M, TILE_N

        tiles = ceil_div(m, TILE_M) * ceil_div(n, TILE_N)
        ev.add("launch.persistent", False,
               (f"the launcher starts one CTA per {TILE_M}x{TILE_N} output tile: {tiles} CTAs for {tiles} tiles at "
                f"{m}x{n}x{k}" if tiled else "the launcher starts a single CTA (grid 1x1x1) whatever the shape"),
               "measured", where)
        return
    try:
        plan = level.plan(m, n, k, ev.dtype)
    except PlanRefused as exc:
        ev.add("launch.persistent", bool(level.persistent), f"persistent={level.persistent}; no plan at {m}x{n}x{k}: {exc}",
               "measured", where)
        return
    sc = plan.schedule
    if level.persistent:
        statement = (f"persistent: {sc.ctas} CTAs (grid {sc.grid}, cluster dims {sc.cluster_dims}) walk {sc.tiles} "
                     f"output tiles at {m}x{n}x{k}, {sc.waves} work units each on average")
    else:
        statement = f"one CTA per output tile: grid {sc.grid}, {sc.ctas} CTAs for {sc.tiles} tiles at {m}x{n}x{k}"
    ev.add("launch.persistent", bool(level.persistent), statement, "inferred",
           f"{where}; the designer's schedule (plan_gemm), assuming {plan._config.arch.sm_count} SMs and its own "
           "CTAs-per-SM estimate (the launch asks the occupancy API)")


def level_evidence(level: Any, dtype: str = "bf16", arch: str = "sm_90a",
                   shape: tuple[int, int, int] = (4096, 4096, 4096)) -> Evidence:
    """Evidence of a ladder level from its build alone: SASS, ELF, ptxas, the -D flags, the launcher's grid rule."""
    from gemm_ladder.runtime.compiler import CompileError, CompilerNotFoundError, build_flags

    ev = Evidence(f"ladder level {level.number} ({level.name}, kernels/{level.source}), {dtype}, {arch}", "level",
                  dtype, arch)
    geometry = level.geometry(dtype)
    try:
        kernel = level.build(dtype, arch)
    except CompilerNotFoundError as exc:
        _no_tools(ev, exc)
        flags = build_flags(arch, level.build_defines(dtype))
        add_build_facts(ev, flags, geometry, "the flags Level.build would pass to nvcc (nothing compiled)")
    except CompileError as exc:
        raise BuildFailed(f"level {level.number}: nvcc failed: {str(exc).splitlines()[0]}") from None
    else:
        try:
            _inspect_cubin(ev, kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=level.number, geometry=geometry)
        except CompilerNotFoundError as exc:
            _no_tools(ev, exc)
        add_build_facts(ev, kernel.flags, geometry, f"the build's nvcc flags ({kernel.directory / 'meta.json'})")
    _add_launch_facts(ev, level, shape)
    return ev


#: Names in a callable's source that mean it launches something the advisor cannot see without a cubin.
_LAUNCHES = re.compile(r"\b(launch|cuLaunch\w*|load_inline|load_cubin|compile_kernel|triton|cupy|ctypes|cuda\.core|"
                       r"cuda\.bindings|RawKernel|\.cubin)\b")
#: torch operations that compute a product: on a GPU they run cuBLAS's kernels, not one of the caller's.
_TORCH_MATMUL = re.compile(r"(@|\btorch\.(?:matmul|mm|bmm|addmm|einsum)\b|\bF\.linear\b|\.matmul\(|\.mm\()")


def callable_evidence(fn: Any, spec: str, dtype: str = "bf16", arch: str = "sm_90a", *,
                      cubin: Path | None = None, kernel_name: str | None = None) -> Evidence:
    """Evidence of a user's ``f(a, b) -> a @ b.T``: its ``build()`` if it has one (as ``gate`` uses it), else
    ``cubin``, else only what its attributes and source say (labelled inferred)."""
    from gemm_ladder.runtime.compiler import CompileError, CompilerNotFoundError

    ev = Evidence(f"{spec}, {dtype}, {arch}", "callable", dtype, arch)
    attrs = [a for a in ("build", "geometry", "check", "launch", "domain", "perf") if hasattr(fn, a)]
    ev.add("callable.attributes", attrs, ("has " + ", ".join(f"{a}" for a in attrs) if attrs else
           "has none of build, geometry, check, launch, domain, perf"), "measured", spec)
    if callable(getattr(fn, "build", None)):
        try:  # the user's code: whatever it raises is a bad input, said in one line
            geometry = fn.geometry(dtype) if callable(getattr(fn, "geometry", None)) else None
            built = fn.build(dtype, arch)
            cubin = Path(built.cubin)
        except CompilerNotFoundError as exc:
            _no_tools(ev, exc)
            return ev
        except Exception as exc:  # noqa: BLE001
            raise BuildFailed(f"{spec}: build() or geometry() raised {type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None
        try:
            _inspect_cubin(ev, cubin, getattr(built, "ptxas_log", None),
                           kernel_name or getattr(built, "kernel_name", None), level=None, geometry=geometry)
        except CompilerNotFoundError as exc:
            _no_tools(ev, exc)
        except (CompileError, KeyError) as exc:
            raise TargetError(f"{spec}: its build's cubin cannot be read: {str(exc).splitlines()[0]}") from None
        else:
            if getattr(built, "flags", None):
                add_build_facts(ev, built.flags, geometry, f"{spec}: build()'s nvcc flags")
        return ev
    if cubin is not None:
        return cubin_evidence(cubin, kernel_name or getattr(fn, "__name__", None), dtype, arch, ev=ev)
    ev.add("sass.available", False, f"no SASS: {spec.rpartition(':')[2]} has no build() and no --cubin was given, so "
           "nothing compiled can be read", "measured", spec)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = ""
    launches = sorted(set(_LAUNCHES.findall(source)))
    if source and not launches:
        matmul = sorted(set(_TORCH_MATMUL.findall(source)))
        ev.add("callable.own_kernel", False,
               "its source launches no kernel of its own (no launch, cubin, ctypes, triton...)"
               + (f" and computes the product with torch ({', '.join(matmul)}): on a GPU that runs cuBLAS's kernels, "
                  "on a CPU torch's; no wgmma kernel of its own" if matmul else ": no wgmma kernel of its own"),
               "inferred", f"the source of {spec}")
    else:
        ev.add("callable.own_kernel", None, (f"its source mentions {', '.join(launches)}: it may launch a kernel the "
               "advisor cannot see; give its cubin with --cubin" if launches else "its source cannot be read"),
               "inferred", f"the source of {spec}")
    return ev


def cubin_evidence(path: Path, kernel_name: str | None, dtype: str = "bf16", arch: str = "sm_90a", *,
                   ev: Evidence | None = None) -> Evidence:
    """Evidence of a bare cubin (no ptxas log: registers and stack from cuobjdump's resource usage)."""
    from gemm_ladder.runtime.compiler import CompilerNotFoundError

    path = Path(path)
    if not path.is_file():
        raise TargetError(f"{path}: no such file")
    ev = ev or Evidence(f"{path}, {arch}", "cubin", dtype, arch)
    try:
        _inspect_cubin(ev, path, None, kernel_name, level=None)
    except CompilerNotFoundError as exc:
        _no_tools(ev, exc)
    except TargetError:
        raise
    except Exception as exc:  # noqa: BLE001 - cuobjdump rejects what is not a cubin
        raise TargetError(f"{path}: cannot be read as a cubin: {str(exc).splitlines()[0]}") from None
    return ev


def cu_evidence(path: Path, kernel_name: str | None, dtype: str = "bf16", arch: str = "sm_90a") -> Evidence:
    """Evidence of a ``.cu`` file compiled here for ``arch`` by the runtime (the package's PTX headers and the
    file's own directory on the include path; ``GL_DTYPE_<DTYPE>`` defined as the levels are)."""
    from gemm_ladder.runtime.compiler import CompileError, CompilerNotFoundError, compile_kernel

    path = Path(path)
    if not path.is_file():
        raise TargetError(f"{path}: no such file")
    ev = Evidence(f"{path} compiled for {arch}, {dtype}", "cu", dtype, arch)
    try:
        built = compile_kernel(path.read_text(), kernel_name or "", arch=arch,
                               defines={"GL_DTYPE_" + dtype.upper(): 1}, extra_flags=[f"-I{path.resolve().parent}"])
    except CompilerNotFoundError as exc:
        _no_tools(ev, exc)
        return ev
    except CompileError as exc:
        first = next((ln for ln in exc.log.splitlines() if "error" in ln), exc.log.strip().splitlines()[0] if exc.log.strip() else "")
        raise BuildFailed(f"{path}: nvcc failed: {first.strip()}") from None
    _inspect_cubin(ev, built.cubin, built.ptxas_log, kernel_name, level=None)
    add_build_facts(ev, built.flags, None, f"nvcc flags of the runtime's build ({built.directory / 'meta.json'})")
    return ev


def result_kernel_evidence(result: dict[str, Any], described: dict[str, Any], source: str, dtype: str = "bf16",
                           arch: str = "sm_90a") -> Evidence:
    """Evidence of the user's kernel in a ``gate --json`` result: only the census summary the result keeps
    (HGMMA, UTMALDG, ...; no loops, modifiers or launch facts), so rungs it cannot show stay unknown."""
    ev = Evidence(f"{described.get('name') or 'your kernel'} in {source}", "results", dtype, arch)
    res = [r for r in result.get("resources") or [] if r.get("level") is None and r.get("dtype") == dtype
           and isinstance(r.get("sass"), dict)]
    if not res:
        ev.add("sass.available", False, "no SASS: the result holds no resource entry for the kernel (gated without "
               "build() or --cubin)", "measured", source)
        return ev
    s = res[0]["sass"]
    ev.add("census.summary", s, "the result keeps only the SASS census summary: loops, modifiers and launch facts are "
           "not in it, so rungs beyond what it shows cannot be decided", "measured", source)
    for key, op, what in (("sass.hgmma", "HGMMA", "HGMMA (wgmma)"), ("sass.hmma", "HMMA", "HMMA (mma.sync)"),
                          ("sass.utmaldg", "UTMALDG", "UTMALDG (TMA loads)"), ("sass.utmastg", "UTMASTG", "UTMASTG (TMA stores)")):
        if op in s:
            ev.add(key, s[op], f"{s[op]} {what} in the census", "measured", source)
    return ev
