// IEEE single-precision arithmetic rounded to nearest with subnormals kept, whatever the compile flags
// (the library compiles with --use_fast_math, which makes __fmul_rn and __fmaf_rn flush subnormals to
// zero): PTX ISA "mul", "fma", "rcp" in .rn without .ftz ("subnormal numbers are supported").
#pragma once

namespace gl {

__device__ __forceinline__ float mul_rn(float a, float b) {
  float d;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

__device__ __forceinline__ float fma_rn(float a, float b, float c) {
  float d;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

// 1 / a correctly rounded.
__device__ __forceinline__ float rcp_rn(float a) {
  float d;
  asm("rcp.rn.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}

}  // namespace gl
