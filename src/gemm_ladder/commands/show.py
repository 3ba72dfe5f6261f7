"""``gemm-ladder show --level N``: what one level is and how it is built, for reading beside its source.

    gemm-ladder show --level 5                  # idea, source, headers, -D constants, nvcc command
    gemm-ladder show --level 5 --dtype fp16     # ... as built for fp16
    gemm-ladder show --level 5 --diff | less    # ... and its source against level 4's

Prints the level's idea (its registry line and its source file's opening comment), its kernel file,
the headers it includes (followed transitively from its ``#include "..."`` lines), every ``-D``
constant of its build and the full nvcc command that builds it (runtime/compiler.py's own
``build_flags`` and ``nvcc_command``; nothing is compiled, so neither nvcc nor a GPU is needed).

With ``--diff``: the unified diff of the level's kernel file against level N-1's, the ``-D``
constants that differ, and each header level N includes that level N-1 does not (in full, as a
new file); headers both include are the same files, so they have no diff. Level 1 has no level
below it: ``--diff`` there is refused (exit 2) rather than printed against an empty file.

Exit status: 0 printed; 2 on a usage error (a level that does not exist, ``--diff`` on level 1, a
dtype other than bf16 or fp16), with one line on stderr.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import sys
from pathlib import Path

NAME = "show"
HELP = "Print a level's idea, source, -D constants and nvcc command; with --diff, its diff against the level below."

#: The translation unit's name in the printed command, as compile_kernel writes it in the cache entry.
UNIT, CUBIN = "kernel.cu", "kernel.cubin"
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--level, --dtype, --diff. Builds no torch import: the parser of every command stays fast."""
    parser.add_argument("--level", type=int, required=True, help="the level number")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"), help="the build to show (default: bf16)")
    parser.add_argument("--diff", action="store_true",
                        help="also the diff of its source (kernel file, new headers) against level N-1's")


def run(args: argparse.Namespace) -> int:
    """Print; 0 when printed, 2 on a usage error (one line on stderr)."""
    from gemm_ladder.levels import LEVELS

    if args.level not in LEVELS:
        return _usage(f"no level {args.level}: the ladder has levels {min(LEVELS)}-{max(LEVELS)}")
    if args.diff and args.level - 1 not in LEVELS:
        return _usage(f"--diff: level {args.level} is the first level, there is no level {args.level - 1} "
                      f"to diff against (`gemm-ladder show --level {args.level}` prints its source file's path)")
    level = LEVELS[args.level]
    print(describe(level, args.dtype))
    if args.diff:
        print()
        print(diff_levels(LEVELS[args.level - 1], level, args.dtype), end="")
    return 0


def _usage(message: str) -> int:
    print(f"gemm-ladder show: {message}", file=sys.stderr)
    return 2


# --- what show prints ---------------------------------------------------------------------------


def describe(level, dtype: str) -> str:
    """The level's idea, files, ``-D`` constants, nvcc command and NVRTC options for ``dtype``, as text."""
    from gemm_ladder.runtime.compiler import build_flags, nvcc_command

    defines = level.build_defines(dtype)
    command = nvcc_command(_nvcc_or_name(), build_flags("sm_90a", defines), UNIT, CUBIN)
    lines = [f"{level.title}: {level.idea}", ""]
    lines += [f"  {line}" for line in leading_comment(level.source_path)]
    headers = sorted(_name(h) for h in included_headers(level.source_path))
    lines += ["", f"source:   {level.source_path}", "includes: " + (", ".join(headers) or "nothing of the package's")]
    lines += ["", f"-D constants ({dtype}; {_defines_origin(level, dtype)}):"]
    width = max(len(k) for k in defines)
    lines += [f"  {k:<{width}} = {v}" for k, v in sorted(defines.items())]
    lines += ["", f"nvcc command ({dtype}, sm_90a; {UNIT} is the translation unit below, written into a cache entry):",
              "  " + shlex.join(command), "", f"{UNIT}:"]
    lines += [f"  {line}" for line in level.translation_unit(dtype).splitlines()]
    from gemm_ladder.runtime.nvrtc import options_from_nvcc_flags

    lines += ["", "NVRTC options (the same build without a CUDA toolkit, runtime/nvrtc.py; then -I<the CUDA headers>):",
              "  " + shlex.join(options_from_nvcc_flags(build_flags("sm_90a", defines)))]
    return "\n".join(lines)


def diff_levels(below, level, dtype: str) -> str:
    """Unified diff of ``level``'s kernel file against ``below``'s, the ``-D`` constants that differ, and
    the headers ``level`` includes that ``below`` does not (each in full); text ending in a newline."""
    from gemm_ladder.runtime.compiler import KERNEL_ROOT

    def rel(path: Path) -> str:
        return str(path.relative_to(KERNEL_ROOT)) if path.is_relative_to(KERNEL_ROOT) else str(path)

    out = [f"=== {level.title} against {below.title} ===\n", "\n"]
    out += _unified(below.source_path, level.source_path, rel(below.source_path), rel(level.source_path))
    old_d, new_d = below.build_defines(dtype), level.build_defines(dtype)
    changed = [(k, old_d.get(k), new_d.get(k)) for k in sorted(old_d.keys() | new_d.keys()) if old_d.get(k) != new_d.get(k)]
    out += ["\n", f"-D constants that differ ({dtype}):" + ("" if changed else " none") + "\n"]
    width = max((len(k) for k, _, _ in changed), default=0)
    out += [f"  {k:<{width}} {'-' if a is None else a} -> {'-' if b is None else b}\n" for k, a, b in changed]
    old_h, new_h = set(included_headers(below.source_path)), set(included_headers(level.source_path))
    added, dropped = sorted(new_h - old_h), sorted(old_h - new_h)
    out += ["\n", "headers included by both: the same files, no diff\n"]
    if dropped:
        out.append("no longer included: " + ", ".join(_name(h) for h in dropped) + "\n")
    if not added:
        out.append("new headers: none\n")
    for header in added:
        out += ["\n", f"new header {_name(header)}:\n"]
        out += _unified(None, header, "/dev/null", rel(header))
    return "".join(out)


# --- reading the sources ------------------------------------------------------------------------


def leading_comment(path: Path) -> list[str]:
    """The ``//`` comment block a kernel file opens with, without the slashes (the level's prose)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:].removeprefix(" "))
    return lines


def included_headers(path: Path) -> list[Path]:
    """Every file that ``path`` includes with ``#include "..."``, directly or not, in first-seen order
    (resolved, absolute). Quoted includes are looked up as nvcc does with the package's flags: beside the including
    file, then ``-I kernels/include``, then ``-I kernels``; ``<...>`` includes (the toolkit's) are skipped.

    Raises FileNotFoundError naming an include found in none of those places.
    """
    from gemm_ladder.runtime.compiler import INCLUDE_DIR, KERNEL_ROOT

    seen: dict[Path, None] = {}

    def visit(file: Path) -> None:
        for name in _INCLUDE.findall(file.read_text()):
            found = next((p.resolve() for p in (file.parent / name, INCLUDE_DIR / name, KERNEL_ROOT / name)
                          if p.is_file()), None)
            if found is None:
                raise FileNotFoundError(f"{file}: #include \"{name}\" is in none of {file.parent}, {INCLUDE_DIR}, "
                                        f"{KERNEL_ROOT}")
            if found not in seen:
                seen[found] = None
                visit(found)

    visit(path)
    return list(seen)


def _unified(old: Path | None, new: Path, old_label: str, new_label: str) -> list[str]:
    a = old.read_text().splitlines(keepends=True) if old is not None else []
    b = new.read_text().splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, old_label, new_label))
    return [line if line.endswith("\n") else line + "\n" for line in lines] or ["(no difference)\n"]


def _name(header: Path) -> str:
    """A header as its #include line names it (relative to kernels/include), else its whole path."""
    from gemm_ladder.runtime.compiler import INCLUDE_DIR

    return str(header.relative_to(INCLUDE_DIR)) if header.is_relative_to(INCLUDE_DIR) else str(header)


def _nvcc_or_name() -> str:
    """The nvcc a build would run, or plain ``nvcc`` where none is installed (printing needs none)."""
    from gemm_ladder.runtime.compiler import CompilerNotFoundError, nvcc_path

    try:
        return nvcc_path()
    except CompilerNotFoundError:
        return "nvcc"


def _defines_origin(level, dtype: str) -> str:
    if level.defines(dtype):
        return "GL_DTYPE_* from the dtype, the rest from the designer's plan (design.plan.kernel_defines_for)"
    return "GL_DTYPE_* from the dtype; tile sizes are constants in the source"
