// Split-K partials of a wgmma fragment reduced through a cluster's distributed shared memory: the S
// CTAs of a cluster each computed one K range of the same tile; each writes its fp32 fragment into its
// own shared memory, and after a cluster barrier CTA r adds up ITS 1/S slice of the tile by reading
// that slice from every CTA q = 0, 1, ..., S - 1 in this order, so the sum is bitwise the same on every
// run, whichever CTA finishes first. No global workspace, no counters (fragment_partials.cuh is the
// global-memory protocol of uneven splits).
//
// Slices are float4 columns of the fragment: float4 v of a thread holds d[4v .. 4v + 3], which in
// wgmma's D layout (PTX ISA, wgmma D fragment; epilogue.cuh) are columns 8v + 2(l % 4) + {0, 1} of
// its rows 16w + l/4 and 16w + l/4 + 8 (thread t = 32w + l). CTA r takes v in [r x kPer, (r + 1) x kPer)
// with kPer = ceil(kVec / S): equal shares when S divides kVec = BN / 8; below that (BN = 8, or 16 with
// S >= 4, or 32 with S = 8) CTAs r >= kVec have no slice, a tile of at most 128 x 32 fp32 that a few
// CTAs reduce (accepted imbalance: it is at most 16 KB per contributor).
#pragma once
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

template <int kAcc, int S>
struct ClusterFragments {
  static_assert(kAcc % 4 == 0, "whole float4s per thread");
  static_assert(S == 2 || S == 4 || S == 8, "a portable cluster of 2, 4 or 8 CTAs");
  static constexpr int kVec = kAcc / 4;                 // float4s per thread
  static constexpr int kPer = (kVec + S - 1) / S;       // float4s of a thread's slice
  static constexpr int kFloats = 128 * kAcc;            // one warpgroup's fragment
  // Layout in shared memory (FragmentPartials' slot): warpgroup g's fragment at g x kFloats floats,
  // float4 v of thread t at float4 index v x 128 + t. A warp stores and loads 32 consecutive float4s
  // (512 contiguous bytes) at a time: 16-byte vectors and no bank conflict.
  float* base;  // this CTA's shared memory, 16-byte aligned

  // This warpgroup's fragment into this CTA's shared memory.
  __device__ __forceinline__ void store(int warpgroup, const float (&d)[kAcc]) const {
    const uint32_t dst = smem_u32(base + warpgroup * kFloats) + 16u * thread_in_warpgroup();
#pragma unroll
    for (int v = 0; v < kVec; ++v)
      st_shared_v4(dst + 16u * 128u * v, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
  }

  // The first float4 column of CTA `rank`'s slice (kVec or more: no slice).
  __device__ __forceinline__ static int first(int rank) { return rank * kPer; }

  // sum[i] = float4 first(rank) + i of this thread's fragment position, added over CTAs q = 0 .. S-1
  // in that order (entries past kVec are left as they are). Every load is issued before the first add,
  // so the S x kPer reads of the slice are in flight together. Call between the cluster barrier that
  // publishes every CTA's store and the one that lets them exit.
  __device__ __forceinline__ void reduce_slice(int warpgroup, int rank, float4 (&sum)[kPer]) const {
    const uint32_t mine = smem_u32(base + warpgroup * kFloats) + 16u * (thread_in_warpgroup() + 128u * first(rank));
    float4 x[S][kPer];
#pragma unroll
    for (int q = 0; q < S; ++q) {
      const uint32_t peer = cluster_map_shared(mine, q);
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        if (kVec % S == 0 || first(rank) + i < kVec) x[q][i] = ld_shared_cluster_v4(peer + 16u * 128u * i);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (!(kVec % S == 0 || first(rank) + i < kVec)) continue;
      float4 s = x[0][i];
#pragma unroll
      for (int q = 1; q < S; ++q) s.x += x[q][i].x, s.y += x[q][i].y, s.z += x[q][i].z, s.w += x[q][i].w;
      sum[i] = s;
    }
  }
};

}  // namespace gl
