// Storing a consumer warpgroup's finished 64 x BN fragment straight from its accumulator registers
// into a row-major output of any pitch and any element-aligned base: masked global stores, no shared
// memory, no tensor map (which needs a 16-byte pitch and base, and writes a row's last 16-byte chunk
// whole). The library kernel's build for outputs TMA cannot write (sm90_gemm.cu, GL_C_FROM_REGISTERS).
//
// Fragment layout (PTX ISA, wgmma D; epilogue.cuh): thread t (warp w, lane l) holds
// d[4j + 2i + c] = D[16w + l/4 + 8i][8j + 2(l%4) + c]: pairs of adjacent columns of one row.
//
// Stores: one store of two elements (4 bytes in bf16/fp16, 8 in fp32) per pair of columns, on every
// row, whatever the pitch. A row whose even columns are aligned to two elements stores its pairs as
// the fragment holds them, (c, c + 1). A row whose even columns are not (an odd pitch: every other row
// of N = 4095 dense; an odd base) stores the pairs shifted by one column, (c + 1, c + 2), which are
// aligned there: c + 2 is the right neighbour's first element, one shuffle within the quad of lanes
// that share the row (lane 3's neighbour is lane 0 of the next j: it stores its shifted pair one j
// later, and the tile's last column alone); the tile's first column is stored alone. Both kinds of
// row store through the same instruction (address and data selected per lane), so each j costs a warp
// one store, not two paths; element stores are left for the N edge and the two ends of shifted rows.
// kShiftPairs false: the pairs as held only; a misaligned one goes out as two element stores. The
// kernels with a fused epilogue take that form: with the shuffle and the shifted pair's values live
// beside the epilogue's loads, ptxas spilled the BN = 256 build (about 160 bytes).
// Coalescing: one store instruction of a warp (fixed i, j) covers 8 rows x 16 bytes (4 lanes x 4
// bytes per row, one row possibly shifted by 2 bytes); j + 1 fills the rest of the same 32-byte
// sectors, which L2 merges before they reach DRAM, so DRAM traffic is the output's bytes.
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

// Columns (col, col + 1) of a row whose element c is line[c], columns >= cols not written: one store of the
// pair where `aligned` (the row's even columns are 2-element aligned) and both are inside, else each
// element alone.
template <typename OutT>
__device__ __forceinline__ void store_out_pair_masked(OutT* line, int col, int cols, bool aligned, float x0, float x1) {
  if (aligned && col + 1 < cols) {
    store_out_pair(line + col, x0, x1);
  } else {
    if (col < cols) store_out(line + col, x0);
    if (col + 1 < cols) store_out(line + col + 1, x1);
  }
}

// Store a consumer's 64 x BN fragment `d` at rows row0.., columns col0.. of a rows x cols output whose
// element (r, c) is C[r * ldc + c] (64-bit: the output may span more than 2^31 elements). Rows >= rows
// and columns >= cols are not written. `pair_op(x0, x1, r, c)` runs on each pair first (a fused
// epilogue, or nothing), right before its store, so the pair's fp32 values and inputs die there; it
// runs on rows past `rows` too (every lane takes part in the shuffles), whose values are not stored.
// With kShiftPairs all 32 lanes of each warp must call it (__shfl_sync over the full warp).
template <int BN, bool kShiftPairs, typename OutT, typename PairOp>
__device__ __forceinline__ void store_fragment_from_registers(OutT* __restrict__ C, long long ldc,
                                                              float (&d)[BN / 2], int row0, int col0, int rows,
                                                              int cols, PairOp&& pair_op) {
  const int t = thread_in_warpgroup(), warp = t / 32, lane = t % 32, q = lane % 4;
  const int neighbour = (lane & ~3) | ((q + 1) & 3);  // the lane holding this row's next pair
  const int c0 = col0 + 2 * q;
  if constexpr (!kShiftPairs) {
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
        store_out_pair_masked(line, col, cols, aligned, x0, x1);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 16 * warp + lane / 4 + 8 * i;
    const bool row_in = row < rows;
    OutT* const line = C + static_cast<long long>(row_in ? row : 0) * ldc;
    // Even columns aligned to a pair in this row (the same for every j: 8j columns are 16j or 32j bytes).
    const bool aligned = reinterpret_cast<uintptr_t>(line + c0) % (2 * sizeof(OutT)) == 0;
    float prev_x1 = 0.f;  // lane 3 of a shifted row: the last element of the previous j's pair
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = c0 + 8 * j;
      float x0 = d[4 * j + 2 * i], x1 = d[4 * j + 2 * i + 1];
      pair_op(x0, x1, row, col);
      const float next = __shfl_sync(0xffffffffu, x0, neighbour);  // column col + 2 (lane 3: col0 + 8j)
      if (!aligned && q == 0 && j == 0 && row_in) store_out(line + col0, x0);  // the tile's first column
      // The pair this lane stores now: (col, col + 1) as held; shifted (col + 1, col + 2); lane 3 of
      // a shifted row the previous j's (col - 7, col - 6), none at j = 0.
      const bool last_lane = !aligned && q == 3;
      const int at = aligned ? col : (last_lane ? col - 7 : col + 1);
      const float first = aligned ? x0 : (last_lane ? prev_x1 : x1), second = aligned ? x1 : next;
      prev_x1 = x1;
      if (row_in && !(last_lane && j == 0)) {
        if (at + 1 < cols) {
          store_out_pair(line + at, first, second);
        } else if (at < cols) {
          store_out(line + at, first);
        }
      }
    }
    if (!aligned && q == 3 && row_in && col0 + BN - 1 < cols) store_out(line + col0 + BN - 1, prev_x1);
  }
}

}  // namespace gl
