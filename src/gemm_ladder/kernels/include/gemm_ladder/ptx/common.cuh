// Small facts every kernel shares: the element type chosen at compile time, shared-memory
// addresses as 32-bit values, and the thread's place in its warp and warpgroup.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gl {

#if defined(GL_DTYPE_BF16)
using elem_t = __nv_bfloat16;
#elif defined(GL_DTYPE_FP16)
using elem_t = __half;
#else
#error "define GL_DTYPE_BF16 or GL_DTYPE_FP16"
#endif

// PTX shared-memory instructions take 32-bit shared-window addresses, not generic pointers.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes into this CTA's shared memory at a 16-byte aligned smem_u32 address (a generic pointer
// made by arithmetic on an address, as SmemMap's, compiles to a generic store instead).
__device__ __forceinline__ void st_shared_v4(uint32_t addr, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

// 4 bytes into this CTA's shared memory at a 4-byte aligned smem_u32 address (a 32-bit address: a generic
// pointer per row held 64-bit addresses in registers a 192-accumulator epilogue did not have).
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ int warpgroup_index() { return threadIdx.x / 128; }

// x as lane 0 of the warp holds it: for a value the warp already agrees on (its warpgroup's index), the
// same value, which the compiler then knows to be warp-uniform (CUTLASS's canonical_warp_group_idx
// broadcasts for the same reason). Two uses: the role dispatch (a branch on a uniform value leaves the
// roles' code eligible for the uniform datapath), and a consumer's first A row in its K loop, so the
// loop's shared-memory addresses and wgmma descriptors live in uniform registers and each wgmma takes its
// descriptors with no R2UR moves (the 64 x 64 tile's path from its full-barrier wait to its last wgmma: 68
// instructions before, 32 after). The consumer index itself stays per-thread: made uniform for the whole
// role, it spilled the 64-row BN 256 builds and a BN 256 epilogue build (and the K loops keep it
// per-thread at BN 192 and 256: ptx/wgmma.cuh's kShortGroup). The warp must be converged at the call (a
// kernel's role dispatch and a wgmma loop's entry are).
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }
__device__ __forceinline__ int thread_in_warpgroup() { return threadIdx.x % 128; }

// Two fp32 accumulators -> one 4-byte pair of output elements, rounded to nearest.
__device__ __forceinline__ uint32_t pack2(float x, float y) {
#if defined(GL_DTYPE_BF16)
  __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
#else
  __half2 v = __floats2half2_rn(x, y);
#endif
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ elem_t to_elem(float x) {
#if defined(GL_DTYPE_BF16)
  return __float2bfloat16_rn(x);
#else
  return __float2half_rn(x);
#endif
}

// Align a dynamic shared-memory pointer up to `align` bytes (128B swizzle wants 1024).
template <int align>
__device__ __forceinline__ uint8_t* align_up(uint8_t* p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>((v + align - 1) & ~uintptr_t(align - 1));
}

}  // namespace gl
