// Levels 4+: the shared-memory map the designer planned (gemm_ladder.design), as pointers.
// Every offset and size is a -D constant from Plan.kernel_defines(); nothing here re-derives them.
#pragma once
#include "gemm_ladder/ptx/common.cuh"

#ifndef GL_SMEM_BYTES
#error "levels 4+ are compiled with the designer's kernel_defines()"
#endif

namespace gl {

constexpr int BM = GL_BM, BN = GL_BN, BK = GL_BK, STAGES = GL_STAGES;

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
};

}  // namespace gl
