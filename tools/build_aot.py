"""Build the default kernels ahead of time, for a wheel or sdist to carry (runtime/aot.py).

    python3 tools/build_aot.py                 # then: python3 -m build (the wheel and sdist carry them)
    python3 tools/build_aot.py --workers 16 --dtype bf16

Builds, with NVRTC (no CUDA toolkit needed, no GPU), every kernel the dispatcher can pick for the
given dtypes in every shape class (dispatch/precompile.py library_builds), in a fresh temporary
cache, and writes them to src/gemm_ladder/aot_kernels/ (replacing what was there): one directory per
build named by its cache key (kernel.cubin, ptxas.log, kernel.cu, meta.json) and manifest.json (the
compiler's identity, which is part of every key, and each build's outcome). Prints the time and size.

The cubins are the same bytes on every run with the same NVRTC wheel and sources, except the source
paths that -lineinfo records (the checkout's path). Exit status: 0 all built, 1 a build failed or no
NVRTC, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
sys.path.insert(0, str(SRC))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="all", help="bf16, fp16 or all (default)")
    parser.add_argument("--workers", type=int, default=None, help="parallel builds (default: the CPU count)")
    parser.add_argument("--epilogues", default="none",
                        help="linear's built-in epilogues built in too: none (default), common or all")
    parser.add_argument("--out", type=Path, default=SRC / "gemm_ladder" / "aot_kernels", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.update(GEMM_LADDER_COMPILER="nvrtc", GEMM_LADDER_AOT="0")
    os.environ.pop("GEMM_LADDER_NVCC", None)
    from gemm_ladder.contract import parse_dtypes
    from gemm_ladder.dispatch.precompile import precompile
    from gemm_ladder.runtime.aot import MANIFEST
    from gemm_ladder.runtime.compiler import CompilerNotFoundError, compiler_identity

    try:
        dtypes = tuple(parse_dtypes(args.dtype))
        from gemm_ladder.dispatch.precompile import epilogue_variants
        epilogue_variants(args.epilogues)
    except ValueError as exc:
        print(f"build_aot: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as cache:
        os.environ["GEMM_LADDER_CACHE"] = cache
        t0 = time.perf_counter()
        try:
            outcomes = precompile(dtypes, workers=args.workers, load=False, epilogues=args.epilogues)
        except CompilerNotFoundError as exc:
            print(f"build_aot: {exc}", file=sys.stderr)
            return 1
        seconds = time.perf_counter() - t0
        failed = {k: v for k, v in outcomes.items() if v.startswith("failed")}
        for label, outcome in failed.items():
            print(f"{label}: {outcome}", file=sys.stderr)
        if failed:
            return 1
        shutil.rmtree(args.out, ignore_errors=True)
        args.out.mkdir(parents=True)
        size = 0
        for entry in sorted(Path(cache).iterdir()):
            if (entry / "kernel.cubin").exists():
                dest = args.out / entry.name
                dest.mkdir()
                for name in ("kernel.cubin", "ptxas.log", "kernel.cu", "meta.json"):
                    shutil.copyfile(entry / name, dest / name)
                    size += (dest / name).stat().st_size
        identity = compiler_identity("nvrtc")
    (args.out / MANIFEST).write_text(json.dumps({"identity": identity, "dtypes": list(dtypes), "builds": outcomes},
                                                indent=1))
    entries = sum(1 for p in args.out.iterdir() if p.is_dir())
    print(f"{entries} builds ({len(outcomes)} asked) in {seconds:.0f} s with {args.workers or os.cpu_count()} "
          f"workers, {size / 2**20:.1f} MiB, in {args.out} ({identity})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
