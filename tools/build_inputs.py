"""Every library build precompile enumerates, as what the compiler receives: its label, kernel name,
a digest of its translation unit and its ``-D`` constants. Nothing is compiled: ``compile_kernel`` is
replaced by a recorder in this process, so run it as its own process (the builds' caches then hold
records, not cubins).

    PYTHONPATH=src python3 tools/build_inputs.py > tests/data/build_inputs.json
    PYTHONPATH=src python3 tools/build_inputs.py grouped_fp8 > tests/data/build_inputs_grouped_fp8.json

Two runs that print the same JSON give the compiler the same inputs for every build: the same cubins
and SASS (the compiler's cache key is the unit, the sorted flags, the compiler and the headers).
tests/test_build_inputs.py compares the package's output against the committed file. The second form
records every grouped GEMM build the host code can ask for and every fp8 build (tests/test_families.py
compares it); it builds through ``grouped_gemm(...).build(dtype)`` and ``Fp8Kernel(...).build()``, which
the trees before and after those kernels became KernelConfig families (issue 22) both take.
"""

from __future__ import annotations

import hashlib
import json
import sys


class _Recorded:
    key = None

    def __init__(self, record: dict):
        self.record = record


def _other_builds(Build) -> list:
    """Builds precompile does not make: the swiglu kernel's (its quantized output's too), and the small-M
    kernel's measuring and two-CTA experiment builds (bench/)."""
    from gemm_ladder.library.small_m import SmallMGemm
    from gemm_ladder.library.swiglu import swiglu_kernel

    out = []
    for d in ("bf16", "fp16"):
        out.append(Build(f"swiglu {d}", lambda d=d: swiglu_kernel().build(d)))
        out.append(Build(f"swiglu e4m3 out {d}", lambda d=d: swiglu_kernel(quantized=True).build(d)))
        out.append(Build(f"small-M BN 64 timeline {d}", lambda d=d: SmallMGemm(64, timeline=True).build(d)))
        out.append(Build(f"small-M BN 32 two CTAs per SM {d}", lambda d=d: SmallMGemm(32, ctas_per_sm=2).build(d)))
        out.append(Build(f"small-M BN 64 3 stages A mn fp32 out {d}",
                         lambda d=d: SmallMGemm(64, stages=3).build(d, a_major="mn", out_fp32=True)))
    return out


def capture(epilogues: str = "common") -> dict:
    """{label: {kernel, unit, defines}} of every build of ``precompile`` for bf16 and fp16, every shape
    class and the epilogue level ``epilogues``; the defines of each distinct set once, by digest."""
    import gemm_ladder.runtime.compiler as compiler
    from gemm_ladder.dispatch import precompile as P

    def record(source, kernel_name, *, arch="sm_90a", defines=None, extra_flags=None):
        return _Recorded({"kernel": kernel_name, "arch": arch, "defines": dict(sorted((defines or {}).items())),
                          "unit": hashlib.sha256(source.encode()).hexdigest()[:16], "extra": extra_flags})

    def patch() -> None:
        for name, mod in list(sys.modules.items()):
            if name.startswith("gemm_ladder") and getattr(mod, "compile_kernel", None) is not None:
                mod.compile_kernel = record

    compiler.compile_kernel = record
    builds = P.library_builds(("bf16", "fp16"), tuple(P.CLASSES))
    builds += P.epilogue_builds(("bf16", "fp16"), tuple(P.CLASSES), epilogues)
    builds += _other_builds(P.Build)
    patch()
    defines: dict[str, dict] = {}
    out: dict[str, dict] = {}
    for b in builds:
        if b.label in out:
            continue
        patch()  # modules imported by a build's first run
        try:
            r = b.run().record
        except Exception as exc:  # noqa: BLE001 - a refused variant is part of the record
            out[b.label] = {"refused": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            continue
        digest = hashlib.sha256(json.dumps(r["defines"], sort_keys=True).encode()).hexdigest()[:12]
        defines[digest] = r["defines"]
        out[b.label] = {"kernel": r["kernel"], "arch": r["arch"], "unit": r["unit"], "defines": digest,
                        "extra": r["extra"]}
    return {"defines": dict(sorted(defines.items())), "builds": dict(sorted(out.items()))}


def capture_grouped_fp8() -> dict:
    """{label: {kernel, unit, defines}} of every grouped GEMM build api_grouped.py can ask for (bf16 and
    fp16) and every fp8 build (scale granularity, A and B fp8 dtypes, output, bias, tile width, overlap,
    and for a bf16 or fp16 output the store: the register store and the TMA store the launch defaults to;
    and the split-K builds the launch asks for)."""
    import itertools

    import gemm_ladder.library.fp8 as fp8
    import gemm_ladder.library.grouped as grouped

    def record(source, kernel_name, *, arch="sm_90a", defines=None, extra_flags=None):
        return _Recorded({"kernel": kernel_name, "arch": arch, "defines": dict(sorted((defines or {}).items())),
                          "unit": hashlib.sha256(source.encode()).hexdigest()[:16], "extra": extra_flags})

    grouped.compile_kernel = fp8.compile_kernel = record
    builds = []
    for bn, major, f32, (bias, masked, kg), d in itertools.product(
            (128, 256), ("k", "mn"), (False, True), ((0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)), ("bf16", "fp16")):
        if not (kg and major == "k"):
            kw = dict(bn=bn, b_major=major, out_fp32=f32, bias=bool(bias), k_grouped=bool(kg), masked=bool(masked))
            builds.append((f"grouped {sorted(kw.items())} {d}", lambda kw=kw, d=d: grouped.grouped_gemm(**kw).build(d)))
    for mode, a, b, out, bias, bn, overlap in itertools.product(
            fp8.SCALE_MODES, ("e4m3", "e5m2"), ("e4m3", "e5m2"), ("bf16", "fp16", "fp32", "fp8"), (False, True),
            fp8.TILE_N, (True, False)):
        if not (out == "fp8" and bn != 128):
            for store in (fp8.STORE_REGISTERS, fp8.STORE_TMA) if out in fp8.TMA_STORE_OUT else (fp8.STORE_REGISTERS,):
                k = fp8.Fp8Kernel(mode, a, b, out, bias, bn, overlap=overlap, store=store)
                builds.append((f"fp8 {k}", k.build))
    # The split-K builds the launch asks for (library/fp8.py split_plan: tiles fewer than the SMs, so BN 64,
    # or 128 for the quantized output), with the launch's promotion.
    for mode, a, b, out, bias in itertools.product(
            fp8.SCALE_MODES, ("e4m3", "e5m2"), ("e4m3", "e5m2"), ("bf16", "fp16", "fp32", "fp8"), (False, True)):
        for store in (fp8.STORE_REGISTERS, fp8.STORE_TMA) if out in fp8.TMA_STORE_OUT else (fp8.STORE_REGISTERS,):
            k = fp8.Fp8Kernel(mode, a, b, out, bias, 128 if out == "fp8" else 64, overlap=fp8.OVERLAP_PROMOTION,
                              store=store, split=True, **fp8.scale_b_source(mode, None, split=True))
            builds.append((f"fp8 {k}", k.build))
    # The launch's two ways of reading blockwise scale_b (library/fp8.py scale_b_source): a shared copy of the
    # tile's column, and the load one K block ahead, on every whole-tile build with the launch's promotion.
    for a, b, out, bias, bn, source in itertools.product(
            ("e4m3", "e5m2"), ("e4m3", "e5m2"), ("bf16", "fp16", "fp32", "fp8"), (False, True), fp8.TILE_N,
            ("scale_b_shared", "scale_b_ahead")):
        if not (out == "fp8" and bn != 128):
            for store in (fp8.STORE_REGISTERS, fp8.STORE_TMA) if out in fp8.TMA_STORE_OUT else (fp8.STORE_REGISTERS,):
                k = fp8.Fp8Kernel("blockwise", a, b, out, bias, bn, overlap=fp8.OVERLAP_PROMOTION, store=store,
                                  **{source: True})
                builds.append((f"fp8 {k}", k.build))
    defines: dict[str, dict] = {}
    out: dict[str, dict] = {}
    for label, run in builds:
        r = run().record
        digest = hashlib.sha256(json.dumps(r["defines"], sort_keys=True).encode()).hexdigest()[:12]
        defines[digest] = r["defines"]
        out[label] = {"kernel": r["kernel"], "arch": r["arch"], "unit": r["unit"], "defines": digest, "extra": r["extra"]}
    return {"defines": dict(sorted(defines.items())), "builds": dict(sorted(out.items()))}


if __name__ == "__main__":
    result = capture_grouped_fp8() if sys.argv[1:] == ["grouped_fp8"] else capture(*sys.argv[1:])
    json.dump(result, sys.stdout, indent=0, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")
