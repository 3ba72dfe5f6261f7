// Library kernel sm90_fp8_gemm: D (M, N) = scale(A (M, K) @ B (N, K)^T) (+ bias) with fp8 inputs (e4m3 or
// e5m2), fp32 accumulation and a bf16, fp16 or fp32 output (library/fp8.py plans, builds and launches it).
//
// Both operands are K-major (A row-major, B the (N, K) rows of torch._scaled_mm's column-major mat2): the
// fp8 forms of wgmma read K-major shared memory only. One stage holds a 128 x 128 tile of A and a BN x 128
// tile of B (BN = 128, or 64 for problems with fewer 128-wide tiles than SMs; 192, an experimental build
// with fewer shared-memory bytes per flop, below), each row one 128-byte swizzle span of 1-byte elements (BK = 128 = four k32 steps), loaded by
// TMA with zero fill outside the matrix, so the M, N and K tails need no masks in the main loop (a K tail
// of 16..112 elements multiplies zeros). The roles are level 7's: a producer warpgroup whose one thread
// issues the loads, and two consumer warpgroups of 64 rows each, on a ring of Cfg::kStages stages with
// full and empty mbarriers; the CTA is persistent and walks its tiles in groups of kGroupM M tiles. A
// build with Cfg::kBM = 64 (GL_FP8_BM) has one consumer warpgroup on a 64-row tile (256 threads, no
// register exchange, half the A bytes a stage, so a deeper ring): for decode's M <= 64, where a 128-row
// tile's second half is rows past M.
//
// The scales (Cfg::kScaleMode, GL_FP8_SCALE):
//  0 tensorwise: one fp32 scale each for A and B, applied once to the finished accumulators;
//  1 rowwise:    scale_a[m] and scale_b[n], applied once to the finished accumulators;
//  2 blockwise:  scale_a per row and 128-wide K block (torch's (M, K/128), passed K-block-major as a
//                (K/128, M) matrix: a tensor map over it, one 512-byte box of 128 rows per stage, loaded by
//                the producer with the operands and counted in the stage's expect_tx), and scale_b per
//                128 x 128 block of B (torch's (K/128, N/128), read by the consumers: one value per tile and
//                K block at BN 128 or 64, where a tile lies in one block, two at BN 192; from global memory in the block
//                that uses it, one block ahead (kScaleBAhead), or from a shared copy of the tile's column
//                made at the start of each K loop (kScaleBShared)).
// Promotion: every K block of 128 (one stage), the four k32 wgmmas write a temporary accumulator t
// (the first with scale-d = 0), and once they are complete each consumer adds t, times the block's
// scale (blockwise) or 1 (the other modes), into its fp32 main accumulator d with ordinary FMAs. The
// tensor core's own accumulation is thus never longer than 128 products; the sum over K blocks is fp32
// FMA (the accuracy torch._scaled_mm gets with use_fast_accum=False). The wait for t before the FMAs
// serialises each consumer's wgmma with its promotion; the two consumers interleave.
// BN = 192 (experimental, not launched by default): per stage 40 KiB of operands for 6.3 MFLOP against 32 KiB
// for 4.2 at BN 128, and each consumer's wgmma reads 8 KiB of shared memory per 0.79 MFLOP against 6 per 0.52:
// 13% fewer shared-memory bytes (TMA writes and wgmma reads) per flop. Its main accumulator and one
// temporary take 96 + 96 registers, so it promotes serially (kOverlap off: the two consumers interleave, each
// promoting while the other's wgmmas run). Blockwise, a 192-wide tile spans two 128-column blocks of B (its first
// column is 0 or 64 past a block's start): each K block has two scale_b values, the second taking the tile's
// columns from 128 (even tn) or 64 (odd tn) on.
//
// The epilogue stores from registers with plain global stores (two neighbouring columns per store when
// N and the output pitch are even), masked to the matrix, with the rowwise/tensorwise scales and the
// optional bias (Cfg::kBias: an fp32 vector of N) applied in fp32 before the one rounding.
// Cfg::kTmaStore (a bf16 or fp16 Out only) stores through shared memory instead: each consumer packs its
// 64 x BN rows, writes them into its own staging buffer (BN / 64 panels of 64 rows x 128 bytes, the 128B
// swizzle, the output tensor map's 64 x 64 box: the writes are free of bank conflicts), and its thread 0
// issues one TMA store per panel and one bulk group; the consumer goes straight on to the next tile's main
// loop. Before it writes the next tile into the same buffer, thread 0 waits until the last group has read
// shared memory (wait_group.read 0), then a named barrier over the warpgroup's 128 threads; after the
// writes, fence.proxy.async and the barrier again, so the store sees all of them. The C tail needs no
// mask there: the copy engine clips the box to the tensor map's extents.
// Split K (Cfg::kSplit, GL_FP8_SPLIT = 1; library/fp8.py picks it when the tiles are fewer than the SMs, as at
// decode's M <= 128, where the whole-tile grid would leave SMs without weight bytes to stream, and for a short
// last wave of tiles that fill the SMs): the launch's
// tail_first_unit says which tiles are split. Tiles [0, tail_first_unit) run whole as above; the K blocks of
// the rest are numbered over the tiles and divided evenly over the grid (stream_k.cuh's StreamKTail, level
// 9's stream-K tail; at decode the launch passes 0, every tile split; for a short last wave, the first tile of
// the wave before it, design/stream_k.py plan_wave). The producer and the consumers walk the same
// segments (a tile and a K-block range [kb, ke)), so their ring positions agree. A segment's partial is the
// consumer's fp32 main accumulator d after the promotion of its last K block (blockwise scales are applied
// per K block, inside the range). A tile with several contributors: each hands its partial in
// (hand_in_fragment: a slot in the global workspace, a fence, an atomic count per tile and consumer), and
// the one that arrives last adds the slots in K order (FragmentPartials::reduce, bitwise the same whoever
// arrives last) and runs the epilogue: the tensorwise and rowwise scales, the bias, the quantized output
// and both stores happen once, on the reduced sum. No contributor waits for another, so the split cannot
// deadlock on CTAs that are not resident. Without kSplit the kernel is the whole-tile loop alone.
// An e4m3 Out (GL_FP8_OUT = 3) quantizes the output in the epilogue instead (e4m3 values and one fp32 scale per row and
// 128 columns, as quantize_fp8 with block (1, 128) computes them), so that the next fp8 GEMM reads it as is.
//
// One templated kernel body, fp8::sm90_fp8_gemm<Cfg>, reads top to bottom; each build's variant is a
// member of its config, chosen with `if constexpr`, never a preprocessor branch: the tile width kBN, the
// ring's kStages, kScaleMode, the operands' fp8 types A and B, the output type Out, kBias, and kOverlap
// (the promotion overlapped with the next K block's wgmmas, or not), kTmaStore (the output staged in
// shared memory and written by TMA stores, or stored from registers) and kSplit (the stream-K split). The instantiation block at the end
// of this file is the one place that reads the build's -D constants (library/fp8.py's GL_FP8_*): it
// makes them the config type and defines the extern "C" entry point the loader finds by name.
//
// The operand element types of the 16-bit headers (GL_DTYPE_BF16) are unused here; the ptx/ headers need one.
#ifndef GL_DTYPE_BF16
#define GL_DTYPE_BF16 1
#endif
#include <cuda.h>
#include <cuda_fp8.h>
#include <type_traits>

#include "gemm_ladder/epilogue.cuh"  // stage_packed_panel_sw128
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/ptx/wgmma_fp8_ops.cuh"
#include "gemm_ladder/quantized_store.cuh"  // store_quantized_1x128
#include "gemm_ladder/stream_k.cuh"  // StreamKTail, PartialSlots; hand_in_fragment (fragment_partials.cuh)

namespace fp8 {
using namespace gl;

constexpr int BK = 128;
// The tile's rows (Cfg::kBM): 128 on two consumer warpgroups of 64 rows, or 64 on one (decode's M <= 64,
// where a 128-row tile's second half is rows past M: half the A bytes and wgmma work spent on nothing).
template <int kBM>
constexpr int kConsumersOf = kBM / 64;
template <int kBM>
constexpr int kThreadsOf = 128 * (1 + kConsumersOf<kBM>);
constexpr int kGroupM = 8;  // M tiles walked together, so that a wave of CTAs shares B tiles in L2
constexpr int kTensorwise = 0, kRowwise = 1, kBlockwise = 2;  // Cfg::kScaleMode (library/fp8.py SCALE_MODES)
// Empty barriers complete on one arrival per consumer warp, each after its own reads of the stage's
// scales (a warp may lag its warpgroup's other warps; one arrival per warpgroup would not cover them).
template <int kConsumers>
constexpr int kEmptyArrivals = kConsumers * 4;
// kTmaStore: named barrier kStoreBarrier + consumer orders each consumer's staging writes and its store (and,
// kScaleBShared, its scale_b copy's writes and reads)
// (id 0 is __syncthreads; kSplit's hand-in of a partial uses the same barrier, in program order); one staging panel is 64 rows x 128 bytes (64 columns of a 2-byte Out).
constexpr int kStoreBarrier = 1, kPanelBytes = 64 * 128;
// Cfg::kScaleBShared: the K blocks of scale_b a consumer's shared copy holds (a tile's or a split segment's
// whole range; library/fp8.py MAX_SHARED_SCALE_B_BLOCKS, K <= 16384: picks the build only where it fits).
constexpr int kSharedScaleBBlocks = 128;
// Blockwise: the 128-column blocks of B (scale_b columns) a tile's K block spans: one at BN 64 and 128 (a tile
// lies in one block), two at BN 192.
template <int kBN>
constexpr int kScaleBColumnsOf = kBN > 128 ? 2 : 1;

// What a config (Cfg) holds, each a static constexpr member or type: kBN (64, 128 or 192), kStages,
// kScaleMode (kTensorwise, kRowwise, kBlockwise), A and B (__nv_fp8_e4m3 or __nv_fp8_e5m2), Out
// (__nv_bfloat16, __half, float, or __nv_fp8_e4m3: e4m3 values with 1 x 128 scales computed in the
// epilogue), kBias, kOverlap, kTmaStore, kSplit, kBM (128, or 64: one consumer warpgroup),
// kScaleBAhead, kScaleBShared. The instantiation
// block's BuildConfig is the one a build compiles.
template <class Cfg>
__host__ __device__ constexpr bool config_ok() {
  // A 128 x 128 block of B (one scale per K block) spans one tile at BN = 128, two at BN = 64 (the launch
  // takes 64 when 128-wide tiles would leave SMs idle); a 192-wide tile spans two blocks (kScaleBColumnsOf).
  static_assert(Cfg::kBN == 128 || Cfg::kBN == 64 || Cfg::kBN == 192, "sm90_fp8_gemm: BN = 64, 128 or 192");
  // BN 192: 96 main accumulators and 96 of one temporary a thread (two temporaries would be 288 registers).
  static_assert(Cfg::kBN != 192 || (!Cfg::kOverlap && !Cfg::kSplit && Cfg::kBM == 128 && !Cfg::kScaleBAhead),
                "sm90_fp8_gemm: BN 192 is built serial (kOverlap off), unsplit, 128 rows, scale_b not loaded ahead");
  static_assert(!std::is_same_v<typename Cfg::Out, __nv_fp8_e4m3> || Cfg::kBN == 128,
                "the quantized output's 1 x 128 blocks are whole 128-wide tiles");
  static_assert(Cfg::kScaleMode >= kTensorwise && Cfg::kScaleMode <= kBlockwise,
                "kScaleMode: 0 tensorwise, 1 rowwise, 2 blockwise");
  static_assert(Cfg::kStages >= 2, "a ring of at least two stages");
  static_assert(!(Cfg::kScaleBShared && Cfg::kScaleBAhead), "scale_b from shared memory or loaded ahead, not both");
  static_assert(Cfg::kBM == 128 || Cfg::kBM == 64, "sm90_fp8_gemm: BM = 128 (two consumers) or 64 (one)");
  static_assert(!Cfg::kTmaStore || std::is_same_v<typename Cfg::Out, __nv_bfloat16> ||
                    std::is_same_v<typename Cfg::Out, __half>,
                "the TMA store stages 2-byte outputs (bf16, fp16) in 128-byte swizzled panels");
  return true;
}

// The ring's shared memory of a config: per stage A (BM x 128), B (BN x 128) and, blockwise, scale_a;
// with kTmaStore, each consumer's staging buffer (64 x BN of Out, 1024-byte aligned after B's ring).
template <class Cfg>
struct Smem {
  static constexpr int BN = Cfg::kBN, STAGES = Cfg::kStages, BM = Cfg::kBM, kConsumers = kConsumersOf<BM>;
  static constexpr int kABytes = BM * BK, kBBytes = BN * BK;
  static constexpr int kSaBytes = Cfg::kScaleMode == kBlockwise ? BM * 4 : 0;  // BM rows' scales of one K block
  static constexpr int kAOffset = 0;
  static constexpr int kBOffset = kAOffset + STAGES * kABytes;
  static constexpr int kCBytes = Cfg::kTmaStore ? 64 * BN * 2 : 0;  // one consumer's staging buffer
  static constexpr int kCOffset = kBOffset + STAGES * kBBytes;
  static constexpr int kSaOffset = kCOffset + kConsumers * kCBytes;
  static constexpr int kBarOffset = kSaOffset + STAGES * kSaBytes;
  static constexpr int kSbOffset = kBarOffset + 2 * STAGES * 8;  // kScaleBShared: each consumer's scale_b copy
  static constexpr int kSbBytes = Cfg::kScaleBShared ? kSharedScaleBBlocks * 4 * kScaleBColumnsOf<BN> : 0;
  static constexpr int kBytes = kSbOffset + kConsumers * kSbBytes + 1024;  // + the worst case of aligning the base
  static constexpr uint32_t kExpectTx = kABytes + kBBytes + kSaBytes;

  uint8_t* base;  // 1024-byte aligned: the 128B swizzle pattern repeats every 1024 bytes
  __device__ __forceinline__ explicit Smem(uint8_t* raw) : base(align_up<1024>(raw)) {}
  __device__ __forceinline__ uint8_t* a(int s) const { return base + kAOffset + s * kABytes; }
  __device__ __forceinline__ uint8_t* b(int s) const { return base + kBOffset + s * kBBytes; }
  __device__ __forceinline__ uint8_t* c(int consumer) const { return base + kCOffset + consumer * kCBytes; }
  __device__ __forceinline__ float* sa(int s) const { return reinterpret_cast<float*>(base + kSaOffset + s * kSaBytes); }
  __device__ __forceinline__ uint64_t* full(int s) const { return reinterpret_cast<uint64_t*>(base + kBarOffset) + s; }
  __device__ __forceinline__ float* sb(int consumer) const {
    return reinterpret_cast<float*>(base + kSbOffset + consumer * kSbBytes);
  }
  __device__ __forceinline__ uint64_t* empty(int s) const {
    return reinterpret_cast<uint64_t*>(base + kBarOffset) + STAGES + s;
  }
};

// Tile `t` of a grid of tiles_m x tiles_n, walked in groups of kGroupM M tiles (N fastest inside a group's column).
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kGroupM * tiles_n;
  const int first_m = (t / per_group) * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int r = t % per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

// Promotion: d += acc x scale in fp32 FMAs, the columns 8j.. with j < kFirst scaled by r0, r1 (the thread's two
// rows), the rest by h0, h1: kFirst = BN / 8 for a tile in one 128-column block of B, the second block's first
// column group for a 192-wide tile spanning two. A template, so that the split point is compile-time (no select
// per column). (A generic lambda for it crashed the CUDA 13.0 front end.)
template <int BN, int kFirst>
__device__ __forceinline__ void promote_columns(float (&d)[BN / 2], const float (&acc)[BN / 2], float r0, float r1,
                                                    float h0, float h1) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const float c0 = j < kFirst ? r0 : h0, c1 = j < kFirst ? r1 : h1;
    d[4 * j + 0] = fmaf(acc[4 * j + 0], c0, d[4 * j + 0]);
    d[4 * j + 1] = fmaf(acc[4 * j + 1], c0, d[4 * j + 1]);
    d[4 * j + 2] = fmaf(acc[4 * j + 2], c1, d[4 * j + 2]);
    d[4 * j + 3] = fmaf(acc[4 * j + 3], c1, d[4 * j + 3]);
  }
}

// Two outputs rounded to a 2-byte Out, packed as they lie in memory (x0 at the lower address).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float x0, float x1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x0, x1);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// A template, so that only the output type's branch is compiled.
template <typename T>
__device__ __forceinline__ void store_pair(T* __restrict__ C, long long ldc, int row, int col, int M, int N,
                                           float x0, float x1, bool pairs) {
  if (row >= M || col >= N) return;
  T* p = C + static_cast<long long>(row) * ldc + col;
  if constexpr (std::is_same_v<T, float>) {
    if (pairs && col + 1 < N) {
      *reinterpret_cast<float2*>(p) = make_float2(x0, x1);
      return;
    }
    p[0] = x0;
    if (col + 1 < N) p[1] = x1;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (pairs && col + 1 < N) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x0, x1);
      return;
    }
    p[0] = __float2bfloat16_rn(x0);
    if (col + 1 < N) p[1] = __float2bfloat16_rn(x1);
  } else {
    if (pairs && col + 1 < N) {
      *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x0, x1);
      return;
    }
    p[0] = __float2half_rn(x0);
    if (col + 1 < N) p[1] = __float2half_rn(x1);
  }
}

// map_a: A (M rows, K inner) uint8, box 128 x 128, 128B swizzle. map_b: B (N rows, K inner), box 128 x BN.
// map_sa (blockwise): scale_a as (K/128 rows, M inner) fp32, box 1 x 128, no swizzle; other modes pass
// map_a again (never read). map_c (kTmaStore): C (M rows, N inner) of Out, box 64 x 64, 128B swizzle; the
// register store passes map_a again (never read) and writes C at pitch ldc. scale_a / scale_b: tensorwise
// one value each; rowwise M and N values; blockwise scale_b[kb * sb_k + nb * sb_n] (scale_a unused). bias: N fp32 values (Cfg::kBias).
// scale_out (a quantized Out only): the output's 1 x 128 scales, scale_out[nb * ld_scale_out + row].
// kSplit: tail_first_unit the first split tile (tiles on are split by K over the grid; >= tiles: none),
// partials (max_contributors slots of 64 x BN fp32 per split tile and consumer) and counters (one int per
// split tile and consumer, zeroed by the launch). A null partials or counters pointer, or a split with
// fewer K blocks than CTAs, runs every tile whole. Builds without kSplit ignore the four.
template <class Cfg>
__device__ __forceinline__ void sm90_fp8_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                              const CUtensorMap& map_sa, const CUtensorMap& map_c,
                                              const float* __restrict__ scale_a,
                                              const float* __restrict__ scale_b, long long sb_k, long long sb_n,
                                              const float* __restrict__ bias, typename Cfg::Out* __restrict__ C,
                                              long long ldc, float* __restrict__ scale_out, long long ld_scale_out,
                                              int M, int N, int K, int tail_first_unit, int max_contributors,
                                              float* __restrict__ partials, int* __restrict__ counters) {
  static_assert(config_ok<Cfg>());
  constexpr int BN = Cfg::kBN, STAGES = Cfg::kStages, kScaleMode = Cfg::kScaleMode;
  constexpr int BM = Cfg::kBM, kConsumers = kConsumersOf<BM>;
  constexpr uint32_t kExpectTx = Smem<Cfg>::kExpectTx;
  using out_t = typename Cfg::Out;
  using Mma = WgmmaFp8<BN, typename Cfg::A, typename Cfg::B>;
  constexpr bool kQuantized = std::is_same_v<out_t, __nv_fp8_e4m3>;  // e4m3 values with 1 x 128 scales
  extern __shared__ uint8_t smem_raw[];
  const Smem<Cfg> smem(smem_raw);
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int k_blocks = (K + BK - 1) / BK;
  // Tiles [0, whole_end) run whole, gridDim.x apart; the rest are the stream-K tail (kSplit). The tail's
  // contributor counts assume every CTA has at least one K block of it (stream_k.cuh), so any other
  // argument runs whole: stream_k.cuh's whole_units_end, plus the workspace check, written out here
  // (calling the helper compiles to other SASS than the split builds the H200 tests passed on).
  int whole_end = tiles;
  if constexpr (Cfg::kSplit) {
    const int tail_tiles = tiles - tail_first_unit;
    if (partials != nullptr && counters != nullptr && tail_first_unit >= 0 && tail_tiles > 0 &&
        tail_tiles * k_blocks >= static_cast<int>(gridDim.x))
      whole_end = tail_first_unit;
  }
  const StreamKTail tail(whole_end, tiles - whole_end, k_blocks, gridDim.x);

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&map_a);
    tma_prefetch_descriptor(&map_b);
    if constexpr (kScaleMode == 2) tma_prefetch_descriptor(&map_sa);
    if constexpr (Cfg::kTmaStore) tma_prefetch_descriptor(&map_c);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(smem.full(s), 1);
      mbarrier_init(smem.empty(s), kEmptyArrivals<kConsumers>);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    // Two consumers take the producer's registers (setmaxnreg); one (the 64-row tile) already has every
    // register the launch gives a thread of a 256-thread CTA: no exchange.
    if constexpr (kConsumers == 2) setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int it = 0;  // K blocks this role has passed through the ring, over all its tiles
      // K blocks [kb0, kb1) of tile t into the ring.
      auto produce = [&](int t, int kb0, int kb1) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          const int s = it % STAGES;
          mbarrier_wait(smem.empty(s), ((it / STAGES) & 1) ^ 1);  // producer_acquire
          mbarrier_arrive_expect_tx(smem.full(s), kExpectTx);     // producer_commit
          tma_load_2d(smem.a(s), &map_a, smem.full(s), kb * BK, tm * BM);
          tma_load_2d(smem.b(s), &map_b, smem.full(s), kb * BK, tn * BN);
          if constexpr (kScaleMode == 2) tma_load_2d(smem.sa(s), &map_sa, smem.full(s), tm * BM, kb);
        }
      };
      for (int t = blockIdx.x; t < whole_end; t += gridDim.x) produce(t, 0, k_blocks);
      if constexpr (Cfg::kSplit) {  // the consumers' segments, in their order
        for (int i = tail.begin(blockIdx.x), end = tail.begin(blockIdx.x + 1); i < end;) {
          const StreamKTail::Segment seg = tail.segment(blockIdx.x, i, end);
          produce(seg.unit, seg.kb, seg.ke);
          i = seg.next;
        }
      }
    }
    return;
  }

  if constexpr (kConsumers == 2) setmaxnreg_inc<232>();
  const int consumer = warpgroup_index() - 1;
  const int a_row0 = warp_uniform(consumer) * 64;  // this consumer's first A row, uniform (ptx/common.cuh)
  const int warp = thread_in_warpgroup() / 32, lane = threadIdx.x % 32;
  const int row_in_tile = 64 * consumer + 16 * warp + lane / 4;  // this thread's first row; the second is 8 below
  const bool elected = thread_in_warpgroup() == 0;                 // kTmaStore: issues this consumer's stores
  // Two columns per store where every pair is aligned to its size: N and the pitch even, the base aligned.
  const bool pairs = (N % 2 == 0) && (ldc % 2 == 0) && (reinterpret_cast<uintptr_t>(C) % (2 * sizeof(out_t)) == 0);
  float ta = 1.0f;  // tensorwise: the product of the two scales
  if constexpr (kScaleMode == 0) ta = scale_a[0] * scale_b[0];
  int it = 0;       // K blocks this role has passed through the ring, over all its tiles
  float d[BN / 2];  // the fp32 main accumulator of the current tile
  // Blockwise scale_b of the tile's K block kb (one value: the tile lies in one 128-column block of B).
  auto scale_b_at = [&](int kb, int tn) { return scale_b[kb * sb_k + (tn * BN / 128) * sb_n]; };
  // Two scale_b columns (kTwoColumns, BN 192): the tile's second 128-column block of B, clamped to the last
  // (a tile whose columns end in the first block reads a value it never uses).
  constexpr bool kTwoColumns = kScaleMode == 2 && kScaleBColumnsOf<BN> == 2;
  const int sb_last = (N + 127) / 128 - 1;
  auto scale_b_hi_at = [&](int kb, int tn) { return scale_b[kb * sb_k + min(tn * BN / 128 + 1, sb_last) * sb_n]; };
  float h0 = 0.0f, h1 = 0.0f;  // kTwoColumns: the promotion scales of the second column block (serial: one block at a time)
  // Cfg::kScaleBAhead: the next K block's scale_b, loaded while this block is issued, so that the
  // multiply before the next block's wgmmas does not wait on a global load (L2 latency); kb_end bounds it.
  float sb_ahead = 0.0f;
  int kb_end = 0;
  // Cfg::kScaleBShared: the tile's (or segment's) scale_b column, copied into this consumer's shared buffer
  // at the start of its K loop (at most one global load per thread), read there by LDS with the stage's
  // scale_a: no global load in the K loop, whose latency the stage's release would wait for. Addressed from
  // smem_raw, so that the reads are LDS (Smem's base is aligned by integer arithmetic).
  float* const sb_copy = reinterpret_cast<float*>(smem_raw + (smem_u32(smem.sb(consumer)) - smem_u32(smem_raw)));
  int sb_kb0 = 0;
  // The promotion scales of K block kb (its stage s) for this thread's two rows: blockwise scale_a x scale_b, 1
  // otherwise.
  auto read_scales = [&](int s, int kb, int tn, float& s0, float& s1) {
    s0 = s1 = 1.0f;
    if constexpr (kScaleMode == 2) {
      float sb, sb_hi = 0.0f;  // sb_hi: the second column block's (kTwoColumns)
      if constexpr (Cfg::kScaleBShared) {
        sb = sb_copy[kScaleBColumnsOf<BN> * (kb - sb_kb0)];
        if constexpr (kTwoColumns) sb_hi = sb_copy[2 * (kb - sb_kb0) + 1];
      } else if constexpr (Cfg::kScaleBAhead) {
        sb = sb_ahead;
        if (kb + 1 < kb_end) sb_ahead = scale_b_at(kb + 1, tn);
      } else {
        sb = scale_b_at(kb, tn);
        if constexpr (kTwoColumns) sb_hi = scale_b_hi_at(kb, tn);
      }
      if constexpr (kTwoColumns) {
        h0 = smem.sa(s)[row_in_tile] * sb_hi;
        h1 = smem.sa(s)[row_in_tile + 8] * sb_hi;
      }
      s0 = smem.sa(s)[row_in_tile] * sb;
      s1 = smem.sa(s)[row_in_tile + 8] * sb;
    }
  };
  // K block kb of a tile in N column tn (ring position pos) into acc: wait for its stage, issue its four
  // k32 wgmmas (the first with scale-d = 0) and commit them as one group, and read the block's promotion
  // scales: while the wgmmas run, or, where both scales are in shared memory (kScaleBShared), before they
  // are issued (on an H100 1.02-1.09x faster there, the scale_b load ahead's build 0.97x: docs/fp8.md).
  auto issue = [&](float (&acc)[BN / 2], int pos, int kb, int tn, float& s0, float& s1) {
    const int s = pos % STAGES;
    mbarrier_wait(smem.full(s), (pos / STAGES) & 1);  // consumer_wait
    if constexpr (Cfg::kScaleBShared) read_scales(s, kb, tn, s0, s1);
    const uint64_t da = operand_desc_at<0>(smem_u32(smem.a(s) + a_row0 * BK));
    const uint64_t db = operand_desc_at<0>(smem_u32(smem.b(s)));
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < BK / 32; ++k) Mma::mma(acc, desc_step(da, 32 * k), desc_step(db, 32 * k), k > 0 ? 1 : 0);
    wgmma_commit();
    if constexpr (!Cfg::kScaleBShared) read_scales(s, kb, tn, s0, s1);
  };
  // The stage of ring position pos is no longer read by this warp (its wgmma group is complete and its
  // scales are in registers): consumer_release.
  auto release = [&](int pos) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(smem.empty(pos % STAGES));
  };
  // Promotion: d += acc x scale, in fp32 FMAs.
  auto promote = [&](float (&acc)[BN / 2], float s0, float s1) { promote_columns<BN, BN / 8>(d, acc, s0, s1, s0, s1); };
  // The epilogue of tile (tm, tn): pair (4j + 2i, 4j + 2i + 1) of d sits at row row_in_tile + 8i, columns
  // 8j + 2 (lane % 4) + {0, 1}.
  auto epilogue = [&](int tm, int tn) {
    const int r0 = tm * BM + row_in_tile;
    uint32_t packed[Cfg::kTmaStore ? BN / 4 : 1];  // kTmaStore: the rounded outputs, two per word
    float ra[2] = {ta, ta};
    if constexpr (kScaleMode == 1) {
      ra[0] = r0 < M ? scale_a[r0] : 0.0f;
      ra[1] = r0 + 8 < M ? scale_a[r0 + 8] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = tn * BN + 8 * j + 2 * (lane % 4);
      float cb0 = 1.0f, cb1 = 1.0f, bias0 = 0.0f, bias1 = 0.0f;
      if constexpr (kScaleMode == 1) {
        cb0 = col < N ? scale_b[col] : 0.0f;
        cb1 = col + 1 < N ? scale_b[col + 1] : 0.0f;
      }
      if constexpr (Cfg::kBias) {
        bias0 = col < N ? bias[col] : 0.0f;
        bias1 = col + 1 < N ? bias[col + 1] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float x0 = d[4 * j + 2 * i], x1 = d[4 * j + 2 * i + 1];
        if constexpr (kScaleMode != 2) {
          x0 = x0 * (ra[i] * cb0);
          x1 = x1 * (ra[i] * cb1);
        }
        if constexpr (kQuantized) {  // kept for the row's amax, stored below
          d[4 * j + 2 * i] = col < N ? x0 + bias0 : 0.0f;
          d[4 * j + 2 * i + 1] = col + 1 < N ? x1 + bias1 : 0.0f;
        } else if constexpr (Cfg::kTmaStore) {
          packed[2 * j + i] = pack_pair<out_t>(x0 + bias0, x1 + bias1);
        } else {
          store_pair(C, ldc, r0 + 8 * i, col, M, N, x0 + bias0, x1 + bias1, pairs);
        }
      }
    }
    if constexpr (Cfg::kTmaStore) {
      // Stage this consumer's 64 rows once its previous tile's store has read the buffer, then store each
      // 64-column panel that starts inside C (the copy engine clips the rest of the box).
      // Addressed from smem_raw itself, so that the compiler knows the writes are shared (st.shared, not a
      // generic store): Smem's base is aligned by integer arithmetic, which loses the address space.
      uint8_t* const staging = smem_raw + (smem_u32(smem.c(consumer)) - smem_u32(smem_raw));
      const int m0 = tm * BM + 64 * consumer;
      if (elected) tma_store_wait_read<0>();
      named_barrier_sync(kStoreBarrier + consumer, 128);
#pragma unroll
      for (int p = 0; p < BN / 64; ++p) stage_packed_panel_sw128<BN>(staging + p * kPanelBytes, packed, p);
      fence_proxy_async_smem();
      named_barrier_sync(kStoreBarrier + consumer, 128);
      if (elected) {
#pragma unroll
        for (int p = 0; p < BN / 64; ++p)
          if (m0 < M && tn * BN + 64 * p < N) tma_store_2d(&map_c, staging + p * kPanelBytes, tn * BN + 64 * p, m0);
        tma_store_commit();
      }
    }
    if constexpr (kQuantized) {
      // 1 x 128 quantization of the output (quantized_store.cuh): a row's 128 columns of this tile (BN = 128,
      // one scale block) are held by the four lanes of a quad.
      store_quantized_1x128<BN>(C, ldc, scale_out, ld_scale_out, d, r0, tn * BN, tn, M, N);
    }
  };
  // The main loop of K blocks [kb0, kb1) (kb0 < kb1) of a tile in N column tn: d = their promoted sum.
  auto mainloop = [&](int tn, int kb0, int kb1) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    if constexpr (kScaleMode == 2 && Cfg::kScaleBAhead) {
      kb_end = kb1;
      sb_ahead = scale_b_at(kb0, tn);
    }
    if constexpr (kScaleMode == 2 && Cfg::kScaleBShared) {
      // The warpgroup's reads of the previous range are done (all its threads are past them), then the copy,
      // then the reads. The copy holds kSharedScaleBBlocks: a longer range is a launch the host refuses
      // (fp8.shared_scale_b_refusal); the bound keeps even such a launch from writing past the buffer.
      // (A __trap() on it instead made ptxas spill the BN 128 builds.)
      named_barrier_sync(kStoreBarrier + consumer, 128);
      // kTwoColumns: both columns of each K block, side by side
      constexpr int kCols = kScaleBColumnsOf<BN>;
      for (int i = thread_in_warpgroup(); i < kCols * min(kb1 - kb0, kSharedScaleBBlocks); i += 128)
        sb_copy[i] = kTwoColumns && (i & 1) ? scale_b_hi_at(kb0 + i / kCols, tn) : scale_b_at(kb0 + i / kCols, tn);
      sb_kb0 = kb0;
      named_barrier_sync(kStoreBarrier + consumer, 128);
    }
    if constexpr (Cfg::kOverlap) {
      // Two temporaries: block kb + 1's wgmmas are issued before block kb's promotion, so the tensor core
      // works on kb + 1 while this warpgroup waits for kb (wait_group 1) and promotes it. (Issuing the next
      // tile's first block before this tile's epilogue made ptxas serialise the wgmmas: C7514.)
      float acc0[BN / 2], acc1[BN / 2], p0a, p0b, p1a, p1b;
      issue(acc0, it, kb0, tn, p0a, p0b);
      int kb = kb0;  // block kb is in flight in acc0
      for (; kb + 2 < kb1; kb += 2) {
        issue(acc1, it + 1, kb + 1, tn, p1a, p1b);
        wgmma_wait<1>();
        fence_accumulators(acc0);
        release(it++);
        promote(acc0, p0a, p0b);
        issue(acc0, it + 1, kb + 2, tn, p0a, p0b);
        wgmma_wait<1>();
        fence_accumulators(acc1);
        release(it++);
        promote(acc1, p1a, p1b);
      }
      if (kb + 1 < kb1) {  // two blocks left: kb (in acc0) and kb + 1
        issue(acc1, it + 1, kb + 1, tn, p1a, p1b);
        wgmma_wait<1>();
        fence_accumulators(acc0);
        release(it++);
        promote(acc0, p0a, p0b);
        wgmma_wait<0>();
        fence_accumulators(acc1);
        release(it++);
        promote(acc1, p1a, p1b);
      } else {  // one block left
        wgmma_wait<0>();
        fence_accumulators(acc0);
        release(it++);
        promote(acc0, p0a, p0b);
      }
    } else {
      for (int kb = kb0; kb < kb1; ++kb, ++it) {
        float acc[BN / 2], s0, s1;
        issue(acc, it, kb, tn, s0, s1);
        wgmma_wait<0>();
        fence_accumulators(acc);
        release(it);
        if constexpr (kTwoColumns) {  // the tile's first column is 0 (even tn) or 64 (odd) past a block's start
          if (tn % 2 == 0)
            promote_columns<BN, 16>(d, acc, s0, s1, h0, h1);
          else
            promote_columns<BN, 8>(d, acc, s0, s1, h0, h1);
        } else {
          promote(acc, s0, s1);
        }
      }
    }
  };
  for (int t = blockIdx.x; t < whole_end; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    mainloop(tn, 0, k_blocks);
    epilogue(tm, tn);
  }
  if constexpr (Cfg::kSplit) {
    // The stream-K tail: this CTA's segments, in the producer's order.
    for (int i = tail.begin(blockIdx.x), end = tail.begin(blockIdx.x + 1); i < end;) {
      const StreamKTail::Segment seg = tail.segment(blockIdx.x, i, end);
      i = seg.next;
      int tm, tn;
      tile_coords(seg.unit, tiles_m, tiles_n, tm, tn);
      mainloop(tn, seg.kb, seg.ke);
      if (seg.contributors > 1) {
        const int slot = (seg.unit - whole_end) * kConsumers + consumer;
        const PartialSlots<BN> slots{partials + static_cast<size_t>(slot) * max_contributors * PartialSlots<BN>::kFloats};
        if (!hand_in_fragment(slots, counters + slot, seg.mine, seg.contributors, d, kStoreBarrier + consumer, elected))
          continue;  // another contributor finishes this tile
        slots.reduce(seg.contributors, d);
      }
      epilogue(tm, tn);
    }
  }
  // The last stores must have read the staging buffers before the CTA's shared memory is released.
  if constexpr (Cfg::kTmaStore) {
    if (elected) tma_store_wait_read<0>();
  }
}

}  // namespace fp8

// ---- The build: its -D constants as the config, and the entry point ------------------------------
// library/fp8.py's Fp8Kernel.defines: GL_FP8_BN, GL_FP8_STAGES, GL_FP8_SCALE (0 tensorwise, 1 rowwise,
// 2 blockwise), GL_FP8_A_E5M2 / GL_FP8_B_E5M2 (1: e5m2, else e4m3), GL_FP8_OUT (0 bf16, 1 fp16, 2 fp32,
// 3 e4m3 quantized), GL_FP8_BIAS, GL_FP8_OVERLAP, GL_FP8_TMA_STORE (1: C through shared memory and TMA
// stores; a bf16 or fp16 output only), GL_FP8_SPLIT (1: the stream-K split, taken from the launch's
// tail_first_unit; 0 or undefined: every tile whole, the split arguments ignored), GL_FP8_BM (64: a 64-row
// tile on one consumer warpgroup, 256 threads; 128 or undefined: two consumers, 384 threads), GL_FP8_SB_AHEAD
// (1: blockwise scale_b loaded one K block ahead), GL_FP8_SB_SHARED (1: blockwise scale_b read from a shared
// copy of the tile's column, made at the start of each K loop).
#ifndef GL_FP8_BN
#define GL_FP8_BN 128
#endif
#ifndef GL_FP8_STAGES
#define GL_FP8_STAGES 6
#endif
#ifndef GL_FP8_SCALE
#define GL_FP8_SCALE 0
#endif
#ifndef GL_FP8_A_E5M2
#define GL_FP8_A_E5M2 0
#endif
#ifndef GL_FP8_B_E5M2
#define GL_FP8_B_E5M2 0
#endif
#ifndef GL_FP8_OUT
#define GL_FP8_OUT 0
#endif
#ifndef GL_FP8_BIAS
#define GL_FP8_BIAS 0
#endif
#ifndef GL_FP8_OVERLAP
#define GL_FP8_OVERLAP 1
#endif
#ifndef GL_FP8_TMA_STORE
#define GL_FP8_TMA_STORE 0
#endif
#ifndef GL_FP8_SPLIT
#define GL_FP8_SPLIT 0
#endif
#ifndef GL_FP8_BM
#define GL_FP8_BM 128
#endif
#ifndef GL_FP8_SB_AHEAD
#define GL_FP8_SB_AHEAD 0
#endif
#ifndef GL_FP8_SB_SHARED
#define GL_FP8_SB_SHARED 0
#endif
struct BuildConfig {
  static constexpr int kBN = GL_FP8_BN, kStages = GL_FP8_STAGES, kScaleMode = GL_FP8_SCALE;
  static constexpr bool kBias = GL_FP8_BIAS, kOverlap = GL_FP8_OVERLAP, kTmaStore = GL_FP8_TMA_STORE, kSplit = GL_FP8_SPLIT;
  static constexpr int kBM = GL_FP8_BM;
  static constexpr bool kScaleBAhead = GL_FP8_SB_AHEAD;
  static constexpr bool kScaleBShared = GL_FP8_SB_SHARED;
  using A = std::conditional_t<GL_FP8_A_E5M2, __nv_fp8_e5m2, __nv_fp8_e4m3>;
  using B = std::conditional_t<GL_FP8_B_E5M2, __nv_fp8_e5m2, __nv_fp8_e4m3>;
  using Out = std::conditional_t<GL_FP8_OUT == 0, __nv_bfloat16,
                                 std::conditional_t<GL_FP8_OUT == 1, __half,
                                                    std::conditional_t<GL_FP8_OUT == 2, float, __nv_fp8_e4m3>>>;
};
static_assert(GL_FP8_OUT >= 0 && GL_FP8_OUT <= 3, "GL_FP8_OUT: 0 bf16, 1 fp16, 2 fp32, 3 e4m3");

extern "C" __global__ void __launch_bounds__(fp8::kThreadsOf<BuildConfig::kBM>, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_sa, const __grid_constant__ CUtensorMap map_c,
                    const float* __restrict__ scale_a,
                    const float* __restrict__ scale_b, long long sb_k, long long sb_n,
                    const float* __restrict__ bias, BuildConfig::Out* __restrict__ C, long long ldc,
                    float* __restrict__ scale_out, long long ld_scale_out, int M, int N, int K, int tail_first_unit,
                    int max_contributors, float* __restrict__ partials, int* __restrict__ counters) {
  fp8::sm90_fp8_gemm<BuildConfig>(map_a, map_b, map_sa, map_c, scale_a, scale_b, sb_k, sb_n, bias, C, ldc, scale_out,
                                  ld_scale_out, M, N, K, tail_first_unit, max_contributors, partials, counters);
}
