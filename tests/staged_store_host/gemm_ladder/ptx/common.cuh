// Host stand-in for kernels/include/gemm_ladder/ptx/common.cuh, for tests/staged_store_host/model.cpp:
// compiles staged_store.cuh with a host C++ compiler. The warp is 32 std::threads; shared memory is a
// host array (g_smem), addressed by offsets as PTX's shared window is; __syncwarp a barrier of the 32.
#pragma once
#include <cstdint>
#include <cstring>

#define __device__
#define __forceinline__ inline
#define GL_STAGED_STORE_HOST_MODEL 1

struct uint4 { uint32_t x, y, z, w; };
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
struct Dim3 { unsigned x; };
extern thread_local Dim3 threadIdx;
void __syncwarp();
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
// PTX shf.r.clamp? No: __funnelshift_r wraps the shift (n & 31) (CUDA Math API, integer intrinsics).
inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t n) {
  return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> (n & 31));
}
extern uint8_t g_smem[];

namespace gl {
struct elem_t { uint16_t bits; };  // a 2-byte output element: the model's values are exact in bf16
inline uint16_t bf16_bits(float x) { uint32_t u = __float_as_uint(x); return static_cast<uint16_t>(u >> 16); }
inline uint32_t pack2(float x, float y) { return bf16_bits(x) | (static_cast<uint32_t>(bf16_bits(y)) << 16); }
inline uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(static_cast<const uint8_t*>(p) - g_smem); }
inline int thread_in_warpgroup() { return threadIdx.x % 128; }
inline void sts_b32(uint32_t a, uint32_t v) { std::memcpy(g_smem + a, &v, 4); }
inline void sts_v2b32(uint32_t a, uint32_t x, uint32_t y) { std::memcpy(g_smem + a, &x, 4); std::memcpy(g_smem + a + 4, &y, 4); }
inline uint4 lds_v4b32(uint32_t a) {
  if (a % 16) throw "misaligned 16-byte shared load";
  uint4 v; std::memcpy(&v, g_smem + a, 16); return v;
}
}  // namespace gl

namespace gl {
// Global stores, checked: aligned to their size; counted (vector stores, element stores).
void count_store(int bytes);
inline void check_aligned(const uint8_t* p, int n) {
  if (reinterpret_cast<uintptr_t>(p) % n) throw "misaligned global store";
}
inline void stg_v4(uint8_t* p, const uint4& v) { check_aligned(p, 16); std::memcpy(p, &v, 16); count_store(16); }
inline void stg_u16(uint8_t* p, uint16_t v) { check_aligned(p, 2); std::memcpy(p, &v, 2); count_store(2); }
inline void stg_u32(uint8_t* p, uint32_t v) { check_aligned(p, 4); std::memcpy(p, &v, 4); count_store(4); }
}  // namespace gl

namespace gl {
inline int opaque(int x) { return x; }
}  // namespace gl
