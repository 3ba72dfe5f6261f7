"""Build, ahead of time, every kernel the dispatcher can pick: so that no call compiles (a JIT
build inside a CUDA-graph capture cannot work, and one inside a timed loop is a stall).

What to build is chosen by input dtype and **shape class** (:data:`CLASSES`): the kernel families
the dispatcher (dispatch/route.py) reaches for a kind of call. Building needs nvcc or NVRTC, not a GPU; builds
land in the kernel cache (``GEMM_LADDER_CACHE``), so a cache built on one machine serves another
with the same nvcc. On a machine with a GPU, :func:`precompile` also loads every build on the device
(and asks its occupancy once), so that a CUDA-graph capture needs neither a build nor a module load
(runtime/capture.py refuses both during a capture).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from gemm_ladder.design.problem import PlanRefused

MAJORS = ("k", "mn")

#: Shape classes -> what the dispatcher runs for them (dispatch/route.py's search).
CLASSES: dict[str, str] = {
    "large": "the layouts kernel in every operand order and each tile width the dispatch table times (BN 64, "
             "128, 256 today): calls with M and N > 256, and any call the small-M kernel does not take "
             "(transposed operands included: backward passes read them)",
    "small_m": "the small-M kernel, every M bucket (8-256) and operand order, output in the input dtype: "
               "calls with M or N <= 256 (its cluster builds are opt-in, never routed: not built here)",
    "fp32_out": "the small-M kernel writing float32 (out_dtype=torch.float32), every bucket and order, and the "
                "layouts kernel's float32 build for outputs a TMA store cannot write (from registers, or the staged "
                "copy: dispatch/kernels.py's STAGED_STORE), every order and timed BN",
    "unaligned": "the repack kernel for the dtype's element size and for float32: operands whose strides a "
                 "TMA tensor map cannot describe, and outputs written through a workspace; and the layouts "
                 "kernel's build for outputs a TMA store cannot write (from registers, or the staged copy: "
                 "dispatch/kernels.py's STAGED_STORE), every order and timed BN",
}


@dataclass(frozen=True)
class Build:
    """One kernel build: a label for reports, the call that compiles it (or fetches it from the cache),
    and the call that loads it on a CUDA device (``load(device)``)."""

    label: str
    run: Callable[[], object]
    load: Callable[[object], object] | None = None


def check_classes(classes) -> tuple[str, ...]:
    """``classes`` as a tuple of names from :data:`CLASSES` ("all" for every one); raises ValueError
    naming the unknown one."""
    if isinstance(classes, str):
        classes = tuple(CLASSES) if classes == "all" else tuple(c.strip() for c in classes.split(","))
    classes = tuple(classes)
    for c in classes:
        if c not in CLASSES:
            raise ValueError(f"shape class {c!r}: use one of {', '.join(CLASSES)} (or all)")
    if not classes:
        raise ValueError(f"no shape class given: use one or more of {', '.join(CLASSES)} (or all)")
    return classes


def normalize_dtypes(dtypes) -> tuple[str, ...]:
    """'bf16' / torch.bfloat16 / a sequence of them -> ('bf16', ...); raises ValueError for another dtype."""
    import torch

    from gemm_ladder.contract import DTYPES, GemmInputError, dtype_name

    if isinstance(dtypes, (str, torch.dtype)):
        dtypes = (dtypes,)
    out = []
    for d in dtypes:
        if isinstance(d, torch.dtype):
            try:
                d = dtype_name(d)
            except GemmInputError as exc:
                raise ValueError(str(exc)) from None
        if d not in DTYPES:
            raise ValueError(f"dtype {d!r}: the library computes {', '.join(DTYPES)}")
        out.append(d)
    if not out:
        raise ValueError("no dtype given: use bf16, fp16 or both")
    return tuple(dict.fromkeys(out))


def _loaded_general(kernel, dtype):
    def load(device):
        kernel.loaded(dtype, device).max_active_clusters(device)
    return load


def _loaded_small_m(kernel, dtype, fp32, am, bm):
    def load(device):
        kernel.loaded(dtype, device, out_fp32=fp32, a_major=am, b_major=bm).max_active_clusters(device)
    return load


def library_builds(dtypes: tuple[str, ...] = ("bf16", "fp16"), classes=tuple(CLASSES)) -> list[Build]:
    """Every build :func:`gemm_ladder.dispatch.route` can reach for ``dtypes`` in ``classes``
    (:data:`CLASSES`): the general kernel in each operand order and each tile width the cost table
    times (the others are never chosen: dispatch.route.choose), each small-M bucket in
    each order (and output dtype), and the repack kernel for each element size. Plans nothing, compiles
    nothing: the list is what :func:`precompile` runs. Raises ValueError for an unknown class or dtype."""
    from gemm_ladder.contract import DTYPES
    from gemm_ladder.dispatch import cost_model
    from gemm_ladder.dispatch import kernels
    from gemm_ladder.dispatch.kernels import general, general_bns, general_unaligned_out
    from gemm_ladder.library.repack import REPACK
    from gemm_ladder.library.small_m import BUCKETS, small_m_gemm

    classes = check_classes(classes)
    # The general kernel's widths the route can reach: those the cost table times (route.choose).
    model = cost_model()
    timed_bns = [bn for bn in general_bns() if bn in model.k_iter_us]
    # Splits "tail_spread" and "all_spread" run each general build's sibling with the distributed fixup
    # (library/gemm.py spread_build); built only where the route may pick them (dispatch/kernels.py
    # ROUTE_SPREAD, and CostModel.may_win: priced, and cheaper than the last arriver's fixup).
    spread = kernels.ROUTE_SPREAD and model.may_win("tail_spread")

    def with_spread(kernel):
        return [(kernel, "")] + ([(kernel.spread_build(), " spread")] if spread else [])
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype {d!r}: the library computes {', '.join(DTYPES)}")
    builds = []
    for dtype in dtypes:
        for am in MAJORS:
            for bm in MAJORS:
                if "large" in classes:
                    for bn in timed_bns:
                        base = general(am, bm, bn)
                        for kernel, tag in with_spread(base) if base is not None else []:
                            builds.append(Build(f"general A {am} B {bm} BN {bn}{tag} {dtype}",
                                                lambda k=kernel, d=dtype: k.build(d), _loaded_general(kernel, dtype)))
                for fp32, cls in ((False, "unaligned"), (True, "fp32_out")):
                    if cls in classes:
                        for bn in timed_bns:
                            how = "staged" if kernels.STAGED_STORE else "from registers"
                            for kernel, tag in with_spread(general_unaligned_out(am, bm, bn, out_fp32=fp32)):
                                builds.append(Build(f"general {how} A {am} B {bm} BN {bn}"
                                                    f"{' fp32 out' if fp32 else ''}{tag} {dtype}",
                                                    lambda k=kernel, d=dtype: k.build(d),
                                                    _loaded_general(kernel, dtype)))
                for fp32 in (False, True):
                    if ("fp32_out" if fp32 else "small_m") not in classes:
                        continue
                    for m in BUCKETS:
                        k = small_m_gemm(m)
                        builds.append(Build(
                            f"small-M BN {m} A {am} B {bm}{' fp32 out' if fp32 else ''} {dtype}",
                            lambda k=k, d=dtype, f=fp32, a=am, b=bm: k.build(d, out_fp32=f, a_major=a, b_major=b),
                            _loaded_small_m(k, dtype, fp32, am, bm)))
        if "unaligned" in classes:
            builds.append(Build(f"repack {dtype}", lambda d=dtype: REPACK.build(d),
                                lambda device: REPACK.loaded(2, device)))
    if "unaligned" in classes or "fp32_out" in classes:  # an fp32 output TMA cannot write is copied back
        builds.append(Build("repack fp32", lambda: REPACK.build("fp32"), lambda device: REPACK.loaded(4, device)))
    return builds


def precompile(dtypes: tuple[str, ...] = ("bf16", "fp16"), *, classes=tuple(CLASSES), workers: int | None = None,
               levels: bool = False, device=None, load: bool | None = None) -> dict[str, str]:
    """Compile every library build for ``dtypes`` and shape ``classes`` (and, with ``levels``, the
    ladder's levels), in parallel; then load each on ``device`` (default: the current CUDA device)
    when ``load`` (default: when torch sees a GPU).

    Returns {label: outcome}: 'built', 'built, loaded on cuda:N', 'not a variant: <rule>' for an order
    a kernel refuses to plan (e.g. an MN-major activation below 64 rows), or 'failed: <error>'. Raises
    CompilerNotFoundError without a compiler (nvcc or NVRTC), ValueError for an unknown class or dtype.
    """
    import torch

    from gemm_ladder.runtime.compiler import CompilerNotFoundError, compiler_choice

    dtypes = normalize_dtypes(dtypes)
    builds = library_builds(dtypes, classes)  # bad input refused before looking for a compiler
    compiler_choice()  # no compiler (nvcc or NVRTC): one clear error, not one per build
    if levels:
        from gemm_ladder.levels import LEVELS

        builds += [Build(f"level {n} {d}", lambda lv=lv, d=d: lv.build(d)) for n, lv in LEVELS.items() for d in dtypes]

    def one(build: Build) -> str:
        try:
            build.run()
            return "built"
        except PlanRefused as exc:
            return f"not a variant: {exc}"
        except CompilerNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported per build; the caller decides
            return f"failed: {type(exc).__name__}: {exc}".splitlines()[0]

    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        outcomes = dict(zip((b.label for b in builds), pool.map(one, builds)))
    if load is None:
        load = torch.cuda.is_available()
    if load:
        dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        for build in builds:
            if outcomes[build.label] == "built" and build.load is not None:
                try:
                    build.load(dev)
                    outcomes[build.label] = f"built, loaded on {dev}"
                except Exception as exc:  # noqa: BLE001 - reported per build
                    outcomes[build.label] = f"failed: load: {type(exc).__name__}: {exc}".splitlines()[0]
    return outcomes


__all__ = ["Build", "CLASSES", "check_classes", "library_builds", "normalize_dtypes", "precompile"]
