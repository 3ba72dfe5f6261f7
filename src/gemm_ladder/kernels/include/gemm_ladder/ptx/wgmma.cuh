// Warpgroup matrix multiply (wgmma) and warpgroup register control, sm_90a.
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" and "setmaxnreg".
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/wgmma_ops.cuh"

namespace gl {

// Shared-memory matrix descriptor for a K-major operand in the 128-byte swizzle layout
// (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading byte offset >> 4
// (unused by swizzled K-major layouts), 32-45 stride byte offset >> 4 (one 8-row x 128-byte swizzle
// atom = 1024 bytes), 62-63 layout type (1 = 128B swizzle). The tile must start 1024-byte aligned;
// stepping K by 16 elements moves the start address by 32 bytes inside the atom.
__device__ __forceinline__ uint64_t desc_k_major_sw128(const void* tile) {
  const uint64_t addr = smem_u32(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Orders register accesses before the first wgmma that reads or writes the accumulators.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most `pending` committed wgmma groups are still in flight.
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

// Keep the compiler from moving accumulator reads above a wgmma_wait (the registers are written
// asynchronously, which the compiler cannot see).
template <int n>
__device__ __forceinline__ void fence_accumulators(float (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Hand registers between warpgroups (PTX ISA "setmaxnreg"); needs a register cap at kernel entry.
template <int regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(regs));
}
template <int regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(regs));
}

// One BK = 64 (128-byte) K tile for a 64-row slice: four k16 steps along the swizzle atom.
template <int BN>
__device__ __forceinline__ void mma_k_tile(float (&d)[BN / 2], const elem_t* a_rows, const elem_t* b, int scale_d) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    Wgmma<BN, elem_t>::mma(d, desc_k_major_sw128(a_rows + 16 * k), desc_k_major_sw128(b + 16 * k),
                           (k > 0) ? 1 : scale_d);
  }
}

}  // namespace gl
