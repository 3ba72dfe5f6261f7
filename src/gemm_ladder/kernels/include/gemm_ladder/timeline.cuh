// Per-CTA timestamps for a measuring build of a kernel (GL_TIMELINE defined; bench/small_m_timeline.py).
//
// With GL_TIMELINE, GL_TIMELINE_STAMP(cond, slot) writes %globaltimer (nanoseconds, PTX ISA "Special
// Registers: %globaltimer") and clock64 (SM cycles) of the calling thread into row blockIdx.x of two
// __device__ arrays, which the host reads with cuModuleGetGlobal after the launch;
// GL_TIMELINE_COUNT(cond, slot) adds 1 to a slot (the host zeroes the arrays first),
// GL_TIMELINE_VALUE(cond, slot, v) stores a value, and GL_TIMELINE_MARK(cond, scratch) /
// GL_TIMELINE_PHASE(cond, slot, scratch) split a run of consecutive phases: a phase adds the nanoseconds
// since the last mark or phase to its slot and marks its own end, the mark kept in the scratch slot
// (memory, not a register: a phase may enclose a main loop that has none to spare; one call per boundary).
// A phase's read of the mark waits on the cache once per boundary, in one thread: the timeline build's
// time over the shipped build's says what the stamps cost (bench/experiments/gemm_timeline.py). Fire-and-
// forget atomic adds instead (no load) spilled sm90_gemm.cu's BN 256 build.
// Without it (every shipped build) the macros expand to nothing, so the kernel compiles exactly as
// without this header.
#pragma once

#if defined(GL_TIMELINE)
#ifndef GL_TIMELINE_CTAS
#define GL_TIMELINE_CTAS 4096  // rows: CTAs with a larger blockIdx.x are not stamped
#endif
#ifndef GL_TIMELINE_SLOTS
#define GL_TIMELINE_SLOTS 16
#endif
__device__ unsigned long long gl_timeline_ns[GL_TIMELINE_CTAS][GL_TIMELINE_SLOTS];
__device__ long long gl_timeline_clk[GL_TIMELINE_CTAS][GL_TIMELINE_SLOTS];

namespace gl {
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ void timeline_stamp(int slot) {
  if (blockIdx.x < GL_TIMELINE_CTAS) {
    gl_timeline_ns[blockIdx.x][slot] = globaltimer_ns();
    gl_timeline_clk[blockIdx.x][slot] = clock64();
  }
}

__device__ __forceinline__ void timeline_value(int slot, unsigned long long v) {
  if (blockIdx.x < GL_TIMELINE_CTAS) gl_timeline_ns[blockIdx.x][slot] = v;
}

__device__ __forceinline__ void timeline_count(int slot) {
  if (blockIdx.x < GL_TIMELINE_CTAS) gl_timeline_ns[blockIdx.x][slot] += 1;  // one thread per slot
}

__device__ __forceinline__ void timeline_mark(int scratch) {
  if (blockIdx.x < GL_TIMELINE_CTAS) gl_timeline_ns[blockIdx.x][scratch] = globaltimer_ns();
}

__device__ __forceinline__ void timeline_phase(int slot, int scratch) {  // the thread that marked
  if (blockIdx.x < GL_TIMELINE_CTAS) {
    const unsigned long long now = globaltimer_ns();
    gl_timeline_ns[blockIdx.x][slot] += now - gl_timeline_ns[blockIdx.x][scratch];
    gl_timeline_ns[blockIdx.x][scratch] = now;
  }
}

// SM cycles (clock64) a consumer spends waiting for its stages' data, added up in registers over the
// K iterations it brackets (cluster_ring.cuh's consume_k_range): two clock reads an iteration and no
// memory traffic, so the loop it measures keeps its pace. The kernel stores cycles() in a slot once.
struct CycleWaitClock {
  unsigned long long sum = 0;
  long long t0 = 0;
  __device__ __forceinline__ void begin() { t0 = clock64(); }
  __device__ __forceinline__ void end() { sum += static_cast<unsigned long long>(clock64() - t0); }
  __device__ __forceinline__ unsigned long long cycles() const { return sum; }
};
}  // namespace gl

// One guard for every stamp: with GL_TIMELINE the call runs where `cond` holds; without it the whole
// statement, the call's arguments included (smid() exists only here), expands to nothing.
#define GL_TIMELINE_IF(cond, call) \
  do {                             \
    if (cond) ::gl::call;          \
  } while (0)
#else
#define GL_TIMELINE_IF(cond, call) \
  do {                             \
  } while (0)
#endif
#define GL_TIMELINE_STAMP(cond, slot) GL_TIMELINE_IF(cond, timeline_stamp(slot))
#define GL_TIMELINE_VALUE(cond, slot, v) GL_TIMELINE_IF(cond, timeline_value(slot, v))
#define GL_TIMELINE_COUNT(cond, slot) GL_TIMELINE_IF(cond, timeline_count(slot))
#define GL_TIMELINE_MARK(cond, scratch) GL_TIMELINE_IF(cond, timeline_mark(scratch))
#define GL_TIMELINE_PHASE(cond, slot, scratch) GL_TIMELINE_IF(cond, timeline_phase(slot, scratch))
