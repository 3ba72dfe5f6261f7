"""How much of the fp8 kernel's per-tile fixed cost is its epilogue's global stores (one-off).

    python bench/experiments/fp8_epilogue_cost.py [--scale tensorwise] [--shape 4096x24576] [--budget S] [-o OUT.json]

The K sweep (docs/where-time-goes.md, results/2026-12-03_k_sweep_bba1224.json) found the fp8 kernel
92-108 us behind cuBLAS at 4096x24576x1536 in a cost that does not grow with K, about 2 us per
128 x 128 tile; its source runs the epilogue in both consumer warpgroups at once, storing from
registers, with no wgmma in flight. This builds sm90_fp8_gemm.cu's register-store epilogue twice, as it is (``stores``) and
with each of the epilogue's global stores behind a condition no output value meets (``no_stores``: the
values are still computed, scaled and biased; nothing is written), launches both through
library/fp8.py's scaled_mm_launch on the same inputs at K = K0 x 1/4 .. 2 (K0 = 1536), interleaved,
L2 flushed before every call (gates.performance.time_fns), and fits t(K) = a + b K to each
(k_sweep.describe_fit). The intercepts' difference is what the stores cost per call; divided by the
tiles per SM, per tile. The guarded build keeps every store instruction behind a compare and a branch
(128 STG in both builds' SASS here, 512 more instructions in the guarded one), so the difference is a
lower bound on the stores' cost. A third build, ``tma_store`` (Fp8Kernel store="tma": the output staged in
shared memory and written by TMA stores while the consumers go on to the next tile), is timed beside them:
the intercepts' difference ``stores`` - ``tma_store`` is what the candidate fix saves a call. ``stores`` and
``tma_store`` are checked against float64 of the dequantized inputs first; the ``no_stores`` output,
poisoned with NaN before its launch, must still be all NaN (nothing stored).

Result (bench/suite.py): DATE_fp8_epilogue_cost_COMMIT.json with ``{shape, scale, ks, us: {build:
[...]}, fits: {build: {a_us, b_us_per_k, rate_tflops, r2}}, store_cost_us, tiles, tiles_per_sm,
store_cost_per_tile_us, rel_err, nothing_stored, tma_store_saving_us, tma_store_saving_per_tile_us,
tma_store_stages, tma_store_rel_err, tma_store_equal_to_stores}`` (the last: the fraction of outputs
bitwise equal to the register store's). Exit status: 0 done, 1 a wrong result or a store that
happened, 2 no GPU or bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # k_sweep.py
from outputs import check_output, positive  # noqa: E402
from suite import add_output_argument, require_gpu, save  # noqa: E402

#: The epilogue's one global store of a plain output, as sm90_fp8_gemm.cu writes it.
STORE = "store_pair(C, ldc, r0 + 8 * i, col, M, N, x0 + bias0, x1 + bias1, pairs);"
#: The same store behind a condition no value of a random product meets (exactly this tiny number).
GUARDED = "if (x0 + bias0 == 1.2345e-30f) " + STORE
FACTORS = (0.25, 0.5, 1.0, 1.5, 2.0)


def no_store_source(source: str) -> str:
    """``source`` (sm90_fp8_gemm.cu) with its plain-output store guarded; raises ValueError when the
    store is not there exactly once (the kernel changed under this experiment)."""
    if source.count(STORE) != 1:
        raise ValueError(f"sm90_fp8_gemm.cu has {source.count(STORE)} copies of the epilogue's store "
                         f"{STORE!r}, not 1: update bench/experiments/fp8_epilogue_cost.py")
    return source.replace(STORE, GUARDED)


def no_store_kernel(kernel):
    """An Fp8Kernel whose build compiles :func:`no_store_source` (bench/variants.py fp8_with_source)."""
    from gemm_ladder.library import fp8
    from gemm_ladder.runtime.compiler import KERNEL_ROOT
    from variants import fp8_with_source

    edited = no_store_source((KERNEL_ROOT / fp8.SOURCE).read_text())
    return fp8_with_source(kernel, "no_stores", edited, "GL_FP8_EXPERIMENT_NO_STORES")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="tensorwise", choices=("tensorwise", "rowwise", "blockwise"))
    p.add_argument("--shape", default="4096x24576", help="M x N (default 4096x24576, the K sweep's short-K problem)")
    p.add_argument("--k0", type=int, default=1536, help="the K the sweep centres on (default 1536)")
    p.add_argument("--budget", type=float, default=0.06, help="seconds of timed calls per build and K (default 0.06)")
    add_output_argument(p)
    args = p.parse_args(argv)
    try:
        m, n = (int(v) for v in args.shape.lower().split("x"))
    except ValueError:
        print(f"bench/experiments/fp8_epilogue_cost.py: --shape {args.shape!r}: use MxN", file=sys.stderr)
        return 2
    for flag, value in (("--shape M", m), ("--shape N", n), ("--k0", args.k0), ("--budget", args.budget)):
        positive(__file__, flag, value)
    check_output(__file__, args.output)
    require_gpu(__file__)
    import torch

    from gemm_ladder.gates.performance import time_fns
    from gemm_ladder.library import fp8, quantized
    from k_sweep import describe_fit, k_points, rel_err as relative_error

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bn = fp8.tile_n(m, n, sms)
    real = fp8.Fp8Kernel(args.scale, bn=bn, overlap=fp8.OVERLAP_PROMOTION)
    tma = dataclasses.replace(real, store=fp8.STORE_TMA)
    builds = {"stores": real, "no_stores": no_store_kernel(real), "tma_store": tma}
    for kernel in builds.values():
        kernel.build()
    ks = k_points(args.k0, FACTORS)
    ba, bw = quantized.SCHEME_BLOCKS[args.scale]
    torch.manual_seed(0)
    us: dict[str, list[float]] = {name: [] for name in builds}
    rel_err, nothing_stored, tma_err, tma_equal = 0.0, True, 0.0, 1.0
    for k in ks:
        qa, sa = quantized.quantize_fp8(torch.randn(m, k, device="cuda"), ba)
        qw, sw = quantized.quantize_fp8(torch.randn(n, k, device="cuda") / math.sqrt(k), bw)
        sb = sw.T if sw.dim() == 2 else sw
        call = fp8.check_scaled_mm(qa, qw.T, sa, sb)
        outs = {name: torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda") for name in builds}
        fns = {name: (lambda *_, kern=kern, out=outs[name]: fp8.scaled_mm_launch(qa, qw.T, sa, sb, None, call, out,
                                                                                  kernel=kern))
               for name, kern in builds.items()}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        ref = quantized.dequantize(qa[:256], sa[:256] if sa.dim() == 2 else sa, ba).double() @ quantized.dequantize(qw, sw, bw).double().T
        rel_err = max(rel_err, relative_error(outs["stores"][:256], ref))
        tma_err = max(tma_err, relative_error(outs["tma_store"][:256], ref))
        tma_equal = min(tma_equal, (outs["tma_store"].view(torch.int16) == outs["stores"].view(torch.int16))
                        .float().mean().item())
        nothing_stored = nothing_stored and bool(outs["no_stores"].isnan().all())
        timings = time_fns(fns, qa, qw, budget_s=args.budget, rounds=2, warmup=3, max_repeats=100)
        for name, t in timings.items():
            us[name].append(t.median_ms * 1e3)
        print(f"K {k:6d}: " + "  ".join(f"{name} {us[name][-1]:8.1f} us" for name in builds), flush=True)
        del qa, qw, outs, ref
        torch.cuda.empty_cache()
    fits = {name: describe_fit(ks, us[name], 2.0 * m * n) for name in builds}
    tiles = math.ceil(m / fp8.BM) * math.ceil(n / bn)
    store_cost = fits["stores"]["a_us"] - fits["no_stores"]["a_us"]
    result = {"shape": [m, n], "scale": args.scale, "bn": bn, "ks": ks, "us": us, "fits": fits,
              "store_cost_us": store_cost, "tiles": tiles, "tiles_per_sm": tiles / sms,
              "store_cost_per_tile_us": store_cost / (tiles / sms), "rel_err": rel_err, "nothing_stored": nothing_stored}
    saving = fits["stores"]["a_us"] - fits["tma_store"]["a_us"]
    result.update({"tma_store_saving_us": saving, "tma_store_saving_per_tile_us": saving / (tiles / sms),
                   "tma_store_stages": tma.ring_stages, "tma_store_rel_err": tma_err,
                   "tma_store_equal_to_stores": tma_equal})
    save(result, "fp8_epilogue_cost", args.output)
    print(f"{m}x{n} {args.scale}: intercept with stores {fits['stores']['a_us']:.1f} us, without "
          f"{fits['no_stores']['a_us']:.1f} us: the stores cost {store_cost:.1f} us a call, "
          f"{result['store_cost_per_tile_us']:.2f} us a tile per SM ({tiles} tiles); rel err {rel_err:.1e}; "
          f"nothing stored without them: {nothing_stored}")
    print(f"TMA store ({tma.ring_stages} stages): intercept {fits['tma_store']['a_us']:.1f} us, "
          f"{saving:.1f} us a call less than the register store ({result['tma_store_saving_per_tile_us']:.2f} us a "
          f"tile per SM); rel err {tma_err:.1e}; {tma_equal:.6f} of outputs bitwise equal to the register store's")
    ok = rel_err <= 2e-2 and nothing_stored and tma_err <= 2e-2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
