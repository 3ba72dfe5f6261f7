"""The ladder: one registry entry per level, each naming its kernel file, its idea and its domain.

``LEVELS[n]`` is level n (a :class:`~gemm_ladder.levels.base.Level`); call it as ``LEVELS[3](a, b)``.
"""

from __future__ import annotations

from gemm_ladder.contract import Domain
from gemm_ladder.levels.base import LaunchGeometry, Level, PerfExpectation
from gemm_ladder.levels.thread_copy import ThreadCopyLevel
from gemm_ladder.levels.tma import TmaLevel

#: TMA's rules for 2-byte elements: 16-byte aligned bases and row strides (K, N multiples of 8).
TMA_DOMAIN = Domain(max_m=65535 * 128, k_multiple=8, n_multiple=8, base_alignment=16)

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
    4: TmaLevel(
        number=4,
        name="tma",
        idea="one thread issues TMA loads into swizzled smem (mbarrier + expect_tx) and TMA stores (commit/wait_group)",
        source="levels/level4_tma.cu",
        domain=TMA_DOMAIN,
        stages=1,
    ),
    5: TmaLevel(
        number=5,
        name="pipeline",
        idea="a ring of stages with full and empty barriers: loads run ahead of the wgmma that consumes them",
        source="levels/level5_pipeline.cu",
        domain=TMA_DOMAIN,
        stages=3,  # the sweep's best at 8192^3 (bench/results/*pipe_depth_sweep*)
        c_aliases_stages=True,
    ),
    6: TmaLevel(
        number=6,
        name="persistent",
        idea="one resident CTA per slot loops over tiles in grouped order; ring phases carry across tiles",
        source="levels/level6_persistent.cu",
        domain=TMA_DOMAIN,
        stages=2,
        persistent=True,
    ),
    7: TmaLevel(
        number=7,
        name="warp_specialized",
        idea="a producer warpgroup (one TMA thread, setmaxnreg down) feeds a consumer warpgroup (setmaxnreg up)",
        source="levels/level7_warp_specialized.cu",
        domain=TMA_DOMAIN,
        stages=4,
        persistent=True,
        producer_warpgroup=True,
    ),
    8: TmaLevel(
        number=8,
        name="cluster_multicast",
        idea="2-CTA clusters along M: the shared B tile is loaded once, half by each CTA, and multicast to both",
        source="levels/level8_cluster_multicast.cu",
        domain=TMA_DOMAIN,
        stages=4,
        cluster=2,
        persistent=True,
        producer_warpgroup=True,
    ),
    9: TmaLevel(
        number=9,
        name="multi_consumer",
        idea="two consumer warpgroups share a 128x256 tile (64 rows each): twice the math per staged B byte",
        source="levels/level9_multi_consumer.cu",
        domain=TMA_DOMAIN,
        tile=(128, 256, 64),
        stages=3,
        consumers=2,
        cluster=2,
        persistent=True,
        producer_warpgroup=True,
    ),
}


def get_level(number: int) -> Level:
    """Level ``number``; raises KeyError naming the levels that exist."""
    try:
        return LEVELS[number]
    except KeyError:
        raise KeyError(f"no level {number}: the ladder has levels {sorted(LEVELS)}") from None


__all__ = ["LEVELS", "Level", "LaunchGeometry", "PerfExpectation", "get_level"]
