// The stream-K tail's distributed reduction (sm90_gemm.cu's GL_SK_SPREAD build; split "tail_spread"):
// instead of the last contributor of a split unit reading every other contributor's partial and
// storing the whole tile alone while the other SMs idle, the unit's participants share the reduction.
// design/stream_k.py (SpreadTail) holds the same arithmetic and audit/reductions.py checks the protocol.
//
// Every contributor of a split unit hands in its fp32 partial (PartialSlots, stream_k.cuh) and counts
// itself on the fragment's counter. A contributor whose segment ends its cluster's range (it has
// nothing after it: the unit's first contributors, and its last one when that range ends with the
// unit) is a participant: it waits until all the unit's contributors have counted themselves, then
// adds the slots in slot (K) order for its share of the fragment and stores that share. A contributor
// whose range goes on after the unit (only the unit's last contributor can be one: its segment runs to
// the unit's end and its range continues) hands in and goes on. Each fragment's values are thus the sum
// of the same slots in the same order whoever reduces them: bitwise what split "tail" stores.
//
// No deadlock: a participant waits once, after its last K iteration and after its own hand-in, and
// every hand-in comes before any wait of its warpgroup (a range's non-participating segment is its
// first). So every hand-in is reached by running K iterations only, given that every CTA of the grid
// runs: the launch sizes the grid to the clusters that can be resident at once (max_active_clusters),
// and a CTA held back by another kernel on the SMs starts when that kernel's CTAs end. That last step
// assumes the other kernel's CTAs end without waiting on CTAs that cannot start: two launches that both
// spin (two spread launches on streams of different priority, say, each holding part of the SMs while
// its remaining CTAs wait for the other's) could wait on each other; a cooperative launch
// (CU_LAUNCH_ATTRIBUTE_COOPERATIVE) would make co-residency the driver's guarantee (not used yet).
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/stream_k.cuh"

namespace gl {

// Participants of the split unit of segment s (contributors > 1): its contributors but the last when
// that one's range goes on past the unit (begin(last + 1) beyond the unit's end). They are the
// contributors numbered 0 .. participants - 1 (s.mine), so s.mine is a participant's share index.
__host__ __device__ __forceinline__ int spread_participants(const StreamKTail& t, const StreamKTail::Segment& s) {
  const int base = (s.unit - t.first_unit) * t.k_tiles;
  const int last = t.owner(base) + s.contributors - 1;
  return s.contributors - (t.begin(last + 1) > base + t.k_tiles ? 1 : 0);
}

// A strong acquire load of a counter in global memory (PTX ISA, "ld": .acquire at .gpu scope).
__device__ __forceinline__ int load_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Hand in this warpgroup's partial (slot `mine`) and count it, without waiting: the ordering of
// hand_in_partial (each thread's stores, its fence, the barrier, one atomic).
template <int BN>
__device__ __forceinline__ void spread_hand_in(const PartialSlots<BN>& slots, int* counter, int mine,
                                               const float (&d)[BN / 2], int bar, bool elected) {
  slots.store(mine, d);
  __threadfence();
  named_barrier_sync(bar, 128);
  if (elected) atomicAdd(counter, 1);  // the launch zeroed the counters
}

// Hand in, then wait until all `n` contributors of the fragment have: the elected thread spins on an
// acquire load, fences, and releases the warpgroup through the barrier; the slots are then read
// through L2 (__ldcg), where the other contributors' stores (__stcg) landed.
template <int BN>
__device__ __forceinline__ void spread_hand_in_and_wait(const PartialSlots<BN>& slots, int* counter, int mine, int n,
                                                        const float (&d)[BN / 2], int bar, bool elected) {
  spread_hand_in(slots, counter, mine, d, bar, elected);
  if (elected) {
    while (load_acquire_gpu(counter) < n) {
    }
    __threadfence();
  }
  named_barrier_sync(bar, 128);
}

__device__ __forceinline__ void spread_store_pair(elem_t* p, float x0, float x1) {
  *reinterpret_cast<uint32_t*>(p) = pack2(x0, x1);
}
__device__ __forceinline__ void spread_store_pair(float* p, float x0, float x1) {
  *reinterpret_cast<float2*>(p) = make_float2(x0, x1);
}
__device__ __forceinline__ void spread_store_one(elem_t* p, float x) { *p = to_elem(x); }
__device__ __forceinline__ void spread_store_one(float* p, float x) { *p = x; }

// Pair (x0, x1) at row `row`, columns col, col + 1 of a rows x cols output at C (pitch ldc elements):
// through pair_op (the fused epilogue, or nothing), then stored if in range, as one pair where aligned.
template <typename OutT, typename PairOp>
__device__ __forceinline__ void spread_store(OutT* __restrict__ C, long long ldc, float x0, float x1, int row, int col,
                                             int rows, int cols, PairOp& pair_op) {
  if (row >= rows || col >= cols) return;
  pair_op(x0, x1, row, col);
  OutT* const p = C + static_cast<long long>(row) * ldc + col;
  if (col + 1 < cols && reinterpret_cast<uintptr_t>(p) % (2 * sizeof(OutT)) == 0) {
    spread_store_pair(p, x0, x1);
  } else {
    spread_store_one(p, x0);
    if (col + 1 < cols) spread_store_one(p + 1, x1);
  }
}

// Share `share` of `shares` of one consumer's 64 x BN fragment (rows row0.., columns col0.. of the
// rows x cols output): float4s [share F / shares, (share + 1) F / shares) of the F = 16 BN of the
// slots' layout (float4 v of thread t at index v * 128 + t: thread t's accumulators 4v .. 4v + 3, two
// pairs at rows 16 (t / 32) + (t % 32) / 4 and 8 below, columns 8v + 2 (t % 4) + {0, 1}: epilogue.cuh's
// fragment). The shares differ by at most one float4 and cover the fragment once. Each float4 is the
// sum of slots 0 .. n-1 in slot order (PartialSlots::reduce's order), then stored by pairs.
template <int BN, typename OutT, typename PairOp>
__device__ __forceinline__ void spread_reduce_store(const PartialSlots<BN>& slots, int n, int share, int shares,
                                                    OutT* __restrict__ C, long long ldc, int row0, int col0, int rows,
                                                    int cols, PairOp&& pair_op) {
  constexpr int kF4 = PartialSlots<BN>::kFloats / 4;
  // Loads in flight: kQ float4s of this thread's share x kBatch slots, then their adds in slot order.
  // The reduction is latency-bound (a few float4s per thread and slot), so its round trips to L2 are
  // what it costs: 16 loads per round trip; the accumulators (dead after the hand-in) leave the room.
  constexpr int kQ = 4, kBatch = 4;
  const int lo = share * kF4 / shares, hi = (share + 1) * kF4 / shares;
  const float4* const src = reinterpret_cast<const float4*>(slots.base);
#pragma unroll 1
  for (int q0 = lo + thread_in_warpgroup(); q0 < hi; q0 += 128 * kQ) {
    // Float4 q0 + 128 j of slot i at at[j][i * kF4]; past the share's end a j reads the last float4 of
    // the share again (loads without predicates, sums never stored).
    const float4* at[kQ];
#pragma unroll
    for (int j = 0; j < kQ; ++j) at[j] = src + min(q0 + 128 * j, hi - 1);
    float4 s[kQ];
#pragma unroll
    for (int j = 0; j < kQ; ++j) s[j] = __ldcg(at[j]);
    int i = 1;
#pragma unroll 1
    for (; i + kBatch <= n; i += kBatch) {
      float4 x[kBatch][kQ];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
#pragma unroll
        for (int j = 0; j < kQ; ++j) x[b][j] = __ldcg(at[j] + (i + b) * kF4);
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
#pragma unroll
        for (int j = 0; j < kQ; ++j) s[j].x += x[b][j].x, s[j].y += x[b][j].y, s[j].z += x[b][j].z, s[j].w += x[b][j].w;
    }
#pragma unroll 1
    for (; i < n; ++i) {
      float4 x[kQ];
#pragma unroll
      for (int j = 0; j < kQ; ++j) x[j] = __ldcg(at[j] + i * kF4);
#pragma unroll
      for (int j = 0; j < kQ; ++j) s[j].x += x[j].x, s[j].y += x[j].y, s[j].z += x[j].z, s[j].w += x[j].w;
    }
#pragma unroll
    for (int j = 0; j < kQ; ++j) {
      const int q = q0 + 128 * j;
      const int t = q % 128, v = q / 128, lane = t % 32;  // the slots' thread t (lo need not be a multiple of 128)
      const int row = row0 + 16 * (t / 32) + lane / 4, col = col0 + 8 * v + 2 * (lane % 4);
      if (q < hi) {
        spread_store(C, ldc, s[j].x, s[j].y, row, col, rows, cols, pair_op);
        spread_store(C, ldc, s[j].z, s[j].w, row + 8, col, rows, cols, pair_op);
      }
    }
  }
}

}  // namespace gl
