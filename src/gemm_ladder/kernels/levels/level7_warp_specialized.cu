// Level 7 - warp specialization.
//
// Level 6's persistent tile loop, split into roles. Warpgroup 0 is the producer: it gives registers
// back (setmaxnreg.dec) and one of its threads does nothing but wait for free stages and issue TMA
// loads, running ahead across tiles. Warpgroup 1 is the consumer: it takes the registers
// (setmaxnreg.inc), waits for full stages, runs wgmma, releases stages and writes the epilogue.
// Every handoff has one producing and one consuming role:
//   full[s]   producer (expect_tx + copy engine bytes) -> consumer
//   empty[s]  consumer (one elected thread per warpgroup)  -> producer
//   staging   consumer's store issuer (wait_group.read 0) -> consumer warpgroup (named barrier 1)
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

static_assert(GL_PRODUCER_WG == 1 && GL_CONSUMERS == 1 && GL_THREADS == 256, "level 7: one producer, one consumer");
constexpr int kStoreIssuer = 128;  // thread 0 of the consumer warpgroup

extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, BN, 1);
  const int k_tiles = (K + BK - 1) / BK;

  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_c);
  __syncthreads();

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0)  // every K tile of every tile of this CTA, running ahead of the consumer
      produce_units(smem, &map_a, &map_b, sched, k_tiles, 0, blockIdx.x, gridDim.x, sched.total);
  } else {
    setmaxnreg_inc<232>();
    const bool elected = threadIdx.x == kStoreIssuer;
    RingPosition pos{0};
    for (int tile = blockIdx.x; tile < sched.total; tile += gridDim.x) {
      int tm, tn;
      sched.coords(tile, tm, tn);
      float d[2][BN / 2];
      for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
        const int s = pos.stage();
        consumer_wait(smem, pos);
        wgmma_fence();
        mma_k_tile<BN>(d[0], smem.a(s), smem.b(s), kt > 0);
        mma_k_tile<BN>(d[1], smem.a(s) + 64 * BK, smem.b(s), kt > 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0 && elected) consumer_release(smem, pos.previous_stage());
      }
      wgmma_wait<0>();
      fence_accumulators(d[0]);
      fence_accumulators(d[1]);
      if (elected) {
        consumer_release(smem, pos.previous_stage());
        tma_store_wait_read<0>();  // the previous tile's store no longer reads the staging
      }
      named_barrier_sync(1, 128);
      stage_fragment_sw128<BN>(smem.c(), d[0], 0, GL_SMEM_C_PANEL_BYTES);
      stage_fragment_sw128<BN>(smem.c(), d[1], 64, GL_SMEM_C_PANEL_BYTES);
      fence_proxy_async_smem();
      named_barrier_sync(1, 128);
      if (elected) store_output_tile(&map_c, smem, tn * BN, tm * BM);
    }
    if (elected) tma_store_wait_read<0>();
  }
}
