// Fused epilogues: elementwise math on the fp32 accumulators, applied in registers before the one
// rounding to the output dtype, so a bias, an activation or a residual costs no extra pass over C.
//
// A fused epilogue is compiled into the library kernels as generated code (library/epilogue.py):
//   GL_EPILOGUE          defined: the kernel takes one more argument, `const EpilogueParams epi`;
//   GL_EPI_SWAP          1 when the kernel's output is the transpose of the caller's (the dispatcher's
//                        D^T = B A^T orientation): the kernel's (row, column) is the output's (column, row);
//   gl_epilogue_pair     the generated function: two accumulators at output (row, col) and the next
//                        element along a row or a column (kAlongRows), the output's extents for the
//                        masks, and the parameters; it loads the declared inputs and applies the
//                        user's function to both.
// The kernels call epilogue_pair() (fused_epilogue_pair.cuh, included after the generated code) with
// their own coordinates; it maps them to the output's.
#pragma once
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

// Inputs of one epilogue (vectors and tiles by pointer and element strides in the OUTPUT's coordinates,
// scalars as fp32), one kernel argument in parameter space: every thread reads it through the constant
// bank, no register holds it. library/epilogue.py's EpilogueParams is the same layout (ctypes).
constexpr int kEpiMaxInputs = 8;
struct EpilogueParams {
  const void* ptr[kEpiMaxInputs];
  long long stride_row[kEpiMaxInputs];
  long long stride_col[kEpiMaxInputs];
  float scalar[kEpiMaxInputs];
  int pair_ok;  // bit i: tile i's two elements of a pair are adjacent and aligned: one load for both
  int pad_;
};

// Input element types, compile-time per input (the generated code names them).
enum EpiDtype { kEpiBf16 = 0, kEpiFp16 = 1, kEpiFp32 = 2 };

template <int DT>
__device__ __forceinline__ float epi_load(const void* base, long long offset) {
  if constexpr (DT == kEpiBf16) {
    return __bfloat162float(__ldg(static_cast<const __nv_bfloat16*>(base) + offset));
  } else if constexpr (DT == kEpiFp16) {
    return __half2float(__ldg(static_cast<const __half*>(base) + offset));
  } else {
    return __ldg(static_cast<const float*>(base) + offset);
  }
}

// Two elements at `offset` and `offset + step`, each only where it is inside the output (else 0).
// `pair` (the host checked: step 1, both aligned to the pair's size): one 4- or 8-byte load.
template <int DT>
__device__ __forceinline__ void epi_load_pair(const void* base, long long offset, long long step, bool in0, bool in1,
                                              bool pair, float& v0, float& v1) {
  if (pair && in0 && in1) {
    if constexpr (DT == kEpiBf16) {
      const float2 f = __bfloat1622float2(__ldg(reinterpret_cast<const __nv_bfloat162*>(
          static_cast<const __nv_bfloat16*>(base) + offset)));
      v0 = f.x, v1 = f.y;
    } else if constexpr (DT == kEpiFp16) {
      const float2 f = __half22float2(__ldg(reinterpret_cast<const __half2*>(static_cast<const __half*>(base) + offset)));
      v0 = f.x, v1 = f.y;
    } else {
      const float2 f = __ldg(reinterpret_cast<const float2*>(static_cast<const float*>(base) + offset));
      v0 = f.x, v1 = f.y;
    }
    return;
  }
  v0 = in0 ? epi_load<DT>(base, offset) : 0.f;
  v1 = in1 ? epi_load<DT>(base, offset + step) : 0.f;
}

// The built-in activations, in fp32. NaN propagates (relu(NaN) = NaN, as torch.relu) and -inf gives
// NaN in gelu, gelu_tanh and silu as torch's formulas do (x * 0). gelu_tanh uses the identity
// 0.5 x (1 + tanh(z)) = x / (1 + exp(-2z)) (no cancellation where tanh(z) is near -1).
//
// silu and gelu_tanh are x * (1 / (1 + 2^t)) with the approximate MUFU instructions, branch-free:
// ex2.approx.ftz.f32 and rcp.approx.ftz.f32 (PTX ISA, "ex2", "rcp": errors of a few fp32 ulp, far below
// the output's rounding). ftz: a power 2^t below 2^-126 becomes 0, where 1 + 2^t is 1 anyway; a
// denominator past 2^126 has reciprocal 0, so the result is 0 where its true value is below 1e-36, and
// -inf * 0 = NaN as torch's -inf / inf. A correctly rounded reciprocal or division (__frcp_rn, '/')
// compiles to a range check and a called slow path per element, which serializes the epilogue.
__device__ __forceinline__ float ex2_approx_ftz(float t) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}
__device__ __forceinline__ float rcp_approx_ftz(float y) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
}
// x / (1 + e^-s) = x * sigmoid(s) for a scaled argument s (log2(e) folded into the multiply).
__device__ __forceinline__ float times_sigmoid(float x, float s) {
  return x * rcp_approx_ftz(1.f + ex2_approx_ftz(s * -1.4426950408889634f));
}
__device__ __forceinline__ float act_relu(float x) { return x < 0.f ? 0.f : x; }
__device__ __forceinline__ float act_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float act_gelu_tanh(float x) {
  // 2 z = 2 sqrt(2 / pi) (x + 0.044715 x^3)
  return times_sigmoid(x, 1.5957691216057307f * (x + 0.044715f * x * x * x));
}
__device__ __forceinline__ float act_silu(float x) { return times_sigmoid(x, x); }

}  // namespace gl

