// The bias as one more K step: D += ones(BM x 1) bias(1 x BN) on the tensor cores, inside the tile's main loop,
// instead of a vector load and an add per accumulator in the epilogue (library kernels with GL_BIAS_MMA_SLOT,
// which library/epilogue.py defines for a linear call whose bias the kernel adds this way).
//
// Why: the epilogue's bias costs the general kernel 4-17% over plain at short K (docs/epilogues.md: 22% more
// instructions, the vector's loads and the panel barrier behind them at each tile's end, where both consumers'
// tensor cores wait). Here the tile's bias is one k16 wgmma issued behind the tile's last K tile, so its cost is
// a few shared stores per thread and one named barrier, while the last K tile's group is still in flight.
//
// The stage: after a unit's last K tile the producer takes one more ring stage and arrives on its full barrier
// without loading anything (stage_ring.cuh's produce_empty_stage); the consumers fill its first k16 step themselves, in the
// K-major 128B-swizzle layout operand_desc_at<0> reads (ptx/wgmma.cuh), whatever the build's operand majors:
//   A: row r's element k = 0 is 1 (or the bias of kernel row r, when the output is swapped), k = 1..15 are 0;
//   B: row n's element k = 0 is the bias of kernel column n (or 1, swapped), k = 1..15 are 0;
// so the product adds bias(n) (or bias(r)) exactly: bias x 1 is exact and accumulates in fp32 like every
// product. The stage goes back to the ring as any other (consume_k_range's release). Rows past the output
// get 0 and are never stored.
//
// Ordering (PTX ISA "Memory Consistency Model", proxies): the generic-proxy stores are made visible to the
// async proxy that wgmma reads shared memory through with fence.proxy.async.shared::cta by every writing
// thread, then a named barrier over the CTA's consumers (B's rows are shared: each consumer writes its
// share of them) before any wgmma of the step. The stage's previous readers are done: the producer took it
// through its empty barrier, as for a TMA load.
#pragma once
#include <type_traits>

#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"

namespace gl {

// Named barrier of the bias stage (0 is __syncthreads; the general kernel's store barriers are 2 and 3).
constexpr int kBiasStageBarrier = 1;

__device__ __forceinline__ uint32_t elem_bits_of_one() {
  if constexpr (std::is_same<elem_t, __nv_bfloat16>::value) {
    return 0x3F80u;  // bf16 1.0
  } else {
    return 0x3C00u;  // fp16 1.0
  }
}

// Row `row`'s first k16 step of a K-major 128B-swizzle tile at shared-window address `tile`: its 16-byte chunks
// 0 and 1 sit at chunk (c ^ (row & 7)) of the row's 128-byte line (the swizzle TMA writes and the descriptor
// reads). st.shared (STS), not a generic store the compiler cannot place.
__device__ __forceinline__ void store_k16_row(uint32_t tile, int row, uint32_t first) {
  const uint32_t line = tile + row * 128;
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %2, %2};" ::"r"(line + ((0 ^ (row & 7)) << 4)), "r"(first), "r"(0u)
               : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(line + ((1 ^ (row & 7)) << 4)), "r"(0u) : "memory");
}

// The consumers' side of one bias stage (consume_k_range's extra stage, cluster_ring.cuh), by consumer
// `consumer` of kConsumers warpgroups of 64 A rows that share the stage (a, b): fill its first k16 step,
// order it, and accumulate this consumer's 64 rows of A times B into d. kSwap: the vector runs along the
// kernel's rows (the dispatcher's swapped output), else along its columns. `bias` is the vector (stride 1, the
// operands' dtype: the host checked), `first` the tile's first kernel row (kSwap) or column, `extent` the
// kernel's rows (kSwap) or columns. Everything is computed here from values live anyway (the stage's K loop
// holds every register the 256-wide tile has: state kept across it spilled). Each thread writes rows
// t, t + 128, ... of: its consumer's 64 A rows, then its share of B's (BN / kConsumers); a row's value is
// loaded right before its store, while the tile's last K group is still in flight on the tensor cores.
template <int BN, int kConsumers, bool kSwap>
__device__ __forceinline__ void bias_stage_step(float (&d)[BN / 2], elem_t* a, elem_t* b, int consumer,
                                                const void* bias, int first, int extent) {
  constexpr int kBRows = BN / kConsumers, kRows = 64 + kBRows;
  const int t = thread_in_warpgroup();
  const uint16_t* const vec = static_cast<const uint16_t*>(bias);
  const uint32_t one = elem_bits_of_one();
#pragma unroll
  for (int q = t; q < kRows; q += 128) {
    const bool on_a = q < 64;
    const int row = on_a ? 64 * consumer + q : consumer * kBRows + (q - 64);  // in its operand's tile
    uint32_t value = one;
    if (on_a == kSwap) {  // this row's element k = 0 is the vector's, 0 outside the output
      const int idx = first + row;
      value = idx < extent ? uint32_t(__ldg(vec + idx)) : 0u;
    }
    store_k16_row(smem_u32(on_a ? a : b), row, value);
  }
  fence_proxy_async_smem();
  named_barrier_sync(kBiasStageBarrier, 128 * kConsumers);
  wgmma_fence();
  Wgmma<BN, elem_t>::template mma<0, 0>(d, operand_desc_at<0>(smem_u32(a + 64 * consumer * 64)),
                                       operand_desc_at<0>(smem_u32(b)), 1);
}

// consume_k_range's extra stage: here(ke) whether a K range ending at K tile ke ends its unit's K (a stream-K
// piece before the last has none: ke < k_tiles), step(d, a, b) the stage's work on stage (a, b) (bias_stage_step).
template <class Step>
struct ExtraStage {
  static constexpr bool kOn = true;
  int k_tiles;
  Step step;
  __device__ __forceinline__ bool here(int ke) const { return ke == k_tiles; }
};
template <class Step>
__device__ __forceinline__ ExtraStage<Step> extra_stage(int k_tiles, Step&& step) {
  return {k_tiles, step};
}

}  // namespace gl
