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
#include <type_traits>

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
  int pair_ok;  // bit i: tile i's two elements of a pair are adjacent and aligned (informational: the
               // generated code has the build's own compile-time answer, library/epilogue.py)
  int pad_;
};

// Input element types, compile-time per input (the generated code names them).
enum EpiDtype { kEpiBf16 = 0, kEpiFp16 = 1, kEpiFp32 = 2 };

// Branch-free masked loads: an element outside the output reads the input's first element instead
// (offset 0: every input has one, and it is aligned for a pair load, the host checked), a select on
// the offset rather than a branch around the load (a C++ `in ? load : 0` compiles to one per
// element). Such an element is never stored, so its value does not matter. __ldg (read-only path):
// the compiler shares the load of a vector element used by several pairs.
template <typename Off>
__device__ __forceinline__ Off epi_masked(Off offset, bool in) {
  return in ? offset : Off(0);
}
// A branch around each load instead where the offsets are 64-bit (an input spanning 2^31 elements,
// rare: a select of 64-bit offsets costs registers the BN = 256 kernel does not have, it spilled) and
// where the kernel asks for it (GL_EPI_BRANCHED_LOADS: the small-M kernel, library/small_m.py).
#ifndef GL_EPI_BRANCHED_LOADS
#define GL_EPI_BRANCHED_LOADS 0
#endif
// The generated code's 32-bit offset type: 64-bit in a kernel that branches around its loads (the
// small-M kernel spilled with 32-bit ones).
using EpiNarrowOff = typename std::conditional<GL_EPI_BRANCHED_LOADS, long long, int>::type;
template <typename Off>
inline constexpr bool kEpiBranchedLoads = sizeof(Off) == 8 || GL_EPI_BRANCHED_LOADS;
// T: the loaded type (an element, or a pair of them), E: the element type `offset` counts.
template <typename T, typename E, typename Off>
__device__ __forceinline__ T epi_ldg(const E* base, Off offset, bool in) {
  if constexpr (kEpiBranchedLoads<Off>) {
    return in ? __ldg(reinterpret_cast<const T*>(base + offset)) : T{};
  } else {
    return __ldg(reinterpret_cast<const T*>(base + epi_masked(offset, in)));
  }
}

template <int DT>
__device__ __forceinline__ float epi_bits_to_float(uint32_t b) {  // the low element's bits
  if constexpr (DT == kEpiBf16) {
    return __uint_as_float(b << 16);
  } else if constexpr (DT == kEpiFp16) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
  } else {
    return __uint_as_float(b);
  }
}

// One element at `base + offset` (elements), or the input's first where !in.
template <int DT, typename Off>
__device__ __forceinline__ float epi_load(const void* base, Off offset, bool in) {
  if constexpr (DT == kEpiFp32) {
    return epi_ldg<float>(static_cast<const float*>(base), offset, in);
  } else {
    return epi_bits_to_float<DT>(epi_ldg<unsigned short>(static_cast<const unsigned short*>(base), offset, in));
  }
}

// One element at `base + offset`, 0 where !in: a guarded load (PTX ISA, "ld", the guard predicate),
// no branch and no select. The single loads of a tile that cannot be paired (two registers per pair)
// use this form: with the select form ptxas hoisted both deferred panels' loads together and spilled
// (BN 256, swapped orientation); with this one it does not.
template <int DT, typename Off>
__device__ __forceinline__ float epi_load_predicated(const void* base, Off offset, bool in) {
  const void* p = static_cast<const char*>(base) + static_cast<long long>(offset) * (DT == kEpiFp32 ? 4 : 2);
  uint32_t v;
  if constexpr (DT == kEpiFp32) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b32 %0, 0;\n @p ld.global.nc.b32 %0, [%1];\n}"
                 : "=r"(v) : "l"(p), "r"(static_cast<int>(in)));
  } else {
    unsigned short h;
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b16 %0, 0;\n @p ld.global.nc.b16 %0, [%1];\n}"
                 : "=h"(h) : "l"(p), "r"(static_cast<int>(in)));
    v = h;
  }
  return epi_bits_to_float<DT>(v);
}

// Two elements at `offset` and `offset + step` (elements), each masked as epi_load. kPair (the host
// checked at build time: step 1, the pair aligned to twice the element size, the output's extent along
// the pair even, so a pair's two elements are both inside or both outside): one 4- or 8-byte load.
template <int DT, bool kPair, typename Off>
__device__ __forceinline__ void epi_load_pair(const void* base, Off offset, Off step, bool in0, bool in1, float& v0,
                                              float& v1) {
  if constexpr (kPair) {  // a select of the offset (branched: see epi_ldg); offsets are even here
    if constexpr (DT == kEpiFp32) {
      const float2 w = epi_ldg<float2>(static_cast<const float2*>(base), static_cast<Off>(offset / 2), in0);
      v0 = w.x, v1 = w.y;
    } else {
      const uint32_t w = epi_ldg<unsigned int>(static_cast<const unsigned int*>(base), static_cast<Off>(offset / 2), in0);
      v0 = epi_bits_to_float<DT>(w);
      v1 = DT == kEpiBf16 ? __uint_as_float(w & 0xffff0000u) : epi_bits_to_float<DT>(w >> 16);
    }
  } else if constexpr (GL_EPI_BRANCHED_LOADS) {
    v0 = epi_load<DT>(base, offset, in0);
    v1 = epi_load<DT>(base, static_cast<Off>(offset + step), in1);
  } else {
    v0 = epi_load_predicated<DT>(base, offset, in0);
    v1 = epi_load_predicated<DT>(base, static_cast<Off>(offset + step), in1);
  }
}

// L2 prefetch of a tile input's block, late in a tile's main loop (the kernel's hook: fused_epilogue_pair.cuh's
// epilogue_prefetch), so that the epilogue's loads at the tile's end hit L2 instead of waiting on DRAM. The
// block is kRuns runs of kRunLen elements of an input contiguous along a run (stride 1, the host checked:
// library/epilogue.py's EpilogueCall.prefetch_runs): run i lies at outer coordinate outer0 + i, starts at
// element (outer0 + i) * outer_stride + inner0 and holds len = min(kRunLen, inner_extent - inner0) elements
// inside the output; a run at or past outer_extent, or an empty one, is not touched, nor is any element
// outside the output. Per run, one prefetch.global.L2 (PTX ISA, "prefetch": the cache line holding the
// address) at each 128 bytes from its first element and one at its last element: every line the run's
// elements touch, aligned or not (ceil(kRunLen / kLine) + 1 per run, spread over the kThreads threads). A
// per-thread prefetch is one instruction (CCTL); cp.async.bulk.prefetch.L2 takes its address in a uniform
// register, which costs a loop over the warp's distinct addresses when each thread has its own run. A
// prefetch writes nothing and orders nothing (a hint): no barrier. 64-bit offsets: a few integer
// instructions per line, once per tile, between two K iterations (a stream-K segment: before its loop).
template <int DT, int kRuns, int kRunLen, int kThreads>
__device__ __forceinline__ void epi_prefetch_runs(const void* base, long long outer_stride, int outer0, int inner0,
                                                  int outer_extent, int inner_extent, int t) {
  constexpr int kBytes = DT == kEpiFp32 ? 4 : 2;
  constexpr int kLine = 128 / kBytes;             // elements per 128-byte line (one per 32-byte sector
                                                  // spilled the BN 256 build, the prefetch now in the loop)
  // Per run: a point every kLine elements from its first, then its last (BN 96 and 144 are not whole lines:
  // consecutive points stay at most a line apart, so every line the run touches is hit).
  constexpr int kPoints = (kRunLen + kLine - 1) / kLine + 1;
  constexpr int kItems = kRuns * kPoints;
  const int len = min(kRunLen, inner_extent - inner0);
  const char* const bytes = static_cast<const char*>(base);
#pragma unroll
  for (int k = 0; k < (kItems + kThreads - 1) / kThreads; ++k) {
    const int q = t + k * kThreads, run = q / kPoints, j = q - run * kPoints;
    if ((kItems % kThreads == 0 || q < kItems) && outer0 + run < outer_extent && len > 0) {
      const long long e = static_cast<long long>(outer0 + run) * outer_stride + inner0 + min(j * kLine, len - 1);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(bytes + e * kBytes)));
    }
  }
}

// The built-in activations, in fp32. NaN propagates (relu(NaN) = NaN, as torch.relu) and -inf gives
// NaN in gelu, gelu_tanh and silu as torch's formulas do (x * 0).
//
// silu (and gelu_tanh with an fp32 output) is x * (1 / (1 + 2^t)) with the approximate MUFU instructions, branch-free:
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
// gelu(x) = x Phi(x), Phi the standard normal CDF (torch's erf GELU). With a = |x| and q = Phi(-a) = erfc(a / sqrt 2)
// / 2, gelu(x) = x (1 - q) for x >= 0 and x q for x < 0: no cancellation on either side (the erf form
// 0.5 x (1 + erf(x / sqrt 2)) cancels for x < 0, where 1 + erf loses all its digits below x = -5.5). q is
// exp(-a^2 / 2) R(a) with R(a) = erfcx(a / sqrt 2) / 2 approximated as t P(t), t = 1 / (1 + 0.3 a), P of degree 5:
// coefficients fitted by iteratively reweighted least squares for the minimax relative error over a in [0, 14]
// (8.3e-6 in exact arithmetic). Cost: two MUFU (rcp.approx, ex2.approx) and about 16 FP32
// instructions, against erff's one MUFU and about 34 (bf16 BN 256 builds: docs/epilogues.md).
// Error against the exact erf GELU (float64) of the fp32 result, measured on a dense grid (tests/test_activations.py
// on the CPU with IEEE division and exp2, tests/test_activations_gpu.py with the kernels' MUFU instructions):
// relative error <= 2^-15 (3.1e-5; bf16's unit roundoff is 2^-8, fp16's 2^-11) wherever |gelu(x)| >= 2^-122,
// absolute <= 2^-122 below (x < -12.9, where q, then the result, flush to 0 under ftz: -0).
// The exponent's fp32 argument carries a relative rounding of 2^-24, an absolute 8e-6 at a = 13: most of the
// bound in the tail. Non-finite: +inf -> +inf (1 - 0), -inf -> NaN (-inf * 0), NaN -> NaN, as torch.
// An fp32 output (GL_OUT_FP32, as act_gelu_tanh) keeps the erff form, a few fp32 ulp where it does not cancel.
__device__ __forceinline__ float act_gelu(float x) {
#if defined(GL_OUT_FP32)
  return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
#else
  const float a = fabsf(x);
  const float t = rcp_approx_ftz(fmaf(a, 0.3f, 1.f));
  float r = -0.077099156842869f;
  r = fmaf(r, t, 0.21604314542578096f);
  r = fmaf(r, t, -0.01695592288193045f);
  r = fmaf(r, t, 0.14420103319694993f);
  r = fmaf(r, t, 0.11374066333482324f);
  r = fmaf(r, t, 0.12007435736773633f);
  const float q = r * t * ex2_approx_ftz(a * a * -0.72134752044448170f);  // -log2(e) / 2
  return x * (x >= 0.f ? 1.f - q : q);
#endif
}
// tanh.approx.f32 (PTX ISA, "tanh", sm_75 and later): one MUFU. Its documented maximum relative error is
// 2^-11 over the whole fp32 range; -inf -> -1, +inf -> 1, NaN -> NaN.
__device__ __forceinline__ float tanh_approx(float z) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(z));
  return r;
}
// gelu_tanh(x) = 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x + 0.044715 x^3), computed as h + h tanh(z) with
// h = x / 2: one MUFU (tanh_approx) and five FP32 instructions (x * x; sqrt(2/pi) (1 + 0.044715 x^2) in one
// FFMA; z = x * that; h; the final FFMA), against two MUFU (ex2, rcp) and about seven for x * sigmoid(2z).
// MUFU results come at an eighth of the FP32 rate (16 against 128 per clock per SM: CUDA C++ Programming
// Guide, arithmetic instruction throughput, compute capability 9.0), and this math sits exposed at each
// tile's end.
// Error: |tanh_approx(z) - tanh z| <= 2^-11 |tanh z|, so the result is off by at most 2^-12 |x| |tanh z|
// (plus fp32 roundings): for x >= 0 a relative 2^-12 (1/16 of bf16's unit roundoff, 1/2 of fp16's); for
// x < 0, where 1 + tanh z cancels and the true value tends to 0, an absolute 2^-12 |x| that can exceed the
// true value (x = -3: gelu_tanh -3.6e-3, bound 7.3e-4), far below the rounding of the outputs' typical
// magnitudes. Non-finite: x = -inf gives -inf * (-1) + (-inf) = NaN, +inf gives +inf, NaN gives NaN (as
// torch); an x whose cube overflows gives z = +-inf, so x or exactly 0 (torch: x or -0).
// An fp32 output (GL_OUT_FP32: the small-M kernel's and the general kernel's register-store builds) keeps
// the sigmoid form, the precision its caller asked for: a few fp32 ulp, plus about 2|z| ulp from the
// argument's rounding where the result tends to 0.
__device__ __forceinline__ float act_gelu_tanh(float x) {
#if defined(GL_OUT_FP32)
  // 2 z = 2 sqrt(2 / pi) (x + 0.044715 x^3)
  return times_sigmoid(x, 1.5957691216057307f * (x + 0.044715f * x * x * x));
#else
  const float z = x * fmaf(x * x, 0.035677408136300125f, 0.7978845608028654f);  // sqrt(2/pi), sqrt(2/pi) 0.044715
  const float h = 0.5f * x;
  return fmaf(h, tanh_approx(z), h);
#endif
}
__device__ __forceinline__ float act_silu(float x) { return times_sigmoid(x, x); }

}  // namespace gl

