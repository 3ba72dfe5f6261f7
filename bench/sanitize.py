"""Run every level once on small shapes, for compute-sanitizer (memcheck, racecheck, synccheck).

    compute-sanitizer --tool racecheck python bench/sanitize.py [--levels 1-9]

Shapes: tails in M, N and K, several K tiles (more than the deepest ring, not a multiple of it), an
odd number of M tiles (the last cluster's second CTA has no tile of its own) and more tiles than SMs
would be too slow under the sanitizer, so the persistent levels get a grid of a few CTAs looping
over many tiles instead (the loop and the carried phases are what matter). Level 9 also runs with
three resident clusters and every tail split (stream_k_min_idle = 0): 8 units make two whole waves
and a tail of 2 units whose K iterations the 3 clusters share, so the partial slots, the counters
and the last arriver's reduction run under the sanitizer. Prints one line per level and shape.
"""

import argparse
import sys

import torch

from suite import require_gpu
from gemm_ladder.contract import reference
from gemm_ladder.gates.climb import parse_level_range
from gemm_ladder.levels import LEVELS

SHAPES = {1: (100, 120, 64), 2: (100, 120, 200), 3: (300, 264, 200)}
TMA_SHAPE = (3 * 128 + 8, 3 * 256 + 8, 5 * 64 + 8)  # odd M tiles, N and K tails, 6 K tiles
#: Persistent levels also run with one K tile (K = 64, K = 8): level 9 then stores each tile's deferred
#: panels after the next tile's main loop rather than inside it.
SHORT_K = (64, 8)


def run(name: str, level, m: int, n: int, k: int) -> bool:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = level(a, b)
    torch.cuda.synchronize()
    ref = reference(a, b)
    err = ((c.double() - ref).norm() / ref.norm()).item()
    ok = err < 1e-2 and not torch.isnan(c).any()
    print(f"{name} {m}x{n}x{k} rel_err={err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--levels", default="1-9", help="as the climb takes them: 1-9, 4,9")
    args = p.parse_args()
    require_gpu(__file__)
    bad = 0
    for n in parse_level_range(args.levels, sorted(LEVELS)):
        level = LEVELS[n]
        m, nn, k = SHAPES.get(n, TMA_SHAPE)
        persistent = getattr(level, "persistent", False)
        if persistent:
            kernel = level.loaded("bf16", torch.device("cuda"))
            kernel._resident = 2  # two resident units: each loops over several tiles
        for kk in (k, *SHORT_K) if persistent else (k,):
            bad += not run(f"L{n}", level, m, nn, kk)
        if getattr(level, "stream_k_args", False):
            split = level.variant(stream_k_min_idle=0.0)
            split.loaded("bf16", torch.device("cuda"))._resident = 3
            for kk in (k, 1000):
                assert split.stream_k_tail(m, nn, kk, "bf16", torch.device("cuda")).tail_units > 0
                bad += not run(f"L{n} stream-K tail", split, m, nn, kk)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
