// Storing a consumer warpgroup's finished 64 x BN fragment straight from its accumulator registers
// into a row-major output of any pitch and any element-aligned base: masked global stores, no shared
// memory, no tensor map (which needs a 16-byte pitch and base, and writes a row's last 16-byte chunk
// whole). The library kernel's build for outputs TMA cannot write (sm90_gemm.cu, GL_C_FROM_REGISTERS).
//
// Fragment layout (PTX ISA, wgmma D; epilogue.cuh): thread t (warp w, lane l) holds
// d[4j + 2i + c] = D[16w + l/4 + 8i][8j + 2(l%4) + c]: pairs of adjacent columns of one row.
//
// Stores: a pair goes out as one store of two elements (4 bytes in bf16/fp16, 8 in fp32) where its
// address is aligned to that size and both columns are inside; else as one or two element stores,
// each masked. A pair's alignment is the same for every j of a row (8j columns are 16j or 32j bytes),
// so it is decided once per row: with an even pitch and an aligned base every pair of every row is
// aligned; with an odd pitch (N = 4095 dense) every other row is, the others store elements.
// Coalescing: one store instruction of a warp (fixed i, j) covers 8 rows x 16 bytes (4 lanes x 4
// bytes per row); j + 1 fills the other half of the same 32-byte sectors, which L2 merges before they
// reach DRAM, so DRAM traffic is the output's bytes. Left as is: a quad shuffle turning each row's
// stores into 8- or 16-byte ones (fewer LSU instructions; alignment then varies by row with an odd
// pitch, which the workspace route had no better answer for).
#pragma once
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

__device__ __forceinline__ void store_out_pair(elem_t* p, float x0, float x1) {
  *reinterpret_cast<uint32_t*>(p) = pack2(x0, x1);
}
__device__ __forceinline__ void store_out_pair(float* p, float x0, float x1) {
  *reinterpret_cast<float2*>(p) = make_float2(x0, x1);
}
__device__ __forceinline__ void store_out(elem_t* p, float x) { *p = to_elem(x); }
__device__ __forceinline__ void store_out(float* p, float x) { *p = x; }

// Store a consumer's 64 x BN fragment `d` at rows row0.., columns col0.. of a rows x cols output whose
// element (r, c) is C[r * ldc + c] (64-bit: the output may span more than 2^31 elements). Rows >= rows
// and columns >= cols are not written. `pair_op(x0, x1, r, c)` runs on each stored pair first (a fused
// epilogue, or nothing), right before its store, so the pair's fp32 values and inputs die there.
template <int BN, typename OutT, typename PairOp>
__device__ __forceinline__ void store_fragment_from_registers(OutT* __restrict__ C, long long ldc,
                                                              float (&d)[BN / 2], int row0, int col0, int rows,
                                                              int cols, PairOp&& pair_op) {
  const int t = thread_in_warpgroup(), warp = t / 32, lane = t % 32;
  const int c0 = col0 + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 16 * warp + lane / 4 + 8 * i;
    if (row >= rows) continue;
    OutT* const line = C + static_cast<long long>(row) * ldc;
    const bool aligned = reinterpret_cast<uintptr_t>(line + c0) % (2 * sizeof(OutT)) == 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = c0 + 8 * j;
      float x0 = d[4 * j + 2 * i], x1 = d[4 * j + 2 * i + 1];
      pair_op(x0, x1, row, col);
      if (aligned && col + 1 < cols) {
        store_out_pair(line + col, x0, x1);
      } else {
        if (col < cols) store_out(line + col, x0);
        if (col + 1 < cols) store_out(line + col + 1, x1);
      }
    }
  }
}

}  // namespace gl
