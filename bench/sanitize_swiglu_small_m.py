"""The small-M kernel's gated build (library/swiglu_small_m.py) on shapes that exercise every path of its
kernel, for compute-sanitizer (memcheck, racecheck, synccheck) on the GPU:

    compute-sanitizer --tool racecheck python3 bench/sanitize_swiglu_small_m.py

Each case: one bucket, M in one or several tiles, N and K tails, the grid rule's split and classic split-K
(partials of both fragments reduced by the last contributor) and no split; every result checked against the
float64 reference (relative error within 2e-2 for bf16). Prints one line per case; exit status 1 on a wrong
result, 2 without a GPU (one line, before any work).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

#: (M, N, K, BN, splits): splits None is the grid rule (here: split, fewer units than SMs), 1 none, 3 classic.
CASES = [(1, 300, 520, 8, None), (7, 1000, 200, 8, 3), (33, 260, 1000, 16, None), (64, 700, 1000, 64, 1),
         (200, 400, 640, 128, None), (128, 1024, 4096, 128, 3)]


def main(argv: list[str] | None = None) -> int:
    from suite import require_gpu

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    require_gpu(__file__)
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.swiglu_small_m import swiglu_small_m_kernel

    bad = 0
    for m, n, k, bn, splits in CASES:
        gen = torch.Generator(device="cuda").manual_seed(m * 7 + n)
        x = torch.randn((m, k), generator=gen, device="cuda").bfloat16()
        wg, wu = ((torch.randn((n, k), generator=gen, device="cuda") / k ** 0.5).bfloat16() for _ in range(2))
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        swiglu_small_m_kernel(bn).launch(*(operand_view(t, k_dim=1) for t in (x, wg, wu)), out, splits=splits)
        x64 = x.double()
        ref = F.silu(x64 @ wg.double().T) * (x64 @ wu.double().T)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        ok = err <= 2e-2
        bad += not ok
        print(f"M={m} N={n} K={k} BN={bn} splits={splits}: rel err {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
