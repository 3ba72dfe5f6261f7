// Levels 1-3: threads copy tiles from global memory into the layout a wgmma descriptor reads.
#pragma once
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a K-major tile of 128-byte rows with
// the 128-byte swizzle: the chunk index is XORed with the row's position in its 8-row atom, so the
// eight rows of an atom spread one column's chunks over all 32 banks (PTX ISA "Shared Memory
// Matrix Layout", 128B swizzling mode).
__device__ __forceinline__ uint32_t sw128_offset(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// Copy rows [row0, row0 + ROWS) x columns [k0, k0 + 64) of a row-major (rows_total x K) matrix into
// `tile` (1024-byte aligned, ROWS x 128 bytes, 128B swizzle). Elements past rows_total or K are
// written as zero, which makes tails contribute nothing to the product. `vec_ok` (K % 8 == 0 and a
// 16-byte aligned base, checked on the host) allows one 16-byte load per chunk.
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_tile_sw128(elem_t* tile, const elem_t* g, int row0, int rows_total, int k0,
                                                int K, bool vec_ok) {
  uint8_t* base = reinterpret_cast<uint8_t*>(tile);
  for (int idx = threadIdx.x % THREADS; idx < ROWS * 8; idx += THREADS) {
    const int row = idx / 8, chunk = idx % 8;
    const int grow = row0 + row, gk = k0 + chunk * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (grow < rows_total) {
      const elem_t* src = g + static_cast<size_t>(grow) * K + gk;
      if (vec_ok && gk < K) {
        v = *reinterpret_cast<const uint4*>(src);
      } else {
        elem_t e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) e[i] = (gk + i < K) ? src[i] : to_elem(0.f);
        v = *reinterpret_cast<uint4*>(e);
      }
    }
    *reinterpret_cast<uint4*>(base + sw128_offset(row, chunk)) = v;
  }
}

}  // namespace gl
