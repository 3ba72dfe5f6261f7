// Level 4 - TMA.
//
// Level 3's tiles, but one thread asks the Tensor Memory Accelerator for each K tile instead of 128
// threads copying it: the copy engine writes A and B into 128B-swizzled shared memory (the layout
// the wgmma descriptors read) and completes the bytes on a "full" mbarrier that the issuer armed
// with expect_tx. The output goes back the same way: registers -> swizzled staging -> TMA store,
// drained with commit_group / wait_group. Tails need no masks: loads zero-fill outside the tensor,
// stores clip. One stage: the next load starts only after every warp finished the last one.
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

extern "C" __global__ void __launch_bounds__(128, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const bool issuer = threadIdx.x == 0;

  if (issuer) {
    tma_prefetch_descriptor(&map_a);
    tma_prefetch_descriptor(&map_b);
    tma_prefetch_descriptor(&map_c);
    mbarrier_init(smem.full(0), 1);  // one arrival: the issuer's arrive.expect_tx
    fence_barrier_init();
  }
  __syncthreads();

  float d[2][BN / 2] = {};
  const int k_tiles = (K + BK - 1) / BK;
  for (int kt = 0; kt < k_tiles; ++kt) {
    if (issuer) {
      mbarrier_arrive_expect_tx(smem.full(0), GL_EXPECT_TX_BYTES);
      tma_load_2d(smem.a(0), &map_a, smem.full(0), kt * BK, m0);
      tma_load_2d(smem.b(0), &map_b, smem.full(0), kt * BK, n0);
    }
    mbarrier_wait(smem.full(0), kt & 1);  // phase kt of the one barrier

    wgmma_fence();
    mma_k_tile<BN>(d[0], smem.a(0), smem.b(0), 1);
    mma_k_tile<BN>(d[1], smem.a(0) + 64 * BK, smem.b(0), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(d[0]);
    fence_accumulators(d[1]);
    __syncthreads();  // the stage is free only when every warp's wgmma has read it
  }

  stage_fragment_sw128<BN>(smem.c(), d[0], 0, GL_SMEM_C_PANEL_BYTES);
  stage_fragment_sw128<BN>(smem.c(), d[1], 64, GL_SMEM_C_PANEL_BYTES);
  fence_proxy_async_smem();  // generic-proxy writes -> visible to the copy engine
  __syncthreads();
  if (issuer) {
    store_output_tile(&map_c, smem, n0, m0);
    tma_store_wait_read<0>();  // shared memory must outlive the engine's reads of it
  }
}
