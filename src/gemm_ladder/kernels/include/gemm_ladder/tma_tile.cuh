// Levels 4+: the shared-memory map the designer planned (gemm_ladder.design), as pointers.
// Every offset and size is a -D constant from Plan.kernel_defines(); nothing here re-derives them.
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"

#ifndef GL_SMEM_BYTES
#error "levels 4+ are compiled with the designer's kernel_defines()"
#endif

namespace gl {

constexpr int BM = GL_BM, BN = GL_BN, BK = GL_BK, STAGES = GL_STAGES;

// The operands' majors in shared memory (plan: GL_A_MN_MAJOR, GL_B_MN_MAJOR): 0 K-major, the ladder's
// contract (a row-major A, B = the (N, K) operand of a @ b.T); 1 MN-major, the library's other
// layouts (library/operand.py). The ladder's plans are K-major; a build without them is too.
#ifndef GL_A_MN_MAJOR
#define GL_A_MN_MAJOR 0
#endif
#ifndef GL_B_MN_MAJOR
#define GL_B_MN_MAJOR 0
#endif
constexpr int A_MN_MAJOR = GL_A_MN_MAJOR, B_MN_MAJOR = GL_B_MN_MAJOR;
// M or N elements one MN-major TMA box spans: 128 bytes, the swizzle span (its map's boxDim[0]).
constexpr int kMnBoxElems = 128 / sizeof(elem_t);

// Levels 5+ state with this line that they release stage k only once the wgmma of k + 1 is issued
// (wgmma.wait_group 1): that needs two stages. Level 4 releases the current stage and may have one.
#define GL_RELEASES_PREVIOUS_STAGE()                                                                      \
  static_assert(gl::STAGES >= 2, "stage k is released only after the wgmma of k + 1 is issued (wgmma.wait_group 1): " \
                                 "with one stage the wait for k + 1 would never end")

struct SmemMap {
  uint8_t* base;  // 1024-byte aligned: the 128B swizzle pattern repeats every 1024 bytes
  __device__ __forceinline__ explicit SmemMap(uint8_t* raw) : base(align_up<1024>(raw)) {}
  __device__ __forceinline__ elem_t* a(int stage) const {
    return reinterpret_cast<elem_t*>(base + GL_SMEM_A_OFFSET + stage * GL_SMEM_A_STAGE_BYTES);
  }
  __device__ __forceinline__ elem_t* b(int stage) const {
    return reinterpret_cast<elem_t*>(base + GL_SMEM_B_OFFSET + stage * GL_SMEM_B_STAGE_BYTES);
  }
  __device__ __forceinline__ uint8_t* c() const { return base + GL_SMEM_C_OFFSET; }
  __device__ __forceinline__ uint64_t* full(int stage) const {
    return reinterpret_cast<uint64_t*>(base + GL_SMEM_FULL_BAR_OFFSET) + stage;
  }
  __device__ __forceinline__ uint64_t* empty(int stage) const {
    return reinterpret_cast<uint64_t*>(base + GL_SMEM_EMPTY_BAR_OFFSET) + stage;
  }
#ifdef GL_SMEM_ORDER_BAR_OFFSET
  // A ping-pong plan's order[c]: consumer c's turn to run a main loop (pingpong.cuh).
  __device__ __forceinline__ uint64_t* order(int consumer) const {
    return reinterpret_cast<uint64_t*>(base + GL_SMEM_ORDER_BAR_OFFSET) + consumer;
  }
#endif
};

// Load K tile kt of rows [row0, row0 + ROWS) of an operand (M rows of A, N rows of B) into `dst`, in
// the layout its wgmma descriptor reads. K-major: one box of ROWS lines of BK elements at (k, row).
// MN-major (the map's inner dimension is M or N): ROWS / 64 boxes of BK lines of 64 elements at
// (row, k), each box BK x 128 bytes after the one before (the descriptor's LBO, wgmma.cuh). A non-zero
// `cta_mask` multicasts every box into the same place in each CTA of the cluster whose bit is set.
template <int MnMajor, int ROWS>
__device__ __forceinline__ void tma_load_operand(elem_t* dst, const CUtensorMap* map, uint64_t* bar, int kt, int row0,
                                                 uint16_t cta_mask = 0) {
  if constexpr (!MnMajor) {
    if (cta_mask) tma_load_2d_multicast(dst, map, bar, kt * BK, row0, cta_mask);
    else tma_load_2d(dst, map, bar, kt * BK, row0);
  } else {
    static_assert(ROWS % kMnBoxElems == 0, "an MN-major tile is a whole number of 64-element boxes");
#pragma unroll
    for (int i = 0; i < ROWS / kMnBoxElems; ++i) {
      if (cta_mask) tma_load_2d_multicast(dst + i * kMnBoxElems * BK, map, bar, row0 + i * kMnBoxElems, kt * BK, cta_mask);
      else tma_load_2d(dst + i * kMnBoxElems * BK, map, bar, row0 + i * kMnBoxElems, kt * BK);
    }
  }
}

// The issuer's one-time setup of a stage ring (levels 5+): prefetch the three tensor maps and arm
// every stage's barriers: full[s] completes on the issuer's arrive.expect_tx plus the copy
// engine's bytes, empty[s] on GL_EMPTY_ARRIVALS releases. The caller's CTA (or cluster) barrier
// follows, so no thread waits on a barrier before it exists.
__device__ __forceinline__ void init_ring(const SmemMap& smem, const CUtensorMap* map_a, const CUtensorMap* map_b,
                                          const CUtensorMap* map_c) {
  tma_prefetch_descriptor(map_a);
  tma_prefetch_descriptor(map_b);
  tma_prefetch_descriptor(map_c);
  for (int s = 0; s < STAGES; ++s) {
    mbarrier_init(smem.full(s), 1);
    mbarrier_init(smem.empty(s), GL_EMPTY_ARRIVALS);
  }
  fence_barrier_init();
}

// Issue the output tile at (column n0, row m0) from the staging buffer: one TMA store per 64-column
// panel, committed as one bulk group (drained later with tma_store_wait_read, never a byte count).
__device__ __forceinline__ void store_output_tile(const CUtensorMap* map_c, const SmemMap& smem, int n0, int m0) {
#pragma unroll
  for (int p = 0; p < GL_C_PANELS; ++p) tma_store_2d(map_c, smem.c() + p * GL_SMEM_C_PANEL_BYTES, n0 + 64 * p, m0);
  tma_store_commit();
}

}  // namespace gl
