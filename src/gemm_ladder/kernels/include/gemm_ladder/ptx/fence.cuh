// Memory-proxy fences (PTX ISA "membar/fence": proxy fences, mbarrier_init) and named barriers.
#pragma once

namespace gl {

// Ordinary (generic-proxy) shared-memory writes become visible to the async proxy (wgmma operand
// reads, TMA stores) only after this fence in each writing thread, followed by a barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Make mbarrier.init visible to the async proxy and to the other CTAs of the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Named CTA barrier `id` over `threads` threads (a multiple of 32): lets a subset of warps, such as the
// consumer warpgroups, synchronise without the producer (PTX ISA "bar.sync"). Id 0 is __syncthreads.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// named_barrier_sync that also ORs a predicate over the `threads` threads: every one of them gets
// true when any passed true (PTX ISA "bar.red"). One thread's finding reaches its warpgroup
// without a shared-memory word.
__device__ __forceinline__ int named_barrier_or(int id, int threads, int pred) {
  int out;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.s32 %0, 1, 0, q;\n}\n"
      : "=r"(out)
      : "r"(pred), "r"(id), "r"(threads)
      : "memory");
  return out;
}

}  // namespace gl
