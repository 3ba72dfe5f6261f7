"""Build, ahead of time, every kernel the dispatcher can pick: so that no call compiles (a JIT
build inside a CUDA-graph capture cannot work, and one inside a timed loop is a stall).

Needs nvcc, not a GPU. Builds land in the kernel cache (``GEMM_LADDER_CACHE``), so a cache built on
one machine serves another with the same nvcc.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from gemm_ladder.design.problem import PlanRefused

MAJORS = ("k", "mn")


@dataclass(frozen=True)
class Build:
    """One kernel build: a label for reports and the call that compiles it (or fetches it from the cache)."""

    label: str
    run: Callable[[], object]


def library_builds(dtypes: tuple[str, ...] = ("bf16", "fp16")) -> list[Build]:
    """Every build :func:`gemm_ladder.dispatch.route` can reach for ``dtypes``: the general kernel in
    each operand order and tile width, each small-M bucket in each order and output dtype, and the
    repack kernel for each element size."""
    from gemm_ladder.dispatch.kernels import general, general_bns
    from gemm_ladder.library.repack import REPACK
    from gemm_ladder.library.small_m import BUCKETS, small_m_gemm

    builds = []
    for dtype in dtypes:
        for am in MAJORS:
            for bm in MAJORS:
                for bn in general_bns():
                    kernel = general(am, bm, bn)
                    if kernel is not None:
                        builds.append(Build(f"general A {am} B {bm} BN {bn} {dtype}",
                                            lambda k=kernel, d=dtype: k.build(d)))
                for m in BUCKETS:
                    for fp32 in (False, True):
                        builds.append(Build(
                            f"small-M BN {m} A {am} B {bm}{' fp32 out' if fp32 else ''} {dtype}",
                            lambda k=small_m_gemm(m), d=dtype, f=fp32, a=am, b=bm: k.build(d, out_fp32=f, a_major=a,
                                                                                           b_major=b)))
        builds.append(Build(f"repack {dtype}", lambda d=dtype: REPACK.build(d)))
    builds.append(Build("repack fp32", lambda: REPACK.build("fp32")))
    return builds


def precompile(dtypes: tuple[str, ...] = ("bf16", "fp16"), *, workers: int | None = None,
               levels: bool = True) -> dict[str, str]:
    """Compile every library build for ``dtypes`` (and, with ``levels``, the ladder's levels), in parallel.

    Returns {label: outcome}: 'built', 'not a variant: <rule>' for an order a kernel refuses to plan
    (e.g. an MN-major activation below 64 rows), or the build's error. Raises CompilerNotFoundError
    without nvcc.
    """
    builds = library_builds(dtypes)
    if levels:
        from gemm_ladder.levels import LEVELS

        builds += [Build(f"level {n} {d}", lambda lv=lv, d=d: lv.build(d)) for n, lv in LEVELS.items() for d in dtypes]

    def one(build: Build) -> str:
        try:
            build.run()
            return "built"
        except PlanRefused as exc:
            return f"not a variant: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported per build; the caller decides
            return f"failed: {type(exc).__name__}: {exc}".splitlines()[0]

    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        return dict(zip((b.label for b in builds), pool.map(one, builds)))
