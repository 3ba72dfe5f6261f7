// Thread-block clusters (PTX ISA "barrier.cluster", special register %cluster_ctarank) and their
// distributed shared memory (PTX ISA "mapa", "ld" with the .shared::cluster state space).
#pragma once
#include <cstdint>

namespace gl {

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Every thread of every CTA in the cluster arrives, then waits for all the others.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// cluster_sync for a kernel built for clusters of kCluster CTAs, __syncthreads for one CTA (a launch
// without a cluster: nothing beyond the CTA to wait for).
template <int kCluster>
__device__ __forceinline__ void sync_cta_or_cluster() {
  if constexpr (kCluster > 1) cluster_sync();
  else __syncthreads();
}

// The two halves of cluster_sync, for work in between (PTX ISA barrier.cluster): every thread of every
// CTA of the cluster arrives (.aligned: all threads of a warp execute the same one); release orders
// the thread's earlier memory accesses (loads included) before its arrival, and acquire makes the
// accesses released by every arrival of this phase visible to the waiting thread. A thread must wait
// before it arrives again.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The shared::cluster address of the variable at shared::cta address `smem` in the CTA of rank
// `rank` of this cluster (PTX ISA mapa: every CTA of a kernel lays its shared memory out alike).
__device__ __forceinline__ uint32_t cluster_map_shared(uint32_t smem, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem), "r"(rank));
  return remote;
}

// 16 bytes (16-byte aligned) of a peer CTA's shared memory, at a cluster_map_shared address. Volatile
// with a memory clobber: it must stay after the cluster barrier that publishes the data and before the
// one that lets its owner exit (the compiler does not move it across either).
__device__ __forceinline__ float4 ld_shared_cluster_v4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}

}  // namespace gl
