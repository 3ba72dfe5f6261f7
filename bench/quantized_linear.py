"""The quantized output of a 16-bit layer (issue 25): ``gemm_ladder.linear(x, w, bias, activation=...,
out_dtype=torch.float8_e4m3fn)`` against what a user writes instead, interleaved in one run.

    python bench/quantized_linear.py [--quick] [--no-compile] [--m 256,4096] [-o OUT.json]
    python bench/quantized_linear.py --prebuild      # compile the builds it runs, no GPU

Per layer (x (M, K) bf16, an ``nn.Parameter`` weight (N, K) and bias (N,), under ``torch.no_grad()``, a new
activation tensor every call from a ring of three), each returning e4m3 values with 1 x 128 scales:

* ``ours_fused``    gemm_ladder.linear(..., out_dtype=torch.float8_e4m3fn): one kernel;
* ``ours_unfused``  gemm_ladder.linear (bf16 out, the activation fused) then ``quantize_fp8(y, (1, 128))``;
* ``torch_eager``   F.linear, the activation, then ``quantize_fp8`` (torch ops);
* ``torch_compile`` the same under ``torch.compile`` (skipped with ``--no-compile``);
* ``cublas_gemm``   F.linear alone (bf16 out, no activation, no quantization): cuBLAS's GEMM, for scale.
* ``ours_bf16``     ours with the same epilogue and a bf16 output (its own route): what the quantized
                    store costs over the kernel's plain output.

Layers: the bf16 layers whose output an fp8 layer reads next: GELU MLPs' fc1 (GPT-2, BERT-large, ViT-L/16),
Llama-3-8B's up_proj and o_proj, DeepSeek-V3's q_a_proj, and Llama-3-8B's gated MLP (activation
"swiglu": ``gemm_ladder.swiglu(x, w_gate, w_up, out_dtype=...)`` against its composition, the down
projection's input); M in ``--m`` (default 256 and 4096; ``--quick``:
4096, the three GELU fc1s and the gated MLP). Before timing, each layer's first 256 rows from ``ours_fused`` are checked against
float64 (dequantized values within e4m3's rounding of the float64 result, scales within 1e-3).

Rows (``rows: [{model, layer, M, N, K, activation, route, median_ms: {fn: ms}, ratio_unfused, ratio_eager,
ratio_compile, ratio_cublas_gemm, ratio_ours_bf16, tflops, correct, err}]``): each ``ratio_*`` is that path's time over
``ours_fused``'s (> 1: ours faster); ``ratio_unfused`` is the issue's target (>= 1.2x). Timing:
gates.performance.time_fns (L2 flushed before each call, median, rounds rotating the first callable). One
JSON (bench/suite.py: DATE_quantized_linear[_quick]_COMMIT.json).

Exit status: 0 when every result is correct (``--prebuild``: every build built); 1 when a result is wrong
(a build failed); 2 for bad input (one line: ``--m``, an unwritable ``-o``) or no CUDA GPU, before
anything runs.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F

import gemm_ladder
from gemm_ladder.library.activations import ACTIVATIONS
from gemm_ladder.library.quantized import quantize_fp8
from gemm_ladder.library.quantized import quantized_error
from outputs import check_output
from suite import add_output_argument, require_gpu, save

E4M3 = torch.float8_e4m3fn
#: (model, layer, N, K, activation): the layer's output is the next (fp8) layer's input.
LAYERS = [("gpt2", "mlp.c_fc", 3072, 768, "gelu_tanh"), ("bert_large", "intermediate.dense", 4096, 1024, "gelu"),
          ("vit_l16", "mlp.fc1", 4096, 1024, "gelu"), ("llama3_8b", "mlp.up_proj", 14336, 4096, None),
          ("llama3_8b", "self_attn.o_proj", 4096, 4096, None), ("dsv3", "self_attn.q_a_proj", 1536, 7168, None),
          ("llama3_8b", "mlp.gate_proj + up_proj (swiglu)", 14336, 4096, "swiglu")]
CHECK_ROWS = 256
RING = 3


def layers(quick: bool, ms: list[int]) -> list[tuple]:
    chosen = LAYERS[:3] + LAYERS[-1:] if quick else LAYERS  # quick: the GELU fc1s and the gated MLP
    return [(m, *layer) for m in ms for layer in chosen]


def linear_case(x0, w, b, activation) -> dict:
    """A linear layer's callables (each of an activation x): ours with the quantized output, ours in bf16,
    torch's layer, cuBLAS's GEMM alone; its float64 reference, the route it runs and its FLOP per row."""
    act = (lambda t: t) if activation is None else ACTIVATIONS[activation].reference  # the library's torch forms
    route = gemm_ladder.explain(x0, w.T, out_dtype=E4M3, activation=activation)
    return {"ours": lambda x: gemm_ladder.linear(x, w, b, activation=activation, out_dtype=E4M3),
            "ours_bf16": lambda x: gemm_ladder.linear(x, w, b, activation=activation),
            "torch": lambda x: act(F.linear(x, w, b)), "cublas": lambda x: F.linear(x, w, b),
            "reference": lambda xd: act(xd @ w.double().T + b.double()),
            "route": {"kernel": route.kernel["name"], "split": route.split, "tile": route.tile},
            "flop_per_row": 2.0 * w.shape[0] * w.shape[1]}


def swiglu_case(w_gate, w_up) -> dict:
    """The gated MLP's callables, as :func:`linear_case`'s (cuBLAS: its two GEMMs alone)."""
    return {"ours": lambda x: gemm_ladder.swiglu(x, w_gate, w_up, out_dtype=E4M3),
            "ours_bf16": lambda x: gemm_ladder.swiglu(x, w_gate, w_up),
            "torch": lambda x: F.silu(F.linear(x, w_gate)) * F.linear(x, w_up),
            "cublas": lambda x: (F.linear(x, w_gate), F.linear(x, w_up)),
            "reference": lambda xd: F.silu(xd @ w_gate.double().T) * (xd @ w_up.double().T),
            "route": {"kernel": "sm90_swiglu_e4m3", "split": "tail (the swiglu kernel's)", "tile": [128, 256, 64]},
            "flop_per_row": 2.0 * 2 * w_gate.shape[0] * w_gate.shape[1]}


def run_layer(m, model, layer, n, k, activation, budget, compile_torch):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    xs = [torch.randn((m, k), device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(RING)]

    def param(*shape, scale=1.0):
        return torch.nn.Parameter((torch.randn(shape, device="cuda", generator=g) * scale).bfloat16())

    w = param(n, k, scale=1 / math.sqrt(k))
    case = (swiglu_case(w, param(n, k, scale=1 / math.sqrt(k))) if activation == "swiglu"
            else linear_case(xs[0], w, param(n), activation))
    turn = [0]

    def x_next():  # a new activation every call
        turn[0] = (turn[0] + 1) % RING
        return xs[turn[0]]

    def torch_path(x):
        return quantize_fp8(case["torch"](x), (1, 128))

    fns = {"ours_fused": lambda *_: case["ours"](x_next()),
           "ours_unfused": lambda *_: quantize_fp8(case["ours_bf16"](x_next()), (1, 128)),
           "torch_eager": lambda *_: torch_path(x_next()),
           "cublas_gemm": lambda *_: case["cublas"](x_next()),
           "ours_bf16": lambda *_: case["ours_bf16"](x_next())}
    if compile_torch:
        compiled = torch.compile(torch_path, dynamic=False)
        fns["torch_compile"] = lambda *_: compiled(x_next())
    x0 = xs[0]
    values, scales = case["ours"](x0)
    scales_ok, values_ok, err = quantized_error(values[:CHECK_ROWS], scales[:CHECK_ROWS],
                                                case["reference"](x0[:CHECK_ROWS].double()))
    ok = scales_ok and values_ok
    times = gemm_ladder.gates.performance.time_fns(fns, x0, w, budget_s=budget, rounds=3)
    t = {name: timing.median_ms for name, timing in times.items()}
    fused = t["ours_fused"]
    return {"model": model, "layer": layer, "M": m, "N": n, "K": k, "activation": activation, "route": case["route"],
            "median_ms": t, "spread": {name: timing.spread for name, timing in times.items()},
            "ratio_unfused": t["ours_unfused"] / fused, "ratio_eager": t["torch_eager"] / fused,
            "ratio_compile": t["torch_compile"] / fused if "torch_compile" in t else None,
            "ratio_cublas_gemm": t["cublas_gemm"] / fused, "ratio_ours_bf16": t["ours_bf16"] / fused, "tflops": case["flop_per_row"] * m / fused / 1e9,
            "correct": ok, "err": err}


def prebuild_builds(quick: bool, ms: list[int]) -> int:
    """Compile every build the run launches (its routes and epilogues, decided on meta tensors), no GPU."""
    from gemm_ladder.dispatch import decide
    from gemm_ladder.dispatch.kernels import family
    from gemm_ladder.dispatch.precompile import Build, run_builds
    from gemm_ladder.dispatch.validate import linear_call
    from gemm_ladder.library.quantized import quantized_buffers

    builds = {}
    from gemm_ladder.library.swiglu import swiglu_kernel

    builds["swiglu"] = Build("sm90_swiglu_e4m3", lambda: swiglu_kernel(quantized=True).build("bf16"))
    builds["swiglu plain"] = Build("sm90_swiglu", lambda: swiglu_kernel().build("bf16"))  # ours_unfused's
    for m, _, _, n, k, activation in layers(quick, ms):
        if activation == "swiglu":
            continue
        x, w = torch.empty((m, k), dtype=torch.bfloat16, device="meta"), torch.empty((n, k), dtype=torch.bfloat16, device="meta")
        b = torch.empty(n, dtype=torch.bfloat16, device="meta")
        for act, bias in ((activation, b), (None, None)):  # the fused call, and explain's plain GEMM
            route = decide(x, w.T, quantized_buffers(m, n, x.device)[0], given=False, activation=act)
            call = linear_call(x, w, bias, activation=act, check_grad=False)
            config = route.config.with_epilogue(call.source() if call is not None else None)
            builds[config] = Build(f"{route.kernel.name} {act or 'plain'} {config.epilogue_id or ''}".strip(),
                                   lambda c=config: family(c).build(c))
    outcomes = run_builds(list(builds.values()), load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def row_counts(text: str) -> list[int]:
    """``--m``'s comma list of positive ints (argparse says what is wrong in one line)."""
    try:
        ms = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of positive integers, e.g. 256,4096") from None
    if not ms or min(ms) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of positive integers, e.g. 256,4096")
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="M = 4096, four layers, shorter timings")
    parser.add_argument("--m", type=row_counts, default=None, help="comma list of M (default 256,4096; --quick 4096)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile path")
    parser.add_argument("--prebuild", action="store_true", help="compile the builds the run launches, no GPU, and exit")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    ms = args.m or ([4096] if args.quick else [256, 4096])
    if args.prebuild:
        return prebuild_builds(args.quick, ms)
    check_output(__file__, args.output)
    require_gpu(__file__)
    import gemm_ladder.gates.performance  # noqa: F401 - time_fns

    rows, ok = [], True
    budget = 0.15 if args.quick else 0.3
    with torch.no_grad():
        for m, model, layer, n, k, activation in layers(args.quick, ms):
            r = run_layer(m, model, layer, n, k, activation, budget, not args.no_compile)
            ok &= r["correct"]
            rows.append(r)
            comp = f"{r['ratio_compile']:.3f}x" if r["ratio_compile"] else "-"
            print(f"{model} {layer} {m}x{n}x{k} {activation or 'none'}: {r['median_ms']['ours_fused'] * 1e3:.1f} us "
                  f"({r['route']['kernel']}, split {r['route']['split']}); vs ours unfused {r['ratio_unfused']:.3f}x, "
                  f"eager {r['ratio_eager']:.3f}x, compile {comp}, cuBLAS GEMM alone {r['ratio_cublas_gemm']:.3f}x, "
                  f"ours bf16 out {r['ratio_ours_bf16']:.3f}x"
                  + ("" if r["correct"] else f"  WRONG (err {r['err']:.3g} scales)"), flush=True)
            torch.cuda.empty_cache()
    save({"rows": rows, "quick": args.quick, "compile": not args.no_compile},
         "quantized_linear_quick" if args.quick else "quantized_linear", args.output)
    if not ok:
        print("a result was wrong: see the rows' 'correct'", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
