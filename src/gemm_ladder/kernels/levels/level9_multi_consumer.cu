// Level 9 - several consumer warpgroups on one larger tile (cooperative).
//
// Level 8's cluster and multicast, with a 128 x 256 tile shared by GL_CONSUMERS consumer
// warpgroups: consumer c owns rows [64c, 64c + 64) of the tile and all 256 columns (one
// m64n256k16 wgmma per k16 step, 128 fp32 accumulators per thread). Both read the same B stage, so
// each staged byte of B feeds twice the math of level 8, and the stage is released only when every
// consumer of both CTAs has arrived (GL_EMPTY_ARRIVALS = consumers x cluster).
//
// Epilogue: each consumer stores its 64 x 256 fragment by itself, one 64 x 64 panel at a time,
// through its own ring of GL_C_RING panel buffers (8 KiB each) and its own store issuer (its
// thread 0). A buffer is refilled once wait_group.read GL_C_RING - 1 says the store that last read
// it is done, so a consumer never waits for its latest store, nor for the other consumer. The 32 KiB
// this staging takes instead of a whole-tile 64 KiB one pays for a fourth 48 KiB stage.
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
static_assert(GL_C_RING >= 1 && GL_C_PANELS % GL_C_RING == 0, "level 9: a ring of panel buffers per consumer");
constexpr int kFirstStoreBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads (0 is __syncthreads)

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
    const bool elected = thread_in_warpgroup() == 0;  // releases stages and issues this consumer's stores
    uint8_t* const ring = smem.c() + consumer * GL_C_RING * GL_SMEM_C_PANEL_BYTES;
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
#pragma unroll
      for (int p = 0; p < GL_C_PANELS; ++p) {
        uint8_t* const buf = ring + (p % GL_C_RING) * GL_SMEM_C_PANEL_BYTES;
        if (elected) tma_store_wait_read<GL_C_RING - 1>();  // the store that last read buf is done
        named_barrier_sync(kFirstStoreBarrier + consumer, 128);
        stage_panel_sw128<BN>(buf, d, p);
        fence_proxy_async_smem();
        named_barrier_sync(kFirstStoreBarrier + consumer, 128);
        if (elected) {
          tma_store_2d(&map_c, buf, tn * BN + 64 * p, tm * BM + 64 * consumer);
          tma_store_commit();
        }
      }
    }
    if (elected) tma_store_wait_read<0>();
  }
  cluster_sync();
}
