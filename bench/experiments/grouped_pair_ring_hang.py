"""Reproduce the launch library/grouped.py refuses (PAIR_RING_HANG): the grouped forward on a pair of CTAs with a
buffer per output panel, beside the builds the library does launch (issue 24, one-off).

    timeout 30 python bench/experiments/grouped_pair_ring_hang.py [CASE [BUILD]] [--reps N] [--k-div D]

CASE is one of bench/experiments/grouped_vs_dense.py's cases (default qwen3_down, which hung at 293011f on an
H100); BUILD (default c2r4) one of
``route`` (gemm_ladder.grouped_mm), ``c1``, ``c2`` (the one-buffer ring forced to one CTA or a pair), ``c1r4``,
``c2r4`` (BN 256 with four buffers: built directly, bypassing grouped_gemm's refusal for ``c2r4``), ``c1s3``,
``c2s3`` (the one-buffer ring cut to the three stages the four-buffer build has: grouped_gemm's measuring
``stages``, so that a hang of ``c2s3`` points at the pair's ring depth and a clean one at the buffers). ``--k-div``
divides the case's K. Run it under ``timeout``: the refused build may never return. Prints one line (seconds for
``--reps`` calls, the relative Frobenius error against ``torch._grouped_mm``); exits 0 when that error is below
1e-2, 1 otherwise; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped import group_sizes  # noqa: E402
from grouped_vs_dense import CASES  # noqa: E402
from suite import require_gpu  # noqa: E402

BUILDS = {"route": None, "c1": (1, 1), "c2": (2, 1), "c1r4": (1, 4), "c2r4": (2, 4), "c1s3": (1, 1, 3), "c2s3": (2, 1, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", default="qwen3_down", choices=sorted(CASES))
    parser.add_argument("build", nargs="?", default="c2r4", choices=sorted(BUILDS))
    parser.add_argument("--reps", type=int, default=1, help="calls, each synchronised")
    parser.add_argument("--k-div", type=int, default=1, help="divide the case's K by this")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.k_div < 1:
        print("grouped_pair_ring_hang: --reps and --k-div must be >= 1", file=sys.stderr)
        return 2
    require_gpu(__file__)
    import torch

    import gemm_ladder
    from gemm_ladder.api_grouped import grouped_mm_direct
    from gemm_ladder.library.grouped import _grouped_gemm, grouped_gemm

    e, rows, n, k, lo, hi = CASES[args.case]
    k //= args.k_div
    sizes = group_sizes(e, rows, lo, hi)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    build = BUILDS[args.build]
    start = time.time()
    for _ in range(args.reps):
        if build is None:
            out = gemm_ladder.grouped_mm(a, w.transpose(1, 2), offs)
        elif build[1] != 1:  # four buffers at BN 256, built directly (grouped_gemm refuses it with a pair)
            out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
            _grouped_gemm(256, "k", False, False, False, False, build[0], build[1]).launch(a, w, offs, out)
        elif len(build) == 3:  # one buffer, the stage ring cut to build[2]
            out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
            grouped_gemm(256, "k", cluster=build[0], stages=build[2]).launch(a, w, offs, out)
        else:
            out = grouped_mm_direct(a, w.transpose(1, 2), offs, bn=256, cluster=build[0])
        torch.cuda.synchronize()
    seconds = time.time() - start
    ref = torch._grouped_mm(a, w.transpose(1, 2), offs).float()
    err = float((out.float() - ref).norm() / ref.norm())
    print(f"{args.case} {args.build} K {k} reps {args.reps}: {seconds:.2f} s, rel err {err:.2e}", flush=True)
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
