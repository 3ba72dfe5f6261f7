// Library kernel sm90_swiglu: the gated MLP of Llama, in one kernel that reads each x tile once for
// both products:  out (M, N) = silu(x @ w_gate^T) * (x @ w_up^T),  x (M, K), w_gate and w_up (N, K),
// all row-major (K-major: nn.Linear's weights), fp32 accumulation and epilogue, one rounding to the
// inputs' dtype. library/swiglu.py plans and launches it.
//
// Level 9's design (persistent, a producer warpgroup, 2-CTA clusters multicasting B, two consumer
// warpgroups of 64 rows on a 128 x 256 accumulator tile, per-consumer panel rings, stream-K tail),
// with the 256 rows of each B stage taken from two weights: CTA rank 0 loads rows [128 tn, 128 tn + 128)
// of w_gate into the stage's first half, rank 1 the same rows of w_up into its second half, each
// multicast to both CTAs (produce_units<BSlice::kPerRankMap>, stage_ring.cuh). So accumulator column
// c < 128 is gate column 128 tn + c and column 128 + c its up column: one tile yields a 128 x 128
// output tile, and gate and up of each output are in the same thread (gated_epilogue.cuh). Each
// consumer stores its 64 x 128 outputs as two 64 x 64 panels through its panel ring (panel_ring.cuh).
//
// The plan is the designer's for the GEMM this kernel computes before its epilogue: x times a weight
// of 2 x ceil(N / 128) x 128 rows that interleaves 128-row blocks of w_gate and w_up (library/swiglu.py
// gives the argument): its tile, ring, shared memory, schedule and stream-K tail are this kernel's; its
// tensor maps are the real x, w_gate, w_up (N rows each: TMA zero-fills rows past N) and out (the
// store clips columns past N and rows past M), and GL_C_PANELS is the output tile's 2.
//
// Why a kernel body of its own, not level 9's with switches: the ladder's level 9 stays one idea per
// level. The loop below repeats level 9's structure (roles, whole units, stream-K pieces) and shares
// every step with it through the headers: the producer (stage_ring.cuh), the consumer's K loop
// (cluster_ring.cuh), the tail (stream_k.cuh), the panel stores (panel_ring.cuh). What differs is
// the B slice's source, the output tile's width and the epilogue; and with two panels per consumer and
// a ring of two buffers, every panel goes out at the end of its tile (level 9 defers two of its four
// into the next tile's main loop: here there is nothing left to defer).
//
// The quantized build (GL_OUT_E4M3; library/swiglu.py's quantized kernel): the output leaves as e4m3 values
// with one fp32 scale per row and 128 columns, what quantize_fp8(out, (1, 128)) computes from the fp32
// product, so the next fp8 GEMM (the MLP's down projection) reads it as it is. A tile's 128 output columns
// are one scale block, held by the four lanes of a quad (quantized_store.cuh); stored from registers, so the
// plan stages no C and the ring gets that shared memory. The kernel takes the values' and the scales'
// pointers and pitches in place of the output's tensor map (QuantizedOut).
#include <type_traits>

#include "gemm_ladder/cluster_ring.cuh"
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/gated_epilogue.cuh"
#include "gemm_ladder/panel_ring.cuh"
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/quantized_store.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/stream_k.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

static_assert(BM == 128 && GL_CONSUMERS == 2 && GL_CLUSTER == 2 && GL_PRODUCER_WG == 1,
              "sm90_swiglu: level 9's 128-row tile, two consumer warpgroups, a 2-CTA cluster and a producer warpgroup");
static_assert(BN == 256 && BK == 64, "sm90_swiglu: 128 gate and 128 up columns per tile, BK = 64");
static_assert(A_MN_MAJOR == 0 && B_MN_MAJOR == 0, "sm90_swiglu: x, w_gate and w_up K-major (row-major)");
constexpr int kOutBN = BN / 2;  // output columns per tile
static_assert(GL_B_BOX_ROWS == kOutBN, "each CTA rank loads one weight's rows of the tile's output columns");
constexpr int kFirstStoreBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads (0 is __syncthreads)

// Where the output goes: the output's tensor map (the panel rings and TMA stores), or (the quantized build)
// the e4m3 values at ptr[r * ld + c] and the scale of row r and the tile's 128 columns tn at
// scales[tn * ld_scales + r].
struct TmaOut {
  const CUtensorMap* map;
};
struct QuantizedOut {
  __nv_fp8_e4m3* ptr;
  long long ld;
  float* scales;
  long long ld_scales;
};

// The kernel body for either output (Out: TmaOut or QuantizedOut); the entry point below picks it.
template <class Out>
__device__ __forceinline__ void swiglu_body(const CUtensorMap& map_x, const CUtensorMap& map_gate,
                                            const CUtensorMap& map_up, const Out& out, int M, int N, int K,
                                            int tail_first_unit, int max_contributors, float* __restrict__ partials,
                                            int* __restrict__ counters) {
  constexpr bool kQuantized = std::is_same<Out, QuantizedOut>::value;
  static_assert(kQuantized ? (GL_C_PANELS == 0 && GL_C_RING == 0)
                           : (GL_C_PANELS == kOutBN * sizeof(elem_t) / 128 && GL_C_PANELS == GL_C_RING),
                "the output tile's panels, each with its own buffer (library/swiglu.py sets GL_C_PANELS); none "
                "staged for the quantized output, stored from registers");
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, kOutBN, GL_CLUSTER);  // units over output tiles of 128 columns
  const int k_tiles = (K + BK - 1) / BK;
  const int rank = cluster_cta_rank();
  const CUtensorMap* const map_w = rank == 0 ? &map_gate : &map_up;  // this CTA's half of every B stage
  const int first_unit = blockIdx.x / GL_CLUSTER, unit_stride = gridDim.x / GL_CLUSTER;
  // As level 9: units [0, whole_end) whole, the rest the stream-K tail.
  const int whole_end = whole_units_end(sched.total, tail_first_unit, k_tiles, unit_stride);
  const StreamKTail tail(whole_end, sched.total - whole_end, k_tiles, unit_stride);

  if constexpr (kQuantized) {
    if (threadIdx.x == 0) init_ring(smem, &map_x, map_w, &map_x);  // no output map: x's is prefetched twice
  } else {
    if (threadIdx.x == 0) init_ring(smem, &map_x, map_w, out.map);
  }
  cluster_sync();

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingPosition pos = produce_units<BSlice::kPerRankMap>(smem, &map_x, map_w, sched, k_tiles, rank, first_unit,
                                                            unit_stride, whole_end);
      for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
        const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
        int um, tn;
        sched.coords(seg.unit, um, tn);
        produce_k_range<BSlice::kPerRankMap>(smem, &map_x, map_w, um, tn, seg.kb, seg.ke, rank, pos);
        it = seg.next;
      }
    }
  } else {
    setmaxnreg_inc<232>();  // level 9's split of the register pool (its comment gives the arithmetic)
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // releases stages and issues this consumer's stores
    uint8_t* const ring = smem.c() + consumer * GL_C_RING * GL_SMEM_C_PANEL_BYTES;
    const int bar = kFirstStoreBarrier + consumer;
    uint32_t packed[kQuantized ? 1 : kOutBN / 4];  // this consumer's 64 x 128 outputs, two per register
    // silu(gate) * up of the accumulators, stored as the output tile of work unit `unit`.
    auto finish_tile = [&](int unit, const float (&d)[BN / 2]) {
      if constexpr (kQuantized) {
        // The tile's 128 columns are one scale block. Columns past N are zero (TMA zero-filled both weights'
        // rows there: silu(0) * 0), so they take no part in the amax, as quantize_fp8's blocks end at N.
        float o[kOutBN / 2];
        gate_fragment<BN>(o, d, Silu{});
        int um, tn;
        sched.coords(unit, um, tn);
        const int t = thread_in_warpgroup(), m0 = (um * GL_CLUSTER + rank) * BM + 64 * consumer;
        store_quantized_1x128<kOutBN>(out.ptr, out.ld, out.scales, out.ld_scales, o, m0 + 16 * (t / 32) + (t % 32) / 4,
                                      tn * kOutBN, tn, M, N);
      } else {
        pack_gated_fragment<BN>(packed, d, Silu{});
        int um, tn;
        sched.coords(unit, um, tn);
        const int m0 = (um * GL_CLUSTER + rank) * BM + 64 * consumer;
#pragma unroll
        for (int p = 0; p < GL_C_PANELS; ++p) store_panel(p, packed, ring, out.map, tn * kOutBN, m0, bar, elected);
      }
    };
    RingPosition pos{0};
    for (int unit = first_unit; unit < whole_end; unit += unit_stride) {
      float d[BN / 2];
      consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [](int) {});
      finish_tile(unit, d);
    }
    for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
      const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
      it = seg.next;
      float d[BN / 2];
      consume_k_range(smem, d, consumer, seg.kb, seg.ke, pos, elected, [](int) {});
      if (seg.contributors > 1) {  // fp32 partials of the whole 256-column accumulator, as level 9's
        const int slot = ((seg.unit - whole_end) * GL_CLUSTER + rank) * GL_CONSUMERS + consumer;
        const PartialSlots<BN> slots{partials + static_cast<size_t>(slot) * max_contributors * PartialSlots<BN>::kFloats};
        if (!hand_in_fragment(slots, counters + slot, seg.mine, seg.contributors, d, bar, elected))
          continue;  // another contributor finishes this tile
        slots.reduce(seg.contributors, d);
      }
      finish_tile(seg.unit, d);
    }
    if constexpr (!kQuantized) {
      if (elected) tma_store_wait_read<0>();
    }
  }
  cluster_sync();
}

// ---- The entry point: the output's arguments as the build says (GL_OUT_E4M3: the quantized output) -----
#if defined(GL_OUT_E4M3)
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    sm90_swiglu(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_gate,
                const __grid_constant__ CUtensorMap map_up, __nv_fp8_e4m3* __restrict__ C, long long ldc,
                float* __restrict__ scale_out, long long ld_scale_out, int M, int N, int K, int tail_first_unit,
                int max_contributors, float* __restrict__ partials, int* __restrict__ counters) {
  swiglu_body(map_x, map_gate, map_up, QuantizedOut{C, ldc, scale_out, ld_scale_out}, M, N, K, tail_first_unit,
              max_contributors, partials, counters);
}
#else
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    sm90_swiglu(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_gate,
                const __grid_constant__ CUtensorMap map_up, const __grid_constant__ CUtensorMap map_out, int M, int N,
                int K, int tail_first_unit, int max_contributors, float* __restrict__ partials,
                int* __restrict__ counters) {
  swiglu_body(map_x, map_gate, map_up, TmaOut{&map_out}, M, N, K, tail_first_unit, max_contributors, partials,
              counters);
}
#endif
