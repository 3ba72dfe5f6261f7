// Level 8 - a 2-CTA cluster with a multicast operand.
//
// Level 7's roles, with two CTAs per cluster stacked along M: they compute tiles (2u, n) and
// (2u + 1, n), which need the same B tile. Each CTA's producer loads its own A tile and half of the
// shared B tile, multicast into the same stage of both CTAs, so B crosses L2 -> SM once per pair.
// The full barrier of each CTA still expects the whole A + B stage (its A, its half of B and the
// peer's half). A stage may be refilled only when the consumers of BOTH CTAs are done with it,
// because the peer's producer writes into it too: the empty barrier counts both CTAs' consumers,
// and each consumer arrives on its own CTA's barrier and, remotely, on the peer's. Clusters sync
// after barrier init (no remote arrive or multicast before the peer's barriers exist) and before
// exit (no CTA leaves while the peer may still write to its shared memory). A tile count that is
// odd in M is fine: the second CTA of the last pair loads zeros (fully out of bounds) and its store
// is clipped away, while it still loads its half of B for its partner.
#include "gemm_ladder/cluster_ring.cuh"
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

static_assert(GL_PRODUCER_WG == 1 && GL_CONSUMERS == 1 && GL_CLUSTER == 2, "level 8: 2-CTA cluster, one consumer");
constexpr int kStoreIssuer = 128;

extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, BN, GL_CLUSTER);  // one unit = a pair of M tiles
  const int k_tiles = (K + BK - 1) / BK;
  const int rank = cluster_cta_rank();
  const int first_unit = blockIdx.x / GL_CLUSTER, unit_stride = gridDim.x / GL_CLUSTER;

  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_c);
  cluster_sync();

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0)  // every K tile of every tile of this CTA, running ahead of the consumer
      produce_units(smem, &map_a, &map_b, sched, k_tiles, rank, first_unit, unit_stride, sched.total);
  } else {
    setmaxnreg_inc<232>();
    const bool elected = threadIdx.x == kStoreIssuer;
    RingPosition pos{0};
    for (int unit = first_unit; unit < sched.total; unit += unit_stride) {
      int um, tn;
      sched.coords(unit, um, tn);
      const int tm = um * GL_CLUSTER + rank;
      float d[2][BN / 2];
      for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
        const int s = pos.stage();
        consumer_wait(smem, pos);
        wgmma_fence();
        mma_k_tile<BN>(d[0], smem.a(s), smem.b(s), kt > 0);
        mma_k_tile<BN>(d[1], smem.a(s) + 64 * BK, smem.b(s), kt > 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0 && elected)
          release_stage_to_cluster(smem, pos.previous_stage());
      }
      wgmma_wait<0>();
      fence_accumulators(d[0]);
      fence_accumulators(d[1]);
      if (elected) {
        release_stage_to_cluster(smem, pos.previous_stage());
        tma_store_wait_read<0>();
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
  cluster_sync();
}
