// Level 5 - a multi-stage pipeline.
//
// Level 4 with a ring of STAGES shared-memory stages, each with a "full" barrier (the issuer's
// expect_tx + the copy engine's bytes) and an "empty" barrier (one arrival per consumer warpgroup
// once its wgmma no longer reads the stage). Load j goes to stage j % STAGES; its barriers are in
// phase j / STAGES, so consumers wait full with parity (j / STAGES) & 1 and the issuer waits empty
// with the opposite parity (a fresh barrier passes parity 1 at once: the ring starts empty).
//   prologue:     the issuer fills min(STAGES, k_tiles) stages;
//   steady state: wait full[kt], issue wgmma for kt, retire kt-1 (wgmma_wait<1>), release its
//                 stage, and refill that stage with load kt-1+STAGES;
//   drain:        no loads left; retire the last wgmma; epilogue as level 4, its staging laid over the
//                 now idle stages so that more CTAs fit on an SM.
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

extern "C" __global__ void __launch_bounds__(128, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const bool issuer = threadIdx.x == 0;
  // The issuer's load j: K tile j into stage j % STAGES (one tile per CTA: the ring position is j).
  auto load = [&](int j) { produce_stage(smem, &map_a, &map_b, RingPosition{j}, j, blockIdx.y, blockIdx.x); };

  if (issuer) init_ring(smem, &map_a, &map_b, &map_c);
  __syncthreads();

  const int k_tiles = (K + BK - 1) / BK;
  if (issuer)
    for (int j = 0; j < min(STAGES, k_tiles); ++j) load(j);  // prologue

  float d[2][BN / 2] = {};
  for (int kt = 0; kt < k_tiles; ++kt) {
    const RingPosition pos{kt};
    const int s = pos.stage();
    consumer_wait(smem, pos);
    wgmma_fence();
    mma_k_tile<BN>(d[0], smem.a(s), smem.b(s), 1);
    mma_k_tile<BN>(d[1], smem.a(s) + 64 * BK, smem.b(s), 1);
    wgmma_commit();
    wgmma_wait<1>();  // k tile kt-1 has retired; kt keeps the tensor cores busy
    if (kt > 0 && issuer) {
      consumer_release(smem, pos.previous_stage());
      if (kt - 1 + STAGES < k_tiles) load(kt - 1 + STAGES);
    }
  }
  wgmma_wait<0>();  // drain
  fence_accumulators(d[0]);
  fence_accumulators(d[1]);
  __syncthreads();  // the staging overlays the stages (plan: c_aliases_stages): every warp must be done reading

  stage_fragment_sw128<BN>(smem.c(), d[0], 0, GL_SMEM_C_PANEL_BYTES);
  stage_fragment_sw128<BN>(smem.c(), d[1], 64, GL_SMEM_C_PANEL_BYTES);
  fence_proxy_async_smem();
  __syncthreads();
  if (issuer) {
    store_output_tile(&map_c, smem, n0, m0);
    tma_store_wait_read<0>();
  }
}
