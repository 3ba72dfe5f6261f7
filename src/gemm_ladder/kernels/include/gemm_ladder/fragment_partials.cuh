// Split-K partials of a wgmma fragment of any width, handed between CTAs through global memory and
// added in a fixed (K) order by whichever contributor arrives last, so the sum is bitwise the same
// whatever order the CTAs finish in. Every split kernel's: level 9's and the library's 64 x BN fragments
// (stream_k.cuh's PartialSlots<BN>, BN / 2 accumulators per thread) and the small-M kernel's 64 x 8 ..
// 64 x 256 (4 .. 128 fp32 accumulators per thread).
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/fence.cuh"

namespace gl {

// The largest divisor of n that is at most cap (n >= 1): whole batches of loads.
__host__ __device__ constexpr int largest_divisor_up_to(int n, int cap) {
  for (int d = cap < n ? cap : n; d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// One warpgroup's fragment of kAcc fp32 accumulators per thread, one slot of 128 * kAcc floats per
// contributor, stored so that a warp's float4 accesses are contiguous: float4 v of thread t lives at
// slot[v * 128 + t].
template <int kAcc>
struct FragmentPartials {
  static_assert(kAcc % 4 == 0, "whole float4s per thread");
  static constexpr int kVec = kAcc / 4;
  static constexpr int kFloats = 128 * kAcc;  // one slot
  // float4 loads in flight per batch while reducing: latency, not registers, is what is short.
  static constexpr int kBatch = largest_divisor_up_to(kVec, 8);  // 6 at BN 96 and 144 (kVec 12, 18)
  static_assert(kVec % kBatch == 0, "whole batches of float4s");
  float* base;  // slot 0 of this tile and warpgroup

  __device__ __forceinline__ void store(int slot, const float (&d)[kAcc]) const {
    float4* dst = reinterpret_cast<float4*>(base + static_cast<size_t>(slot) * kFloats) + thread_in_warpgroup();
#pragma unroll
    for (int v = 0; v < kVec; ++v) __stcg(dst + v * 128, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
  }

  // d = slot 0 + slot 1 + ... + slot n-1, added in this order. The caller's own partial is read back
  // from its slot like the others, so the order does not depend on who reduces, and d need not stay
  // live beside the loads (it would spill). One L2 round trip per slot (ptxas issues a slot's loads
  // before its adds); loading several slots per round trip was measured without gain
  // (docs/where-time-goes.md).
  __device__ __forceinline__ void reduce(int n, float (&d)[kAcc]) const {
    const float4* src = reinterpret_cast<const float4*>(base) + thread_in_warpgroup();
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const float4 x = __ldcg(src + v * 128);
      d[4 * v] = x.x, d[4 * v + 1] = x.y, d[4 * v + 2] = x.z, d[4 * v + 3] = x.w;
    }
#pragma unroll 1
    for (int i = 1; i < n; ++i) {
      const float4* slot = src + static_cast<size_t>(i) * (kFloats / 4);
#pragma unroll
      for (int v0 = 0; v0 < kVec; v0 += kBatch) {
        float4 x[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) x[j] = __ldcg(slot + (v0 + j) * 128);
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          float* e = d + 4 * (v0 + j);
          e[0] += x[j].x, e[1] += x[j].y, e[2] += x[j].z, e[3] += x[j].w;
        }
      }
    }
  }

  // The same sum, slot 0 + slot 1 + ... + slot n-1 in this order (bitwise reduce's), handed out a batch
  // of float4s at a time: op(v, x) for each float4 v of the sum, x = (d[4v], ..., d[4v + 3]). For a caller
  // that stores the sum as it comes instead of holding it whole (the grouped kernel's stream-K tail at
  // BN 256: the sum written into its wgmma accumulators made ptxas serialise every wgmma, C7515, and a
  // second array of 128 beside them spilled).
  template <class Op>
  __device__ __forceinline__ void reduce_each(int n, Op&& op) const {
    const float4* src = reinterpret_cast<const float4*>(base) + thread_in_warpgroup();
#pragma unroll 1
    for (int v0 = 0; v0 < kVec; v0 += kBatch) {
      float4 x[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) x[j] = __ldcg(src + (v0 + j) * 128);
#pragma unroll 1
      for (int i = 1; i < n; ++i) {
        const float4* slot = src + static_cast<size_t>(i) * (kFloats / 4);
        float4 y[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) y[j] = __ldcg(slot + (v0 + j) * 128);
#pragma unroll
        for (int j = 0; j < kBatch; ++j) x[j].x += y[j].x, x[j].y += y[j].y, x[j].z += y[j].z, x[j].w += y[j].w;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) op(v0 + j, x[j]);
    }
  }
};

// One warpgroup (128 threads, named barrier `bar`, `elected` its thread 0) hands in its partial as
// contributor `mine` of `n` on `counter`, which the launch gave zeroed. Returns true in every thread
// of the warpgroup that arrived last, which must then reduce and store the tile. Ordering (CUDA's
// threadfence pattern): each thread's partial stores, its fence, the barrier, one atomic; the last
// arriver fences before reading.
template <int kAcc>
__device__ __forceinline__ bool hand_in_fragment(const FragmentPartials<kAcc>& slots, int* counter, int mine, int n,
                                                 const float (&d)[kAcc], int bar, bool elected) {
  slots.store(mine, d);
  __threadfence();
  named_barrier_sync(bar, 128);
  const int last = elected && atomicAdd(counter, 1) == n - 1;
  // The same in every thread; broadcast so the compiler knows it (ptx/common.cuh warp_uniform): the K loop
  // after a branch on it stays in uniform registers.
  const bool any_last = warp_uniform(named_barrier_or(bar, 128, last));
  if (any_last) __threadfence();
  return any_last;
}

}  // namespace gl
