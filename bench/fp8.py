"""The fp8 GEMM's benchmark: ``gemm_ladder.scaled_mm`` against ``torch._scaled_mm`` of each scaling and bf16
``torch.mm``, interleaved in one run (issue 25).

    python bench/fp8.py [--quick] [--shapes MxNxK,...] [--split auto|none|both] [--tile-m 128|auto|both]
                        [--wave-efficiency X] [--alt NAME=VALUE] [--prebuild] [-o OUT.json]

Per shape (M x N x K: a (M, K), weight w (N, K), b = w.T), on the same quantized tensors:

* ``ours_<scheme>``  gemm_ladder.scaled_mm (kernels/library/sm90_fp8_gemm.cu), bf16 output;
* ``torch_<scheme>`` torch._scaled_mm with the same arguments (cuBLASLt); a scheme torch refuses is
                     recorded with its reason and no time;
* ``bf16_mm``        torch.mm of the bf16 operands (cuBLAS).

Schemes: tensorwise, rowwise, blockwise (1 x 128 scales on a, 128 x 128 on w). Shapes: the issue's five,
then DeepSeek-V3 and Llama-3-8B linear layers at decode (M = 64) and prefill (M = 4096); ``--quick``: the
issue's five. Before timing, each scheme's first 256 output rows are checked against float64 of the
dequantized inputs (``err``: largest element error over the largest |ref|), within ``err_bound``: 1.5x
torch's error + 1e-6 (``bound: "torch"``) where torch ran and its own error is within the library's
bound, else the library's bound, 1.5x the float64 result's rounding to bf16 + 1e-4 (``bound: "own"``, as
tests/test_fp8_gpu.py): torch refusing a scheme, or its own result being wrong (blockwise at some K),
leaves a check with a bound, never none (``correct`` is that check; a NaN fails it). The ``fused_quant``
row's e4m3 values are checked too (``bound: "own"``): each dequantized value within e4m3's rounding of
the float64 product (2^-4 relative, 2^-9 of its block's scale) + 2^-10 of the largest |ref|; ``err`` is
the worst value's error over its bound (<= 1 passes).

Split K (library/fp8.py ``split_plan``): each of our rows records the split its call ran (``split``: "all" or
"none", ``grid``, ``contributors``, from ``explain_scaled_mm``). ``--split``: "auto" (default: the library's
choice), "none" (the split turned off, fp8.SPLIT_DEFAULT), or "both": where the library splits, the unsplit
launch of the same call is timed too, interleaved with the others (``ours_<scheme>_nosplit``), and the row
gets ``median_ms_nosplit`` and ``ratio_nosplit`` (unsplit time over split time: > 1, the split is faster);
None where nothing is split.

``--wave-efficiency X`` sets fp8.MAX_WAVE_EFFICIENCY for the run: tiles that fill the SMs in whole-tile waves
less efficient than X have their last partial wave split ("wave" or "all"); with ``--split both`` the sweep that
chose the library's value (docs/fp8.md).

``--alt NAME=VALUE``: each scheme's call is also timed with that library/fp8.py setting (e.g. ``SPLIT_ALIGNED=1``),
interleaved, where the setting changes its launch (build, grid or split): ``median_ms_alt`` and ``ratio_alt``
(the altered time over the library's: < 1, the setting is faster), its output checked like the others.
``--prebuild`` compiles the run's builds (these settings included) into the kernel cache and exits, no GPU.

Tile height (library/fp8.py ``tile_m``): each of our rows records it (``bm``). ``--tile-m``: "auto" (default,
the library's: 64-row tiles where M <= 64), "128" (128-row tiles everywhere), or "both": "auto", and where it takes 64 rows
the 128-row launch of the same call is timed too, interleaved (``ours_<scheme>_rows128``): the row gets
``median_ms_rows128`` and ``ratio_rows128`` (the 128-row time over the 64-row one: > 1, 64 rows faster).

Rows (``rows: [{M, N, K, scheme, fused_quant, tflops, ratio_torch, split, ...}]``): ``ratio_torch`` is
torch's time over ours for the same scheme (> 1: ours faster); for ``bf16_mm`` rows it is None. The
``fused_quant`` row (blockwise, ``out_dtype=torch.float8_e4m3fn``: e4m3 output with 1 x 128 scales from
the epilogue) has ``ratio_torch`` = (torch._scaled_mm blockwise to bf16, then quantize_fp8) over ours,
and ``ratio_ours_unfused`` = (our bf16 scaled_mm, then quantize_fp8) over ours (issue target >= 1.2x). Timing: gates.performance.time_fns
(L2 flushed before each call, median, rounds rotating the first callable). One JSON
(bench/suite.py: DATE_fp8[_quick]_COMMIT.json).

Exit status: 0 when every result is within its bound; 1 when one is not; 2 for bad input (one line: a bad
``--shapes``, an unwritable ``-o``) or no CUDA GPU, before anything runs.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

import gemm_ladder
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.library import fp8
from gemm_ladder.library.quantized import SCHEME_BLOCKS, dequantize, quantize_fp8, quantized_product_error
from outputs import check_output, parse_shapes, refuse
from suite import add_output_argument, require_gpu, save, with_setting

ISSUE = [(4096, 7168, 16384), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 24576, 1536), (128, 7168, 2048)]
#: (N, K) of linear layers: DeepSeek-V3 (q_a, q_b, kv_a, o, shared-expert gate/up, down) and Llama-3-8B
#: (qkv, o, gate_up, down).
LAYERS = {"dsv3": [(1536, 7168), (24576, 1536), (576, 7168), (7168, 16384), (4096, 7168), (7168, 2048)],
          "llama3_8b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]}
BLOCKS = SCHEME_BLOCKS
CHECK_ROWS = 256


def shapes(quick: bool, spec: str | None) -> list[tuple[int, int, int]]:
    """``--shapes`` (validated: one line and exit 2 for a bad entry) or the default set."""
    if spec is not None:
        return parse_shapes(__file__, "--shapes", spec)
    out = list(ISSUE)
    if not quick:
        for layers in LAYERS.values():
            for m in (64, 4096):
                out += [(m, n, k) for n, k in layers if (m, n, k) not in out]
    return out


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def verdict(err: float, err_torch: float | None, floor: float) -> dict:
    """Whether our error ``err`` passes, and against which bound: torch's (1.5x its error + 1e-6) where torch
    ran and its error is within the library's own bound, else the library's own (1.5x ``floor``, the float64
    result's rounding to bf16, + 1e-4: tests/test_fp8_gpu.py's): a refused or wrong torch result bounds
    nothing, and a check without a bound would pass anything."""
    own = 1.5 * floor + 1e-4
    usable = err_torch is not None and math.isfinite(err_torch) and err_torch <= own
    bound = 1.5 * err_torch + 1e-6 if usable else own
    return {"correct": bool(math.isfinite(err) and err <= bound), "bound": "torch" if usable else "own",
            "err_bound": bound}


def quantized_verdict(values: torch.Tensor, scales: torch.Tensor, ref: torch.Tensor) -> dict:
    """The fused-quantization output (e4m3 ``values``, 1 x 128 ``scales``) against the float64 product ``ref``,
    by the library's quantized_product_error (the fp8 GPU tests' check); ``err``: the worst value's error over
    its bound (<= 1 passes; NaN fails)."""
    worst = quantized_product_error(values, scales, ref)
    return {"correct": bool(math.isfinite(worst) and worst <= 1), "bound": "own", "err": worst}


def unsplit(fn):
    """``fn`` run with the library's split turned off (fp8.SPLIT_DEFAULT = "none" during the call)."""
    return with_setting(fp8, "SPLIT_DEFAULT", "none", fn)


def rows128(fn):
    """``fn`` run with 128-row tiles (fp8.TILE_M_DEFAULT = "128" during the call)."""
    return with_setting(fp8, "TILE_M_DEFAULT", "128", fn)


def parse_alt(text: str | None) -> tuple[str, object] | None:
    """``--alt NAME=VALUE``: a library/fp8.py setting read at each call (an upper-case module attribute) and
    the value to time it at, parsed as the attribute's own type (bool: 0/1/true/false). Refuses (one line,
    exit 2) an unknown name or a value of the wrong type."""
    if text is None:
        return None
    name, _, value = text.partition("=")
    current = getattr(fp8, name, None) if name.isupper() else None
    if current is None or not value or isinstance(current, (tuple, list, dict)):
        refuse(__file__, f"--alt {text!r}: give NAME=VALUE for a setting of library/fp8.py (e.g. SPLIT_ALIGNED=1)")
    try:
        if isinstance(current, bool):
            parsed = {"1": True, "true": True, "0": False, "false": False}[value.lower()]
        else:
            parsed = type(current)(value)
    except (KeyError, ValueError):
        refuse(__file__, f"--alt {text!r}: {value!r} is not a {type(current).__name__}")
    return name, parsed


def split_of(*args, **kwargs) -> dict:
    """The split-K schedule and tile height scaled_mm runs for these arguments (explain_scaled_mm's fields)."""
    e = gemm_ladder.explain_scaled_mm(*args, **kwargs)
    return {"split": e["split"], "grid": e["grid"], "contributors": e["contributors"], "bm": e["tile"]["BM"],
            "bn": e["tile"]["BN"]}


def run_shape(m: int, n: int, k: int, budget: float, both: bool = False,
              both_tile_m: bool = False, alt: tuple[str, object] | None = None) -> tuple[list[dict], bool]:
    """Time and check one shape; ``both``: also the unsplit launch where the library splits;
    ``both_tile_m``: also the 128-row launch where the library takes 64-row tiles; ``alt`` (NAME, VALUE):
    also each scheme's launch with that fp8 setting, where it changes the build or its split."""
    a = torch.randn((m, k), device="cuda")
    w = torch.randn((n, k), device="cuda") / math.sqrt(k)
    a16, w16 = a.bfloat16(), w.bfloat16()
    fns, args, errors, splits, refs, ok = {}, {}, {}, {}, {}, True
    for scheme, (ba, bw) in BLOCKS.items():
        qa, sa = quantize_fp8(a, ba)
        qw, sw = quantize_fp8(w, bw)
        sb = sw.T if sw.dim() == 2 else sw
        b = qw.T
        args[scheme] = (qa, b, sa, sb)
        ref = dequantize(qa[:CHECK_ROWS], sa[:CHECK_ROWS] if sa.dim() == 2 else sa, ba) @ dequantize(qw, sw, bw).T
        refs[scheme] = ref
        floor = rel_err(ref.to(torch.bfloat16), ref)
        ours = gemm_ladder.scaled_mm(qa, b, sa, sb)
        e_ours = rel_err(ours[:CHECK_ROWS], ref)
        try:
            theirs = torch._scaled_mm(qa, b, sa, sb, out_dtype=torch.bfloat16)
            e_torch = rel_err(theirs[:CHECK_ROWS], ref)
            fns[f"torch_{scheme}"] = (lambda x, y, s=scheme: torch._scaled_mm(*args[s][:2], *args[s][2:],
                                                                               out_dtype=torch.bfloat16))
        except (RuntimeError, ValueError) as e:
            e_torch = None
            errors[scheme] = str(e).splitlines()[0][:200]
        judged = verdict(e_ours, e_torch, floor)
        ok &= judged["correct"]
        errors[f"err_{scheme}"] = (e_ours, e_torch, judged)
        fns[f"ours_{scheme}"] = (lambda x, y, s=scheme: gemm_ladder.scaled_mm(*args[s]))
        splits[scheme] = split_of(*args[scheme])
        if both and splits[scheme]["split"] != "none":
            fns[f"ours_{scheme}_nosplit"] = unsplit(fns[f"ours_{scheme}"])
            e_nosplit = rel_err(unsplit(lambda x, y, s=scheme: gemm_ladder.scaled_mm(*args[s]))(None, None)[:CHECK_ROWS], ref)
            ok &= verdict(e_nosplit, e_torch, floor)["correct"]
            errors[f"err_{scheme}_nosplit"] = e_nosplit
        if alt is not None:
            altered = with_setting(fp8, alt[0], alt[1], lambda *_, s=scheme: (
                gemm_ladder.explain_scaled_mm(*args[s]), gemm_ladder.scaled_mm(*args[s])))
            explained, y_alt = altered(None, None)
            if _launch_of(explained) != _launch_of(gemm_ladder.explain_scaled_mm(*args[scheme])):
                fns[f"ours_{scheme}_alt"] = with_setting(fp8, alt[0], alt[1], fns[f"ours_{scheme}"])
                e_alt = rel_err(y_alt[:CHECK_ROWS], ref)
                ok &= verdict(e_alt, e_torch, floor)["correct"]
                errors[f"err_{scheme}_alt"] = e_alt
        if both_tile_m and splits[scheme]["bm"] == 64:
            fns[f"ours_{scheme}_rows128"] = rows128(fns[f"ours_{scheme}"])
            e_128 = rel_err(rows128(lambda x, y, s=scheme: gemm_ladder.scaled_mm(*args[s]))(None, None)[:CHECK_ROWS], ref)
            ok &= verdict(e_128, e_torch, floor)["correct"]
            errors[f"err_{scheme}_rows128"] = e_128
    fns["bf16_mm"] = lambda x, y: torch.mm(a16, w16.T)
    # The quantized output (blockwise in, e4m3 with 1 x 128 scales out) against the GEMM then quantize_fp8.
    blk = args["blockwise"]
    fns["ours_blockwise_fq"] = lambda x, y: gemm_ladder.scaled_mm(*blk, out_dtype=torch.float8_e4m3fn)
    splits["fq"] = split_of(*blk, out_dtype=torch.float8_e4m3fn)
    values, scales = gemm_ladder.scaled_mm(*blk, out_dtype=torch.float8_e4m3fn)
    fq_check = quantized_verdict(values[:CHECK_ROWS], scales[:CHECK_ROWS], refs["blockwise"])
    ok &= fq_check["correct"]
    if both and splits["fq"]["split"] != "none":
        fns["ours_blockwise_fq_nosplit"] = unsplit(fns["ours_blockwise_fq"])
    fns["ours_blockwise_then_quant"] = lambda x, y: quantize_fp8(gemm_ladder.scaled_mm(*blk), (1, 128))
    if "torch_blockwise" in fns:
        fns["torch_blockwise_then_quant"] = lambda x, y: quantize_fp8(
            torch._scaled_mm(*blk, out_dtype=torch.bfloat16), (1, 128))
    times = time_fns(fns, a16, w16, budget_s=budget, rounds=3)
    flop = 2.0 * m * n * k
    rows = []
    for scheme in BLOCKS:
        t_ours = times[f"ours_{scheme}"].median_ms
        t_torch = times[f"torch_{scheme}"].median_ms if f"torch_{scheme}" in times else None
        e_ours, e_torch, judged = errors[f"err_{scheme}"]
        rows.append({"M": m, "N": n, "K": k, "scheme": scheme, "fused_quant": False,
                     "tflops": flop / t_ours / 1e9, "ratio_torch": (t_torch / t_ours) if t_torch else None,
                     "median_ms": t_ours, "torch_tflops": flop / t_torch / 1e9 if t_torch else None,
                     "spread": times[f"ours_{scheme}"].spread, "err": e_ours, "err_torch": e_torch,
                     **judged, "torch_refused": errors.get(scheme), **splits[scheme],
                     **_nosplit(times, f"ours_{scheme}", errors.get(f"err_{scheme}_nosplit")),
                     **_other(times, f"ours_{scheme}", "rows128", errors.get(f"err_{scheme}_rows128")),
                     **_other(times, f"ours_{scheme}", "alt", errors.get(f"err_{scheme}_alt"))})
    t_fq = times["ours_blockwise_fq"].median_ms
    t_tq = times["torch_blockwise_then_quant"].median_ms if "torch_blockwise_then_quant" in times else None
    rows.append({"M": m, "N": n, "K": k, "scheme": "blockwise", "fused_quant": True, "tflops": flop / t_fq / 1e9,
                 "ratio_torch": (t_tq / t_fq) if t_tq else None, "median_ms": t_fq,
                 "ratio_ours_unfused": times["ours_blockwise_then_quant"].median_ms / t_fq,
                 "spread": times["ours_blockwise_fq"].spread, **fq_check, **splits["fq"],
                 **_nosplit(times, "ours_blockwise_fq")})
    t16 = times["bf16_mm"].median_ms
    rows.append({"M": m, "N": n, "K": k, "scheme": "bf16_mm", "fused_quant": False, "tflops": flop / t16 / 1e9,
                 "ratio_torch": None, "median_ms": t16})
    return rows, ok


def _launch_of(explained: dict) -> tuple:
    """What identifies a launch in explain_scaled_mm's answer: the build's defines, grid and split."""
    return (tuple(sorted(explained["defines"].items())), explained["grid"], explained["split"],
            explained["contributors"])


def _other(times: dict, name: str, variant: str, err: float | None = None) -> dict:
    """The ``variant`` launch's median and its time over the library's (None where it was not timed)."""
    if f"{name}_{variant}" not in times:
        return {f"median_ms_{variant}": None, f"ratio_{variant}": None}
    t = times[f"{name}_{variant}"].median_ms
    return {f"median_ms_{variant}": t, f"ratio_{variant}": t / times[name].median_ms,
            **({f"err_{variant}": err} if err is not None else {})}


def _nosplit(times: dict, name: str, err: float | None = None) -> dict:
    """The unsplit launch's median and its time over the split one's (None where it was not timed)."""
    return _other(times, name, "nosplit", err)


def _meta_operands(m: int, n: int, k: int, scheme: str):
    """Meta tensors of scaled_mm's arguments for a scheme (no GPU): what :func:`prebuild` plans with."""
    a = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn, device="meta").T
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    scales = {"tensorwise": (torch.empty((), device="meta"), torch.empty((), device="meta")),
              "rowwise": (torch.empty((m, 1), device="meta"), torch.empty((1, n), device="meta")),
              "blockwise": (torch.empty((kb, m), device="meta").T, torch.empty((nb, kb), device="meta").T)}
    return (a, b, *scales[scheme])


def run_builds_of(shape_list, both: bool, both_tile_m: bool, sms: int = 132,
                  alt: tuple[str, object] | None = None) -> list:
    """The fp8 builds (Fp8Kernel, each once) a run over ``shape_list`` launches with the module's current
    settings on ``sms`` SMs: each scheme's bf16 call and the blockwise quantized one, and with ``both`` /
    ``both_tile_m`` / ``alt`` their unsplit, 128-row and altered launches too. No GPU."""
    # what unsplit(), rows128() and --alt time
    other = {"SPLIT_DEFAULT": "none", "TILE_M_DEFAULT": "128", **dict([alt] if alt else [])}
    settings = ([None] + (["SPLIT_DEFAULT"] if both else []) + (["TILE_M_DEFAULT"] if both_tile_m else [])
                + ([alt[0]] if alt else []))
    kernels = []
    for m, n, k in shape_list:
        for scheme in BLOCKS:
            for out_dtype in (torch.bfloat16,) + ((torch.float8_e4m3fn,) if scheme == "blockwise" else ()):
                args = _meta_operands(m, n, k, scheme)
                call = fp8.check_scaled_mm(*args, out_dtype=out_dtype, device_type=None)
                for name in settings:
                    build = lambda *_, c=call, x=args: fp8.default_build(c, x[0], x[1], None, None, sms)[0]
                    kernels.append(build() if name is None else with_setting(fp8, name, other[name], build)())
    return list(dict.fromkeys(kernels))


def prebuild(shape_list, both: bool, both_tile_m: bool, sms: int = 132, alt: tuple[str, object] | None = None) -> int:
    """Compile :func:`run_builds_of` into the kernel cache, no GPU: before a device session. 0 when all are
    ready, else 1."""
    from gemm_ladder.dispatch.precompile import Build, run_builds

    kernels = run_builds_of(shape_list, both, both_tile_m, sms, alt)
    outcomes = run_builds([Build(repr(k), k.build) for k in kernels], load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the issue's five shapes, shorter timings")
    parser.add_argument("--shapes", default=None, help="comma list of MxNxK (overrides the sets)")
    parser.add_argument("--split", choices=("auto", "none", "both"), default="auto",
                        help="split K as the library chooses (auto), never (none), or time both where it splits")
    parser.add_argument("--tile-m", choices=("128", "auto", "both"), default="auto",
                        help="128-row tiles (128), 64-row tiles where M <= 64 (auto), or auto and the 128-row "
                             "launch timed too where it takes 64 rows (both)")
    parser.add_argument("--wave-efficiency", type=float, default=None,
                        help="split the last partial wave of tiles that fill the SMs when the whole-tile waves' "
                             "efficiency is below this (fp8.MAX_WAVE_EFFICIENCY; default: the library's)")
    parser.add_argument("--alt", default=None, metavar="NAME=VALUE",
                        help="also time each scheme with this library/fp8.py setting (e.g. SPLIT_ALIGNED=1), "
                             "interleaved, where it changes the launch: rows get median_ms_alt and ratio_alt")
    parser.add_argument("--prebuild", action="store_true", help="compile the run's builds (no GPU) and exit")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    if args.wave_efficiency is not None and not 0 <= args.wave_efficiency <= 1:
        refuse(__file__, f"--wave-efficiency {args.wave_efficiency}: use a number in [0, 1]")
    shape_list = shapes(args.quick, args.shapes)
    alt = parse_alt(args.alt)
    # The run's settings, for the builds --prebuild lists as for the launches timed.
    fp8.SPLIT_DEFAULT = "none" if args.split == "none" else "auto"
    fp8.TILE_M_DEFAULT = "128" if args.tile_m == "128" else "auto"
    if args.wave_efficiency is not None:
        fp8.MAX_WAVE_EFFICIENCY = args.wave_efficiency
    if args.prebuild:
        return prebuild(shape_list, args.split == "both", args.tile_m == "both", alt=alt)
    check_output(__file__, args.output)
    require_gpu(__file__)
    torch.manual_seed(0)
    rows, ok = [], True
    budget = 0.15 if args.quick else 0.3
    for m, n, k in shape_list:
        shape_rows, good = run_shape(m, n, k, budget, both=args.split == "both", both_tile_m=args.tile_m == "both",
                                     alt=alt)
        ok &= good
        rows += shape_rows
        for r in shape_rows:
            ratio = f"{r['ratio_torch']:.3f}x" if r.get("ratio_torch") else "-"
            extra = (f" fused quant (vs ours unfused {r['ratio_ours_unfused']:.3f}x, worst value {r['err']:.2f}x its bound)"
                     if r["fused_quant"] else f" err {r['err']:.2e} (torch {r['err_torch']}; bound {r['bound']} "
                     f"{r['err_bound']:.2e})" if "err" in r else "")
            extra += "" if r.get("correct", True) else " WRONG"
            if r.get("split") not in (None, "none"):
                extra += f" split over {r['grid']} CTAs (<= {r['contributors']} per tile)"
                if r.get("ratio_nosplit"):
                    extra += f", unsplit {r['ratio_nosplit']:.3f}x slower"
            if r.get("ratio_alt"):
                extra += f", with {args.alt} {r['ratio_alt']:.3f}x the time"
            if r.get("bm") == 64:
                extra += " 64-row tiles"
                if r.get("ratio_rows128"):
                    extra += f", 128 rows {r['ratio_rows128']:.3f}x slower"
            print(f"{m}x{n}x{k} {r['scheme']:>10}: {r['tflops']:7.1f} TFLOP/s  vs torch {ratio}{extra}", flush=True)
        torch.cuda.empty_cache()
    save({"rows": rows, "quick": args.quick, "split": args.split, "tile_m": args.tile_m,
          "max_wave_efficiency": fp8.MAX_WAVE_EFFICIENCY, "alt": args.alt}, "fp8_quick" if args.quick else "fp8", args.output)
    if not ok:
        print("a result was wrong (err above its bound): see the rows' 'correct', 'bound' and 'err_bound'",
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
