"""fp8 builds side by side: the library's default build of each call against named variants of it, and
``torch._scaled_mm`` of the same scaling, interleaved in one run (one-off, issue 25).

    python bench/experiments/fp8_variants.py [--variants behind,stages5] [--schemes blockwise]
                                             [--shapes MxNxK,...] [--budget S] [-o OUT.json]
    python bench/experiments/fp8_variants.py --prebuild [--variants ...] [--schemes ...]

Variants (each a ``dataclasses.replace`` of library/fp8.py's ``default_build`` for the call with the 192-wide tile
turned off, ``fp8.WIDE_TILE = False``: the 128-wide launch build, whose variants these are; the wide tile is the
``bn192`` variant; a variant that would be the default build itself is skipped):

* ``behind``    blockwise scale_b loaded in the K block that uses it (the default reads it from a shared copy,
                ``scale_b_shared``, or loads it one block ahead, ``scale_b_ahead``); ``ahead`` and ``shared``
                those two, where the default is not already that;
* ``registers`` the register store with its deeper ring (blockwise: 6 stages against the TMA store's 5);
* ``shared``    blockwise scale_b read from a shared copy of the tile's column (``scale_b_shared``: no global
                load in the K loop; K <= 16384);
* ``stages5``   the same build with a 5-stage ring (tensorwise and rowwise take 6 with the TMA store,
                blockwise 5: what one stage less costs);
* ``serial``    the promotion after each K block's wgmmas complete (one temporary, ``overlap=False``): what the
                overlap within a consumer gains over the two consumers' own interleaving;
* ``bn192``     the experimental 192-wide tile (fp8.EXPERIMENTAL_TILE_N: 13% fewer shared-memory bytes per
                flop, promoted serially as its registers require; blockwise scale_b from the shared copy where the
                default reads it so (16-128 K blocks), else in the block; 128-row, unsplit builds only). Compare
                it with ``serial`` for what the width alone gains.

Another, ``onepanel`` (the TMA store staging one 64-column panel at a time, which fits blockwise a 6-stage
ring), ran 0.98-1.00x the default blockwise build and was removed (docs/fp8.md, "Tried and removed").

Diagnostics (blockwise; timed, their results wrong by design and not checked): the promotion scales'
two lines of the kernel edited in a temporary copy of its source: ``scales_one`` (both scales 1: no
scale_a read, no scale_b load), ``sa_one`` (scale_b only), ``sb_one`` (scale_a only). What each saves
against the default says where the blockwise K loop's time goes beside tensorwise's. ``sa_lds`` edits the
same lines keeping their arithmetic (checked bitwise): scale_a read by LDS instead of a generic load;
``scales_before`` and ``scales_after`` (checked bitwise) read the block's scales before its wgmmas are
issued, or after (the kernel reads them before where scale_b comes from the shared copy, after otherwise);
each is skipped where it is the build's own order.

Each variant's output, poisoned with NaN first, is compared bitwise with the default build's (a variant
that changes no arithmetic must match every element) and against float64 of the dequantized inputs
(within 1.5x torch's error, as bench/fp8.py). Timing: gemm_ladder.timing.time_fns (L2 flushed before each
call, median of rounds rotating the first callable). ``ratio_<variant>``: the default's time over the
variant's (> 1: the variant is faster); ``ratio_torch``: torch's time over the default's.

Result (bench/suite.py): DATE_fp8_variants_COMMIT.json, ``rows: [{M, N, K, scheme, default, tflops,
ratio_torch, variants: {name: {tflops, ratio, bitwise_equal, err}}}]``. Exit status: 0 done, 1 a wrong or
unequal result, 2 no GPU or bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, fp8.py

import torch

from gemm_ladder.library import fp8
from gemm_ladder.library.quantized import SCHEME_BLOCKS, dequantize, quantize_fp8
from gemm_ladder.timing import time_fns
from fp8 import _meta_operands, rel_err  # bench/fp8.py's (not gemm_ladder.library.fp8)
from outputs import check_output, comma_list, positive, shapes_of
from suite import add_output_argument, require_gpu, save

ISSUE = ["4096x7168x16384", "4096x4096x4096", "8192x8192x8192", "4096x24576x1536", "128x7168x2048"]


def _bn192(k: fp8.Fp8Kernel) -> fp8.Fp8Kernel | None:
    """The 192-wide build of a 128-row, unsplit, non-quantized call's default build (None otherwise)."""
    if k.bm != fp8.BM or k.split or k.out_dtype == "fp8":
        return None
    return dataclasses.replace(k, bn=192, overlap=False, stages=0, scale_b_ahead=False)


VARIANTS = {
    "behind": lambda k: dataclasses.replace(k, scale_b_ahead=False, scale_b_shared=False, stages=0)
    if k.scale_b_ahead or k.scale_b_shared else None,
    "registers": lambda k: dataclasses.replace(k, store=fp8.STORE_REGISTERS, stages=0)
    if k.store == fp8.STORE_TMA else None,
    "stages5": lambda k: dataclasses.replace(k, stages=5) if k.ring_stages > 5 else None,
    "shared": lambda k: dataclasses.replace(k, scale_b_shared=True, scale_b_ahead=False, stages=0)
    if k.scale_mode == "blockwise" and not k.scale_b_shared else None,
    "ahead": lambda k: dataclasses.replace(k, scale_b_ahead=True, scale_b_shared=False, stages=0)
    if k.scale_mode == "blockwise" and not k.scale_b_ahead else None,
    "serial": lambda k: dataclasses.replace(k, overlap=False, stages=0) if k.overlap else None,
    "bn192": _bn192,
}

#: Diagnostic builds (blockwise only): the kernel's source with the promotion scales' computation edited,
#: so that their results are wrong (timed, never checked): where the blockwise loop's time goes.
PROMOTION_SCALES = "      s0 = smem.sa(s)[row_in_tile] * sb;\n      s1 = smem.sa(s)[row_in_tile + 8] * sb;\n"
DIAGNOSTICS = {
    "scales_one": "      s0 = s1 = 1.0f;\n      (void)sb;\n",  # no scale_a read, no scale_b load (dead)
    "sa_one": "      s0 = s1 = sb;\n",  # scale_b only: no scale_a read from shared memory
    "sb_one": "      s0 = smem.sa(s)[row_in_tile];\n      s1 = smem.sa(s)[row_in_tile + 8];\n      (void)sb;\n",
}
#: Candidate edits of the same lines that keep the arithmetic (checked bitwise like the variants): ``sa_lds``
#: reads scale_a through a pointer derived from the kernel's extern __shared__ array, so that ptxas emits
#: LDS instead of the generic LD it emits for Smem's integer-aligned base (the K loop's SASS: LD.E).
SA_SHARED = "reinterpret_cast<const float*>(smem_raw + (smem_u32(smem.sa(s)) - smem_u32(smem_raw)))"
#: The promotion scales' place in the kernel's issue(): before the block's wgmmas where scale_b is read from the
#: shared copy, after them otherwise. ``scales_before`` reads them before for every source, ``scales_after``
#: after (each checked bitwise; each skipped where it is the build's own order): lists of (old, new, count)
#: edits, each ``old`` occurring exactly ``count`` times.
_BEFORE = "    if constexpr (Cfg::kScaleBShared) read_scales(s, kb, tn, s0, s1);\n"
_AFTER = "    if constexpr (!Cfg::kScaleBShared) read_scales(s, kb, tn, s0, s1);\n"
_READ = "    read_scales(s, kb, tn, s0, s1);\n"
EDITS = {**DIAGNOSTICS,
         "sa_lds": f"      s0 = {SA_SHARED}[row_in_tile] * sb;\n      s1 = {SA_SHARED}[row_in_tile + 8] * sb;\n",
         "scales_before": [(_BEFORE, _READ, 1), (_AFTER, "", 1)],
         "scales_after": [(_BEFORE, "", 1), (_AFTER, _READ, 1)]}
#: Where an edit variant is the build itself (skipped).
EDIT_IS_DEFAULT = {"scales_before": lambda k: k.scale_b_shared, "scales_after": lambda k: not k.scale_b_shared}
CHECK_ROWS = 256
SMS_H200 = 132  # the builds --prebuild compiles: the default tile width for the H200's (and H100's) 132 SMs


def default_kernel(m: int, n: int, k: int, scheme: str, sms: int) -> fp8.Fp8Kernel:
    """The library's build (fp8.default_build) for a bf16-output call of this shape and scheme, planned on
    meta tensors (no GPU: what --prebuild compiles)."""
    args = _meta_operands(m, n, k, scheme)
    call = fp8.check_scaled_mm(*args, device_type=None)
    return fp8.default_build(call, args[0], args[1], None, None, sms)[0]


def diagnostic_kernel(kernel: fp8.Fp8Kernel, name: str) -> fp8.Fp8Kernel:
    """``kernel`` compiled from the source with EDITS[name] in place of the promotion scales' lines
    (bench/variants.py fp8_with_source)."""
    from gemm_ladder.runtime.compiler import KERNEL_ROOT
    from variants import fp8_with_source

    source = (KERNEL_ROOT / fp8.SOURCE).read_text()
    edits = EDITS[name] if isinstance(EDITS[name], list) else [(PROMOTION_SCALES, EDITS[name], 1)]
    edited = source
    for old, new, count in edits:
        if edited.count(old) != count:
            raise SystemExit(f"fp8_variants: {name}'s edit no longer applies to {fp8.SOURCE}; update it")
        edited = edited.replace(old, new)
    return fp8_with_source(kernel, name, edited, f"GL_FP8_DIAGNOSTIC_{name.upper()}")


def variant(kernel: fp8.Fp8Kernel, name: str) -> fp8.Fp8Kernel | None:
    if name in EDITS:
        if kernel.scale_mode != "blockwise" or EDIT_IS_DEFAULT.get(name, lambda k: False)(kernel):
            return None
        return diagnostic_kernel(kernel, name)
    return VARIANTS[name](kernel)


def builds(shapes, schemes, variants, sms: int) -> list[fp8.Fp8Kernel]:
    out = []
    for m, n, k in shapes:
        for scheme in schemes:
            base = default_kernel(m, n, k, scheme, sms)
            out.append(base)
            out += [v for name in variants if (v := variant(base, name)) is not None]
    return list(dict.fromkeys(out))


def run_shape(m: int, n: int, k: int, scheme: str, variants: list[str], budget: float,
              check_only: bool = False) -> tuple[dict, bool]:
    ba, bw = SCHEME_BLOCKS[scheme]
    a = torch.randn((m, k), device="cuda")
    w = torch.randn((n, k), device="cuda") / math.sqrt(k)
    qa, sa = quantize_fp8(a, ba)
    qw, sw = quantize_fp8(w, bw)
    b, sb = qw.T, (sw.T if sw.dim() == 2 else sw)
    call = fp8.check_scaled_mm(qa, b, sa, sb)
    base, _, _ = fp8.default_build(call, qa, b, None, None, fp8._sm_count(qa.device))
    kernels = {"default": base}
    kernels.update({name: v for name in variants if (v := variant(base, name)) is not None})
    ref = dequantize(qa[:CHECK_ROWS], sa[:CHECK_ROWS] if sa.dim() == 2 else sa, ba) @ dequantize(qw, sw, bw).T
    outs = {}
    for name, kern in kernels.items():
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        outs[name] = fp8.scaled_mm_launch(qa, b, sa, sb, None, call, out, kernel=kern)
    e_torch, torch_fn = None, None
    # Under --check-only (compute-sanitizer) torch is not launched: racecheck reports hazards in cuBLAS's
    # blockwise kernel (nvjet_sm90_qqtst_128x128_..._coopA, H100, 64 x 4096 x 7168), which are not ours.
    try:
        if not check_only:
            e_torch = rel_err(torch._scaled_mm(qa, b, sa, sb, out_dtype=torch.bfloat16)[:CHECK_ROWS], ref)
            torch_fn = lambda x, y: torch._scaled_mm(qa, b, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    except (RuntimeError, ValueError):
        pass
    fns = {name: (lambda x, y, kern=kern: fp8.scaled_mm_launch(qa, b, sa, sb, None, call, kernel=kern))
           for name, kern in kernels.items()}
    if torch_fn is not None:
        fns["torch"] = torch_fn
    if check_only:  # one launch each (above), no timing: what a compute-sanitizer run needs
        times = {name: _Untimed() for name in fns}
    else:
        times = time_fns(fns, qa, b, budget_s=budget, rounds=3)
    flop = 2.0 * m * n * k
    t0 = times["default"].median_ms
    ok = True
    row = {"M": m, "N": n, "K": k, "scheme": scheme, "default": repr(base), "tflops": flop / t0 / 1e9,
           "median_ms": t0, "err": rel_err(outs["default"][:CHECK_ROWS], ref), "err_torch": e_torch,
           "ratio_torch": times["torch"].median_ms / t0 if "torch" in times else None, "variants": {}}
    # Without torch's error (--check-only, or a scheme torch refuses): bench/sanitize_families.py's bound.
    bound = 1.5 * e_torch + 1e-6 if e_torch is not None else 2e-2
    ok &= math.isfinite(row["err"]) and row["err"] <= bound
    for name in kernels:
        if name == "default":
            continue
        t = times[name].median_ms
        equal = bool(torch.equal(outs[name], outs["default"]))
        err = rel_err(outs[name][:CHECK_ROWS], ref)
        ok &= name in DIAGNOSTICS or (equal and math.isfinite(err) and err <= bound)  # a diagnostic's: wrong by design
        row["variants"][name] = {"build": repr(kernels[name]), "tflops": flop / t / 1e9, "median_ms": t,
                                 "ratio": t0 / t, "bitwise_equal": equal, "err": err}
    return row, ok


class _Untimed:
    median_ms = math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="behind,stages5")
    parser.add_argument("--schemes", default="blockwise")
    parser.add_argument("--shapes", default=",".join(ISSUE))
    parser.add_argument("--budget", type=float, default=0.15, help="timing budget per callable, seconds")
    parser.add_argument("--prebuild", action="store_true", help="compile the builds (no GPU) and exit")
    parser.add_argument("--check-only", action="store_true",
                        help="launch and check each build once, no timing and no torch (under compute-sanitizer)")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    fp8.WIDE_TILE = False  # "default": the 128-wide launch build (module docstring)
    variants = comma_list(__file__, "--variants", args.variants)
    schemes = comma_list(__file__, "--schemes", args.schemes)
    positive(__file__, "--budget", args.budget)
    bad = [v for v in variants if v not in VARIANTS and v not in EDITS] + [s for s in schemes if s not in SCHEME_BLOCKS]
    if bad:
        print(f"fp8_variants: unknown variant or scheme: {', '.join(bad)}", file=sys.stderr)
        return 2
    try:
        shapes = shapes_of("--shapes", args.shapes)
    except ValueError:
        print(f"fp8_variants: --shapes {args.shapes!r}: use MxNxK[,MxNxK...]", file=sys.stderr)
        return 2
    if args.prebuild:
        from gemm_ladder.dispatch.precompile import Build, run_builds

        outcomes = run_builds([Build(repr(k), k.build) for k in builds(shapes, schemes, variants, SMS_H200)], load=False)
        print(outcomes.summary())
        return 1 if outcomes.failed else 0
    check_output(__file__, args.output)
    require_gpu(__file__)
    rows, ok = [], True
    for m, n, k in shapes:
        for scheme in schemes:
            row, good = run_shape(m, n, k, scheme, variants, args.budget, args.check_only)
            ok &= good
            rows.append(row)
            vs = "  ".join(f"{name} {v['ratio']:.3f}x"
                           f"{'' if v['bitwise_equal'] or name in DIAGNOSTICS else ' UNEQUAL'}"
                           for name, v in row["variants"].items())
            rt = ("not run" if args.check_only else "refused") if row["ratio_torch"] is None else f"{row['ratio_torch']:.3f}x"
            print(f"{m}x{n}x{k} {scheme}: {row['tflops']:.0f} TFLOP/s, torch {rt}; {vs}"
                  f"{'' if good else '  WRONG'}", flush=True)
    save({"rows": rows, "variants": variants}, "fp8_variants", args.output)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
