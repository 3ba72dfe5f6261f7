// Library kernel sm90_gemm: D (M, N) = A (M, K) @ B (N, K)^T for the operand layouts torch.mm hands
// over without a copy (library/gemm.py plans and launches it; library/operand.py names the layouts),
// with an optional fused epilogue (library/epilogue.py generates it; fused_epilogue.cuh).
//
// Level 9's kernel, compiled from the designer's plan for one layout: persistent, a producer
// warpgroup, 2-CTA clusters that multicast B (or, a build's choice, one CTA per cluster), two consumer warpgroups of 64 rows on a 128 x BN tile
// (or, a build's choice, one consumer on a 64 x BN tile: twice the tiles, for problems too small to fill the SMs),
// (or, a measuring build's, two consumers of 128 rows on a 256 x BN tile, every unit whole: fewer, larger tiles),
// each storing through its own panel ring overlapped with the next tile, and a stream-K split.
//
// One templated kernel body, sm90_gemm<Cfg, COut, Epi>, reads top to bottom; each build's variant is a
// type, chosen with `if constexpr`, never a preprocessor branch. The instantiation block at the end of
// this file is the one place that reads the build's -D constants (the plan's, design/plan.py
// kernel_defines, and library/gemm.py's build_defines): it makes them the config type and defines the
// extern "C" entry point the loader finds by name. What a config sets, beyond level 9's:
//  - kAMnMajor / kBMnMajor: each operand K-major or MN-major in memory and in shared memory.
//    An MN-major operand's tensor map has M (or N) as its inner dimension: the producer loads it as
//    boxes of 64 elements x BK rows (tma_load_operand, tma_tile.cuh, through stage_ring.cuh's
//    produce_stage), and the consumers read it with wgmma's transpose immediate and the MN-major
//    descriptor (mma_k_tile and operand_desc_at<1>, ptx/wgmma.cuh, through cluster_ring.cuh's
//    consume_k_range). Every layout difference lives in those headers.
//  - kCluster: 2, level 9's pair of CTAs on vertically adjacent tiles sharing B by multicast, or 1, one
//    CTA alone (B loaded whole, stages released to itself: cluster_ring.cuh, sync_cta_or_cluster). A
//    pair needs an even number of M tiles: with an odd one (M = 333: three), the pair of the last has
//    an idle twin computing a tile of nothing; one CTA has none, at the price of B's multicast.
//  - BN = 64, 128, 192 or 256 (the dispatcher's cost model picks it: narrower tiles where wider ones
//    would leave SMs idle). At BN = 64 a tile is one 64-column panel: the plan gives each consumer a
//    ring of one panel buffer (kCRing = 1), so every panel is stored at the end of its tile and
//    none is deferred (kDeferredPanels = 0); the one buffer is refilled once the store that read it,
//    a whole tile earlier, has been read (wait_group.read 0). The cluster's B slices are 32 rows: a
//    K-major B loads them as boxes of 32 rows; an MN-major B, whose box is 64 elements of N wide,
//    splits the stage's K rows instead (stage_ring.cuh's produce_stage, the plan's B box).
//    BN = 192 (three panels, a ring of one: kCRing divides kCPanels) is built for a K-major B only,
//    whose cluster slices are 96-row boxes; the designer refuses an MN-major B there (its 96-element
//    slice is not whole 64-element boxes). BN = 96 and 144 (K-major B, 48- and 72-row cluster slices) are
//    built with the register store only: their tiles are not whole 64-column store panels.
//  - kStore: how C is written (CStore below), and Out, its element type.
//  - Epi: the fused epilogue or none (fused_epilogue_pair.cuh's FusedEpilogue, NoEpilogue).
// The stage ring's headers (tma_tile.cuh's SmemMap, stage_ring.cuh, cluster_ring.cuh, panel_ring.cuh)
// are shared with the ladder's levels 4-9 and read the same plan constants themselves; the config is
// made from those constants in the one block, so the two cannot differ.
// And what the launch sets: the leading dimensions of A, B and D (the tensor maps' global strides),
// and the stream-K split (tail_first_unit: the first unit split by K over every cluster; 0 splits
// every unit, the unit count none).
//
// The body is level 9's (levels/level9_multi_consumer.cu, which stays the ladder's rung), with one
// hook: where level 9 packs a finished fragment to the output dtype (pack_fragment: at the end of
// each whole tile, and in the stream-K tail after the partials are reduced), a build with a fused
// epilogue (Epi::kFused) applies it to each pair of fp32 accumulators first (epilogue_pack_panel):
// its loads and math run in the registers the packing already uses, and the output is rounded
// once. And kPrefetchAhead (8) K iterations before each whole tile's end (a stream-K segment: before its
// loop), each consumer prefetches its slice of the epilogue's tile inputs into L2 (epi.prefetch), so the
// loads at the tile's end need not wait on DRAM. Without an epilogue the kernel is level 9's, instruction for
// instruction, and takes no epilogue argument (tests/test_epilogue.py compares the SASS).
//
// CStore::kRegisters (the plan's c_from_registers) builds the kernel for outputs a TMA store cannot
// write (N not a multiple of 16 bytes, a pitch or base not 16-byte aligned; or a float32 output,
// Out = float): the consumers store each finished fragment straight from their accumulator registers
// with masked global stores (register_store.cuh: one store per pair of columns, pairs shifted by a
// column in rows whose even columns are misaligned) at any pitch, instead of the panel rings and TMA
// stores; the kernel takes the output's pointer and row pitch in place of its tensor map, and no
// shared memory holds C (the plan gives it to the stage ring). Each fragment is stored right after
// its last wgmma, so its stores are not overlapped with the next tile's first K iterations as the
// panel ring's deferred panels are; the producer keeps loading meanwhile.
//
// Its quantized build (GL_OUT_E4M3, Out = __nv_fp8_e4m3, BN 128 or 256) stores each finished fragment as
// e4m3 values with one fp32 scale per row and 128 columns (quantized_store.cuh), computed from the fp32
// result after the fused epilogue, so that an fp8 GEMM reads the output as it is; the kernel takes the
// scales' pointer and row pitch beside the output's (QuantizedC).
//
// GL_TIMELINE (a measuring build, never the dispatcher's: library_gemm(..., timeline=True),
// bench/experiments/gemm_timeline.py) stamps the points of TimelineSlot per CTA (timeline.cuh); without
// it the stamps compile to nothing and every build's SASS is what it was.
//
// Two other ways to store and reduce were built, measured no faster where they apply, and removed: a
// staged copy of C through per-warp shared memory with 16-byte stores, and a stream-K fixup distributed
// over a split tile's contributors (docs/library.md says what was measured and where the code is in git).
#include "gemm_ladder/bias_stage.cuh"
#include "gemm_ladder/cluster_ring.cuh"
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/fused_epilogue_pair.cuh"
#include "gemm_ladder/panel_ring.cuh"
#include "gemm_ladder/pingpong.cuh"
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/quantized_store.cuh"
#include "gemm_ladder/register_store.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/stream_k.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#ifndef GL_TIMELINE_SLOTS
#define GL_TIMELINE_SLOTS 96
#endif
#include "gemm_ladder/timeline.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

// The timeline build's slots (GL_TIMELINE; bench/experiments/gemm_timeline.py reads this enum). Stamped
// by thread 0 (the producer) or by consumer 0's elected thread; values, counts and sums (nanoseconds added
// over every stream-K segment, or every turn) where said. A whole tile i < kTiles of consumer 0 (its i-th:
// level 9's tiles, or its turns under ping-pong) has two slots: kTile0 + 2i when its K loop is done
// (wgmma_wait 0), kTile0 + 2i + 1 when what it does before the next tile is done (its fragment packed and
// its early panels stored, or stored from registers). Between kWholeEnd and kTailEnd the stream-K tail
// runs; the sums split it (the rest is the segments' own setup, prefetch and bookkeeping): a segment's
// phases are consecutive, each summed from the boundary before it.
enum TimelineSlot {
  kEntry = 0,          // thread 0: the kernel's first instruction
  kSetup = 1,          // thread 0: barriers initialised, maps prefetched, the CTA (or cluster) barrier passed
  kSmId = 2,           // value: %smid
  kProducerStart = 3,  // producer: about to issue its first whole unit's loads
  kProducerWhole = 4,  // producer: every whole unit's loads issued
  kProducerEnd = 5,    // producer: the stream-K tail's loads issued too
  kReady = 6,          // consumer 0: registers raised (setmaxnreg)
  kFirstFull = 7,      // consumer 0: its first whole tile's first wgmma issued (the first stage arrived); not
                       // stamped by the cooperative TMA-store builds at BN 256 (its registers spilled there)
  kWholeTiles = 8,     // count: whole tiles consumer 0 computed
  kWholeEnd = 9,       // consumer 0: its whole tiles done, the last one's deferred panels stored too
  kTailLoopSum = 10,   // sum: the K ranges of consumer 0's stream-K segments
  kHandInSum = 11,     // sum: handing in its split segments' partials (stored, fenced, counted)
  kReduceSum = 12,     // sum: adding the contributors' partials, where it arrived last
  kTailStoreSum = 13,  // sum: packing and storing the stream-K tiles it finished
  kSegments = 14,      // count: stream-K segments consumer 0 computed
  kHandIns = 15,       // count: partials consumer 0 handed in
  kReductions = 16,    // count: split tiles consumer 0 reduced and stored as the last contributor
  kTailEnd = 17,       // consumer 0: its stream-K segments done
  kStoresRead = 18,    // consumer 0: its last TMA stores read out of shared memory (wait_group.read 0)
  kExit0 = 19,         // consumer 0: done, before the final CTA (or cluster) barrier
  kExit1 = 20,         // consumer 1 (two consumers): the same
  kExit = 21,          // thread 0: past the final barrier
  kTurnWaitSum = 22,   // sum (ping-pong): consumer 0 waiting for its turn before each of its tiles
  kMark = 23,          // scratch: the last phase boundary of the sums (timeline.cuh's MARK / PHASE)
  kFullWaitClk = 24,   // value, SM cycles (clock64): consumer 0 waiting for its stages' data over its whole
                       // tiles' K loops (timeline.cuh's CycleWaitClock); stored once they are done
  kTile0 = 25,         // the whole tiles' slots: kTile0 .. kTile0 + 2 kTiles - 1
  kTiles = 35,         // whole tiles stamped per CTA (later ones are counted, not stamped)
  kSlots = kTile0 + 2 * kTiles,
};
#if defined(GL_TIMELINE)
static_assert(kSlots <= GL_TIMELINE_SLOTS, "the stamp arrays hold every slot");
// The consumers' wait clock: the timeline build's (its sum fits at every BN with no spill, ptxas keeping
// it in uniform registers at 256), no code everywhere else.
using ConsumerWaitClock = CycleWaitClock;
#else
using ConsumerWaitClock = NoWaitClock;
#endif

// How a build writes C.
enum class CStore {
  kTmaPanels,  // level 9's: each consumer's panel ring and TMA stores, the last panels deferred to the next tile
  kRegisters,  // masked global stores straight from the accumulators, any pitch (register_store.cuh)
};

// Where a kTmaPanels build writes C: the output's tensor map (a __grid_constant__ kernel argument).
struct TmaC {
  const CUtensorMap* map;
};
// Where a kRegisters build writes C: element (r, c) of the kernel's M x N output at ptr[r * ld + c].
template <class OutT>
struct PointerC {
  OutT* ptr;
  long long ld;
};
// Where a kRegisters build with an e4m3 Out writes: the values as PointerC, and the scale of row r and
// columns [128 b, 128 b + 128) at scales[b * ld_scales + r].
struct QuantizedC {
  __nv_fp8_e4m3* ptr;
  long long ld;
  float* scales;
  long long ld_scales;
};

// What a config (Cfg) holds, each a static constexpr member: the tile BM, BN, BK; kStages; kCluster,
// kConsumers, kProducerWarpgroups, kThreads; kAMnMajor, kBMnMajor; the output panels per tile kCPanels,
// the ring of panel buffers per consumer kCRing and a buffer's bytes kCPanelBytes (the plan's shared
// memory for C: none with kRegisters); kStore; and the type Out. The instantiation block's BuildConfig
// is the one a build compiles.
template <class Cfg>
__host__ __device__ constexpr bool config_ok() {
  static_assert(((Cfg::BM == 128 && Cfg::kConsumers == 2) || (Cfg::BM == 64 && Cfg::kConsumers == 1) ||
                 (Cfg::kPingpong && (Cfg::BM == 64 || Cfg::BM == 128) && Cfg::kConsumers == 2) ||
                 (!Cfg::kPingpong && Cfg::BM == 256 && Cfg::kConsumers == 2)) &&
                    Cfg::kProducerWarpgroups == 1,
                "sm90_gemm: level 9's 128-row tile on two consumer warpgroups, or a 64-row tile on one, or 64- or "
                "128-row tiles taken in turn by two (ping-pong), or a 256-row tile on two (128 rows each); a producer "
                "warpgroup");
  static_assert(Cfg::kCluster == 1 || Cfg::kCluster == 2, "sm90_gemm: a 2-CTA cluster sharing B, or one CTA");
  static_assert(Cfg::BN == 64 || Cfg::BN == 128 || Cfg::BN == 192 || Cfg::BN == 256 ||
                    ((Cfg::BN == 32 || Cfg::BN == 96 || Cfg::BN == 144) && Cfg::kStore == CStore::kRegisters),
                "sm90_gemm: BN is 64, 128, 192 or 256; 96 or 144 stored from registers (not whole 64-column panels)");
  static_assert(Cfg::BK == 64, "sm90_gemm: BK = 64, one 128-byte swizzle span of K per stage");
  static_assert((Cfg::kAMnMajor == 0 || Cfg::kAMnMajor == 1) && (Cfg::kBMnMajor == 0 || Cfg::kBMnMajor == 1),
                "sm90_gemm: each operand K-major (0) or MN-major (1)");
  static_assert(Cfg::kPingpong || Cfg::BM == 64 * Cfg::kConsumers || Cfg::BM == 256,
                "level 9: each consumer owns 64 rows of the tile (128 in the 256-row tile)");
  static_assert(Cfg::BM != 256 || Cfg::BN <= 192,
                "the 256-row tile: each consumer holds 128 x BN, BN <= 192 (192 accumulator registers a thread)");
  static_assert(!Cfg::kPingpong || ((Cfg::BM == 64 || (Cfg::BM == 128 && Cfg::BN <= 192)) && Cfg::kConsumers == 2),
                "ping-pong: each of two consumers holds a whole tile in its accumulators: 64 x BN, or 128 x BN at "
                "BN <= 192 (192 accumulator registers a thread)");
  if constexpr (Cfg::kStore == CStore::kRegisters) {
    static_assert(Cfg::kCPanels == 0 && Cfg::kCRing == 0,
                  "sm90_gemm: C from registers: the plan must stage no C (c_from_registers)");
    static_assert(!std::is_same<typename Cfg::Out, __nv_fp8_e4m3>::value || Cfg::BN % 128 == 0,
                  "sm90_gemm: the e4m3 output's 1 x 128 scale blocks are whole columns of a tile (BN 128 or 256)");
  } else {
    static_assert(Cfg::kCRing >= 1 && Cfg::kCPanels % Cfg::kCRing == 0, "level 9: a ring of panel buffers per consumer");
    static_assert(std::is_same<typename Cfg::Out, elem_t>::value, "sm90_gemm: a TMA store writes the input dtype");
  }
  return true;
}

// Column panel p (columns 64p.. of BN) of a consumer's finished 64 x BN fragment (rows row0.., columns
// col0.. of the kernel's M x N output) through the fused epilogue, in place, then packed as
// pack_fragment packs it. Pair (4j + 2i, 4j + 2i + 1) sits at row row0 + 16w + l/4 + 8i, columns
// col0 + 8j + 2(l%4) + {0, 1} (epilogue.cuh's fragment layout): two neighbours along a row of the
// kernel's output. The kernel calls it for each panel right before that panel's staging (or, for the
// panels stored later, after the earlier panels' stores): ptxas sinks the math to where the packed
// values are used, and the whole fragment's math sunk into the first panel's store spilled.
template <int BN, class Epi>
__device__ __forceinline__ void epilogue_panel(float (&d)[BN / 2], int p, int row0, int col0, int M, int N,
                                               const Epi& epi) {
  const int t = thread_in_warpgroup(), warp = t / 32, lane = t % 32;
#pragma unroll
  for (int j = 8 * p; j < 8 * p + 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      epi.pair_along_row(d[4 * j + 2 * i], d[4 * j + 2 * i + 1], row0 + 16 * warp + lane / 4 + 8 * i,
                         col0 + 8 * j + 2 * (lane % 4), M, N);
  }
}
template <int BN, class Epi>
__device__ __forceinline__ void epilogue_pack_panel(uint32_t (&packed)[BN / 4], float (&d)[BN / 2], int p, int row0,
                                                    int col0, int M, int N, const Epi& epi) {
  epilogue_panel<BN>(d, p, row0, col0, M, N, epi);
#pragma unroll
  for (int q = 16 * p; q < 16 * p + 16; ++q) packed[q] = pack2(d[2 * q], d[2 * q + 1]);
}

// A consumer's R 64-row fragments of a 128-row tile at BN 192 (the 256-row tile's and the 128-row ping-pong
// tile's) stored by TMA panel by panel from rows m0.., columns n0..: each panel's pairs put through the fused
// epilogue (if any) in place and packed as they are staged, by 32-bit shared addresses. Narrower tiles stage a
// packed copy of each panel through generic addresses (the SASS their GPU runs verified); at BN 192, 192
// accumulator registers a thread, that spilled.
template <int kPanels, int BN, int R, class Epi>
__device__ __forceinline__ void store_wide_fragments(float (&d)[R][BN / 2], uint8_t* ring, const CUtensorMap* map_c,
                                                     int n0, int m0, int M, int N, int bar, bool issuer, const Epi& epi) {
#pragma unroll
  for (int p = 0; p < kPanels; ++p)
    store_panel_staged<kPanels>(p, ring, map_c, n0, m0, bar, issuer, -1, [&](uint8_t* buf, int q) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if constexpr (Epi::kFused) epilogue_panel<BN>(d[r], q, m0 + 64 * r, n0, M, N, epi);
        stage_panel_sw128<BN>(buf, d[r], q, 64 * r);
      }
    });
}

// The kernel: map_a, map_b the operands' tensor maps; c_out where C goes (TmaC or PointerC, as
// Cfg::kStore says); the problem; the stream-K split (tail_first_unit) and its workspace (partials,
// counters: null when no unit has two contributors); epi the epilogue (NoEpilogue or FusedEpilogue).
template <class Cfg, class COut, class Epi>
__device__ __forceinline__ void sm90_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b, const COut& c_out, int M,
                                          int N, int K, int tail_first_unit, int max_contributors,
                                          float* __restrict__ partials, int* __restrict__ counters, const Epi& epi) {
  static_assert(config_ok<Cfg>());
  GL_TIMELINE_STAMP(threadIdx.x == 0, kEntry);
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, kCluster = Cfg::kCluster;
  constexpr bool kFromRegisters = Cfg::kStore == CStore::kRegisters;
  constexpr bool kQuantized = std::is_same<typename Cfg::Out, __nv_fp8_e4m3>::value;  // e4m3 values, 1 x 128 scales
  // Panels stored at once at the end of a tile: one per buffer, whose last stores (the previous tile's,
  // issued a whole tile ago) have long been read. The rest wait in registers for the next tile.
  constexpr int kEarlyPanels = Cfg::kCRing < Cfg::kCPanels ? Cfg::kCRing : Cfg::kCPanels;
  constexpr int kDeferredPanels = Cfg::kCPanels - kEarlyPanels;
  // Consumer c's first row in a tile is kConsumerRows x c: its 64-row slice of level 9's tile (128-row slice of
  // the 256-row tile), or (ping-pong) row 0 of the whole tile it holds.
  constexpr int kConsumerRows = Cfg::kPingpong ? 0 : BM / Cfg::kConsumers;
  // The 64 x BN fragments a consumer holds per tile: level 9's one, a ping-pong consumer's BM / 64 (its whole
  // tile: two at BM 128), or two of the 256-row tile's 128-row slice; each stage's A rows 64 r.. of the
  // consumer's into fragment r, in one wgmma group.
  constexpr int kRowBlocks = kConsumerRows ? kConsumerRows / 64 : BM / 64;
  // Every unit whole (no stream-K tail): ping-pong, and the 256-row tile (its fragments' partials are not built).
  constexpr bool kWholeUnitsOnly = Cfg::kPingpong || kRowBlocks > 1;
  constexpr int kPrefetchAhead = 8;  // K iterations between a tile's epilogue prefetch and its epilogue
  // Named barrier 2 + c: consumer c's 128 threads (0 is __syncthreads; the panel ring's stores and the
  // stream-K hand-in).
  constexpr int kFirstStoreBarrier = 2;

  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, BN, kCluster);
  const int k_tiles = (K + BK - 1) / BK;
  const int rank = cluster_cta_rank();
  const int first_unit = blockIdx.x / kCluster, unit_stride = gridDim.x / kCluster;
  // Units [0, whole_end) are computed whole, unit_stride apart; the rest are the stream-K tail (none
  // when ping-pong: its units are each one consumer's whole tile, and the launch splits none).
  const int whole_end = kWholeUnitsOnly ? sched.total : whole_units_end(sched.total, tail_first_unit, k_tiles, unit_stride);
  const StreamKTail tail(whole_end, sched.total - whole_end, k_tiles, unit_stride);
  // The bias as one more K step (bias_stage.cuh) where the generated epilogue leaves it to the kernel: the
  // producer adds a stage after each unit's last K tile, the consumers fill it and issue one k16 wgmma.
#if defined(GL_BIAS_MMA_SLOT)
  constexpr bool kBiasMma = true;
  static_assert(!Cfg::kPingpong && kRowBlocks == 1, "the bias stage: one 64-row fragment a consumer, cooperative");
  // Unit `unit`'s bias stage for consumer c, after the K range that ends the unit's K.
  const auto bias_stage = [&](const int& unit, const int& c) {
    return extra_stage(k_tiles, [&](float (&acc)[BN / 2], elem_t* a, elem_t* b) {
      int um, tn;
      sched.coords(unit, um, tn);
      bias_stage_step<BN, Cfg::kConsumers, GL_EPI_SWAP>(acc, a, b, c, epi.p.ptr[GL_BIAS_MMA_SLOT],
                                                        GL_EPI_SWAP ? (um * kCluster + rank) * BM : tn * BN,
                                                        GL_EPI_SWAP ? M : N);
    });
  };
#else
  constexpr bool kBiasMma = false;
  const auto bias_stage = [](const int&, const int&) { return NoExtraStage{}; };
#endif

  if constexpr (Cfg::kPingpong) {
    if (threadIdx.x == 0) init_order_barriers(smem);  // before init_ring's fence, which publishes both
  }
  if constexpr (kFromRegisters) {
    if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_b);  // no output map: b's is prefetched twice
  } else {
    if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, c_out.map);
  }
  sync_cta_or_cluster<kCluster>();
  GL_TIMELINE_STAMP(threadIdx.x == 0, kSetup);
  GL_TIMELINE_VALUE(threadIdx.x == 0, kSmId, smid());

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    if constexpr (Cfg::kConsumers == 2) setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      GL_TIMELINE_STAMP(true, kProducerStart);
      RingPosition pos = produce_units<BSlice::kOfTile, kBiasMma>(smem, &map_a, &map_b, sched, k_tiles, rank, first_unit,
                                                                 unit_stride, whole_end);
      GL_TIMELINE_STAMP(true, kProducerWhole);
      if constexpr (!kWholeUnitsOnly)
      for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
        const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
        int um, tn;
        sched.coords(seg.unit, um, tn);
        produce_k_range(smem, &map_a, &map_b, um, tn, seg.kb, seg.ke, rank, pos);
        if (kBiasMma && seg.ke == k_tiles) produce_empty_stage(smem, pos);  // the piece that ends the unit's K
        it = seg.next;
      }
      GL_TIMELINE_STAMP(true, kProducerEnd);
    }
  } else {
    // 232 and the producer's 40 use the whole pool the launch gives the CTA (168 x 384 = 2 x 128 x 232 +
    // 128 x 40 registers): an increase past it cannot be granted (a 240 / 32 split never finished:
    // docs/measured-choices.md). ptxas uses all 232: one added line in this role (a sleep) spills.
    // One consumer (the 64-row tile) already has every register ptxas gave the kernel: no exchange.
    if constexpr (Cfg::kConsumers == 2) setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // releases stages and issues this consumer's stores
    GL_TIMELINE_STAMP(consumer == 0 && elected, kReady);
    uint8_t* const ring = smem.c() + consumer * Cfg::kCRing * Cfg::kCPanelBytes;  // kTmaPanels: this consumer's
    const int bar = kFirstStoreBarrier + consumer;
    // kTmaPanels: the previous tile's outputs; its last kDeferredPanels are still to be stored (ping-pong: this
    // tile's, kRowBlocks fragments' worth)
    uint32_t packed[kRowBlocks * BN / 4];
    // kRegisters: store a finished fragment of work unit `unit` from registers, the fused epilogue (if
    // any) applied to each pair right before its store (epilogue.cuh's pairs: neighbours along a kernel
    // row). Pairs shifted into alignment on misaligned rows, except with an epilogue (register_store.cuh:
    // it spilled).
    auto store_fragment = [&](float (&d)[BN / 2], int unit, int rows_in = 0) {  // rows_in: fragment r's 64 r
      if constexpr (kFromRegisters) {
        int um, tn;
        sched.coords(unit, um, tn);
        auto pair_op = [&](float& x0, float& x1, int r, int c) {
          if constexpr (Epi::kFused) epi.pair_along_row(x0, x1, r, c, M, N);
        };
        const int row0 = (um * kCluster + rank) * BM + kConsumerRows * consumer + rows_in;
        if constexpr (kQuantized) {
          store_fragment_quantized<BN>(c_out.ptr, c_out.ld, c_out.scales, c_out.ld_scales, d, row0, tn * BN, M, N, pair_op);
        } else {
          store_fragment_from_registers<BN, !Epi::kFused>(c_out.ptr, c_out.ld, d, row0, tn * BN, M, N, pair_op);
        }
      }
    };
    // kTmaPanels: store panel p of this consumer's rows of work unit `unit`, its place recomputed from
    // the unit rather than kept from the tile before: registers are what this loop is short of.
    auto store_panel_of = [&](int unit, int p) {
      if constexpr (!kFromRegisters && kRowBlocks == 1) {  // level 9's one fragment (ping-pong stores its own)
        int um, tn;
        sched.coords(unit, um, tn);
        store_panel(p, packed, ring, c_out.map, tn * BN, (um * kCluster + rank) * BM + kConsumerRows * consumer, bar, elected);
      }
    };
    RingPosition pos{0};
    ConsumerWaitClock wait_clock;  // the whole tiles' waits for data (a timeline build's; else no code)
    if constexpr (Cfg::kPingpong) {
      // Consumer c takes the CTA's tiles c, c + kConsumers, ...: units first_unit + (c + j kConsumers)
      // unit_stride. Its ring position starts past the tiles before its first and steps over the other
      // consumers' tiles (each k_tiles loads); its turns keep the main loops in tile order (pingpong.cuh).
      // Every panel is stored at the end of its tile: the other consumer's main loop hides the stores.
      pos.count = consumer * k_tiles;
      int turn = 0;
      for (int unit = first_unit + consumer * unit_stride; unit < whole_end;
           unit += Cfg::kConsumers * unit_stride, ++turn) {
        int um, tn;
        sched.coords(unit, um, tn);
        const int tm = um * kCluster + rank;
        float d[kRowBlocks][BN / 2];
        GL_TIMELINE_MARK(consumer == 0 && elected, kMark);
        wait_turn(smem, consumer, turn);
        GL_TIMELINE_PHASE(consumer == 0 && elected, kTurnWaitSum, kMark);
        consume_k_range(smem, d, 0, 0, k_tiles, pos, elected, [&](int kt) {
          GL_TIMELINE_STAMP(consumer == 0 && elected && turn == 0 && kt == 0, kFirstFull);
          if (kt == k_tiles - 1 && elected) pass_turn(smem, consumer);  // after the tile's last full wait
          if constexpr (Epi::kFused) {
            if (kt == (k_tiles > kPrefetchAhead ? k_tiles - kPrefetchAhead : 0))
              epi.template prefetch<BM, BN, 128>(tm * BM, tn * BN, M, N, thread_in_warpgroup());
          }
        }, wait_clock);
        pos.count += (Cfg::kConsumers - 1) * k_tiles;
        GL_TIMELINE_STAMP(consumer == 0 && elected && turn < kTiles, kTile0 + 2 * turn);
        uint32_t (&tile_packed)[kRowBlocks][BN / 4] = reinterpret_cast<uint32_t(&)[kRowBlocks][BN / 4]>(packed);
        if constexpr (kFromRegisters) {
#pragma unroll
          for (int r = 0; r < kRowBlocks; ++r) store_fragment(d[r], unit, 64 * r);
        } else if constexpr (Epi::kFused && kRowBlocks == 1) {
#pragma unroll
          for (int p = 0; p < Cfg::kCPanels; ++p) {
            epilogue_pack_panel<BN>(tile_packed[0], d[0], p, tm * BM, tn * BN, M, N, epi);
            store_panel(p, tile_packed, ring, c_out.map, tn * BN, tm * BM, bar, elected);
          }
        } else if constexpr (kRowBlocks > 1 && BN > 128) {
          store_wide_fragments<Cfg::kCPanels, BN>(d, ring, c_out.map, tn * BN, tm * BM, M, N, bar, elected, epi);
        } else if constexpr (Epi::kFused) {
          // Each fragment's panel through the epilogue right before its staging, one fragment's math live
          // at a time (both first spilled GELU's at BN 128).
#pragma unroll
          for (int p = 0; p < Cfg::kCPanels; ++p)
            store_panel_staged<Cfg::kCPanels>(p, ring, c_out.map, tn * BN, tm * BM, bar, elected, -1,
                                              [&](uint8_t* buf, int q) {
#pragma unroll
              for (int r = 0; r < kRowBlocks; ++r) {
                epilogue_pack_panel<BN>(tile_packed[r], d[r], q, tm * BM + 64 * r, tn * BN, M, N, epi);
                stage_packed_panel_sw128<BN>(buf, tile_packed[r], q, 64 * r);
              }
            });
        } else if constexpr (kRowBlocks == 1) {
          pack_fragment<BN>(tile_packed[0], d[0]);
#pragma unroll
          for (int p = 0; p < Cfg::kCPanels; ++p)
            store_panel(p, tile_packed, ring, c_out.map, tn * BN, tm * BM, bar, elected);
        } else {  // each panel's words packed right before its staging: the whole tile packed at once spilled
#pragma unroll
          for (int p = 0; p < Cfg::kCPanels; ++p) {
#pragma unroll
            for (int r = 0; r < kRowBlocks; ++r)
#pragma unroll
              for (int q = 16 * p; q < 16 * p + 16; ++q) tile_packed[r][q] = pack2(d[r][2 * q], d[r][2 * q + 1]);
            store_panel(p, tile_packed, ring, c_out.map, tn * BN, tm * BM, bar, elected);
          }
        }
        GL_TIMELINE_STAMP(consumer == 0 && elected && turn < kTiles, kTile0 + 2 * turn + 1);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kWholeTiles);
      }
      GL_TIMELINE_STAMP(consumer == 0 && elected, kWholeEnd);
    } else if constexpr (kRowBlocks > 1) {
      // The 256-row tile: consumer c computes rows 128c.. of every unit as two 64-row fragments (each stage's A
      // rows 128c + 64r into fragment r, one wgmma group: consume_k_range's consumer index counts 64-row
      // slices), then stores them at the tile's end, the producer loading on meanwhile. The
      // tile's two consumers share each stage's B, so a 256 x BN tile moves fewer operand bytes per flop than
      // two 128 x BN ones; its use is fewer, larger tiles where 128-row tiles leave a wave partly idle.
      for (int unit = first_unit; unit < whole_end; unit += unit_stride) {
        int um, tn;
        sched.coords(unit, um, tn);
        const int row0 = (um * kCluster + rank) * BM + kConsumerRows * consumer;
        float d[kRowBlocks][BN / 2];
        consume_k_range(smem, d, kRowBlocks * consumer, 0, k_tiles, pos, elected, [&](int kt) {
          GL_TIMELINE_STAMP(consumer == 0 && elected && unit == first_unit && kt == 0, kFirstFull);
          if constexpr (Epi::kFused) {
            if (kt == (k_tiles > kPrefetchAhead ? k_tiles - kPrefetchAhead : 0))
              epi.template prefetch<kConsumerRows, BN, 128>(row0, tn * BN, M, N, thread_in_warpgroup());
          }
        }, wait_clock);
        GL_TIMELINE_STAMP(consumer == 0 && elected && (unit - first_unit) / unit_stride < kTiles,
                          kTile0 + 2 * ((unit - first_unit) / unit_stride));
        // Stored as a 128-row ping-pong consumer stores its tile (the ping-pong branch above, whose copy keeps the
        // SASS its GPU runs verified): from registers, or each panel's two fragments packed (or put through the
        // epilogue) right before its staging.
        uint32_t (&tile_packed)[kRowBlocks][BN / 4] = reinterpret_cast<uint32_t(&)[kRowBlocks][BN / 4]>(packed);
        if constexpr (kFromRegisters) {
#pragma unroll
          for (int r = 0; r < kRowBlocks; ++r) store_fragment(d[r], unit, 64 * r);
        } else if constexpr (BN > 128) {
          store_wide_fragments<Cfg::kCPanels, BN>(d, ring, c_out.map, tn * BN, row0, M, N, bar, elected, epi);
        } else {
#pragma unroll
          for (int p = 0; p < Cfg::kCPanels; ++p)
            store_panel_staged<Cfg::kCPanels>(p, ring, c_out.map, tn * BN, row0, bar, elected, -1,
                                              [&](uint8_t* buf, int q) {
#pragma unroll
              for (int r = 0; r < kRowBlocks; ++r) {
                if constexpr (Epi::kFused) {
                  epilogue_pack_panel<BN>(tile_packed[r], d[r], q, row0 + 64 * r, tn * BN, M, N, epi);
                } else {
#pragma unroll
                  for (int w = 16 * q; w < 16 * q + 16; ++w) tile_packed[r][w] = pack2(d[r][2 * w], d[r][2 * w + 1]);
                }
                stage_packed_panel_sw128<BN>(buf, tile_packed[r], q, 64 * r);
              }
            });
        }
        GL_TIMELINE_STAMP(consumer == 0 && elected && (unit - first_unit) / unit_stride < kTiles,
                          kTile0 + 2 * ((unit - first_unit) / unit_stride) + 1);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kWholeTiles);
      }
      GL_TIMELINE_STAMP(consumer == 0 && elected, kWholeEnd);
    } else if constexpr (kFromRegisters) {
      for (int unit = first_unit; unit < whole_end; unit += unit_stride) {
        float d[BN / 2];
        consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [&](int kt) {
          GL_TIMELINE_STAMP(consumer == 0 && elected && unit == first_unit && kt == 0, kFirstFull);
        }, wait_clock, bias_stage(unit, consumer));
        GL_TIMELINE_STAMP(consumer == 0 && elected && (unit - first_unit) / unit_stride < kTiles,
                          kTile0 + 2 * ((unit - first_unit) / unit_stride));
        store_fragment(d, unit);
        GL_TIMELINE_STAMP(consumer == 0 && elected && (unit - first_unit) / unit_stride < kTiles,
                          kTile0 + 2 * ((unit - first_unit) / unit_stride) + 1);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kWholeTiles);
      }
      GL_TIMELINE_STAMP(consumer == 0 && elected, kWholeEnd);
    } else {
      for (int unit = first_unit; unit < whole_end; unit += unit_stride) {
        int um, tn;
        sched.coords(unit, um, tn);
        const int tm = um * kCluster + rank;
        const int prev = unit - unit_stride;  // the previous tile of this CTA, if unit != first_unit
        float d[BN / 2];
        consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [&](int kt) {
          // Not at BN 256: the stamp's registers inside the K loop spilled there (ptxas).
          GL_TIMELINE_STAMP(BN < 256 && consumer == 0 && elected && unit == first_unit && kt == 0, kFirstFull);
          if (kt < kDeferredPanels && unit != first_unit)  // runs while this K iteration's wgmma does
            store_panel_of(prev, kEarlyPanels + kt);
          if constexpr (Epi::kFused) {
            // This consumer's 64 x BN slice of the epilogue's tile inputs (a residual) into L2, kPrefetchAhead
            // K iterations before the epilogue loads it: late enough that the main loop's operand traffic
            // does not evict it first, early enough to cover DRAM's latency. A hint that orders nothing
            // (fused_epilogue.cuh's epi_prefetch_runs).
            if (kt == (k_tiles > kPrefetchAhead ? k_tiles - kPrefetchAhead : 0))
              epi.template prefetch<64, BN, 128>(tm * BM + 64 * consumer, tn * BN, M, N, thread_in_warpgroup());
          }
        }, wait_clock, bias_stage(unit, consumer));
        GL_TIMELINE_STAMP(consumer == 0 && elected && (unit - first_unit) / unit_stride < kTiles,
                          kTile0 + 2 * ((unit - first_unit) / unit_stride));
        if (unit != first_unit)  // fewer K iterations than deferred panels: finish the previous tile first
          for (int p = kEarlyPanels + k_tiles; p < Cfg::kCPanels; ++p)
            store_panel_of(prev, p);
        if constexpr (Epi::kFused) {
          // Each panel's epilogue right before its staging, in the same block: ptxas sinks the math to
          // where the packed values are used, so a panel's inputs stay live only across its own store.
#pragma unroll
          for (int p = 0; p < Cfg::kCPanels; ++p) {
            epilogue_pack_panel<BN>(packed, d, p, tm * BM + 64 * consumer, tn * BN, M, N, epi);
            if (p < kEarlyPanels) store_panel(p, packed, ring, c_out.map, tn * BN, tm * BM + 64 * consumer, bar, elected);
          }
        } else {
          pack_fragment<BN>(packed, d);
#pragma unroll
          for (int p = 0; p < kEarlyPanels; ++p)
            store_panel(p, packed, ring, c_out.map, tn * BN, tm * BM + 64 * consumer, bar, elected);
        }
        GL_TIMELINE_STAMP(consumer == 0 && elected && (unit - first_unit) / unit_stride < kTiles,
                          kTile0 + 2 * ((unit - first_unit) / unit_stride) + 1);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kWholeTiles);
      }
      if (first_unit < whole_end) {  // the last whole tile's deferred panels
        const int last = first_unit + (whole_end - 1 - first_unit) / unit_stride * unit_stride;
        for (int p = kEarlyPanels; p < Cfg::kCPanels; ++p)
          store_panel_of(last, p);
      }
      GL_TIMELINE_STAMP(consumer == 0 && elected, kWholeEnd);
    }
    GL_TIMELINE_VALUE(consumer == 0 && elected, kFullWaitClk, wait_clock.cycles());  // every whole tile's waits
    if constexpr (!kWholeUnitsOnly)
    for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
      const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
      it = seg.next;
      if constexpr (Epi::kFused) {  // every contributor of a split tile prefetches (which one finishes it is decided at its end)
        int um, tn;
        sched.coords(seg.unit, um, tn);
        epi.template prefetch<64, BN, 128>((um * kCluster + rank) * BM + kConsumerRows * consumer, tn * BN, M, N,
                                           thread_in_warpgroup());
      }
      float d[BN / 2];
      GL_TIMELINE_MARK(consumer == 0 && elected, kMark);
      consume_k_range(smem, d, consumer, seg.kb, seg.ke, pos, elected, [](int) {}, NoWaitClock{},
                      bias_stage(seg.unit, consumer));
      GL_TIMELINE_PHASE(consumer == 0 && elected, kTailLoopSum, kMark);
      GL_TIMELINE_COUNT(consumer == 0 && elected, kSegments);
      if (seg.contributors > 1) {
        const int slot = ((seg.unit - whole_end) * kCluster + rank) * Cfg::kConsumers + consumer;
        const PartialSlots<BN> slots{partials + static_cast<size_t>(slot) * max_contributors * PartialSlots<BN>::kFloats};
        const bool last = hand_in_fragment(slots, counters + slot, seg.mine, seg.contributors, d, bar, elected);
        GL_TIMELINE_PHASE(consumer == 0 && elected, kHandInSum, kMark);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kHandIns);
        if (!last) continue;  // another contributor finishes this tile
        slots.reduce(seg.contributors, d);
        GL_TIMELINE_PHASE(consumer == 0 && elected, kReduceSum, kMark);
        GL_TIMELINE_COUNT(consumer == 0 && elected, kReductions);
      }
      if constexpr (kFromRegisters) {
        store_fragment(d, seg.unit);
      } else if constexpr (Epi::kFused) {
#pragma unroll
        for (int p = 0; p < Cfg::kCPanels; ++p) {
          {
            int um, tn;
            sched.coords(seg.unit, um, tn);
            epilogue_pack_panel<BN>(packed, d, p, (um * kCluster + rank) * BM + kConsumerRows * consumer, tn * BN, M, N, epi);
          }
          store_panel_of(seg.unit, p);
        }
      } else {
        pack_fragment<BN>(packed, d);
#pragma unroll
        for (int p = 0; p < Cfg::kCPanels; ++p)
          store_panel_of(seg.unit, p);
      }
      GL_TIMELINE_PHASE(consumer == 0 && elected, kTailStoreSum, kMark);
    }
    GL_TIMELINE_STAMP(consumer == 0 && elected, kTailEnd);
    if constexpr (!kFromRegisters) {
      if (elected) tma_store_wait_read<0>();
      GL_TIMELINE_STAMP(consumer == 0 && elected, kStoresRead);
    }
    GL_TIMELINE_STAMP(elected, consumer == 0 ? kExit0 : kExit1);
  }
  sync_cta_or_cluster<kCluster>();
  GL_TIMELINE_STAMP(threadIdx.x == 0, kExit);
}

// ---- The build: its -D constants as the config, and the entry point ------------------------------
// The plan's constants (design/plan.py kernel_defines) and library/gemm.py's build_defines:
// GL_C_FROM_REGISTERS 1 for the plan's c_from_registers, GL_OUT_FP32 for a float32 output, GL_OUT_E4M3 for
// the quantized one (e4m3 values and 1 x 128 scales); GL_EPILOGUE
// when the translation unit starts with a fused epilogue's generated code (library/epilogue.py).
#ifndef GL_C_FROM_REGISTERS
#define GL_C_FROM_REGISTERS 0
#endif
#ifndef GL_PINGPONG
#define GL_PINGPONG 0
#endif
// CTAs resident per SM (library_gemm's ctas_per_sm, a measuring build): 1, or 2 for the 64-row tile on one CTA
// per cluster, whose one consumer warpgroup then shares the SM's tensor pipe with another CTA's (two wgmma
// groups in flight from independent tiles); its launch bounds cap a thread at 128 registers (two CTAs of 256
// threads in the SM's 65536) and its ring fits in half the SM's shared memory (the plan's stages).
#ifndef GL_CTAS_PER_SM
#define GL_CTAS_PER_SM 1
#endif
static_assert(GL_CTAS_PER_SM == 1 || (GL_CTAS_PER_SM == 2 && GL_CONSUMERS == 1 && GL_CLUSTER == 1 && !GL_PINGPONG),
              "two CTAs per SM: the 64-row tile's one consumer on one CTA per cluster");
struct BuildConfig {
  static constexpr int BM = GL_BM, BN = GL_BN, BK = GL_BK, kStages = GL_STAGES;
  static constexpr int kCluster = GL_CLUSTER, kConsumers = GL_CONSUMERS, kProducerWarpgroups = GL_PRODUCER_WG;
  static constexpr int kThreads = GL_THREADS;
  static constexpr int kAMnMajor = GL_A_MN_MAJOR, kBMnMajor = GL_B_MN_MAJOR;
  static constexpr int kCPanels = GL_C_PANELS, kCRing = GL_C_RING, kCPanelBytes = GL_SMEM_C_PANEL_BYTES;
  static constexpr CStore kStore = GL_C_FROM_REGISTERS ? CStore::kRegisters : CStore::kTmaPanels;
  static constexpr bool kPingpong = GL_PINGPONG;  // the plan's schedule "pingpong" (pingpong.cuh)
#if defined(GL_OUT_FP32)
  using Out = float;
#elif defined(GL_OUT_E4M3)
  using Out = __nv_fp8_e4m3;
#else
  using Out = elem_t;
#endif
};
// The output's arguments: the pointer and row pitch (library/gemm.py passes them for c_from_registers),
// or the tensor map; the epilogue's parameters last, with an epilogue only (GL_EPILOGUE_ARG and
// GL_EPILOGUE_OBJ: fused_epilogue_pair.cuh).
#if GL_C_FROM_REGISTERS && defined(GL_OUT_E4M3)
#define GL_C_ARG BuildConfig::Out* __restrict__ C, long long ldc, float* __restrict__ scale_out, long long ld_scale_out
#define GL_C_OUT QuantizedC{C, ldc, scale_out, ld_scale_out}
#elif GL_C_FROM_REGISTERS
#define GL_C_ARG BuildConfig::Out* __restrict__ C, long long ldc
#define GL_C_OUT PointerC<BuildConfig::Out>{C, ldc}
#else
#define GL_C_ARG const __grid_constant__ CUtensorMap map_c
#define GL_C_OUT TmaC{&map_c}
#endif

extern "C" __global__ void __launch_bounds__(BuildConfig::kThreads, GL_CTAS_PER_SM)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                GL_C_ARG, int M, int N, int K, int tail_first_unit,
                int max_contributors, float* __restrict__ partials, int* __restrict__ counters GL_EPILOGUE_ARG) {
  sm90_gemm<BuildConfig>(map_a, map_b, GL_C_OUT, M, N, K, tail_first_unit, max_contributors, partials, counters,
                         GL_EPILOGUE_OBJ);
}
