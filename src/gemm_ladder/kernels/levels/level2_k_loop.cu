// Level 2 - the K loop.
//
// Level 1's tile, now accumulated over every 64-wide K tile into the same registers: the
// accumulator starts at zero, each K tile adds its partial product, and the last (partial) K tile
// is zero-filled by the copy so K need not be a multiple of 64. A second barrier per iteration
// keeps the next copy from overwriting shared memory that a warp's wgmma may still be reading.
// Domain: M <= 128, N <= 128, any K >= 1.
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

  float d[2][BN / 2] = {};  // the initial accumulator: zero
  for (int k0 = 0; k0 < K; k0 += BK) {
    copy_tile_sw128<BM, 128>(sA, A, 0, M, k0, K, vec_ok);
    copy_tile_sw128<BN, 128>(sB, B, 0, N, k0, K, vec_ok);
    fence_proxy_async_smem();
    __syncthreads();

    wgmma_fence();
    mma_k_tile<BN>(d[0], sA, sB, 1);
    mma_k_tile<BN>(d[1], sA + 64 * BK, sB, 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(d[0]);
    fence_accumulators(d[1]);
    __syncthreads();  // every warp's reads of sA/sB are done before the next copy
  }

  store_fragment_masked<BN>(C, d[0], 0, 0, M, N);
  store_fragment_masked<BN>(C, d[1], 64, 0, M, N);
}
