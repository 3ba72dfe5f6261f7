// Level 9's stream-K tail: the work units left over after the last whole wave are split by K
// iterations, evenly over every resident cluster, instead of leaving part of the GPU idle while
// the last partial wave runs. The same integer arithmetic is in gemm_ladder/design/stream_k.py
// (which sizes the workspace and is what the CPU tests check); keep the two alike.
//
// The tail's K iterations are numbered it = u * k_tiles + kt over tail units u; cluster c owns
// [begin(c), begin(c + 1)) with begin(c) = floor(c * total / clusters). A unit whose iterations
// span several clusters gets one fp32 partial per contributing cluster; the contributor that
// arrives last (an atomic counter per tile and consumer) adds them in K order and stores the tile.
// The launch splits a tail only when it has at least one iteration per cluster (total >= clusters):
// every range is then non-empty, so owner(last) - owner(first) + 1 counts exactly the contributors
// that will arrive.
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/fence.cuh"

namespace gl {

struct StreamKTail {
  int first_unit;  // units [0, first_unit) are whole (data-parallel); the tail follows
  int units, k_tiles, clusters;
  int total;  // units * k_tiles; the launch keeps (clusters + 1) * total below 2^31, so 32-bit math holds

  __host__ __device__ StreamKTail(int first_unit_, int units_, int k_tiles_, int clusters_)
      : first_unit(first_unit_), units(units_), k_tiles(k_tiles_), clusters(clusters_), total(units_ * k_tiles_) {}

  __host__ __device__ int begin(int c) const { return c * total / clusters; }
  // The cluster whose range holds iteration `it`: the largest c with begin(c) <= it.
  __host__ __device__ int owner(int it) const { return ((it + 1) * clusters + total - 1) / total - 1; }

  // The piece of cluster c's range [it, end) that starts at `it`: K tiles [kb, ke) of one unit
  // (counted over all units: the tail's first is first_unit), the cluster's place among the unit's
  // contributors, and where the next piece starts. Walk a range with
  //   for (int it = t.begin(c), end = t.begin(c + 1); it < end; it = seg.next) { seg = t.segment(c, it, end); ... }
  struct Segment {
    int unit, kb, ke, mine, contributors, next;
  };
  __host__ __device__ Segment segment(int c, int it, int end) const {
    const int u = it / k_tiles, base = u * k_tiles;
    const int ke = end - base < k_tiles ? end - base : k_tiles;
    const int first = owner(base), last = owner(base + k_tiles - 1);
    return {first_unit + u, it - base, ke, c - first, last - first + 1, base + ke};
  }
};

// The end of a persistent launch's whole units: `tail_first_unit` when the launch splits the units from
// it on by K over its `stride` clusters, else `units`. A split needs at least one K iteration of the tail
// per cluster (the tail's contributor counts assume it: design/stream_k.py); any other argument runs
// every unit whole, so it cannot miscount a unit's contributors.
__host__ __device__ __forceinline__ int whole_units_end(int units, int tail_first_unit, int k_tiles, int stride) {
  const int tail_units = units - tail_first_unit;
  return tail_first_unit >= 0 && tail_units > 0 && tail_units * k_tiles >= stride ? tail_first_unit : units;
}

// Partials of one consumer's 64 x BN fragment, one slot of 64 * BN floats per contributor, stored
// so that a warp's float4 accesses are contiguous: float4 v of thread t lives at slot[v * 128 + t].
template <int BN>
struct PartialSlots {
  static constexpr int kVec = BN / 8;  // float4s per thread (BN / 2 accumulators)
  static constexpr int kFloats = 64 * BN;
  static constexpr int kBatch = 8;  // float4 loads in flight while reducing: latency, not registers, is short
  static_assert(kVec % kBatch == 0, "whole batches of float4s");
  float* base;  // slot 0 of this (unit, CTA rank, consumer)

  __device__ __forceinline__ void store(int slot, const float (&d)[BN / 2]) const {
    float4* dst = reinterpret_cast<float4*>(base + static_cast<size_t>(slot) * kFloats) + thread_in_warpgroup();
#pragma unroll
    for (int v = 0; v < kVec; ++v) __stcg(dst + v * 128, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
  }

  // d = the sum of slots 0..n-1, added in slot (K) order whoever finishes last, so the result does
  // not depend on which cluster that was. The caller's own partial is read back from its slot like
  // the others: d need not stay live beside the loads (it would spill). One L2 round trip per slot
  // (ptxas issues a slot's loads before its adds); loading several slots per round trip was measured
  // without gain (docs/where-time-goes.md).
  __device__ __forceinline__ void reduce(int n, float (&d)[BN / 2]) const {
    const float4* src = reinterpret_cast<const float4*>(base) + thread_in_warpgroup();
#pragma unroll
    for (int v = 0; v < kVec; ++v) {  // slot 0 straight into d: kVec loads in flight
      const float4 x = __ldcg(src + v * 128);
      d[4 * v] = x.x, d[4 * v + 1] = x.y, d[4 * v + 2] = x.z, d[4 * v + 3] = x.w;
    }
#pragma unroll 1
    for (int i = 1; i < n; ++i) {
      const float4* slot = src + static_cast<size_t>(i) * (kFloats / 4);
#pragma unroll
      for (int v0 = 0; v0 < kVec; v0 += kBatch) {  // kBatch loads in flight, then their adds
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
};

// One consumer warpgroup (128 threads, named barrier `bar`) hands in its partial for a unit with
// `n` contributors. Returns true in every thread of the warpgroup that arrived last, which must
// then reduce and store the tile. Ordering (CUDA's threadfence pattern): each thread's partial
// stores, then its fence, then the barrier, then one atomic; the last arriver fences before reading.
template <int BN>
__device__ __forceinline__ bool hand_in_partial(const PartialSlots<BN>& slots, int* counter, int mine, int n,
                                                const float (&d)[BN / 2], int bar, bool elected) {
  slots.store(mine, d);
  __threadfence();
  named_barrier_sync(bar, 128);
  const int last = elected && atomicAdd(counter, 1) == n - 1;  // the launch zeroed the counters
  // The same in every thread; broadcast so the compiler knows it (ptx/common.cuh warp_uniform): the K loop
  // after a branch on it stays in uniform registers.
  const bool any_last = warp_uniform(named_barrier_or(bar, 128, last));
  if (any_last) __threadfence();
  return any_last;
}

}  // namespace gl
