"""Where a fused bias's cost comes from: the epilogue's machinery, or its vector loads (one-off experiment).

    python bench/experiments/bias_cost.py [--shapes MxNxK,...] [--budget S] [-o OUT.json]
    python bench/experiments/bias_cost.py --prebuild [--shapes ...]   # compile every variant's build, no GPU
    python bench/experiments/bias_cost.py --profile [--shapes MxNxK]   # one launch of each, for Nsight Compute

Per shape (bf16; x (M, K), w (N, K)), interleaved in one run (gemm_ladder.timing.time_fns, L2 flushed), on the
same route:

* ``plain``      ``gemm_ladder.linear(x, w)``;
* ``bias``       ``linear(x, w, bias)``, the library's bias (bias (N,), bf16);
* ``scalar``     a user Epilogue ``acc + s`` (a scalar: the fused epilogue's code with no load);
* ``col``        a user Epilogue ``acc + b`` (b a column vector: the bias through the user path);
* ``row``        a user Epilogue ``acc + r`` (r (M,), a row vector: one value per output row);
* ``col_f32``    ``col`` with a float32 vector (8-byte pair loads);
* ``col_bcast``  ``col`` with a vector of stride 0 (one element expanded: every load the same address);
* ``tile_bcast`` a user Epilogue ``acc + t`` with t the bias as a tile of strides (0, 1) (a load per pair
                 of outputs, where a column vector's load is shared by a thread's two rows);
* ``cublas_plain``, ``cublas_bias``: ``F.linear`` without and with the bias.

Read as: ``scalar / plain`` is what the fused epilogue costs with nothing to load, ``col / scalar`` what a
column vector's loads add; ``col_f32``, ``col_bcast`` and ``tile_bcast`` against ``col`` whether that follows
the vector's bytes and addresses or the number of loads (the runs that timed an L1 prefetch of the bias,
``bias_l1``, and its loads issued first are in bench/results: both were removed). Each of our outputs is checked
against float64 first (1.5x the float64 result's rounding to bf16, + 1e-4 of its largest magnitude).

``--profile``: for the first shape, the plain call and the library's bias, each warmed up, then one launch of
each inside the NVTX range "prof" (plain first), nothing timed: what bench/device/smoke_bias_stalls.sh runs
under Nsight Compute (its warp stall reasons per issued instruction and per SASS line).

Result: DATE_bias_cost_COMMIT.json, ``rows: [{M, N, K, us: {variant: median us}, over_plain: {variant: time /
plain}, err: {variant}, correct}]``. Exit status: 0 every output right, 1 one wrong, 2 bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, outputs.py
from outputs import check_output, parse_shapes, positive  # noqa: E402
from suite import add_output_argument, require_gpu, save  # noqa: E402

import gemm_ladder  # noqa: E402
from gemm_ladder.dispatch.validate import linear_call  # noqa: E402
from gemm_ladder.timing import time_fns  # noqa: E402

#: Bias layers where the bias cost most on the H200 at 2869771 (bench/shapes_real.py) and the H100 at 1560f29
#: (bench/results/2026-12-06_vector_prefetch_*): GPT-2 c_attn, BERT-large query, ViT-L qkv and fc2, BERT-large
#: output.
SHAPES = [(8192, 2304, 768), (4096, 768, 768), (1576, 3072, 1024), (4096, 1024, 1024), (512, 1024, 4096),
          (12608, 1024, 4096)]

ADD_SCALAR = gemm_ladder.Epilogue(name="add_scalar", cuda="return acc + s;", inputs={"s": "scalar"},
                                  reference=lambda acc, s: acc + s)
ADD_COL = gemm_ladder.Epilogue(name="add_col", cuda="return acc + b;", inputs={"b": "col"},
                               reference=lambda acc, b: acc + b)
ADD_ROW = gemm_ladder.Epilogue(name="add_row", cuda="return acc + r;", inputs={"r": "row"},
                               reference=lambda acc, r: acc + r)
ADD_TILE = gemm_ladder.Epilogue(name="add_tile", cuda="return acc + t;", inputs={"t": "tile"},
                                reference=lambda acc, t: acc + t)


def user_calls(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, rowvec: torch.Tensor) -> dict:
    """The user-epilogue variants: name -> (Epilogue, inputs)."""
    m, n = x.shape[0], w.shape[0]
    return {"scalar": (ADD_SCALAR, {"s": 0.5}), "col": (ADD_COL, {"b": bias}), "row": (ADD_ROW, {"r": rowvec}),
            "col_f32": (ADD_COL, {"b": bias.float()}), "col_bcast": (ADD_COL, {"b": bias[:1].expand(n)}),
            "tile_bcast": (ADD_TILE, {"t": bias.expand(m, n)})}


def operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh random x (M, K), w (N, K) (scaled by 1/sqrt(K)) and bias (N,), bf16 on the GPU."""
    x = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    w = (torch.randn((n, k), device="cuda") / math.sqrt(k)).bfloat16()
    return x, w, torch.randn(n, device="cuda", dtype=torch.bfloat16)


def run_shape(m: int, n: int, k: int, budget: float) -> dict:
    x, w, bias = operands(m, n, k)
    rowvec = torch.randn(m, device="cuda", dtype=torch.bfloat16)
    prod = x.double() @ w.double().T
    # Each variant's float64 reference is its epilogue's own (EpilogueCall.reference) on the float64 product.
    refs = {"plain": prod, "bias": linear_call(x, w, bias).reference(prod)}
    fns = {"plain": lambda a, b: gemm_ladder.linear(a, b), "bias": lambda a, b: gemm_ladder.linear(a, b, bias)}
    for name, (ep, inputs) in user_calls(x, w, bias, rowvec).items():
        refs[name] = linear_call(x, w, epilogue=ep, inputs=inputs).reference(prod)
        fns[name] = lambda a, b, ep=ep, inputs=inputs: gemm_ladder.linear(a, b, epilogue=ep, **inputs)
    fns["cublas_plain"] = lambda a, b: F.linear(a, b)
    fns["cublas_bias"] = lambda a, b: F.linear(a, b, bias)
    err, ok = {}, True
    for name, ref in refs.items():
        fns[name](x, w)
        y = fns[name](x, w)  # the bound launch's second call
        floor = ((ref.to(torch.bfloat16).double() - ref).abs().max() / ref.abs().max()).item()
        err[name] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        ok = ok and math.isfinite(err[name]) and err[name] <= 1.5 * floor + 1e-4
    t = time_fns(fns, x, w, budget_s=budget, rounds=3)
    us = {name: t[name].median_ms * 1e3 for name in fns}
    return {"M": m, "N": n, "K": k, "us": us, "over_plain": {name: v / us["plain"] for name, v in us.items()},
            "err": err, "correct": bool(ok)}


def profile(m: int, n: int, k: int) -> int:
    """One launch each of ``linear(x, w)`` and ``linear(x, w, bias)`` inside the NVTX range "prof", after
    three warm-up calls each (the builds loaded, the bound launches made), for a profiler to capture."""
    x, w, bias = operands(m, n, k)
    for _ in range(3):
        gemm_ladder.linear(x, w), gemm_ladder.linear(x, w, bias)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    gemm_ladder.linear(x, w)
    gemm_ladder.linear(x, w, bias)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    print(f"profiled {m}x{n}x{k}: plain, then bias", flush=True)
    return 0


def prebuild(shapes) -> int:
    """Compile every variant's build of ``shapes`` (the plain route, the library's bias, the six user
    epilogues), no GPU: routes decided on meta tensors for each GPU the package has a cost table for, as the
    run decides them (linear's output allocated, a user epilogue's decided as given), each epilogue oriented
    as its route runs it (dispatch/precompile.py's route_builds: the kernel, and a repack where the route
    copies an operand). 0 when every build is ready, else 1."""
    from gemm_ladder.dispatch import decide
    from gemm_ladder.dispatch.precompile import route_builds, run_builds, table_devices

    builds = {}
    devices = table_devices()
    for device, (m, n, k) in itertools.product(devices, shapes):
        x = torch.empty((m, k), dtype=torch.bfloat16, device="meta")
        w = torch.empty((n, k), dtype=torch.bfloat16, device="meta")
        c = torch.empty((m, n), dtype=torch.bfloat16, device="meta")
        bias = torch.empty(n, dtype=torch.bfloat16, device="meta")
        rowvec = torch.empty(m, dtype=torch.bfloat16, device="meta")
        calls = [(False, None, "plain"), (False, linear_call(x, w, bias, check_grad=False), "bias")]
        calls += [(True, linear_call(x, w, epilogue=ep, inputs=inputs, check_grad=False), name)
                  for name, (ep, inputs) in user_calls(x, w, bias, rowvec).items()]
        for given, call, name in calls:
            route = decide(x, w.T, c, given=given, device=device)
            src = None if call is None else call.oriented(route.c_path.transposed).source()
            for build in route_builds(route, "bf16", src, name):
                builds.setdefault(build.label, build)
    outcomes = run_builds(list(builds.values()), load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=None, help="comma list of MxNxK (default: six bias layers)")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of timed calls per callable")
    parser.add_argument("--prebuild", action="store_true", help="compile every variant's build, no GPU, and exit")
    parser.add_argument("--profile", action="store_true",
                        help="one launch of the plain call and of the bias (the first shape) in NVTX range 'prof'")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    shapes = parse_shapes(__file__, "--shapes", args.shapes) if args.shapes else SHAPES
    positive(__file__, "--budget", args.budget)
    if args.prebuild:
        return prebuild(shapes)
    check_output(__file__, args.output)
    require_gpu(__file__)
    torch.manual_seed(0)
    if args.profile:
        return profile(*shapes[0])
    rows = []
    for m, n, k in shapes:
        r = run_shape(m, n, k, args.budget)
        rows.append(r)
        print(f"{m}x{n}x{k}: plain {r['us']['plain']:.1f} us; over plain: "
              + ", ".join(f"{name} {v:.3f}" for name, v in r["over_plain"].items() if name != "plain")
              + ("" if r["correct"] else " WRONG"), flush=True)
    save({"rows": rows}, "bias_cost", args.output)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
