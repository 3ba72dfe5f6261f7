// Epilogues: from the wgmma accumulator fragment to the output.
//
// Fragment of wgmma m64nNk16 with f32 accumulators (PTX ISA "Register Fragments and Shared Memory
// Matrix Layouts", matrix D): thread t of the warpgroup, warp w = t / 32, lane l = t % 32, holds
// d[4j + 2i + c] = D[16w + l/4 + 8i][8j + 2(l%4) + c] for j < N/8, i, c in {0, 1}.
#pragma once
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

// Levels 1-3: write a 64 x BN fragment straight to global memory, masking rows >= M and
// columns >= N. Pairs go out as one 4-byte store when N is even (then every pair is aligned).
template <int BN>
__device__ __forceinline__ void store_fragment_masked(elem_t* C, const float (&d)[BN / 2], int row0, int col0, int M,
                                                      int N) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 16 * warp + lane / 4 + 8 * i;
      const int col = col0 + 8 * j + 2 * (lane % 4);
      if (row >= M) continue;
      elem_t* dst = C + static_cast<size_t>(row) * N + col;
      const float x = d[4 * j + 2 * i], y = d[4 * j + 2 * i + 1];
      if ((N % 2 == 0) && col + 1 < N) {
        *reinterpret_cast<uint32_t*>(dst) = pack2(x, y);
      } else {
        if (col < N) dst[0] = to_elem(x);
        if (col + 1 < N) dst[1] = to_elem(y);
      }
    }
  }
}

// Byte offset, in a panel of 128-byte rows with the 128B swizzle (the layout TMA reads and writes: the 16-byte
// chunk index XORed with the row's place in its 8-row atom; PTX ISA "Shared Memory Matrix Layout", 128B swizzling
// mode), of the 4 bytes this thread holds of fragment columns 8j.. (chunk j % 8) in fragment row i (tile row
// row0 + 16w + l/4 + 8i, the layout above). The one formula of the library's panel staging below (levels 4-8's
// stage_fragment_sw128 keeps its own, by column, whose SASS this one's would change).
__device__ __forceinline__ int sw128_fragment_offset(int row0, int j, int i) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int row = row0 + 16 * warp + lane / 4 + 8 * i;
  return row * 128 + (((j % 8) ^ (row & 7)) << 4) + 4 * (lane % 4);
}

// Levels 4+: write a 64 x BN fragment into the output staging buffer, laid out as BN/64 column
// panels of (rows x 128 bytes) each with the 128B swizzle, the layout the output tensor map's
// box (64 x rows) expects. `row0` is the fragment's first row inside the tile; `panel_bytes` is one
// panel's size (tile rows x 128).
template <int BN>
__device__ __forceinline__ void stage_fragment_sw128(uint8_t* staging, const float (&d)[BN / 2], int row0,
                                                     int panel_bytes) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 16 * warp + lane / 4 + 8 * i;
      const int col = 8 * j + 2 * (lane % 4);  // column inside the tile
      const int panel = col / 64, chunk = (col % 64) / 8, within = (col % 8) * 2;
      uint8_t* dst = staging + panel * panel_bytes + row * 128 + ((chunk ^ (row & 7)) << 4) + within;
      *reinterpret_cast<uint32_t*>(dst) = pack2(d[4 * j + 2 * i], d[4 * j + 2 * i + 1]);
    }
  }
}

// Level 9, overlapped epilogue: the accumulators converted to the output dtype, two per register,
// so a tile's outputs (BN / 4 registers) can wait while the next tile's accumulators fill.
// packed[2j + i] holds d[4j + 2i], d[4j + 2i + 1] (the fragment layout above).
template <int BN>
__device__ __forceinline__ void pack_fragment(uint32_t (&packed)[BN / 4], const float (&d)[BN / 2]) {
#pragma unroll
  for (int q = 0; q < BN / 4; ++q) packed[q] = pack2(d[2 * q], d[2 * q + 1]);
}

// Level 9: write column panel `p` (columns [64p, 64p + 64), 128 bytes of 2-byte elements) of a packed
// 64 x BN fragment into one 64-row panel buffer (64 x 128 bytes, 128B swizzle), the layout of the
// output tensor map's (64 x 64) box; or, at `row0` = 64 r, into rows 64 r.. of a taller panel buffer (a
// ping-pong consumer's 128-row tile: its box is 64 x 128, the swizzle's phase the same, row0 % 8 = 0).
// The caller unrolls p, so the register indices stay compile-time.
template <int BN>
__device__ __forceinline__ void stage_packed_panel_sw128(uint8_t* panel, const uint32_t (&packed)[BN / 4], int p,
                                                         int row0 = 0) {
#pragma unroll
  for (int j = 8 * p; j < 8 * p + 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      *reinterpret_cast<uint32_t*>(panel + sw128_fragment_offset(row0, j, i)) = packed[2 * j + i];
  }
}

// Column panel `p` of a 64 x BN fragment straight from its accumulators into a panel buffer, as
// stage_packed_panel_sw128 writes the packed fragment (packed[2j + i] = pack2(d[4j + 2i], d[4j + 2i + 1])), each
// pair packed as it is written: no packed copy of the fragment is held beside it (the 256-row tile at BN 192
// holds 192 accumulator registers a thread, and spilled with one).
template <int BN>
__device__ __forceinline__ void stage_panel_sw128(uint8_t* panel, const float (&d)[BN / 2], int p, int row0 = 0) {
  const uint32_t base = smem_u32(panel);
#pragma unroll
  for (int j = 8 * p; j < 8 * p + 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      st_shared_b32(base + sw128_fragment_offset(row0, j, i), pack2(d[4 * j + 2 * i], d[4 * j + 2 * i + 1]));
  }
}

}  // namespace gl
