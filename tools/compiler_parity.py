"""Build the same kernels through nvcc and NVRTC and compare them: compile time, ptxas's resource
report and the SASS instruction census. Needs both compilers (no GPU); writes JSON to stdout or --json.

    python3 tools/compiler_parity.py                  # level 9 and the library's general kernel, bf16
    python3 tools/compiler_parity.py --all-levels --json out.json

Each build runs in a fresh cache directory, so the times are whole builds (one process, one thread).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def targets(all_levels: bool):
    from gemm_ladder.dispatch.kernels import general
    from gemm_ladder.levels import LEVELS
    from gemm_ladder.library.small_m import small_m_gemm

    def fresh(kernel):  # its in-memory build memo forgotten: each call goes to the (fresh) cache
        def build():
            kernel._builds.clear()
            return kernel.build("bf16")
        return build

    levels = LEVELS if all_levels else {9: LEVELS[9]}
    out = [(f"level {n} bf16", fresh(lv)) for n, lv in levels.items()]
    out.append(("library general A k B k BN 256 bf16", fresh(general("k", "k", 256))))
    out.append(("library small-M BN 64 bf16", fresh(small_m_gemm(64))))
    return out


def measure(build, compiler: str) -> dict:
    from gemm_ladder.gates.resources import parse_ptxas_log, sass_census
    from gemm_ladder.runtime.compiler import disassemble

    with tempfile.TemporaryDirectory() as cache:
        os.environ["GEMM_LADDER_CACHE"] = cache
        os.environ["GEMM_LADDER_COMPILER"] = compiler
        def cpu():  # this process and its children (nvcc's): the measure that other load on the machine moves least
            return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
                       for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        t0, c0 = time.perf_counter(), cpu()
        kernel = build()
        seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
        ptxas = parse_ptxas_log(kernel.ptxas_log)[kernel.kernel_name]
        census = sass_census(disassemble(kernel.cubin))[kernel.kernel_name]
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2), "registers": ptxas.registers, "smem_static": ptxas.smem_static,
            "stack": ptxas.stack_bytes, "spill_stores": ptxas.spill_stores, "spill_loads": ptxas.spill_loads,
            "sass_total": census.total, "census": census.counts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-levels", action="store_true", help="every level, not only level 9")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from gemm_ladder.runtime.compiler import compiler_identity

    rows = []
    for label, build in targets(args.all_levels):
        row = {"kernel": label}
        for compiler in ("nvcc", "nvrtc"):
            row[compiler] = measure(build, compiler)
        a, b = row["nvcc"]["census"], row["nvrtc"]["census"]
        row["census_differs"] = {op: [a.get(op, 0), b.get(op, 0)] for op in sorted(set(a) | set(b))
                                 if a.get(op, 0) != b.get(op, 0)}
        rows.append(row)
        print(label + ": " + "; ".join(
            f"{c} {row[c]['seconds']} s wall, {row[c]['cpu_seconds']} s CPU, {row[c]['registers']} regs, "
            f"{row[c]['spill_stores']}/{row[c]['spill_loads']} B spilled, {row[c]['sass_total']} SASS" for c in ("nvcc", "nvrtc")),
            file=sys.stderr)
    result = {"compilers": {c: compiler_identity(c) for c in ("nvcc", "nvrtc")}, "cpus": os.cpu_count(), "rows": rows}
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
