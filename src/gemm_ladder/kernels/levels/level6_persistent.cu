// Level 6 - a persistent kernel with a tile scheduler.
//
// Level 5's ring, but the grid is only as large as the GPU holds at once; each CTA loops over output
// tiles in the scheduler's grouped order. The ring's load and consume counters run on across
// tiles, so stage = count % STAGES and phase = (count / STAGES) & 1 stay right without re-arming
// any barrier, and the issuer's refills run straight into the next tile's first K tiles while this
// tile's epilogue is still being written. The staging buffer is reused per tile: the issuer waits
// until the previous tile's TMA store has read it (wait_group.read 0) before anyone rewrites it.
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

// The issuer's walk over (tile, K tile) pairs of this CTA, one load per call.
struct Producer {
  const SmemMap& smem;
  const CUtensorMap *map_a, *map_b;
  const TileScheduler& sched;
  int k_tiles, tile, kt = 0;
  RingPosition pos{0};
  __device__ __forceinline__ bool done() const { return tile >= sched.total; }
  __device__ __forceinline__ void load_next() {
    if (done()) return;
    int tm, tn;
    sched.coords(tile, tm, tn);
    produce_stage(smem, map_a, map_b, pos, kt, tm, tn);
    pos.advance();
    if (++kt == k_tiles) kt = 0, tile += gridDim.x;
  }
};

extern "C" __global__ void __launch_bounds__(128, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const bool issuer = threadIdx.x == 0;
  const TileScheduler sched(M, N, BM, BN, 1);
  const int k_tiles = (K + BK - 1) / BK;
  Producer producer{smem, &map_a, &map_b, sched, k_tiles, static_cast<int>(blockIdx.x)};

  if (issuer) {
    init_ring(smem, &map_a, &map_b, &map_c);
    for (int j = 0; j < STAGES; ++j) producer.load_next();  // prologue (stops by itself when out of work)
  }
  __syncthreads();

  RingPosition pos{0};  // K tiles consumed by this CTA over all its tiles: carries stage and phase
  for (int tile = blockIdx.x; tile < sched.total; tile += gridDim.x) {
    int tm, tn;
    sched.coords(tile, tm, tn);
    float d[2][BN / 2];
    for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
      const int s = pos.stage();
      consumer_wait(smem, pos);
      wgmma_fence();
      mma_k_tile<BN>(d[0], smem.a(s), smem.b(s), kt > 0);  // scale_d = 0 on the first K tile: starts at zero
      mma_k_tile<BN>(d[1], smem.a(s) + 64 * BK, smem.b(s), kt > 0);
      wgmma_commit();
      wgmma_wait<1>();
      if (kt > 0 && issuer) {
        consumer_release(smem, pos.previous_stage());
        producer.load_next();
      }
    }
    wgmma_wait<0>();
    fence_accumulators(d[0]);
    fence_accumulators(d[1]);
    if (issuer) {
      consumer_release(smem, pos.previous_stage());  // release the tile's last stage
      producer.load_next();                               // ... and start on the next tile
      tma_store_wait_read<0>();                           // the previous tile's store has read the staging
    }
    __syncthreads();
    stage_fragment_sw128<BN>(smem.c(), d[0], 0, GL_SMEM_C_PANEL_BYTES);
    stage_fragment_sw128<BN>(smem.c(), d[1], 64, GL_SMEM_C_PANEL_BYTES);
    fence_proxy_async_smem();
    __syncthreads();
    if (issuer) store_output_tile(&map_c, smem, tn * BN, tm * BM);
  }
  if (issuer) tma_store_wait_read<0>();
}
