"""What a fused bias costs the general kernel, with the bias prefetched into L1 or not (one-off experiment).

    python bench/experiments/vector_prefetch.py [--vector-prefetch on|off] [--shapes MxNxK,...] [--budget S] [-o OUT.json]
    python bench/experiments/vector_prefetch.py --prebuild [--shapes ...]   # compile both settings' builds, no GPU

``library/epilogue.py``'s VECTOR_PREFETCH_L1 is set for the whole run (the library's call cache keys a call
by its signature, not by that setting, so both settings cannot be timed interleaved in one process). Per
shape (bf16; x (M, K), w (N, K), bias (N,)), interleaved (gemm_ladder.timing.time_fns, L2 flushed):
``gemm_ladder.linear`` with and without the bias, and ``F.linear`` (cuBLAS) with and without it. Compare
two runs by ``bias_cost`` (ours with bias over ours without, each run's own ratio) and ``vs_cublas_bias``
(F.linear with bias over ours with bias). Each of our outputs is checked against float64 first (1.5x the
float64 result's rounding to bf16, + 1e-4 of its largest magnitude).

Result: DATE_vector_prefetch_{on,off}_COMMIT.json, ``rows: [{M, N, K, ours_bias_us, ours_plain_us,
cublas_bias_us, cublas_plain_us, bias_cost, vs_cublas_bias, err, correct}]``. Exit status: 0 every output
right, 1 one wrong, 2 bad arguments or no GPU.
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
from gemm_ladder.library import epilogue  # noqa: E402
from gemm_ladder.timing import time_fns  # noqa: E402

#: Bias layers where the bias cost most at 2869771 (H200, shapes_real): GPT-2 c_attn and c_proj, ViT-L qkv,
#: BERT-large query and output, Qwen2.5-7B qkv, ViT-L fc2 at prefill.
SHAPES = [(8192, 2304, 768), (4096, 768, 768), (1576, 3072, 1024), (4096, 1024, 1024), (512, 1024, 4096),
          (1000, 4608, 3584), (12608, 1024, 4096)]


def run_shape(m: int, n: int, k: int, budget: float) -> dict:
    x = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    w = (torch.randn((n, k), device="cuda") / math.sqrt(k)).bfloat16()
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = x.double() @ w.double().T + bias.double()
    y = gemm_ladder.linear(x, w, bias)
    floor = ((ref.to(torch.bfloat16).double() - ref).abs().max() / ref.abs().max()).item()
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    correct = math.isfinite(err) and err <= 1.5 * floor + 1e-4
    fns = {"ours_bias": lambda a, b: gemm_ladder.linear(a, b, bias), "ours_plain": lambda a, b: gemm_ladder.linear(a, b),
           "cublas_bias": lambda a, b: F.linear(a, b, bias), "cublas_plain": lambda a, b: F.linear(a, b)}
    t = time_fns(fns, x, w, budget_s=budget, rounds=3)
    us = {name: t[name].median_ms * 1e3 for name in fns}
    return {"M": m, "N": n, "K": k, **{f"{name}_us": v for name, v in us.items()},
            "bias_cost": us["ours_bias"] / us["ours_plain"], "vs_cublas_bias": us["cublas_bias"] / us["ours_bias"],
            "err": err, "correct": bool(correct)}


def prebuild(shapes) -> int:
    """Compile the bias builds of ``shapes`` with the prefetch on and off, no GPU: routes decided on meta
    tensors as the run's ``gemm_ladder.linear`` decides them, for each GPU the package has a cost table for
    (an H100 lent for an H200 takes the H100's routes). 0 when every build is ready, else 1."""
    from gemm_ladder.dispatch import decide
    from gemm_ladder.dispatch.heuristic import device_tables
    from gemm_ladder.dispatch.kernels import family
    from gemm_ladder.dispatch.precompile import Build, run_builds
    from gemm_ladder.dispatch.route import ASSUMED_DEVICE, DeviceFacts
    from gemm_ladder.dispatch.validate import linear_call

    builds = {}
    devices = [ASSUMED_DEVICE] + [DeviceFacts(name, ASSUMED_DEVICE.sms) for name in device_tables()]
    saved = epilogue.VECTOR_PREFETCH_L1
    try:
        for setting, device, (m, n, k) in itertools.product((False, True), devices, shapes):
            epilogue.VECTOR_PREFETCH_L1 = setting
            x = torch.empty((m, k), dtype=torch.bfloat16, device="meta")
            w = torch.empty((n, k), dtype=torch.bfloat16, device="meta")
            c = torch.empty((m, n), dtype=torch.bfloat16, device="meta")
            call = linear_call(x, w, torch.empty(n, dtype=torch.bfloat16, device="meta"), check_grad=False)
            route = decide(x, w.T, c, given=False, device=device)
            for config in (route.config, route.config.with_epilogue(call.source())):
                builds[config] = Build(f"{route.kernel.name} {config.epilogue_id or 'plain'}",
                                       lambda c=config: family(c).build(c))
    finally:
        epilogue.VECTOR_PREFETCH_L1 = saved
    outcomes = run_builds(list(builds.values()), load=False)
    print(outcomes.summary())
    return 1 if outcomes.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vector-prefetch", choices=("on", "off"), default="on",
                        help="the setting for the whole run (default on; run once with each)")
    parser.add_argument("--shapes", default=None, help="comma list of MxNxK (default: seven bias layers)")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of timed calls per callable")
    parser.add_argument("--prebuild", action="store_true",
                        help="compile the run's bias builds, the prefetch on and off, no GPU, and exit")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    shapes = parse_shapes(__file__, "--shapes", args.shapes) if args.shapes else SHAPES
    positive(__file__, "--budget", args.budget)
    if args.prebuild:
        return prebuild(shapes)
    check_output(__file__, args.output)
    require_gpu(__file__)
    epilogue.VECTOR_PREFETCH_L1 = args.vector_prefetch == "on"
    torch.manual_seed(0)
    rows = []
    for m, n, k in shapes:
        r = run_shape(m, n, k, args.budget)
        rows.append(r)
        print(f"{m}x{n}x{k}: bias {r['ours_bias_us']:.1f} us, plain {r['ours_plain_us']:.1f}, cost {r['bias_cost']:.3f}x; "
              f"cuBLAS bias {r['cublas_bias_us']:.1f} ({r['vs_cublas_bias']:.3f}x ours){'' if r['correct'] else ' WRONG'}",
              flush=True)
    save({"rows": rows, "vector_prefetch_l1": epilogue.VECTOR_PREFETCH_L1}, f"vector_prefetch_{args.vector_prefetch}",
         args.output)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
