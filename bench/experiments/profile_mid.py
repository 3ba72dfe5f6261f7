"""One launch each of forced general-kernel builds and of cuBLAS on one mid-size shape, inside the NVTX
range "prof", for Nsight Compute (one-off).

    ncu --clock-control none --nvtx --nvtx-include "prof/" --section SpeedOfLight --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section SchedulerStats \
        python bench/experiments/profile_mid.py [--shape 512,1024,4096] [--builds "route;c1 bm64 bn64 none"]
    python bench/experiments/profile_mid.py --prebuild [--shape ...] [--builds ...]   # compile only, no GPU

Why: the timeline (bench/experiments/gemm_timeline.py; docs/where-time-goes.md) shows the mid-size
shapes' main loops running at a third to a half of the tensor pipe's rate on tiles cuBLAS also uses
(512 x 1024 x 4096: 64 x 64 tiles, 13 stages, one tile per SM, on both sides), with neither the L2's
bandwidth nor the ring's depth obviously the limit. Nsight Compute's stall reasons and memory charts for
the two kernels side by side say which unit waits on which.

Builds (``--builds``, ';'-separated, gemm_timeline.py's syntax): ``route`` (the dispatcher's general-kernel
choice) or ``[c1] [bm64] [lag2] bnN SPLIT`` (``lag2``: two wgmma groups in flight, a measuring build). Operands x (M, K) and w (N, K) row-major, bf16, random normal.
Every build, and cuBLAS (``F.linear``), runs once outside the range first (compiled, loaded, cuBLAS's
heuristics run) and is checked against float64 (gates.correctness's bound), so the profiled launches
are steady and right. Exit status 1 when a build is wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # gemm_timeline.py
from gemm_timeline import builds_for, parse_build  # noqa: E402
from suite import require_gpu  # noqa: E402

DEFAULT_BUILDS = "route;c1 bm64 bn64 none;c1 bm64 lag2 bn64 none;bm64 bn64 none"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="512,1024,4096", help="M,N,K")
    p.add_argument("--builds", default=DEFAULT_BUILDS, help="';'-separated builds (gemm_timeline.py's syntax)")
    p.add_argument("--prebuild", action="store_true", help="compile the builds, no GPU")
    args = p.parse_args(argv)
    try:
        m, n, k = (int(v) for v in args.shape.split(","))
    except ValueError:
        p.error(f"--shape {args.shape!r}: three integers M,N,K")
    specs = [parse_build(b.strip()) for b in args.builds.split(";")]
    if any(s is None for s in specs):
        print(f"profile_mid.py: --builds {args.builds!r}: each is route or [c1] [bm64] [lag2] bnN SPLIT", file=sys.stderr)
        return 2
    builds = builds_for((f"{m}x{n}x{k}", m, n, k), specs)
    if args.prebuild:
        from suite import prebuild

        return prebuild([kernel for kernel, _ in builds.values()])
    require_gpu(__file__)
    from gemm_ladder.contract import reference
    from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
    from gemm_ladder.library.operand import operand_view

    x, w = random_operands(m, n, k, "bf16", "cuda", 0)
    ref = reference(x, w)
    want = torch.nn.functional.linear(x, w)
    bound = error_bound(((want.double() - ref).norm() / ref.norm()).item(), "bf16")
    cap = absolute_cap(x, w, ref.abs().max().item(), "bf16")
    va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    launches, ok = {}, True
    for label, (kernel, split) in builds.items():
        c = torch.full((m, n), float("nan"), dtype=x.dtype, device="cuda")
        launch = kernel.bind(va, vb, c, split=split)
        launch()
        torch.cuda.synchronize()
        d = c.double() - ref
        err = (d.norm() / ref.norm()).item()
        right = err <= bound and d.abs().max().item() <= cap
        ok &= right
        print(f"{label}: rel err {err:.3g} (bound {bound:.3g}) {'ok' if right else 'WRONG'}", flush=True)
        launches[label] = launch
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    for label, launch in launches.items():
        torch.cuda.nvtx.range_push(label)
        launch()
        torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("cuBLAS")
    torch.nn.functional.linear(x, w)
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("launch order in the range:", "; ".join([*launches, "cuBLAS"]))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
