"""The ladder: one registry entry per level, each naming its kernel file, its idea and its domain.

Each entry's ``perf`` is what the performance gate holds the level to on shapes of at least
gpu.MIN_TIMED_FLOPS: floors against cuBLAS set below the lowest ratio the level measured on the
H200 over the square and llm sets in both dtypes (bench/results/2026-11-29_climb_{bf16,fp16}_edge_square_llm_hidden_launch.json:
GPU time, launch latency hidden, levels and cuBLAS timed interleaved), and ``min_vs_previous=1.0``
where the level claims to beat the one below. Levels 6 and 8 make no such claim. Their reasons
(bf16, 8192^3; the level-against-level figures from that climb, the variants from
bench/results/2026-11-29_ladder_variants.json, a separate run):

* **Level 6 < level 5** (436 vs 631 TFLOP/s). Three measured parts. Ring depth: level 6's output
  staging cannot overlay its ring (a persistent CTA stores one tile while loading the next), so it
  holds 2 stages at 2 CTAs/SM where level 5 holds 3; level 5 cut to 2 stages ran 579 instead of 616.
  Tile order: level 6 walking tiles row by row ran 464, grouped order 428 (8% lost to the grouped
  order at 128x128 tiles, where the CTAs resident at once already cover the same rows either way).
  Persistence itself: at equal ring and occupancy (2 stages, 2 CTAs/SM) level 5 ran 497 against
  level 6's 444 in the older timing of bench/results/2026-11-29_pipe_depth_sweep_L5_separate_staging.json
  and 2026-11-30_experiments_8192.json (~10%), which is not explained further.
* **Level 8 < level 7** (672 vs 708). Level 8 with multicast off and the cluster kept ran 677 (665
  with it, 698 for level 7 in that run): multicast buys nothing at this tile size, and the loss
  comes with the cluster. Whether it is the pairing (every stage refill waits for both CTAs'
  consumers) or fewer resident CTAs under the cluster constraint is a reading of the code, not
  separated by a measurement. Level 9 keeps the cluster, feeds two consumers from each multicast
  stage, and gains 1.06-1.13x over level 8 (both dtypes, every timed shape).
* **Level 9 against cuBLAS** (bench/results/2026-11-30_l9_targets_bf16_{stream_k,888439e,d55a50c}.json,
  three runs of 5 passes, the last two on the final kernel): 0.99x at 4096^3 (0.985-0.992 per pass);
  at 8192^3 medians 1.06 (188a049, an earlier tail), 1.04 and 1.03 (passes 1.005-1.085); llm geomean
  1.007, 1.011 and 0.999. Why 4096^3 stays at parity: cuBLAS runs the same design there (Nsight
  Compute names nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA: a 128x256 tile per CTA, 2-CTA cluster,
  4 stages, cooperative) at the same SM clock (1.57 GHz for both, bench/results/ncu/
  2026-11-30_L9_cublas_SOL_4096cubed_835fc7a.txt; nvidia-smi sampled 1980 MHz all through the 4096^3
  runs of bench/results/2026-11-30_tensor_pipe_sol*.json), in 179.7 us against level 9's 182.7. Per cycle, level 9's main loop runs at the tensor pipe's rate: bench/l9_timeline.py
  stamps clock64 and %globaltimer in every CTA and finds 1043-1054 cycles per 128x256x64 K tile (the
  medians of a window that opens just after a tile's first wgmma and of one that opens before its
  first stage wait), against 1024 at 2048 bf16 FMA per clock per SM (H100 whitepaper: twice the A100
  SM's 1024 per clock), while the clock moves between 1.46 and 1.63 GHz from tile to tile of one
  launch (bench/results/2026-11-30_l9_timeline_flush_98afbc3.json). The rest of its 183 us, per CTA
  (L2 flushed by writes, as timed): 0.9 us of setup, 4.0 us for the first load (3.7 after a flush by
  reads, 2.0 with L2 warm), 1.4-1.6 us at each of 3 tile boundaries while both consumers store, 1.8
  us of last epilogue and drain, and the partial last wave (16 of 132 CTAs do 3 tiles, not 4). With
  every boundary and drain cost removed (6.3 us) it would run ~1.02x cuBLAS; with its epilogue
  compiled out it measured 772 TFLOP/s against 751 shipped and 761 for cuBLAS (1.01x;
  bench/results/2026-11-30_ladder_bounds.json). 1.05x
  would also need the partial wave gone at no cost (it costs 2.5%: the whole-wave shape
  8448x2048x4096 runs 767 against 748, 2026-11-30_wave_quantization_run2.json), and the lever built
  for it costs more than it saves: splitting that tail by K (stream-K) runs 0.94-0.95x of computing
  it whole at 4096^3 (bench/results/2026-11-30_stream_k*.json). At 4096x4096x14336 (0.90x) Nsight
  Compute shows the clusters, at staggered K offsets, no longer sharing A and B in L2: DRAM reads
  1.24 GB against 521 MB whole, L2 hit rate 59.5% against 75.7%, "Compute (SM) Throughput" 85%
  against 94%. At 4096^3 the extra traffic is small (179 against 148 MB read, 45 against 28 MB
  written, L2 hit rate 76% against 79%) and does not explain the loss; the partials' writes and the
  last arriver's reduction are the other candidates (bench/results/ncu/2026-11-30_L9_whole_vs_split_*.txt).
  So the kernel splits a tail only when the last wave would leave more than 40% of the clusters idle
  (design/stream_k.py); there (8192^3, 4096x14336x4096, 4096x28672x8192) the split measured +0.4% to
  +3.7% over computing the tail whole, within the up to 3.5% that separated two identical
  configurations in one run. A reference with no data to move, bench/tensor_pipe_sol.py (level 9's
  launch with only its wgmma, work shared evenly, no epilogue), does 4096^3's FLOPs at 822-826
  TFLOP/s, 1.08-1.09x cuBLAS (bench/results/2026-11-30_tensor_pipe_sol*.json), by its clock (1.70
  GHz) and not by its cycles (1100-1140 per K tile from Nsight Compute's duration and clock). At
  8192^3 the H200 is at its 700 W limit and Nsight Compute puts the clock at 1.54 GHz for level 9
  and 1.57 for cuBLAS; level 9's own speed was the same in two l9_targets runs (741 and 739
  TFLOP/s) while its ratio moved from 1.03x to 1.06x because cuBLAS ran at 717, then 699.
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
        stages=3,  # the sweep's best at 8192^3 (bench/results/*pipe_depth_sweep*)
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


__all__ = ["LEVELS", "Level", "LaunchGeometry", "PerfExpectation", "get_level"]
