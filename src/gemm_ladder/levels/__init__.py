"""The ladder: one registry entry per level, each naming its kernel file, its idea and its domain.

Each entry's ``perf`` is what the performance gate holds the level to on shapes of at least
gpu.MIN_TIMED_FLOPS: floors against cuBLAS set below the lowest ratio the level measured on the H200
(square and llm sets, both dtypes), and ``min_vs_previous=1.0`` where the level claims to beat the
one below. Levels 6 and 8 make no such claim. Level 6's output staging cannot overlay its ring (a
persistent CTA stores one tile while it loads the next), which costs it a stage, and its grouped tile
order does not pay at 128x128 tiles. Level 8's multicast buys nothing at its tile size while its
cluster costs time; level 9 keeps the cluster and feeds two consumers from each stage. Level 9 stays at parity
with cuBLAS at 4096^3 because cuBLAS runs the same design there, at the same clock.

docs/ladder.md gives each level's idea, its diff against the level below, the measured figures with
the result files they come from, and the measurements behind the reasons above.
"""

from __future__ import annotations

from gemm_ladder.contract import Domain
from gemm_ladder.levels.base import LaunchGeometry, Level, PerfExpectation
from gemm_ladder.levels.thread_copy import ThreadCopyLevel
from gemm_ladder.levels.tma import TmaLevel
from gemm_ladder.runtime.compiler import ARCH_FLAGS

#: The architecture every level is written for: wgmma and setmaxnreg need sm_90a.
LADDER_ARCH = "sm_90a"


def arch_refusal(arch: str) -> str | None:
    """None when the ladder's kernels build for ``arch``, else the one-line reason they do not."""
    if arch == LADDER_ARCH:
        return None
    if arch in ARCH_FLAGS:
        return (f"--arch {arch}: the ladder's kernels are {LADDER_ARCH} (wgmma); {arch} is a planning model "
                f"only: gemm-ladder design --arch {arch}")
    return f"--arch {arch!r}: unknown architecture; the ladder's kernels are {LADDER_ARCH}"


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
        perf=PerfExpectation(min_vs_cublas=0.08),
        tiled=True,
    ),
    4: TmaLevel(
        number=4,
        name="tma",
        idea="one thread issues TMA loads into swizzled smem (mbarrier + expect_tx) and TMA stores (commit/wait_group)",
        source="levels/level4_tma.cu",
        domain=TMA_DOMAIN,
        perf=PerfExpectation(min_vs_cublas=0.5, min_vs_previous=1.0),
        stages=1,
    ),
    5: TmaLevel(
        number=5,
        name="pipeline",
        idea="a ring of stages with full and empty barriers: loads run ahead of the wgmma that consumes them",
        source="levels/level5_pipeline.cu",
        domain=TMA_DOMAIN,
        perf=PerfExpectation(min_vs_cublas=0.5, min_vs_previous=1.0),
        stages=3,  # the depth sweep's best (docs/ladder.md, level 5)
        c_aliases_stages=True,
    ),
    6: TmaLevel(
        number=6,
        name="persistent",
        idea="one resident CTA per slot loops over tiles in grouped order; ring phases carry across tiles",
        source="levels/level6_persistent.cu",
        domain=TMA_DOMAIN,
        perf=PerfExpectation(min_vs_cublas=0.5),
        stages=2,
        persistent=True,
    ),
    7: TmaLevel(
        number=7,
        name="warp_specialized",
        idea="a producer warpgroup (one TMA thread, setmaxnreg down) feeds a consumer warpgroup (setmaxnreg up)",
        source="levels/level7_warp_specialized.cu",
        domain=TMA_DOMAIN,
        perf=PerfExpectation(min_vs_cublas=0.85, min_vs_previous=1.0),
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
        perf=PerfExpectation(min_vs_cublas=0.8),
        stages=4,
        cluster=2,
        persistent=True,
        producer_warpgroup=True,
    ),
    9: TmaLevel(
        number=9,
        name="multi_consumer",
        idea="two consumer warpgroups share a 128x256 tile (64 rows each); each stores its rows panel by panel, "
             "overlapped with the next tile; a mostly idle last wave is split by K (stream-K tail)",
        source="levels/level9_multi_consumer.cu",
        domain=TMA_DOMAIN,
        perf=PerfExpectation(min_vs_cublas=0.9, min_vs_previous=1.0),
        tile=(128, 256, 64),
        stages=4,  # fits beside the per-consumer panel rings (c_ring); a whole-tile staging left room for 3
        consumers=2,
        c_ring=2,
        cluster=2,
        persistent=True,
        stream_k_args=True,
        producer_warpgroup=True,
    ),
}


def get_level(number: int) -> Level:
    """Level ``number``; raises KeyError naming the levels that exist."""
    try:
        return LEVELS[number]
    except KeyError:
        raise KeyError(f"no level {number}: the ladder has levels {sorted(LEVELS)}") from None


__all__ = ["LADDER_ARCH", "LEVELS", "arch_refusal", "Level", "LaunchGeometry", "PerfExpectation", "get_level"]
