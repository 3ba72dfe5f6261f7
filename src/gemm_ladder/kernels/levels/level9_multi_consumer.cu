// Level 9 - several consumer warpgroups on one larger tile (cooperative).
//
// Level 8's cluster and multicast, with a 128 x 256 tile shared by GL_CONSUMERS consumer
// warpgroups: consumer c owns rows [64c, 64c + 64) of the tile and all 256 columns (one
// m64n256k16 wgmma per k16 step, 128 fp32 accumulators per thread). Both read the same B stage, so
// each staged byte of B feeds twice the math of level 8, and the stage is released only when every
// consumer of both CTAs has arrived (GL_EMPTY_ARRIVALS = consumers x cluster). The consumers write
// disjoint rows of the staging buffer (no write conflicts) and meet at a named barrier before one
// thread issues the TMA stores. That store drains while the next tile's main loop runs: its
// wait_group.read comes only before the staging is rewritten, one tile later, and the producer has
// long since started loading that next tile.
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

static_assert(GL_PRODUCER_WG == 1 && BM == 64 * GL_CONSUMERS, "level 9: each consumer owns 64 rows of the tile");
constexpr int kConsumerThreads = 128 * GL_CONSUMERS;
constexpr int kStoreIssuer = 128;  // thread 0 of consumer 0

extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, BN, GL_CLUSTER);
  const int k_tiles = (K + BK - 1) / BK;
  const int rank = cluster_cta_rank();
  const int first_unit = blockIdx.x / GL_CLUSTER, unit_stride = gridDim.x / GL_CLUSTER;

  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_c);
  cluster_sync();

  if (warpgroup_index() == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int count = 0;
      for (int unit = first_unit; unit < sched.total; unit += unit_stride) {
        int um, tn;
        sched.coords(unit, um, tn);
        const int tm = um * GL_CLUSTER + rank;
        for (int kt = 0; kt < k_tiles; ++kt, ++count) {
          const int s = count % STAGES;
          mbarrier_wait(smem.empty(s), ((count / STAGES) & 1) ^ 1);
          mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);
          tma_load_2d(smem.a(s), &map_a, smem.full(s), kt * BK, tm * BM);
          tma_load_2d_multicast(smem.b(s) + rank * GL_B_BOX_ROWS * BK, &map_b, smem.full(s), kt * BK,
                                tn * BN + rank * GL_B_BOX_ROWS, (1 << GL_CLUSTER) - 1);
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // one release per consumer warpgroup
    const bool store_issuer = threadIdx.x == kStoreIssuer;
    int count = 0;
    for (int unit = first_unit; unit < sched.total; unit += unit_stride) {
      int um, tn;
      sched.coords(unit, um, tn);
      const int tm = um * GL_CLUSTER + rank;
      float d[BN / 2];
      for (int kt = 0; kt < k_tiles; ++kt, ++count) {
        const int s = count % STAGES;
        mbarrier_wait(smem.full(s), (count / STAGES) & 1);
        wgmma_fence();
        mma_k_tile<BN>(d, smem.a(s) + consumer * 64 * BK, smem.b(s), kt > 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0 && elected)
          for (int r = 0; r < GL_CLUSTER; ++r) mbarrier_arrive_cluster(smem.empty((count - 1) % STAGES), r);
      }
      wgmma_wait<0>();
      fence_accumulators(d);
      if (elected)
        for (int r = 0; r < GL_CLUSTER; ++r) mbarrier_arrive_cluster(smem.empty((count - 1) % STAGES), r);
      if (store_issuer) tma_store_wait_read<0>();
      named_barrier_sync(1, kConsumerThreads);
      stage_fragment_sw128<BN>(smem.c(), d, consumer * 64, GL_SMEM_C_PANEL_BYTES);
      fence_proxy_async_smem();
      named_barrier_sync(1, kConsumerThreads);
      if (store_issuer) store_output_tile(&map_c, smem, tn * BN, tm * BM);
    }
    if (store_issuer) tma_store_wait_read<0>();
  }
  cluster_sync();
}
