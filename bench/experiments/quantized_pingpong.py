"""Does the ping-pong build pay for the quantized (e4m3, 1 x 128 scales) output? (one-off experiment)

    python bench/experiments/quantized_pingpong.py [-o OUT_DIR]     # on the GPU
    python bench/experiments/quantized_pingpong.py --prebuild      # compile its builds here, no GPU

The route stores the quantized output from the cooperative register-store build (128 x BN tiles, both
consumers in their epilogue at once, the tensor cores idle meanwhile). The ping-pong build (64 x BN tiles
taken in turn by two consumers) runs one consumer's epilogue while the other computes; for bf16 it won
with a fused GELU at K <= 1024 (dispatch/pingpong.py). The quantized epilogue costs more (amax, scale,
division, conversion), so more is there to hide.

Per shape (x (M, K), w (N, K) row-major, bias, the shape's activation), forced with the call's fused
epilogue (dispatch.validate.linear_call): ``coop BN b`` (library_gemm(..., c_from_registers=True,
out_e4m3=True), split none, as the route) and ``pp BN b cC`` (the same with bm=64, pingpong=True, clusters
of C CTAs); beside them the route (``gemm_ladder.linear(..., out_dtype=torch.float8_e4m3fn)``), ours with a
bf16 output and cuBLAS's bare ``F.linear``. Each forced output is NaN-poisoned, checked against float64
(library/quantized.py's quantized_error: dequantized values within e4m3's rounding, scales within 1e-3)
and launched 3 more times, compared bit for bit; a build that fails is reported and not timed. Then all
are timed interleaved (gates.performance.time_fns: L2 flushed, launch hidden, median of 4 rounds).
Writes ``quantized_pingpong.json`` into the output folder (default ``$OUT``, else the current folder);
exits 1 when a forced build is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (name, M, N, K, activation): GELU fc1s where the route runs the cooperative e4m3 build, and one long K.
SHAPES = (("gpt2 c_fc", 4096, 3072, 768, "gelu_tanh"), ("bert_large fc1", 4096, 4096, 1024, "gelu"),
          ("gpt2 c_fc M 8192", 8192, 3072, 768, "gelu_tanh"), ("bert_large fc1 M 16384", 16384, 4096, 1024, "gelu"),
          ("llama3_8b o_proj", 4096, 4096, 4096, None))
#: (label, library_gemm keyword arguments) of every forced build.
CONFIGS = (("coop BN 256", dict(bn=256)), ("coop BN 128", dict(bn=128)),
           ("pp BN 256 c1", dict(bn=256, bm=64, pingpong=True, cluster=1)),
           ("pp BN 256 c2", dict(bn=256, bm=64, pingpong=True, cluster=2)),
           ("pp BN 128 c1", dict(bn=128, bm=64, pingpong=True, cluster=1)))
E4M3 = torch.float8_e4m3fn


def kernel(kw: dict):
    from gemm_ladder.library.gemm import library_gemm

    kw = dict(kw)
    return library_gemm("k", "k", kw.pop("bn"), c_from_registers=True, out_e4m3=True, **kw)


def prebuild() -> int:
    """Compile every forced build with each shape's epilogue (NVRTC keys as on the device), no GPU."""
    from gemm_ladder.dispatch.precompile import Build, run_builds
    from gemm_ladder.dispatch.validate import linear_call

    builds = {}
    for _, m, n, k, act in SHAPES:
        x, w = (torch.empty(s, dtype=torch.bfloat16, device="meta") for s in ((m, k), (n, k)))
        call = linear_call(x, w, torch.empty(n, dtype=torch.bfloat16, device="meta"), activation=act, check_grad=False)
        for label, kw in CONFIGS:
            config = kernel(kw).config("bf16", epilogue_source=call.source())
            builds[config] = Build(f"{label} {act}", lambda kw=kw, src=call.source(): kernel(kw).build("bf16", epilogue_source=src))
    outcomes = run_builds(list(builds.values()), load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def run_shape(name, m, n, k, activation) -> dict:
    import gemm_ladder
    from gemm_ladder.dispatch.validate import linear_call
    from gemm_ladder.gates.performance import time_fns
    from gemm_ladder.library.activations import ACTIVATIONS
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.quantized import kernel_views, quantized_buffers, quantized_error

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn((m, k), device="cuda", generator=g).bfloat16()
    w = torch.nn.Parameter((torch.randn((n, k), device="cuda", generator=g) / k**0.5).bfloat16())
    bias = torch.nn.Parameter(torch.randn(n, device="cuda", generator=g).bfloat16())
    act = (lambda t: t) if activation is None else ACTIVATIONS[activation].reference
    rows = 512
    ref = act(x[:rows].double() @ w.double().T + bias.double())
    va, vb = operand_view(x, k_dim=1), operand_view(w.detach(), k_dim=1)
    out = {"name": name, "M": m, "N": n, "K": k, "activation": activation, "configs": {}}
    fns = {"cublas F.linear": lambda *_: F.linear(x, w, bias),
           "ours bf16": lambda *_: gemm_ladder.linear(x, w, bias, activation=activation),
           "route e4m3": lambda *_: gemm_ladder.linear(x, w, bias, activation=activation, out_dtype=E4M3)}
    with torch.no_grad():
        for label, kw in CONFIGS:
            values, scales = quantized_buffers(m, n, x.device)
            c, scale_rows = kernel_views(values, scales)
            call = linear_call(x, w.detach(), bias.detach(), activation=activation, check_grad=False)
            launch = kernel(kw).bind(va, vb, c, split="none", epilogue=call, scales=scale_rows)
            c.view(torch.uint8).fill_(0x7F)
            scale_rows.fill_(float("nan"))
            launch()
            scales_ok, values_ok, worst = quantized_error(values[:rows], scales[:rows], ref)
            first = (values.view(torch.uint8).clone(), scales.clone())
            repeat = True
            for _ in range(3):
                c.view(torch.uint8).fill_(0x7F)
                launch()
                repeat &= torch.equal(values.view(torch.uint8), first[0]) and torch.equal(scales, first[1])
            ok = bool(scales_ok and values_ok and repeat)
            out["configs"][label] = {"ok": ok, "scales_ok": bool(scales_ok), "values_ok": bool(values_ok),
                                     "worst": worst, "bitwise_repeatable": bool(repeat)}
            print(f"{name}: {label} {'ok' if ok else 'WRONG'} (worst {worst:.3g} of a scale, repeat {repeat})", flush=True)
            if ok:
                fns[label] = lambda *_, launch=launch: launch()
        times = time_fns(fns, x, w, budget_s=0.05, rounds=4, warmup=3, max_repeats=200)
    us = {label: t.median_ms * 1e3 for label, t in times.items()}
    out["us"] = us
    out["route"] = gemm_ladder.explain(x, w.detach().T, out_dtype=E4M3, activation=activation).kernel["name"]
    forced = [lb for lb in us if lb.startswith(("coop", "pp"))]
    best = min(forced, key=us.get) if forced else None
    out["best"] = best
    print(f"{name} {m}x{n}x{k} {activation}: " + ", ".join(f"{lb} {t:.1f}" for lb, t in us.items())
          + f" us; best {best}; route {out['route']}", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prebuild", action="store_true", help="compile the forced builds, no GPU")
    p.add_argument("-o", "--out", default=os.environ.get("OUT", "."), help="output folder")
    args = p.parse_args(argv)
    if args.prebuild:
        return prebuild()
    from suite import require_gpu

    require_gpu(__file__)
    from gemm_ladder.results import run_meta

    results = [run_shape(*s) for s in SHAPES]
    doc = {"meta": run_meta(" ".join(sys.argv)), "date": time.strftime("%FT%TZ", time.gmtime()), "shapes": results}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "quantized_pingpong.json"
    path.write_text(json.dumps(doc, indent=1))
    print("wrote", path)
    wrong = [(r["name"], lb) for r in results for lb, c in r["configs"].items() if not c["ok"]]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
