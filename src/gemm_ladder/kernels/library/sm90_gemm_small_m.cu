// Library kernel: small M (M <= 256: LLM decode, small batches), Hopper (sm_90a).
//
// C (M, N) = A (M, K) @ B (N, K)^T with A = x small and B = w large. A tile of C keeps only a few SMs
// busy when M is small, so this kernel computes C^T = B A^T instead: the large N sits on wgmma's M
// (BM = 128 rows of w per CTA tile, 64 per consumer warpgroup) and the small M on wgmma's N (BN = 8 ..
// 256 columns, the M bucket this build is for). Each operand is K-major or MN-major in shared memory as
// its tensor map lays it out (the plan's majors; an MN-major one is read with wgmma's transpose bit), so
// both F.linear's (N, K) weight and x @ W's (K, N) one are read in place. The weight is what costs: it
// is read once, so the kernel is bound by memory
// whenever M is small, and every SM must keep as many weight bytes in flight as it can:
//
// - all work units (N tiles x M tiles, each k_tiles K iterations) are split by K iterations evenly
//   over the grid (stream_k.cuh's StreamKTail over every unit, not only a tail): CTA c computes
//   iterations [floor(c T / G), floor((c + 1) T / G)) of the T = units x k_tiles, so every SM gets
//   the same number of weight bytes whatever N and K are;
// - the stage ring is as deep as shared memory allows (the designer's plan: no output staging, every
//   byte goes to stages), so the producer has up to STAGES weight tiles in flight from the start;
// - a unit several CTAs contributed to is reduced from fp32 partials in a workspace by the last
//   contributor to arrive, in K order (fragment_partials.cuh): bitwise the same result every run.
//   (A reduction through the shared memory of a cluster of the unit's contributors was built, measured
//   no faster, and removed: docs/library.md.)
//
// A fused epilogue (Epi = FusedEpilogue: library/epilogue.py's generated code, fused_epilogue.cuh) is
// applied to the fp32 fragment after the split-K reduction, pair by pair just before the store rounds it
// once.
//
// The epilogue stores straight from the accumulator registers into C, transposed (C[m][n] = D[n][m]),
// masked at the M and N edges, with the strides the caller gives (row- or column-major, any pitch):
// the output is at most 256 x N elements, a few percent of the weight's bytes, so a staging buffer
// would cost ring stages (shared memory) for no measurable gain, and an stmatrix.trans + TMA store
// would need C's pitch 16-byte aligned, which a decode's output need not be.
//
// One templated kernel body, sm90_gemm_small_m<Cfg, Epi>, with its variants as types (the output's
// element type Cfg::Out, the epilogue Epi) chosen by `if constexpr`; the instantiation block at the end
// is the one place that reads the build's -D constants (the plan's, design/plan.py kernel_defines, and
// library/small_m.py's) and defines the extern "C" entry point the loader finds by name.
//
// The gated build (GL_SWIGLU; library/swiglu_small_m.py): out = silu(x w_gate^T) * (x w_up^T), the gated
// MLP at small M in one launch. A unit is 128 output columns (N), as in the plain build, but its A stage
// holds 256 weight rows: rows [0, 128) from w_gate and [128, 256) from w_up, the same 128 output columns
// of each (two TMA loads from two maps, K-major). Consumer c multiplies its 64 gate rows and its 64 up rows
// by the same x tile into two fragments, so gate and up of each output meet in one thread's registers;
// the split-K partials carry both fragments under the one arrival counter of the unit and consumer, so
// the last contributor holds both sums and stores silu(gate) * up, rounded once. The two fragments take
// BN accumulators per thread: BN <= 128.
//
// GL_TIMELINE (a measuring build, never shipped: bench/small_m_timeline.py) stamps the points of
// TimelineSlot per CTA (timeline.cuh); without it the stamps compile to nothing.
#include "gemm_ladder/fragment_partials.cuh"
#include "gemm_ladder/fused_epilogue_pair.cuh"
#include "gemm_ladder/gated_epilogue.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/stream_k.cuh"
#include "gemm_ladder/timeline.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

// The timeline build's slots (GL_TIMELINE; bench/small_m_timeline.py reads this enum). Stamped by
// thread 0 (the producer) or by consumer 0's elected thread; values and counts where said.
enum TimelineSlot {
  kEntry = 0,       // thread 0: the kernel's first instruction
  kSetup = 1,       // thread 0: barriers initialised, tensor maps prefetched, __syncthreads passed
  kFirstLoad = 2,   // producer: about to wait for its first stage and issue its first load
  kLastLoad = 3,    // producer: its last load issued (the loop over its K range done)
  kReady = 4,       // consumer 0: registers raised (setmaxnreg)
  kFirstFull = 5,   // consumer 0: the first stage arrived (its first consumer_wait done)
  kLoopEnd = 6,     // consumer 0: the K tiles of its last segment done (wgmma_wait 0)
  kHandIn = 7,      // consumer 0: its last split segment's partial handed in (stored, counted)
  kReduceEnd = 8,   // consumer 0: its last reduction of other contributors' partials done
  kStoreEnd = 9,    // consumer 0: its last store of C issued
  kExit0 = 10,      // consumer 0: leaving the kernel
  kExit1 = 11,      // consumer 1: leaving the kernel
  kSmId = 12,       // value: %smid
  kSegments = 13,   // count: segments (units) consumer 0 computed a range of
  kReductions = 14, // count: units consumer 0 reduced and stored as the last contributor
  kHandIns = 15,    // count: partials consumer 0 handed in
};

// What a config (Cfg) holds, each a static constexpr member: the tile BM (weight rows), BN (the M
// bucket), BK; kCluster, kConsumers, kProducerWarpgroups, kThreads; kAMnMajor, kBMnMajor (the ring's A is
// the weight, its B is x); kCPanels (the plan's staged C panels: none); kCtasPerSm; and the type Out (C's
// elements: elem_t, or float). The instantiation block's BuildConfig is the one a build compiles.
//
// CTAs per SM (kCtasPerSm, default 1). Registers are the limit: 384 threads x 168 (one CTA) fill the
// SM's 65536, which level 9's split of the pool uses (168 x 384 = 2 x 128 x 232 + 128 x 40). Two CTAs
// get 85 each, 80 after ptxas's rounding (80 x 384 = 30720 >= 2 x 128 x 96 + 128 x 40), so the consumers
// keep 96: enough for BN <= 64's accumulators (32). The ring must fit in half the SM's shared memory (the
// plan's stages). An experiment's build (bench/small_m_timeline.py), not the dispatcher's.
template <class Cfg>
__host__ __device__ constexpr bool config_ok() {
  static_assert(Cfg::kProducerWarpgroups == 1 && Cfg::kCluster == 1 &&
                    Cfg::BM == (Cfg::kSwiglu ? 128 : 64) * Cfg::kConsumers,
                "small M: a producer warpgroup and consumers of 64 weight rows each (the gated build: 64 of each "
                "weight), no cluster");
  static_assert(!Cfg::kSwiglu || (Cfg::BN <= 128 && !Cfg::kAMnMajor && std::is_same<typename Cfg::Out, elem_t>::value),
                "the gated build: two fragments of BN / 2 accumulators (BN <= 128), K-major weights, C in the "
                "inputs' dtype");
  static_assert(Cfg::kCPanels == 0, "small M: the plan must store C from registers (c_from_registers)");
  static_assert(Cfg::kCtasPerSm == 1 || (Cfg::kCtasPerSm == 2 && Cfg::BN <= 64), "two CTAs per SM: BN <= 64");
  static_assert(std::is_same<typename Cfg::Out, float>::value || std::is_same<typename Cfg::Out, elem_t>::value,
                "small M: C in the input dtype or float32");
  return true;
}

// One fp32 value as C's element type, rounded to nearest.
template <class OutT>
__device__ __forceinline__ OutT to_out(float x) {
  if constexpr (std::is_same<OutT, float>::value) {
    return x;
  } else {
    return to_elem(x);
  }
}

// One pair: C[m][n], C[m + 1][n] = x0, x1 (after the epilogue), each masked at M; n < N is the caller's.
template <class OutT, class Epi>
__device__ __forceinline__ void store_pair(OutT* __restrict__ C, long long ldc_m, long long ldc_n, float x0, float x1,
                                          int m, int n, int M, int N, const Epi& epi) {
  float x[2] = {x0, x1};
  if constexpr (Epi::kFused) epi.pair_along_col(x[0], x[1], m, n, M, N);
#pragma unroll
  for (int c = 0; c < 2; ++c)
    if (m + c < M) C[(m + c) * ldc_m + n * ldc_n] = to_out<OutT>(x[c]);
}

// Store a consumer's 64 x BN fragment of C^T (rows n0.., columns m0..) into C transposed, masked.
// With a fused epilogue each pair d[4j + 2i], d[4j + 2i + 1] (C rows m, m + 1 of column n: neighbours
// along a column of C) goes through it just before its store, so its fp32 values die there (applied to
// the whole fragment first, the loads it hoists spilled at BN = 256).
// Fragment layout (PTX ISA, wgmma D, see epilogue.cuh): thread t (warp w, lane l) holds
// d[4j + 2i + c] = D[16w + l/4 + 8i][8j + 2(l%4) + c].
template <int BN, class OutT, class Epi>
__device__ __forceinline__ void store_transposed(OutT* __restrict__ C, long long ldc_m, long long ldc_n,
                                                 const float (&d)[BN / 2], int n0, int m0, int M, int N, const Epi& epi) {
  const int t = thread_in_warpgroup(), warp = t / 32, lane = t % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int n = n0 + 16 * warp + lane / 4 + 8 * i;
    if (n >= N) continue;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      store_pair(C, ldc_m, ldc_n, d[4 * j + 2 * i], d[4 * j + 2 * i + 1], m0 + 8 * j + 2 * (lane % 4), n, M, N, epi);
  }
}

// K tiles [kb, ke) of one unit into d, from ring position `pos` on: stage k goes back to the
// producer once the wgmma of k + 1 is issued (wait_group 1), the last one once all have completed.
// kFrags fragments: 1, or the gated build's 2 (d[0] from the stage's gate rows, d[1] from its up rows
// 128 further on), both in one commit group.
template <class Cfg, int kFrags>
__device__ __forceinline__ void consume_k_range(const SmemMap& smem, float (&d)[kFrags][Cfg::BN / 2], int consumer,
                                                int kb, int ke, RingPosition& pos, bool elected) {
  const int a_row0 = warp_uniform(consumer) * 64;  // this consumer's first A row, uniform (ptx/common.cuh)
  for (int kt = kb; kt < ke; ++kt, pos.advance()) {
    const int s = pos.stage();
    consumer_wait(smem, pos);
    GL_TIMELINE_STAMP(consumer == 0 && elected && pos.count == 0, kFirstFull);
    wgmma_fence();
    // A consumer's 64 weight rows start 64 x BK elements into the tile in either major (K-major: 64
    // rows of BK; MN-major: the tile's second 64-row box).
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
      mma_k_tile<Cfg::BN, Cfg::kAMnMajor, Cfg::kBMnMajor>(d[f], smem.a(s) + (128 * f + a_row0) * Cfg::BK, smem.b(s),
                                                          kt > kb);
    wgmma_commit();
    wgmma_wait<1>();
    if (kt > kb && elected) consumer_release(smem, pos.previous_stage());
  }
  wgmma_wait<0>();
#pragma unroll
  for (int f = 0; f < kFrags; ++f) fence_accumulators(d[f]);
  if (elected) consumer_release(smem, pos.previous_stage());
}

// The gated build's producer: K tiles [kb, ke) of N tile tn (128 output columns) and M tile tm, each
// stage's A rows [0, 128) from w_gate and [128, 256) from w_up (both K-major, rows 128 tn..), its B x's.
__device__ __forceinline__ void produce_gated_k_range(const SmemMap& smem, const CUtensorMap* map_gate,
                                                      const CUtensorMap* map_up, const CUtensorMap* map_x, int tn,
                                                      int tm, int kb, int ke, RingPosition& pos) {
  for (int kt = kb; kt < ke; ++kt, pos.advance()) {
    const int s = pos.stage();
    producer_acquire(smem, pos);
    mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);  // producer_commit: both weights and x
    tma_load_2d(smem.a(s), map_gate, smem.full(s), kt * BK, tn * (BM / 2));
    tma_load_2d(smem.a(s) + (BM / 2) * BK, map_up, smem.full(s), kt * BK, tn * (BM / 2));
    tma_load_operand<B_MN_MAJOR, BN>(smem.b(s), map_x, smem.full(s), kt, tm * BN);
  }
}

// map_w: B = w (N, K), the plan's a map (K-major box (BK, BM), or MN-major boxes of 64 rows x BK);
// map_x: A = x (M, K), the plan's b map (box (BK, BN), or MN-major boxes of 64 rows x BK).
// C: element (m, n) at C[m * ldc_m + n * ldc_n]. partials / counters: the workspace, null when no unit
// has two contributors (max_contributors == 1); the counters (one per unit and consumer) are zero.
// epi: the epilogue (NoEpilogue or FusedEpilogue). map_up: the gated build's w_up (its map_w is w_gate);
// null otherwise.
template <class Cfg, class Epi>
__device__ __forceinline__ void sm90_gemm_small_m(const CUtensorMap& map_w, const CUtensorMap& map_x,
                                                  typename Cfg::Out* __restrict__ C, long long ldc_m, long long ldc_n,
                                                  int M, int N, int K, int max_contributors,
                                                  float* __restrict__ partials, int* __restrict__ counters,
                                                  const Epi& epi, const CUtensorMap* map_up) {
  static_assert(config_ok<Cfg>());
  static_assert(!Cfg::kSwiglu || !Epi::kFused, "the gated build's epilogue is its own: silu(gate) * up");
  constexpr int BN = Cfg::BN, BK = Cfg::BK;
  constexpr int kFrags = Cfg::kSwiglu ? 2 : 1;  // fragments per consumer: gate and up in the gated build
  constexpr int kUnitRows = Cfg::BM / kFrags;   // output columns (N) per unit: 128
  constexpr int kAcc = BN / 2;  // fp32 accumulators per consumer thread and fragment: one 64 x BN fragment
  constexpr int kProducerRegs = 40;
  constexpr int kConsumerRegs = Cfg::kCtasPerSm == 1 ? 232 : 96;  // the pool split (config_ok's note)
  constexpr int kFirstReduceBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads (0 is __syncthreads)

  extern __shared__ uint8_t smem_raw[];
  GL_TIMELINE_STAMP(threadIdx.x == 0, kEntry);
  GL_TIMELINE_VALUE(threadIdx.x == 0, kSmId, smid());
  const SmemMap smem(smem_raw);
  const int m_tiles = (M + BN - 1) / BN;
  // Unit u = (N tile u / m_tiles, M tile u % m_tiles): units sharing a weight tile are neighbours.
  // The launch keeps gridDim.x <= the iterations (every CTA's range non-empty, which the contributor
  // count assumes) and (gridDim.x + 1) x iterations below 2^31 (StreamKTail's 32-bit arithmetic).
  // Each role builds it after its setmaxnreg: a value live across that point is spilled.
  auto split = [&] { return StreamKTail(0, (N + kUnitRows - 1) / kUnitRows * m_tiles, (K + BK - 1) / BK, gridDim.x); };

  // No output map: the third prefetched is w_up's (the gated build), else x's again.
  if (threadIdx.x == 0) init_ring(smem, &map_w, &map_x, Cfg::kSwiglu ? map_up : &map_x);
  __syncthreads();
  GL_TIMELINE_STAMP(threadIdx.x == 0, kSetup);

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      const StreamKTail work = split();
      const int first = work.begin(blockIdx.x), end = work.begin(blockIdx.x + 1);
      RingPosition pos{0};
      GL_TIMELINE_STAMP(true, kFirstLoad);
      for (int it = first; it < end;) {
        const StreamKTail::Segment seg = work.segment(blockIdx.x, it, end);
        // The ring's A is the weight (its N tile), its B is x (its M tile).
        if constexpr (Cfg::kSwiglu)
          produce_gated_k_range(smem, &map_w, map_up, &map_x, seg.unit / m_tiles, seg.unit % m_tiles, seg.kb, seg.ke, pos);
        else
          produce_k_range(smem, &map_w, &map_x, seg.unit / m_tiles, seg.unit % m_tiles, seg.kb, seg.ke, 0, pos);
        it = seg.next;
      }
      GL_TIMELINE_STAMP(true, kLastLoad);
    }
  } else {
    // The pool split (kConsumerRegs, above): with one CTA per SM, BN = 256 needs 128 accumulators.
    setmaxnreg_inc<kConsumerRegs>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // releases stages, counts the arrival
    const int bar = kFirstReduceBarrier + consumer;
    GL_TIMELINE_STAMP(consumer == 0 && elected, kReady);
    const StreamKTail work = split();
    const int first = work.begin(blockIdx.x), end = work.begin(blockIdx.x + 1);
    RingPosition pos{0};
    for (int it = first; it < end;) {
      const StreamKTail::Segment seg = work.segment(blockIdx.x, it, end);
      it = seg.next;
      float d[kFrags][kAcc];
      consume_k_range<Cfg, kFrags>(smem, d, consumer, seg.kb, seg.ke, pos, elected);
      GL_TIMELINE_STAMP(consumer == 0 && elected, kLoopEnd);
      GL_TIMELINE_COUNT(consumer == 0 && elected, kSegments);
      if (seg.contributors > 1) {
        // A slot's fragments: d[0]'s max_contributors partials, then (gated) d[1]'s, under one counter.
        const int slot = seg.unit * Cfg::kConsumers + consumer;
        float* const base = partials + static_cast<size_t>(slot) * kFrags * max_contributors * FragmentPartials<kAcc>::kFloats;
        const FragmentPartials<kAcc> slots{base};
        const FragmentPartials<kAcc> up_slots{base + static_cast<size_t>(max_contributors) * FragmentPartials<kAcc>::kFloats};
        if constexpr (kFrags == 2) up_slots.store(seg.mine, d[1]);  // ordered before the count by hand_in's fence
        const bool last = hand_in_fragment(slots, counters + slot, seg.mine, seg.contributors, d[0], bar, elected);
        GL_TIMELINE_STAMP(consumer == 0 && elected, kHandIn);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kHandIns);
        if (!last) continue;  // another contributor finishes this unit
        slots.reduce(seg.contributors, d[0]);
        if constexpr (kFrags == 2) up_slots.reduce(seg.contributors, d[1]);
        GL_TIMELINE_STAMP(consumer == 0 && elected, kReduceEnd);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kReductions);
      }
      if constexpr (kFrags == 2) {  // silu(gate) * up in fp32, into d[0]: the same element of both fragments
#pragma unroll
        for (int i = 0; i < kAcc; ++i) d[0][i] = Silu{}(d[0][i]) * d[1][i];
      }
      const int tn = seg.unit / m_tiles, tm = seg.unit % m_tiles;
      store_transposed<BN>(C, ldc_m, ldc_n, d[0], tn * kUnitRows + 64 * consumer, tm * BN, M, N, epi);
      GL_TIMELINE_STAMP(consumer == 0 && elected, kStoreEnd);
    }
    GL_TIMELINE_STAMP(elected, consumer == 0 ? kExit0 : kExit1);
  }
}

// ---- The build: its -D constants as the config, and the entry point ------------------------------
// The plan's constants (design/plan.py kernel_defines) and library/small_m.py's: GL_OUT_FP32 for a
// float32 C, GL_CTAS_PER_SM (default 1); GL_EPILOGUE when the translation unit starts with a fused
// epilogue's generated code (library/epilogue.py).
#ifndef GL_CTAS_PER_SM
#define GL_CTAS_PER_SM 1
#endif
#ifndef GL_SWIGLU
#define GL_SWIGLU 0
#endif
// The gated build's w_up map: one more argument, after the epilogue's place (a gated build has none).
#if GL_SWIGLU
#define GL_SWIGLU_ARG , const __grid_constant__ CUtensorMap map_up
#define GL_SWIGLU_MAP &map_up
#else
#define GL_SWIGLU_ARG
#define GL_SWIGLU_MAP nullptr
#endif
struct BuildConfig {
  static constexpr int BM = GL_BM, BN = GL_BN, BK = GL_BK;
  static constexpr int kCluster = GL_CLUSTER, kConsumers = GL_CONSUMERS, kProducerWarpgroups = GL_PRODUCER_WG;
  static constexpr int kThreads = GL_THREADS, kCtasPerSm = GL_CTAS_PER_SM;
  static constexpr int kAMnMajor = GL_A_MN_MAJOR, kBMnMajor = GL_B_MN_MAJOR;
  static constexpr int kCPanels = GL_C_PANELS;
  static constexpr bool kSwiglu = GL_SWIGLU;
#if defined(GL_OUT_FP32)
  using Out = float;
#else
  using Out = elem_t;
#endif
};
// The epilogue's parameters, the last argument, with an epilogue only (GL_EPILOGUE_ARG and
// GL_EPILOGUE_OBJ: fused_epilogue_pair.cuh).

extern "C" __global__ void __launch_bounds__(BuildConfig::kThreads, BuildConfig::kCtasPerSm)
    sm90_gemm_small_m(const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_x,
                      BuildConfig::Out* __restrict__ C, long long ldc_m, long long ldc_n, int M, int N, int K,
                      int max_contributors, float* __restrict__ partials, int* __restrict__ counters GL_EPILOGUE_ARG
                          GL_SWIGLU_ARG) {
  sm90_gemm_small_m<BuildConfig>(map_w, map_x, C, ldc_m, ldc_n, M, N, K, max_contributors, partials, counters,
                                 GL_EPILOGUE_OBJ, GL_SWIGLU_MAP);
}
