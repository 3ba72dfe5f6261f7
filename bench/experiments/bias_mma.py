"""linear's bias added by the tensor cores (one more k16 step per tile: bias_stage.cuh) against the same bias
added in the epilogue, on the same route (one-off experiment).

    python bench/experiments/bias_mma.py [--shapes MxNxK[:act],...] [--dtype bf16|fp16] [--budget S] [-o OUT.json]
    python bench/experiments/bias_mma.py --prebuild [--shapes ...] [--dtype ...]   # compile every build, no GPU
    python bench/experiments/bias_mma.py --sanitize [--shapes ...] [--split all]   # each launch once, nothing timed

Per shape (x (M, K), w (N, K), bias (N,), all of --dtype; ``:act`` an activation after the bias), interleaved in
one run (gemm_ladder.timing.time_fns, L2 flushed), the route ``linear`` decides for the call:

* ``plain``   the route's build on x, w without bias or activation (a bound launch);
* ``epi``     with the bias (and activation) fused in the epilogue (library.gemm.BIAS_BY_MMA off when bound);
* ``mma``     with the bias by the MMA (BIAS_BY_MMA on when bound; the same as ``epi`` where the route's build
              does not take it: ``mma_taken`` false);
* ``torch``   ``F.linear(x, w, bias)`` (then the activation), eager: what a user writes instead.

Bound launches (library/bound.py), so the host side is the same for ours and only the kernels differ.
``--split S`` (none, tail, all, wave) launches the route's general build with split S instead of the route's own
where the build has it (``split_forced`` says where it did): ``all`` puts every unit's bias on the stream-K piece
that ends its K, the path compute-sanitizer needs to see.
Before timing, each of ours runs on an output poisoned with NaN and is checked against float64 (1.5x the float64
result's rounding to the dtype + 1e-4 of its largest magnitude), and ``mma`` twice more for bitwise repeatability.

Result: DATE_bias_mma_COMMIT.json, ``rows: [{M, N, K, activation, dtype, route, split, split_forced, swapped, mma_taken,
us: {variant: median us}, mma_over_epi, mma_over_plain, epi_over_plain, torch_over_mma, err: {variant},
repeatable, correct}]``. Exit status: 0 every output right and repeatable, 1 one not, 2 bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, outputs.py
from outputs import check_output, positive, refuse  # noqa: E402
from suite import add_output_argument, require_gpu, save  # noqa: E402

from gemm_ladder.contract import DTYPES  # noqa: E402
from gemm_ladder.dispatch import decide  # noqa: E402
from gemm_ladder.dispatch.calls import bind_route  # noqa: E402
from gemm_ladder.dispatch.validate import linear_call  # noqa: E402
from gemm_ladder.library import gemm as G  # noqa: E402
from gemm_ladder.library.epilogue import ACTIVATIONS  # noqa: E402
from gemm_ladder.timing import time_fns  # noqa: E402

#: The bias layers furthest below eager torch on the H200 at d726cbf (bench/shapes_real.py, bias_geomean_vs_eager
#: 0.914): ViT-L qkv, proj, fc2; Qwen2.5-7B qkv (a stream-K route at 1000 rows); GPT-2 c_attn, c_proj; BERT-large
#: output, query; and the GELU layers (bias + activation) of ViT-L, BERT-large and GPT-2.
SHAPES = ["1576x3072x1024", "1000x4608x3584", "1023x2304x768", "1576x1024x1024", "255x4608x3584", "1576x1024x4096",
          "512x1024x4096", "4096x768x768", "8192x2304x768", "4096x1024x1024", "12608x1024x4096", "16384x768x768",
          "1576x4096x1024:gelu", "4096x4096x1024:gelu", "8192x3072x768:gelu_tanh", "12608x4096x1024:gelu"]


def parse(spec: str) -> tuple[int, int, int, str | None]:
    """``MxNxK`` or ``MxNxK:activation`` as (M, N, K, activation or None); ValueError(spec) otherwise."""
    dims, _, act = spec.partition(":")
    try:
        m, n, k = (int(v) for v in dims.split("x"))
    except ValueError:
        raise ValueError(spec) from None
    if min(m, n, k) <= 0 or (act and act not in ACTIVATIONS):
        raise ValueError(spec)
    return m, n, k, act or None


def route_of(x, w, out, act):
    return decide(x, w.T, out, given=False, activation=act)


def bound_pair(route, x, w, out, call):
    """The bound launches of ``call`` with the bias in the epilogue and by the MMA, and whether the MMA took it."""
    saved = G.BIAS_BY_MMA
    try:
        G.BIAS_BY_MMA = False
        epi = bind_route(route, x, w.T, out, call)
        G.BIAS_BY_MMA = True
        mma = bind_route(route, x, w.T, out, call)
        oriented = call.oriented(route.c_path.transposed)
        taken = route.kind != "small_m" and G.epilogue_for(route.config, oriented, x.dtype) is not oriented
    finally:
        G.BIAS_BY_MMA = saved
    return epi, mma, taken


def forced_split(route, split):
    """``route`` launching ``split`` (None: as decided), where it is a general build that has that split; else
    ``route`` itself."""
    if split in (None, dict(route.options).get("split")) or route.kind != "general" \
            or split not in G.kernel_for(route.config).splits:
        return route
    return replace(route, options=tuple((k, v) for k, v in route.options if k != "split") + (("split", split),))


def run_shape(m, n, k, act, dtype, budget, split=None):
    x = torch.randn((m, k), device="cuda").to(dtype)
    w = (torch.randn((n, k), device="cuda") / math.sqrt(k)).to(dtype)
    bias = torch.randn(n, device="cuda").to(dtype)
    out = torch.empty((m, n), device="cuda", dtype=dtype)
    plain_out = torch.empty((m, n), device="cuda", dtype=dtype)
    decided = route_of(x, w, out, act)
    route = forced_split(decided, split)
    call = linear_call(x, w, bias, activation=act)
    epi, mma, taken = bound_pair(route, x, w, out, call)
    plain = bind_route(forced_split(route_of(x, w, plain_out, None), split), x, w.T, plain_out, None)
    prod = x.double() @ w.double().T
    ref = call.reference(prod)
    floor = ((ref.to(dtype).double() - ref).abs().max() / ref.abs().max()).item()
    err, ok = {}, True
    runs = {}
    for name, fn in (("epi", epi), ("mma", mma), ("mma_again", mma), ("mma_third", mma)):
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        runs[name] = out.clone()
        err[name] = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        ok = ok and math.isfinite(err[name]) and err[name] <= 1.5 * floor + 1e-4
    repeatable = bool(torch.equal(runs["mma"], runs["mma_again"]) and torch.equal(runs["mma"], runs["mma_third"]))
    torch_act = ACTIVATIONS[act].reference if act else None

    def eager(a, b):
        y = F.linear(a, b, bias)
        return torch_act(y) if torch_act else y

    fns = {"plain": lambda a, b: plain(), "epi": lambda a, b: epi(), "mma": lambda a, b: mma(), "torch": eager}
    if budget is None:  # --sanitize: launched and checked above, nothing timed
        us = {name: math.nan for name in fns}
    else:
        t = time_fns(fns, x, w, budget_s=budget, rounds=3)
        us = {name: t[name].median_ms * 1e3 for name in fns}
    return {"M": m, "N": n, "K": k, "activation": act, "dtype": str(dtype).replace("torch.", ""),
            "route": route.kernel.name if route.kind != "small_m" else "small_m", "split": dict(route.options).get("split"),
            "split_forced": route is not decided,
            "swapped": bool(route.c_path.transposed), "mma_taken": bool(taken), "us": us,
            "mma_over_epi": us["mma"] / us["epi"], "mma_over_plain": us["mma"] / us["plain"],
            "epi_over_plain": us["epi"] / us["plain"], "torch_over_mma": us["torch"] / us["mma"],
            "err": err, "repeatable": repeatable, "correct": bool(ok)}


def prebuild(shapes, dtype) -> int:
    """Compile every build the run launches (routes decided on meta tensors for each GPU the package has a cost
    table for; the epilogue bound both ways), no GPU. 0 when every build is ready, else 1."""
    import itertools

    from gemm_ladder.dispatch.precompile import route_builds, run_builds, table_devices

    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    builds = {}
    devices = table_devices()
    for device, (m, n, k, act) in itertools.product(devices, shapes):
        x = torch.empty((m, k), dtype=dtype, device="meta")
        w = torch.empty((n, k), dtype=dtype, device="meta")
        c = torch.empty((m, n), dtype=dtype, device="meta")
        call = linear_call(x, w, torch.empty(n, dtype=dtype, device="meta"), activation=act, check_grad=False)
        plain_route = decide(x, w.T, c, given=False, device=device)
        route = decide(x, w.T, c, given=False, device=device, activation=act)
        oriented = call.oriented(route.c_path.transposed)
        for b in route_builds(plain_route, name) + route_builds(route, name, oriented.source(), "epi"):
            builds.setdefault(b.label, b)
        saved, G.BIAS_BY_MMA = G.BIAS_BY_MMA, True
        try:
            for b in route_builds(route, name, epilogue_name="mma", epilogue_call=oriented):
                builds.setdefault(b.label, b)
        finally:
            G.BIAS_BY_MMA = saved
    outcomes = run_builds(list(builds.values()), load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma list of MxNxK[:activation]")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of timed calls per callable")
    parser.add_argument("--split", choices=("none", "tail", "all", "wave"), default=None,
                        help="launch the route's general build with this split where it has it (default: the route's)")
    parser.add_argument("--prebuild", action="store_true", help="compile every build, no GPU, and exit")
    parser.add_argument("--sanitize", action="store_true",
                        help="each launch once, checked, nothing timed (for compute-sanitizer)")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    try:
        shapes = [parse(s) for s in args.shapes.split(",") if s]
    except ValueError as e:
        refuse(__file__, f"--shapes: {e} is not MxNxK or MxNxK:activation with M, N, K > 0 and an activation of "
                         f"{', '.join(ACTIVATIONS)}")
    positive(__file__, "--budget", args.budget)
    dtype = DTYPES[args.dtype]
    if args.prebuild:
        return prebuild(shapes, dtype)
    check_output(__file__, args.output)
    require_gpu(__file__)
    torch.manual_seed(0)
    rows = []
    for m, n, k, act in shapes:
        r = run_shape(m, n, k, act, dtype, None if args.sanitize else args.budget, args.split)
        rows.append(r)
        forced = " (forced)" if r["split_forced"] else ""
        print(f"{m}x{n}x{k} {act or 'bias'} {r['route']} split {r['split']}{forced}{' swapped' if r['swapped'] else ''}"
              f"{'' if r['mma_taken'] else ' (mma not taken)'}: plain {r['us']['plain']:.1f} epi {r['us']['epi']:.1f} "
              f"mma {r['us']['mma']:.1f} torch {r['us']['torch']:.1f} us; mma/epi {r['mma_over_epi']:.3f} "
              f"torch/mma {r['torch_over_mma']:.3f}" + ("" if r["correct"] else " WRONG")
              + ("" if r["repeatable"] else " UNEQUAL"), flush=True)
    taken = [r for r in rows if r["mma_taken"]]
    if taken:
        g = math.exp(sum(math.log(r["mma_over_epi"]) for r in taken) / len(taken))
        gt = math.exp(sum(math.log(r["torch_over_mma"]) for r in taken) / len(taken))
        ge = math.exp(sum(math.log(r["us"]["torch"] / r["us"]["epi"]) for r in taken) / len(taken))
        print(f"geomean over {len(taken)} rows the MMA took: mma/epi {g:.3f}; torch/mma {gt:.3f} (torch/epi {ge:.3f})")
    save({"rows": rows}, "bias_mma", args.output)
    return 0 if all(r["correct"] and r["repeatable"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
