// Level 9's output ring: each consumer warpgroup stores its packed 64-row fragment one 64 x 64 panel
// (128 bytes of columns) at a time, through its own ring of GL_C_RING panel buffers of
// GL_SMEM_C_PANEL_BYTES each (the designer's plan: design/smem.py, c_ring) and its own store issuer.
// A buffer is refilled only once wait_group.read GL_C_RING - 1 says the store that last read it is
// done. Level 9 stores 4 panels per tile (64 x 256), the gated library kernel 2 (64 x 128 outputs),
// the library GEMM at BN = 64 one, through a ring of one buffer; a ping-pong consumer of a 128-row tile
// stores both its fragments' rows in one panel (store_panel's R = 2).
#pragma once
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/tma_tile.cuh"

namespace gl {

// Stage panel `p` (runtime) of a consumer's tile into its ring and store it at (n0 + 64p, m0), or at
// (n0 + 64p, m0, z) of a rank-3 map when z >= 0 (the grouped kernel's per-group outputs): stage(buf, q)
// writes panel q (= p) into buffer buf between the ring's two barriers. The unrolled dispatch keeps the
// panel index, and so the register indices, compile-time (no local memory). `bar`: the consumer's named
// barrier (its 128 threads); `issuer`: its thread 0.
template <int kPanels, class Stage>
__device__ __forceinline__ void store_panel_staged(int p, uint8_t* ring, const CUtensorMap* map_c, int n0, int m0,
                                                   int bar, bool issuer, int z, Stage&& stage) {
  static_assert(kPanels % GL_C_RING == 0, "whole panels, each always in buffer p % GL_C_RING");
#pragma unroll
  for (int q = 0; q < kPanels; ++q) {
    if (q != p) continue;
    uint8_t* const buf = ring + (q % GL_C_RING) * GL_SMEM_C_PANEL_BYTES;
    if (issuer) tma_store_wait_read<GL_C_RING - 1>();  // the store that last read buf is done
    named_barrier_sync(bar, 128);
    stage(buf, q);
    fence_proxy_async_smem();
    named_barrier_sync(bar, 128);
    if (issuer) {
      if (z >= 0) tma_store_3d(map_c, buf, n0 + 64 * q, m0, z);
      else tma_store_2d(map_c, buf, n0 + 64 * q, m0);
      tma_store_commit();
    }
  }
}

// Panel `p` of a consumer's packed fragment (`Words` = 16 registers per panel), as store_panel_staged.
// With R fragments (a ping-pong consumer's 128-row tile, R = 2), fragment r fills rows 64 r.. of the
// panel buffer, whose box is the whole tile's rows (the plan's c_store_rows), one store for all.
template <int R, int Words>
__device__ __forceinline__ void store_panel(int p, const uint32_t (&packed)[R][Words], uint8_t* ring,
                                            const CUtensorMap* map_c, int n0, int m0, int bar, bool issuer,
                                            int z = -1) {
  static_assert(Words % 16 == 0, "whole panels");
  store_panel_staged<Words / 16>(p, ring, map_c, n0, m0, bar, issuer, z, [&](uint8_t* buf, int q) {
#pragma unroll
    for (int r = 0; r < R; ++r) stage_packed_panel_sw128<4 * Words>(buf, packed[r], q, 64 * r);
  });
}
template <int Words>
__device__ __forceinline__ void store_panel(int p, const uint32_t (&packed)[Words], uint8_t* ring,
                                            const CUtensorMap* map_c, int n0, int m0, int bar, bool issuer,
                                            int z = -1) {
  store_panel(p, reinterpret_cast<const uint32_t(&)[1][Words]>(packed), ring, map_c, n0, m0, bar, issuer, z);
}

}  // namespace gl
