// Bench only: the math of a GEMM alone on this GPU (bench/tensor_pipe_sol.py).
//
// Level 9's launch (grid, cluster, roles, register split, shared-memory map and signature), with
// everything a real GEMM needs besides the math taken out. The producer fills the STAGES stages once
// (the problem's own A and B, so the operands toggle like random data, which sets the power drawn)
// and never loads again; the consumers then issue the wgmma of an evenly shared K loop over those
// stages, wgmma.wait_group 1 as in level 9, with no barrier, no epilogue and no last partial wave:
// every CTA does the same (total CTA tiles x K tiles) / gridDim.x K iterations. It runs at the clock
// the GPU grants work that moves no data, which is higher than a real GEMM's; per cycle its loop is
// no faster than level 9's main loop. A reference point, not a bound.
//
// The accumulators end in a sum that traps on a value it never takes, so ptxas must keep every
// wgmma whole (a dead accumulator lets it shrink HGMMA.64x256x16 to 64x8: see ladder_variants.py).
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

// wgmma groups left in flight after each K iteration's commit: 1 as in level 9; -1 never waits inside
// the loop (whether the wait slows the loop).
#ifndef GL_SOL_PENDING
#define GL_SOL_PENDING 1
#endif

static_assert(GL_PRODUCER_WG == 1 && BM == 64 * GL_CONSUMERS, "the level 9 plan: each consumer owns 64 rows");

extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K, int, int, float*, int*) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, BN, GL_CLUSTER);
  const int k_tiles = (K + BK - 1) / BK;
  // Each CTA's even share of the problem's K iterations (CTA tiles x K tiles over the CTAs).
  const long long cta_tiles = static_cast<long long>(sched.total) * GL_CLUSTER;
  const int iterations = static_cast<int>(cta_tiles * k_tiles / gridDim.x);
  const int rank = cluster_cta_rank();

  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_c);
  cluster_sync();
  if (warpgroup_index() == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0 && k_tiles >= STAGES) {  // fill every stage once, from this cluster's first unit
      int um, tn;
      RingPosition pos{0};
      sched.coords(blockIdx.x / GL_CLUSTER, um, tn);
      produce_k_range(smem, &map_a, &map_b, um, tn, 0, STAGES, rank, pos);
    }
  } else if (k_tiles >= STAGES) {
    setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    for (int s = 0; s < STAGES; ++s) mbarrier_wait(smem.full(s), 0);
    float d[BN / 2];
    for (int it = 0; it < iterations; ++it) {
      const int s = it % STAGES;
      wgmma_fence();
      mma_k_tile<BN>(d, smem.a(s) + consumer * 64 * BK, smem.b(s), it % k_tiles != 0);
      wgmma_commit();
#if GL_SOL_PENDING >= 0
      wgmma_wait<GL_SOL_PENDING>();
#endif
    }
    wgmma_wait<0>();
    fence_accumulators(d);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) sum += d[i];
    if (sum == 1234.5f) asm volatile("trap;");
  }
  cluster_sync();  // no CTA leaves while its cluster peer may still multicast into it
}
