// Level 1 - one correct tile.
//
// One CTA of one warpgroup (128 threads) computes a single 128 x 128 output tile with K inside one
// 64-wide K tile. Every address space is explicit:
//   global a (M x K), b (N x K), row-major  --threads, 16-byte chunks-->  shared sA, sB in the
//   128-byte-swizzled K-major layout  --wgmma descriptors-->  tensor cores  -->  fp32 accumulators
//   in registers (two 64-row halves)  --masked stores-->  global c (M x N).
// Domain: M <= 128, N <= 128, 1 <= K <= 64; the copy writes zeros past M, N and K.
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

  copy_tile_sw128<BM, 128>(sA, A, 0, M, 0, K, vec_ok);
  copy_tile_sw128<BN, 128>(sB, B, 0, N, 0, K, vec_ok);
  fence_proxy_async_smem();  // the tensor cores read through the async proxy
  __syncthreads();

  float d[2][BN / 2] = {};  // rows 0-63 and 64-127 of the tile
  wgmma_fence();
  mma_k_tile<BN>(d[0], sA, sB, 1);
  mma_k_tile<BN>(d[1], sA + 64 * BK, sB, 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(d[0]);
  fence_accumulators(d[1]);

  store_fragment_masked<BN>(C, d[0], 0, 0, M, N);
  store_fragment_masked<BN>(C, d[1], 64, 0, M, N);
}
