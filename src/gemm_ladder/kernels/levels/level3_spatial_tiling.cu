// Level 3 - spatial tiling.
//
// Level 2's K loop, now one CTA per 128 x 128 output tile: blockIdx.x walks N tiles, blockIdx.y
// walks M tiles, so the grid covers the whole output. Tails in M and N are handled by the copy's
// zero fill (rows past M or N contribute zeros) and by the store's masks (nothing is written
// outside c). Domain: any M, N >= 1, any K >= 1.
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/thread_copy.cuh"

using namespace gl;
constexpr int BM = 128, BN = 128, BK = 64;

extern "C" __global__ void __launch_bounds__(128, 1)
    gemm_kernel(const elem_t* __restrict__ A, const elem_t* __restrict__ B, elem_t* __restrict__ C, int M, int N, int K,
                int vec_ok) {
  __shared__ __align__(1024) elem_t sA[BM * BK];
  __shared__ __align__(1024) elem_t sB[BN * BK];
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

  float d[2][BN / 2] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    copy_tile_sw128<BM, 128>(sA, A, m0, M, k0, K, vec_ok);
    copy_tile_sw128<BN, 128>(sB, B, n0, N, k0, K, vec_ok);
    fence_proxy_async_smem();
    __syncthreads();

    wgmma_fence();
    mma_k_tile<BN>(d[0], sA, sB, 1);
    mma_k_tile<BN>(d[1], sA + 64 * BK, sB, 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(d[0]);
    fence_accumulators(d[1]);
    __syncthreads();
  }

  store_fragment_masked<BN>(C, d[0], m0, n0, M, N);
  store_fragment_masked<BN>(C, d[1], m0 + 64, n0, M, N);
}
