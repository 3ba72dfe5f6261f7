"""The ladder: one registry entry per level, each naming its kernel file, its idea and its domain.

``LEVELS[n]`` is level n (a :class:`~gemm_ladder.levels.base.Level`); call it as ``LEVELS[3](a, b)``.
"""

from __future__ import annotations

from gemm_ladder.contract import Domain
from gemm_ladder.levels.base import LaunchGeometry, Level, PerfExpectation
from gemm_ladder.levels.thread_copy import ThreadCopyLevel

LEVELS: dict[int, Level] = {
    1: ThreadCopyLevel(
        number=1,
        name="single_tile",
        idea="one CTA, one warpgroup: threads copy A and B into 128B-swizzled shared memory, wgmma over one K tile",
        source="levels/level1_single_tile.cu",
        domain=Domain(max_m=128, max_n=128, max_k=64),
    ),
    2: ThreadCopyLevel(
        number=2,
        name="k_loop",
        idea="accumulate over every 64-wide K tile in the same registers; the copy zero-fills the K tail",
        source="levels/level2_k_loop.cu",
        domain=Domain(max_m=128, max_n=128),
    ),
    3: ThreadCopyLevel(
        number=3,
        name="spatial_tiling",
        idea="a grid of CTAs, one per 128x128 output tile; zero-filled loads and masked stores for M/N tails",
        source="levels/level3_spatial_tiling.cu",
        domain=Domain(max_m=65535 * 128),  # gridDim.y <= 65535
        tiled=True,
    ),
}


def get_level(number: int) -> Level:
    """Level ``number``; raises KeyError naming the levels that exist."""
    try:
        return LEVELS[number]
    except KeyError:
        raise KeyError(f"no level {number}: the ladder has levels {sorted(LEVELS)}") from None


__all__ = ["LEVELS", "Level", "LaunchGeometry", "PerfExpectation", "get_level"]
