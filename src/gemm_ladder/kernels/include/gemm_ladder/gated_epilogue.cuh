// Gated epilogues (the gated MLP: out = act(x w_gate^T) * (x w_up^T)), from one accumulator fragment
// whose first half of columns are the gate's and whose second half are the up projection's, for the
// same output columns (library/sm90_swiglu.cu loads its B stage that way: stage_ring.cuh, BSlice).
//
// In wgmma's fragment (epilogue.cuh: d[4j + 2i + c] is column 8j + 2(l%4) + c) column n and column
// n + BN/2 are in the same thread, BN/4 registers apart: gate and up of one output meet in registers,
// with no exchange between threads. The result is a 64 x BN/2 fragment in the same layout.
#pragma once
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

// SiLU (swish): g * sigmoid(g) = g / (1 + e^-g), in fp32. __expf is ex2.approx on g * log2(e)
// (relative error about 2^-21, CUDA C Programming Guide, "Intrinsic Functions"); __fdividef is one
// reciprocal and a multiply (2 ulp). Both are far below the bf16/fp16 output's rounding (2^-8, 2^-11).
// Limits as torch's x / (1 + exp(-x)): silu(+inf) = +inf, silu(-inf) = NaN (-inf / inf), NaN stays
// NaN; for g < -87 the quotient is 0 (__fdividef of a denominator past 2^126), where silu(g) is
// below 1e-36.
struct Silu {
  __device__ __forceinline__ float operator()(float g) const { return __fdividef(g, 1.0f + __expf(-g)); }
};

// packed[2j + i] = the output pair (act(gate) * up) of d[4j + 2i], d[4j + 2i + 1], rounded once to the
// output dtype: the layout pack_fragment<BN / 2> gives a 64 x BN/2 fragment (epilogue.cuh), so
// stage_packed_panel_sw128<BN / 2> stores it.
template <int BN, class Act>
__device__ __forceinline__ void pack_gated_fragment(uint32_t (&packed)[BN / 8], const float (&d)[BN / 2], Act act) {
  constexpr int kUp = BN / 4;  // register offset of column n + BN/2: 8 columns per j, 4 registers per j
#pragma unroll
  for (int q = 0; q < BN / 8; ++q)
    packed[q] = pack2(act(d[2 * q]) * d[2 * q + kUp], act(d[2 * q + 1]) * d[2 * q + 1 + kUp]);
}

// o[i] = act(gate) * up of d[i], d[i + BN/4] in fp32, not rounded: a 64 x BN/2 fragment in epilogue.cuh's
// layout (o[4j + 2i + c] is column 8j + 2(l%4) + c), for a store from registers (register_store.cuh).
template <int BN, class Act>
__device__ __forceinline__ void gate_fragment(float (&o)[BN / 4], const float (&d)[BN / 2], Act act) {
  constexpr int kUp = BN / 4;
#pragma unroll
  for (int i = 0; i < BN / 4; ++i) o[i] = act(d[i]) * d[i + kUp];
}

}  // namespace gl
