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
// scale a positive normal number, as quantize_fp8 does), values = x / scale rounded as IEEE division
// (ScaleDivisor, whatever the fast-math flags), rounded to nearest and saturated to +-448 (cvt with
// .satfinite: PTX ISA "cvt", e4m3x2). fmaxf ignores NaN: a NaN output leaves its block's scale finite and
// is stored as an e4m3 NaN.
#pragma once
#include <cuda_fp8.h>

#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/ieee.cuh"  // mul_rn, fma_rn, rcp_rn: subnormals kept under --use_fast_math

namespace gl {

constexpr float kE4m3Max = 448.0f;
constexpr float kFloatMinNormal = 1.17549435e-38f;  // FLT_MIN, torch.finfo(torch.float32).tiny

// x / s rounded to nearest, as __fdiv_rn(x, s), for the 32 values a lane divides by one scale, with no
// branch and no slow path. Per scale: a power of two p that brings s' = s p into [2^-90, 2^100] (p = 1 but
// for a block of subnormal or huge amax) and y = RN(1 / s'). Per value: x' = x p (exact, subnormals kept:
// ptx/ieee.cuh; a product that underflows has a quotient e4m3 rounds to zero), q0 = RN(x' y), then two
// residual steps by FMA, each q <- RN(q + RN(x' - s' q) y). The first leaves q within one ulp of x / s;
// from there the second gives RN(x / s) (Markstein's theorem: y within half an ulp of 1 / s', q within
// one ulp, the residual exact unless it underflows, which in this range needs |x / s| < 2^-11, a
// quotient e4m3 rounds to zero whatever its last bits; Muller et al., Handbook of Floating-Point
// Arithmetic, division by Newton-Raphson iteration with an FMA). A zero quotient takes q0's sign (x's,
// as y > 0), as division gives -0 for -0; an infinite scale (a block holding an Inf) gives q0 = x * 0:
// zero, or NaN for an Inf, as division does.
struct ScaleDivisor {
  float p, s, y;
  bool inf;
  __device__ __forceinline__ explicit ScaleDivisor(float scale)
      : p(scale < 0x1p-90f ? 0x1p100f : scale > 0x1p100f ? 0x1p-100f : 1.0f),
        s(mul_rn(scale, p)),
        y(rcp_rn(s)),
        inf(isinf(scale)) {}
  __device__ __forceinline__ float operator()(float x) const {
    x = mul_rn(x, p);
    const float q0 = mul_rn(x, y);
    const float q1 = fma_rn(fma_rn(-s, q0, x), y, q0);
    const float q2 = fma_rn(fma_rn(-s, q1, x), y, q1);
    return (q2 == 0.0f || inf) ? q0 : q2;
  }
};

// Two e4m3 values (x0 at the lower column), rounded to nearest and saturated to +-448 (NaN stays NaN: cvt
// with .satfinite, PTX ISA "cvt", e4m3x2), as the 2 bytes of a store's low address first.
__device__ __forceinline__ uint32_t e4m3_pair(float x0, float x1) {
  return __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
}

// A quad's 4 x 4 transpose of 2-byte pairs, so that a row's 32 bytes are stored as one 8-byte store per
// lane instead of four 2-byte ones (a sector whole in one instruction). On entry lane q of the quad holds
// a[m] = the pair at columns 8m + 2q, +1 of a 32-column group (m = 0..3: the fragment's j); it returns the
// 8 bytes at columns 8q .. 8q + 7: the pairs of lanes 0..3 for m = q, lane 0's first. Two shuffles: pairs
// of words across lanes q ^ 2, then pairs of halves across q ^ 1. Every lane of the warp takes part.
__device__ __forceinline__ uint2 quad_transpose_pairs(const uint32_t (&a)[4]) {
  const int q = threadIdx.x % 4;
  const uint32_t w0 = a[0] | (a[1] << 16), w1 = a[2] | (a[3] << 16);  // pairs m = 0, 1 and 2, 3
  const bool low = q < 2;
  const uint32_t got = __shfl_xor_sync(0xffffffffu, low ? w1 : w0, 2);
  // Now u0 holds lane (q % 2)'s pairs m = q & 2, (q & 2) + 1 and u1 lane (q % 2) + 2's (low half first).
  const uint32_t u0 = low ? w0 : got, u1 = low ? got : w1;
  const bool even = q % 2 == 0;
  // An even lane keeps the low halves (its m) and sends the high ones; an odd lane the reverse.
  const uint32_t r = __shfl_xor_sync(0xffffffffu, even ? __byte_perm(u0, u1, 0x7632) : __byte_perm(u0, u1, 0x5410), 1);
  return even ? make_uint2(__byte_perm(u0, r, 0x5410), __byte_perm(u1, r, 0x7610))
              : make_uint2(__byte_perm(r, u0, 0x7610), __byte_perm(r, u1, 0x7632));
}

// The first `count` (1..8) of the bytes v, one at a time: store_e4m3x8's rare case, out of line so that
// its loop is not copied into every store site of the unrolled epilogue.
__device__ __noinline__ void store_bytes(uint8_t* p, uint2 v, int count) {
  for (int c = 0; c < count; ++c) p[c] = static_cast<uint8_t>((c < 4 ? v.x : v.y) >> (8 * (c % 4)));
}

// The 8 bytes `v` at (row, col) of C (pitch ldc), col a multiple of 8: one store where all 8 columns are
// before N and `wide` (C's base and pitch multiples of 8 bytes), else byte stores of the columns before N;
// nothing at or past M.
__device__ __forceinline__ void store_e4m3x8(__nv_fp8_e4m3* __restrict__ C, long long ldc, int row, int col, int M,
                                             int N, uint2 v, bool wide) {
  if (row >= M || col >= N) return;
  uint8_t* p = reinterpret_cast<uint8_t*>(C + static_cast<long long>(row) * ldc + col);
  if (wide && col + 8 <= N)
    *reinterpret_cast<uint2*>(p) = v;
  else
    store_bytes(p, v, min(N - col, 8));
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
                                                      int M, int N) {
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
  const ScaleDivisor div[2] = {ScaleDivisor(scale[0]), ScaleDivisor(scale[1])};
  const bool wide = ldc % 8 == 0 && reinterpret_cast<uintptr_t>(C) % 8 == 0;
#pragma unroll
  for (int g = 0; g < 4; ++g) {  // 32-column groups: fragment j = 16 b + 4 g + m
    const int j0 = 16 * b + 4 * g;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint32_t pair[4];
#pragma unroll
      for (int m = 0; m < 4; ++m)
        pair[m] = e4m3_pair(div[i](d[4 * (j0 + m) + 2 * i]), div[i](d[4 * (j0 + m) + 2 * i + 1]));
      store_e4m3x8(C, ldc, r0 + 8 * i, col0 + 8 * (j0 + lane % 4), M, N, quad_transpose_pairs(pair), wide);
    }
  }
}

// Every scale block of the fragment (store_quantized_block's arguments).
template <int BN>
__device__ __forceinline__ void store_quantized_1x128(__nv_fp8_e4m3* __restrict__ C, long long ldc,
                                                      float* __restrict__ scale_out, long long ld_scale_out,
                                                      const float (&d)[BN / 2], int r0, int col0, int block0, int M,
                                                      int N) {
#pragma unroll
  for (int b = 0; b < BN / 128; ++b)
    store_quantized_block<BN>(C, ldc, scale_out, ld_scale_out, d, b, r0, col0, block0, M, N);
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
    store_quantized_block<BN>(C, ldc, scale_out, ld_scale_out, d, b, r0, col0, col0 / 128, rows, cols);
  }
}

}  // namespace gl
