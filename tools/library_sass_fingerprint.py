"""Print (or compare) a SHA-256 of the SASS of every library build a route can reach.

The builds: what ``precompile`` builds for bf16 and fp16 in every shape class
(dispatch/precompile.py library_builds), and each of those kernels' families compiled with the
built-in ``linear`` epilogues (every activation with a bias; bias + residual + alpha; with and without
the swapped orientation; bf16) on the general kernel (TMA store and register store), the small-M kernel
and the swiglu kernel. A refactor that claims "no change to the product's kernels" keeps every
fingerprint identical:

    GEMM_LADDER_CACHE=/tmp/cache_old PYTHONPATH=<old>/src python tools/library_sass_fingerprint.py > before.txt
    GEMM_LADDER_CACHE=/tmp/cache_new PYTHONPATH=src python tools/library_sass_fingerprint.py --compare before.txt

Needs nvcc and cuobjdump, no GPU. Each build is compiled in the given cache (an empty one, so that
nothing is taken from an earlier build). The hash is tools/sass_fingerprint.py's: the disassembly
with the cubin's file name and blank lines removed.
"""

from __future__ import annotations

import argparse
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sass_fingerprint import fingerprint  # noqa: E402 - the one hash (tools/sass_fingerprint.py)




def epilogue_jobs() -> list[tuple[str, object]]:
    """(label, build) for the built-in epilogues on each kernel family (bf16)."""
    import torch

    from gemm_ladder.library.epilogue import ACTIVATIONS, linear_epilogue
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.small_m import small_m_kernel

    jobs = []
    combos = [(dict(bias=True, activation=act, residual=False, alpha=False), f"bias {act}") for act in ACTIVATIONS]
    combos.append((dict(bias=True, activation="gelu_tanh", residual=True, alpha=True), "alpha bias gelu_tanh residual"))
    combos.append((dict(bias=False, activation=None, residual=True, alpha=False), "residual"))
    for dtype, tdt in (("bf16", torch.bfloat16),):  # the epilogue's code does not depend on the input dtype
        for kw, what in combos:
            ep = linear_epilogue(**kw)
            dts = {n: tdt for n in ep.tensor_inputs}
            pairs = {n: (True, False) for n in dts}
            for swap in (False, True):
                src = ep.source(dts, swap, wide=False, pairs=pairs)
                for bn in (256, 128):
                    for creg in (False, True):
                        g = library_gemm("k", "k", bn, c_from_registers=creg)
                        jobs.append((f"epi general kk BN {bn}{' creg' if creg else ''} {what} swap={swap} {dtype}",
                                     lambda g=g, d=dtype, s=src: g.build(d, epilogue_source=s)))
                if not swap:
                    continue
                sm = small_m_kernel(64)
                jobs.append((f"epi small-M BN 64 {what} {dtype}", lambda k=sm, d=dtype, s=src: k.build(d, epilogue_source=s)))
    return jobs


def jobs() -> list[tuple[str, object]]:
    from gemm_ladder.dispatch.precompile import library_builds
    from gemm_ladder.library.swiglu import swiglu_kernel

    out = [(b.label, b.run) for b in library_builds(("bf16", "fp16"))]
    out += [(f"swiglu {d}", lambda d=d: swiglu_kernel().build(d)) for d in ("bf16", "fp16")]
    return out + epilogue_jobs()


def main(make_jobs=None, doc: str = __doc__) -> int:
    """The command line over ``make_jobs()`` ((label, build) pairs; default :func:`jobs`), described by
    ``doc``'s first line: print each fingerprint, or compare with ``--compare``'s file (exit 1 if any
    differs). tools/grouped_fp8_sass_fingerprint.py runs it over its own builds."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--compare", metavar="FILE", help="a previous output: exit 1 if any fingerprint differs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", metavar="REGEX",
                        help="only the builds whose label matches (re.search); with --compare, only those are compared")
    parser.add_argument("--cached-only", action="store_true",
                        help="compile nothing: fingerprint the builds already in the cache, report the others as NotBuilt")
    args = parser.parse_args()
    if args.cached_only:
        from gemm_ladder.runtime import compiler

        class NotBuilt(Exception):
            pass

        def refuse(*_a, **_k):
            raise NotBuilt

        compiler._build_entry = refuse

    def one(job):
        label, build = job
        try:
            return f"{label}|{fingerprint(str(build().cubin))}"
        except Exception as exc:  # noqa: BLE001 - a refused plan (not a variant) is part of the record
            return f"{label}|{type(exc).__name__}"

    lines = []
    with ThreadPoolExecutor(args.workers) as pool:
        for line in pool.map(one, [j for j in (make_jobs or jobs)() if not args.only or re.search(args.only, j[0])]):
            lines.append(line)
            if not args.compare:  # each as it comes, in order: a run cut short keeps what it finished
                print(line, flush=True)
    if not args.compare:
        return 0
    before = dict(line.rsplit("|", 1) for line in open(args.compare).read().splitlines() if "|" in line)
    if args.only:
        before = {k: v for k, v in before.items() if re.search(args.only, k)}
    now = dict(line.rsplit("|", 1) for line in lines)
    bad = 0
    unbuilt = 0
    for label in sorted(set(before) | set(now)):
        b, a = before.get(label, "absent"), now.get(label, "absent")
        if "NotBuilt" in (a, b):
            unbuilt += 1
            print(f"{label}|{b}|{a}|not compared")
            continue
        print(f"{label}|{b}|{a}|{'same' if a == b else 'CHANGED'}")
        bad += a != b
    print(f"# {len(now)} builds now, {len(before)} before, {len(now) - unbuilt} compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
