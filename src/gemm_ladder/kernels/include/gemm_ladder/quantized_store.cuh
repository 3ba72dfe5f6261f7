// The 1 x 128 quantized output: a consumer warpgroup's finished 64 x BN fragment (fp32, BN a multiple of
// 128) stored as e4m3 values with one fp32 scale per row and 128 columns, what
// gemm_ladder.quantize_fp8(x, (1, 128)) computes from the fp32 result, so that the next fp8 GEMM reads
// both as they are. Used by the fp8 kernel's quantized output (sm90_fp8_gemm.cu, GL_FP8_OUT = 3) and by
// the 16-bit kernel's e4m3-output build (sm90_gemm.cu, GL_OUT_E4M3).
//
// Fragment layout (PTX ISA, wgmma D; epilogue.cuh): thread t (warp w, lane l) holds
// d[4j + 2i + c] = D[16w + l/4 + 8i][8j + 2(l%4) + c]. A row's 128 columns of scale block b (j in
// [16b, 16b + 16)) are held by the four lanes of a quad, 32 values each: the block's amax is each lane's
// own maximum, then two shuffles (lane ^ 1, lane ^ 2). scale = max(amax / 448, FLT_MIN) (448: e4m3's
// largest finite value, OCP 8-bit floating point specification, E4M3; the floor keeps an all-zero block's
// scale a positive normal number, as quantize_fp8 does), values = x / scale by IEEE division (__fdiv_rn,
// whatever the fast-math flags), rounded to nearest and saturated to +-448 (cvt with .satfinite: PTX ISA
// "cvt", e4m3x2). fmaxf ignores NaN: a NaN output leaves its block's scale finite and is stored as an
// e4m3 NaN.
#pragma once
#include <cuda_fp8.h>

#include "gemm_ladder/ptx/common.cuh"

namespace gl {

constexpr float kE4m3Max = 448.0f;
constexpr float kFloatMinNormal = 1.17549435e-38f;  // FLT_MIN, torch.finfo(torch.float32).tiny

// Two e4m3 values, rounded to nearest and saturated to +-448 (NaN stays NaN), at (row, col) and (row, col + 1)
// of C (pitch ldc); nothing at or past M or N. `pairs`: one 2-byte store where col + 1 < N (every even
// column of C is 2-byte aligned: an even pitch and base), else two byte stores.
__device__ __forceinline__ void store_pair_e4m3(__nv_fp8_e4m3* __restrict__ C, long long ldc, int row, int col, int M,
                                                int N, float x0, float x1, bool pairs) {
  if (row >= M || col >= N) return;
  const __nv_fp8x2_storage_t v = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
  uint8_t* p = reinterpret_cast<uint8_t*>(C + static_cast<long long>(row) * ldc + col);
  if (pairs && col + 1 < N) {
    *reinterpret_cast<__nv_fp8x2_storage_t*>(p) = v;
    return;
  }
  p[0] = static_cast<uint8_t>(v & 0xFF);
  if (col + 1 < N) p[1] = static_cast<uint8_t>(v >> 8);
}

// Quantize and store scale block b (columns [128 b, 128 b + 128) of the fragment) of a fragment `d` whose
// columns at or past N are already zero (they take no part in a block's amax). r0: this thread's first row
// of the output (its second is r0 + 8); col0: the fragment's first column, a multiple of 128, and
// block0 = col0 / 128, its first scale block. The scale of row r goes to
// scale_out[(block0 + b) * ld_scale_out + r], rows < M only.
template <int BN>
__device__ __forceinline__ void store_quantized_block(__nv_fp8_e4m3* __restrict__ C, long long ldc,
                                                      float* __restrict__ scale_out, long long ld_scale_out,
                                                      const float (&d)[BN / 2], int b, int r0, int col0, int block0,
                                                      int M, int N, bool pairs) {
  static_assert(BN % 128 == 0, "a 1 x 128 scale block is whole columns of the fragment");
  const int lane = threadIdx.x % 32;
  float amax[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 16 * b; j < 16 * b + 16; ++j) {
    amax[0] = fmaxf(amax[0], fmaxf(fabsf(d[4 * j + 0]), fabsf(d[4 * j + 1])));
    amax[1] = fmaxf(amax[1], fmaxf(fabsf(d[4 * j + 2]), fabsf(d[4 * j + 3])));
  }
  float scale[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    amax[i] = fmaxf(amax[i], __shfl_xor_sync(0xffffffffu, amax[i], 1));
    amax[i] = fmaxf(amax[i], __shfl_xor_sync(0xffffffffu, amax[i], 2));
    scale[i] = fmaxf(__fdiv_rn(amax[i], kE4m3Max), kFloatMinNormal);
    if (lane % 4 == 0 && r0 + 8 * i < M) scale_out[(block0 + b) * ld_scale_out + r0 + 8 * i] = scale[i];
  }
#pragma unroll
  for (int j = 16 * b; j < 16 * b + 16; ++j) {
    const int col = col0 + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 2; ++i)
      store_pair_e4m3(C, ldc, r0 + 8 * i, col, M, N, __fdiv_rn(d[4 * j + 2 * i], scale[i]),
                      __fdiv_rn(d[4 * j + 2 * i + 1], scale[i]), pairs);
  }
}

// Every scale block of the fragment (store_quantized_block's arguments).
template <int BN>
__device__ __forceinline__ void store_quantized_1x128(__nv_fp8_e4m3* __restrict__ C, long long ldc,
                                                      float* __restrict__ scale_out, long long ld_scale_out,
                                                      const float (&d)[BN / 2], int r0, int col0, int block0, int M,
                                                      int N, bool pairs) {
#pragma unroll
  for (int b = 0; b < BN / 128; ++b)
    store_quantized_block<BN>(C, ldc, scale_out, ld_scale_out, d, b, r0, col0, block0, M, N, pairs);
}

// The 16-bit kernel's form: per scale block, `pair_op(x0, x1, r, c)` (its fused epilogue, or nothing) on
// each pair of the block at rows row0 + 16w + l/4 + 8i, columns col0 + 8j + 2(l%4) of a rows x cols output,
// in place, the columns at or past `cols` zeroed; then the block is quantized and stored. Block by block,
// so that only one block's epilogue inputs are live (the whole fragment's at BN 256 spilled). Every lane of
// the warpgroup must call it (the amax shuffles); rows past `rows` are computed and not stored.
template <int BN, typename PairOp>
__device__ __forceinline__ void store_fragment_quantized(__nv_fp8_e4m3* __restrict__ C, long long ldc,
                                                         float* __restrict__ scale_out, long long ld_scale_out,
                                                         float (&d)[BN / 2], int row0, int col0, int rows, int cols,
                                                         PairOp&& pair_op) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int r0 = row0 + 16 * warp + lane / 4;
  const bool pairs = ldc % 2 == 0 && reinterpret_cast<uintptr_t>(C) % 2 == 0;
#pragma unroll
  for (int b = 0; b < BN / 128; ++b) {
    // A block that starts at or past the output's last column has no scale to write (the scales hold
    // ceil(cols / 128) blocks; the last 256-wide tile's second block may lie wholly past them). The same
    // for every lane of the warpgroup, so no shuffle below is left half-taken.
    if (col0 + 128 * b >= cols) break;
#pragma unroll
    for (int j = 16 * b; j < 16 * b + 16; ++j) {
      const int col = col0 + 8 * j + 2 * (lane % 4);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float x0 = d[4 * j + 2 * i], x1 = d[4 * j + 2 * i + 1];
        pair_op(x0, x1, r0 + 8 * i, col);
        d[4 * j + 2 * i] = col < cols ? x0 : 0.0f;
        d[4 * j + 2 * i + 1] = col + 1 < cols ? x1 : 0.0f;
      }
    }
    store_quantized_block<BN>(C, ldc, scale_out, ld_scale_out, d, b, r0, col0, col0 / 128, rows, cols, pairs);
  }
}

}  // namespace gl
