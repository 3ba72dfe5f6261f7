// Library kernel sm90_grouped_gemm: the grouped GEMM of mixture-of-experts layers, torch._grouped_mm's
// contiguous layout. x (total_rows, K) row-major, its rows split into groups by `offs` (an int32 device
// array of cumulative row ends: group e has rows [offs[e - 1], offs[e]), group 0 from row 0), times w
// (E, N, K), one (N, K) weight per group (nn.Linear's layout):
//   out[r, :] = x[r, :] @ w[e]^T  for each row r of group e,
// fp32 accumulation, out in the inputs' dtype (or fp32), optionally plus a bias row per group (bias
// (E, N)) and then an activation (Cfg::kActivation: out = act(x @ w[e]^T + bias[e]) in fp32, rounded once).
// library/grouped.py plans, binds and launches it.
//
// One templated kernel body, sm90_grouped_gemm<Cfg>, reads top to bottom; each build's variant is a
// member of its config, chosen with `if constexpr`, never a preprocessor branch: kMode (the schedule's
// problem: GroupedMode below), kBias, kActivation, kCluster (1 or 2, below), and the types Out and Activation. The instantiation
// block at the end of this file is the one place that reads the build's -D constants (the plan's,
// design/plan.py kernel_defines, and library/grouped.py's: GL_MAX_GROUPS, GL_GROUPED_K, GL_MASKED,
// GL_BIAS, GL_GROUPED_TAIL, GL_OUT_FP32): it makes them the config type and defines the extern "C" entry point the
// loader finds by name.
//
// Level 9's roles on one CTA (kCluster 1, the default build): a producer warpgroup whose one thread
// issues the TMA loads, two consumer warpgroups of 64 rows each on a 128 x BN tile (BN 128 or 256, BK 64), the stage ring of
// stage_ring.cuh (producer_acquire / producer_commit / consumer_wait / consumer_release; the consumers'
// loop is cluster_ring.cuh's consume_k_range releasing to this CTA alone), persistent CTAs. What differs
// from sm90_gemm.cu:
//  - The schedule (grouped_scheduler.cuh): every CTA reads `offs` at its start and builds the prefix of
//    the groups' M-tile counts in shared memory; tile index -> (M tile over all groups, N tile) in the
//    library's grouped order, M tile -> its group by a binary search. No group size reaches the host, so
//    a launch is the same for every routing (CUDA graphs, torch.compile).
//  - The loads: one 2-D map over all of x's rows (a group's last tile loads the next group's first rows,
//    or zeros past the last row: TMA's out-of-bounds fill), and one 3-D map over w, (K, N, E) innermost
//    first, the group as its outer coordinate. An N-major weight (GL_B_MN_MAJOR) is read as (N, K, E):
//    w given as (E, K, N) row-major per group (the backward's grad_x = grad_out @ w[e]), BN / 64 boxes
//    of 64 N x BK K per stage, as tma_tile.cuh's tma_load_operand loads an MN-major operand.
//  - The store. Builds of a 2-byte output, grouped along M contiguously or along K, carry
//    level 9's panel ring (Cfg::kCRing > 0, the plan's c_ring: panel_ring.cuh): a consumer's 64 rows go
//    out by TMA one 64 x 64 panel at a time, all but the last at the tile's end and the last while the
//    next tile's first wgmma runs (a ring with a buffer per panel: all at the tile's end); the copy
//    engine writes global memory while the tensor cores go on.
//    That takes a consumer slice whose 64 rows all belong to the tile's group (grouped along K: every
//    slice, the rank-3 output map clipping M and N) and an output TMA can write (the launch's
//    tma_store: 16-byte base, pitches and rows); a bias row is added while packing. The rest, and every other build's output, goes straight
//    from the accumulator registers (register_store.cuh), rows masked to the group's end, so the rows a
//    tile borrowed from the next group are never written, at any pitch.
// Rows past offs[E - 1] are not written (torch._grouped_mm leaves them too).
//
// kCluster = 2 (GL_CLUSTER 2; library/grouped.py's cluster=2, which the public calls take where it
// measured faster: choose_cluster) is level 8's idea on the grouped schedule: a cluster of two CTAs
// takes units of two vertically adjacent M tiles (M tiles 2p and 2p + 1 of the schedule's order, one N
// tile; grouped along K, of one group), CTA rank r computing M tile 2p + r, both CTAs walking the same
// units in the same order with the same K iterations per unit. When both tiles exist and read one
// weight (grouped along M: one group; along K: always), each CTA loads half of the B tile and
// multicasts it into both CTAs' stage (per CTA, 32 KB of L2 traffic a stage at BN 256 instead of 48 KB);
// otherwise (a pair straddling two groups, or rank 1 past the last M tile) each loads the whole B into
// its own stage, and a rank without a tile loads rank 0's rows, computes and stores nothing. Every
// stage is released to both CTAs either way, so one ring protocol (the plan's GL_EMPTY_ARRIVALS,
// expect_tx A + the whole B) holds whatever each unit decides.
//
// Cfg::kTail (GL_GROUPED_TAIL; library/grouped.py's tail build) is level 9's stream-K tail on the grouped
// schedule, grouped along M contiguously: the device, which alone knows how many units the groups make,
// splits the last partial wave's units by K iterations over every cluster when plan_tail's rule says so
// (stream_k.cuh tail_start_unit), so that a wave the groups' sizes leave mostly idle is spread over the
// whole GPU. A split unit's contributors hand their fp32 partials in through a global workspace and the
// last to arrive adds them in K order and stores the slice (fragment_partials.cuh), bitwise the same
// whichever arrives last. The producer walks the same pieces, so the ring's positions agree.
//
// GroupedMode::kMasked builds the masked layout of decode under CUDA graphs: x (E x M_max, K), group
// e's rows start at e x M_max, and `offs` holds each group's count of valid rows (on the device); rows
// past a count are neither loaded into a tile of their own, computed nor written (a group with no row
// has no tile).
//
// GroupedMode::kAlongK builds the other grouped problem, the weight gradient:
// out[e] (M, N) = a[:, K_e] @ b[K_e, :] over group e's range K_e = [offs[e - 1], offs[e]) of the shared K (torch._grouped_mm of a 2-D a and a
// 2-D b), with a (M, total K) and b (total K, N) both read MN-major (a = grad_y^T or x^T, b = x or grad_y:
// rows of the forward's operands, M or N contiguous). Every group owns all M x N tiles; an empty group's
// tiles are zeros. A group's K range starts anywhere: its K tiles start at its first row, and its last
// K tile, which reaches into the next group's rows, is masked in shared memory before its wgmma: the
// consumers overwrite those K lines of every A and B box with zeros (a K line of an MN-major box is one
// 128-byte line whatever the swizzle, which permutes 16-byte chunks inside a line), fence the writes
// to the async proxy and meet at a named barrier, so no value of another group (not even a NaN or an Inf)
// enters the sum.
//
// Cfg::kSwiglu (GL_SWIGLU; library/grouped.py's swiglu build) fuses the experts' gated MLP, grouped along
// M: out[r, :] = silu(x[r] @ w_gate[e]^T) * (x[r] @ w_up[e]^T), as sm90_swiglu.cu does for one dense layer.
// Its B stage's 256 rows come from two weights: rows [128 tn, 128 tn + 128) of w_gate into the stage's
// first half (map_b) and the same rows of w_up into its second half (map_b_up), two 128-row boxes, so
// accumulator column c < 128 is gate column 128 tn + c and column 128 + c its up column, in the same
// thread (gated_epilogue.cuh); a tile yields a 128 x 128 output tile (the schedule's N tiles are 128 wide),
// stored from registers with the rows masked at the group's end. x is read once for both products, and
// gate and up never leave the registers. One CTA per cluster, a K-major weight, no bias, a 2-byte output.
#include "gemm_ladder/tma_tile.cuh"
#include "gemm_ladder/cluster_ring.cuh"
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/gated_epilogue.cuh"
#include "gemm_ladder/grouped_scheduler.cuh"
#include "gemm_ladder/panel_ring.cuh"
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/register_store.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/stream_k.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

// The problem a build's schedule walks.
enum class GroupedMode {
  kContiguous,  // grouped along M, torch._grouped_mm's layout: offs the groups' cumulative row ends
  kMasked,      // grouped along M, decode's masked layout: group e's rows from e x M_max, offs their counts
  kAlongK,      // grouped along K (the weight gradient): offs the groups' cumulative ends along K
};

// What a config (Cfg) holds, each a static constexpr member: the tile BM, BN, BK; kConsumers, kCluster,
// kProducerWarpgroups; kAMnMajor, kBMnMajor; kCPanels, kCRing (the plan's output panels and panel ring per consumer: 0 and 0
// store from registers only);
// kMode, kBias, kSwiglu, kTail, kActivation; the type Out, and Activation (a functor float -> float applied to each
// output after its bias, the identity where kActivation is false). The instantiation block's BuildConfig is the
// one a build compiles.
template <class Cfg>
__host__ __device__ constexpr bool config_ok() {
  static_assert(Cfg::BM == 128 && Cfg::kConsumers == 2 && Cfg::kProducerWarpgroups == 1,
                "sm90_grouped_gemm: a 128-row tile, two consumer warpgroups, a producer warpgroup");
  static_assert(Cfg::kCluster == 1 || Cfg::kCluster == 2, "sm90_grouped_gemm: one CTA per cluster, or a pair sharing B");
  static_assert(Cfg::BN == 128 || Cfg::BN == 256, "sm90_grouped_gemm: BN is 128 or 256");
  static_assert(Cfg::BK == 64, "sm90_grouped_gemm: BK = 64, one 128-byte swizzle span of K per stage");
  static_assert(Cfg::kMode == GroupedMode::kAlongK ? (Cfg::kAMnMajor == 1 && Cfg::kBMnMajor == 1) : Cfg::kAMnMajor == 0,
                "sm90_grouped_gemm: x K-major (grouped along M); a and b MN-major (grouped along K)");
  static_assert((Cfg::kCPanels == 0 && Cfg::kCRing == 0) ||
                    (Cfg::kCPanels == Cfg::BN / 64 && Cfg::kCRing > 0 && Cfg::kCPanels % Cfg::kCRing == 0 &&
                     sizeof(typename Cfg::Out) == 2),
                "sm90_grouped_gemm: C from registers only (no panels), or a panel ring of a 2-byte output");
  static_assert(!(Cfg::kBias && Cfg::kMode == GroupedMode::kAlongK), "sm90_grouped_gemm: grouped along K adds no bias");
  static_assert(!Cfg::kActivation || (Cfg::kMode == GroupedMode::kContiguous && !Cfg::kSwiglu && !Cfg::kTail),
                "sm90_grouped_gemm: an activation is built grouped along M contiguously, without the tail or the gated MLP");
  static_assert(!Cfg::kSwiglu || (Cfg::BN == 256 && Cfg::kMode != GroupedMode::kAlongK && Cfg::kCluster == 1 &&
                                  Cfg::kBMnMajor == 0 && !Cfg::kBias && Cfg::kCPanels == 0 &&
                                  sizeof(typename Cfg::Out) == 2),
                "sm90_grouped_gemm: the fused gated MLP: 128 gate and 128 up rows a stage (BN 256), grouped along M, "
                "one CTA, a K-major weight, no bias, a 2-byte output stored from registers");
  static_assert(!Cfg::kTail || (Cfg::kMode == GroupedMode::kContiguous && !Cfg::kSwiglu),
                "sm90_grouped_gemm: the stream-K tail is built grouped along M contiguously, not fused");
  return true;
}

constexpr int kMaskBarrier = 1;  // named barrier 1: the two consumer warpgroups (256 threads) after masking
constexpr int kFirstStoreBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads around its panel ring

// K tile at K offset k0 of an MN-major operand's rows [r0, r0 + ROWS) into `dst`: ROWS / 64 boxes of
// 64 rows x BK K lines, kMnGroupBytes apart (tma_tile.cuh's tma_load_operand, at any K offset). `z`: the
// group coordinate of a rank-3 map, or -1 for a rank-2 one. A non-zero `cta_mask` multicasts each box
// into the same place of every CTA of the cluster whose bit is set.
template <int ROWS>
__device__ __forceinline__ void load_mn_major(elem_t* dst, const CUtensorMap* map, uint64_t* bar, int k0, int r0, int z,
                                              uint16_t cta_mask = 0) {
#pragma unroll
  for (int i = 0; i < ROWS / kMnBoxElems; ++i) {
    elem_t* box = dst + i * kMnBoxElems * BK;
    if (z >= 0) {
      if (cta_mask) tma_load_3d_multicast(box, map, bar, r0 + i * kMnBoxElems, k0, z, cta_mask);
      else tma_load_3d(box, map, bar, r0 + i * kMnBoxElems, k0, z);
    } else {
      if (cta_mask) tma_load_2d_multicast(box, map, bar, r0 + i * kMnBoxElems, k0, cta_mask);
      else tma_load_2d(box, map, bar, r0 + i * kMnBoxElems, k0);
    }
  }
}

// B's rows [r0, r0 + ROWS) at K offset k0 into `dst`, in B's planned major: K-major, one box of the
// rank-3 weight map (group z; its box is ROWS rows: BN, or BN / 2 in a cluster); MN-major, ROWS / 64
// boxes (load_mn_major). `cta_mask` as load_mn_major's.
template <int ROWS>
__device__ __forceinline__ void load_b_rows(elem_t* dst, const CUtensorMap* map, uint64_t* bar, int k0, int r0, int z,
                                            uint16_t cta_mask) {
  if constexpr (B_MN_MAJOR) load_mn_major<ROWS>(dst, map, bar, k0, r0, z, cta_mask);
  else if (cta_mask) tma_load_3d_multicast(dst, map, bar, k0, r0, z, cta_mask);
  else tma_load_3d(dst, map, bar, k0, r0, z);
}

// The producer's one step: producer_acquire the stage at `pos`, producer_commit its full barrier with
// the stage's bytes, load A's BM rows and B's BN rows of the K tile at K offset k0.
//  grouped along M: A = x rows [a_row0, +BM) (K-major), B = w[group] rows [b_row0, +BN) (K-major, or
//    N-major boxes with GL_B_MN_MAJOR), group the 3-D map's outer coordinate;
//  grouped along K: A = a's M rows [a_row0, +BM), B = b's N rows [b_row0, +BN), both MN-major, group -1.
// In a cluster (kCluster 2) B comes in GL_B_BOX_ROWS = BN / 2 row slices: with `share`, CTA `rank`
// loads slice `rank` and multicasts it into this stage of both CTAs (the peer loads the other half);
// without, it loads both slices into its own stage alone. Either way every CTA's stage receives A + the
// whole B, the GL_EXPECT_TX_BYTES it armed, so the full barriers do not depend on the choice.
template <int kCluster>
__device__ __forceinline__ void produce_grouped_stage(const SmemMap& smem, const CUtensorMap* map_a,
                                                      const CUtensorMap* map_b, RingPosition pos, int k0, int a_row0,
                                                      int b_row0, int group, int rank = 0, bool share = false) {
  const int s = pos.stage();
  producer_acquire(smem, pos);
  mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);  // producer_commit
  if constexpr (A_MN_MAJOR) load_mn_major<BM>(smem.a(s), map_a, smem.full(s), k0, a_row0, -1);
  else tma_load_2d(smem.a(s), map_a, smem.full(s), k0, a_row0);
  if constexpr (kCluster == 1) {
    load_b_rows<BN>(smem.b(s), map_b, smem.full(s), k0, b_row0, group, 0);
  } else {
    constexpr int kRows = GL_B_BOX_ROWS;
    static_assert(kRows * kCluster == BN && (kRows * BK * sizeof(elem_t)) % 1024 == 0,
                  "a B slice is BN / cluster rows, 1024-byte aligned in the stage (whole 128B swizzle atoms)");
    // Shared: slice `rank`, multicast; not: every slice, here alone. One loop for both keeps the
    // producer within its 40 registers (two unrolled paths spilled at BN 256 with an N-major B).
    const uint16_t mask = share ? (1 << kCluster) - 1 : 0;
    const int first = share ? rank : 0, end = share ? rank + 1 : kCluster;
#pragma unroll 1
    for (int r = first; r < end; ++r)
      load_b_rows<kRows>(smem.b(s) + r * kRows * BK, map_b, smem.full(s), k0, b_row0 + r * kRows, group, mask);
  }
}

// The fused gated MLP's producer step (Cfg::kSwiglu): as produce_grouped_stage with one CTA, B's 256 rows
// from two weights: rows [b_row0, b_row0 + 128) of w_gate (map_b) into the stage's first half and the
// same rows of w_up (map_b_up) into its second, each one 128-row box of its rank-3 map (group `group`).
// The stage's bytes are A + 256 rows of B, what GL_EXPECT_TX_BYTES counts.
__device__ __forceinline__ void produce_swiglu_stage(const SmemMap& smem, const CUtensorMap* map_a,
                                                     const CUtensorMap* map_b, const CUtensorMap* map_b_up,
                                                     RingPosition pos, int k0, int a_row0, int b_row0, int group) {
  constexpr int kRows = BN / 2;
  // The weight maps' boxes are BN / 2 rows (library/grouped.py encodes them so; the plan's one CTA would
  // load B as one box of BN rows).
  static_assert((kRows * BK * sizeof(elem_t)) % 1024 == 0, "each weight's half is whole 128B swizzle atoms in the stage");
  const int s = pos.stage();
  producer_acquire(smem, pos);
  mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);  // producer_commit
  tma_load_2d(smem.a(s), map_a, smem.full(s), k0, a_row0);
  tma_load_3d(smem.b(s), map_b, smem.full(s), k0, b_row0, group);
  tma_load_3d(smem.b(s) + kRows * BK, map_b_up, smem.full(s), k0, b_row0, group);
}

// consumer_release of stage s: to this CTA, or in a cluster to both (release_stage_to_cluster), whether
// or not this unit shared B. Either producer may multicast into this CTA's stage on a later unit, and it
// must have waited for both CTAs' consumers (GL_EMPTY_ARRIVALS counts them); one uniform protocol keeps
// the two CTAs' rings in lockstep whatever each unit decides.
template <int kCluster>
__device__ __forceinline__ void release_grouped_stage(const SmemMap& smem, int s) {
  if constexpr (kCluster == 1) consumer_release(smem, s);
  else release_stage_to_cluster(smem, s);
}

// Zero K lines [valid, BK) of every box of the stage (grouped along K: the last K tile of a group, whose
// other lines are the next group's rows), then make the writes visible to wgmma: each writing thread
// fences them to the async proxy, and both consumer warpgroups meet before either reads the stage.
// Consumer c clears its own A box (its 64 rows) and B boxes c, c + 2, ...
// In a cluster each CTA masks its own copy of the stage, B halves from the peer's multicast included:
// those landed before full[s] completed (consumer_wait), both CTAs mask the same lines (one group, one
// `valid`), and no producer writes this stage again before both CTAs' consumers released it, after
// the wgmma that read the masked lines; the writes never reach the peer's shared memory.
__device__ __forceinline__ void mask_k_lines(const SmemMap& smem, int s, int consumer, int valid) {
  constexpr int kChunks = 128 / 16;  // 16-byte chunks per 128-byte K line
  constexpr int kBBoxes = BN / kMnBoxElems;
  const int lines = BK - valid, per_box = lines * kChunks;
  const int t = thread_in_warpgroup();
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  auto clear = [&](const elem_t* box) {
    const uint32_t base = smem_u32(box) + valid * 128;
    for (int i = t; i < per_box; i += 128) st_shared_v4(base + i * 16, zero);
  };
  clear(smem.a(s) + consumer * kMnBoxElems * BK);
#pragma unroll
  for (int b = consumer; b < kBBoxes; b += 2) clear(smem.b(s) + b * kMnBoxElems * BK);
  fence_proxy_async_smem();
  named_barrier_sync(kMaskBarrier, 2 * 128);
}

// A consumer warpgroup's K tiles [kb, ke) of one tile into d, from ring position `pos` on (the loop
// of cluster_ring.cuh's consume_k_range, releasing to this CTA alone: consumer_release). Stage k goes back
// once the wgmma of k + 1 is issued (wait_group 1), the last once all have completed. `valid_last`: K
// lines of the last K tile that belong to the tile's group (BK: all; fewer, with kMaskLastK: mask_k_lines
// first). A whole tile is [0, its K tiles); a stream-K piece of one (Cfg::kTail) any sub-range. `compute` false (grouped along M: none of this consumer's 64 rows is in the tile's group, a
// small group's last tile): the consumer still waits for each stage and releases it, in the ring's
// order, but issues no wgmma, so the other consumer's run alone; its accumulators are garbage and never
// stored. after_issue(i) runs at the range's i-th K tile (i = kt - kb), while its wgmma does (the previous
// tile's deferred panels are stored there), with or without `compute`: every thread of the warpgroup calls it.
template <bool kMaskLastK, int kCluster, class AfterIssue>
__device__ __forceinline__ void consume_tile(const SmemMap& smem, float (&d)[BN / 2], int consumer, int kb, int ke,
                                             int valid_last, RingPosition& pos, bool elected, bool compute,
                                             AfterIssue&& after_issue) {
  if (!warp_uniform(compute)) {  // the same in a warpgroup; broadcast so the K loop below stays uniform
    for (int kt = kb; kt < ke; ++kt, pos.advance()) {
      consumer_wait(smem, pos);
      after_issue(kt - kb);
      if (elected) release_grouped_stage<kCluster>(smem, pos.stage());
    }
    return;
  }
  const int a_row0 = k_loop_a_row<BN>(consumer);  // uniform where the group is short (ptx/wgmma.cuh)
  for (int kt = kb; kt < ke; ++kt, pos.advance()) {
    const int s = pos.stage();
    consumer_wait(smem, pos);
    if constexpr (kMaskLastK) {
      if (kt == ke - 1 && valid_last < BK) mask_k_lines(smem, s, consumer, valid_last);
    }
    wgmma_fence();
    mma_k_tile<BN, A_MN_MAJOR, B_MN_MAJOR>(d, smem.a(s) + a_row0 * BK, smem.b(s), kt > kb);
    wgmma_commit();
    after_issue(kt - kb);
    wgmma_wait<1>();
    if (kt > kb && elected) release_grouped_stage<kCluster>(smem, pos.previous_stage());
  }
  wgmma_wait<0>();
  fence_accumulators(d);
  if (ke > kb && elected) release_grouped_stage<kCluster>(smem, pos.previous_stage());
}

// Pack a consumer's fragment for the panel ring with a bias row added: packed[2j + i] = the pair
// d[4j + 2i + c] + bias_row[col0 + 8j + 2(l%4) + c] (epilogue.cuh's layout; columns >= N add nothing),
// the same float additions as the register store's per-pair bias, so both stores round alike. The
// accumulators are read, never written: a bias added to them in place made ptxas serialise every wgmma
// of the kernel (C7515).
template <int BN>
__device__ __forceinline__ void pack_fragment_with_bias(uint32_t (&packed)[BN / 4], const float (&d)[BN / 2],
                                                        const elem_t* __restrict__ bias_row, int col0, int N) {
  const int q = thread_in_warpgroup() % 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int c = col0 + 8 * j + 2 * q;
    const float b0 = c < N ? static_cast<float>(bias_row[c]) : 0.f, b1 = c + 1 < N ? static_cast<float>(bias_row[c + 1]) : 0.f;
#pragma unroll
    for (int i = 0; i < 2; ++i) packed[2 * j + i] = pack2(d[4 * j + 2 * i] + b0, d[4 * j + 2 * i + 1] + b1);
  }
}

// Pack a consumer's fragment for the panel ring as pack_fragment_with_bias (kBias) or pack_fragment does, with
// `act` applied to each value after its bias (Cfg::kActivation): the register store's order of operations
// (bias, then the activation, then one rounding), so both stores round alike.
template <int BN, bool kBias, class Act>
__device__ __forceinline__ void pack_fragment_activated(uint32_t (&packed)[BN / 4], const float (&d)[BN / 2],
                                                        const elem_t* __restrict__ bias_row, int col0, int N, Act act) {
  const int q = thread_in_warpgroup() % 4;
  // Each pair's values pass in and out through empty volatile asm, which the compiler keeps in program order, so it
  // cannot start later pairs' bias loads and activation math early: at BN 256 that overlap spilled (128
  // accumulators, the packed pairs and the activation's temporaries in 168 registers).
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int c = col0 + 8 * j + 2 * q;
    float v[4] = {d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]};  // copies: the accumulators are only read
    asm volatile("" : "+f"(v[0]), "+f"(v[1]), "+f"(v[2]), "+f"(v[3]));
    if constexpr (kBias) {
      const float b0 = c < N ? static_cast<float>(bias_row[c]) : 0.f, b1 = c + 1 < N ? static_cast<float>(bias_row[c + 1]) : 0.f;
#pragma unroll
      for (int i = 0; i < 2; ++i) packed[2 * j + i] = pack2(act(v[2 * i] + b0), act(v[2 * i + 1] + b1));
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) packed[2 * j + i] = pack2(act(v[2 * i]), act(v[2 * i + 1]));
    }
    asm volatile("" : "+r"(packed[2 * j]), "+r"(packed[2 * j + 1]));
  }
}

// Group `group`'s bias at columns c and c + 1 added to a pair, columns >= N adding nothing (the register
// store's per-pair bias: the stream-K tail's store adds it the same way, so both round alike).
__device__ __forceinline__ void add_bias_pair(float& x0, float& x1, const elem_t* __restrict__ bias, int group, int c,
                                              int N) {
  const elem_t* b = bias + static_cast<long long>(group) * N;
  if (c < N) x0 += static_cast<float>(b[c]);
  if (c + 1 < N) x1 += static_cast<float>(b[c + 1]);
}

// One pair of a reduced stream-K slice (columns col, col + 1 of `row`) into C, as the register store
// writes a pair (register_store.cuh store_out_pair_masked): not past the group's rows or N, plus the
// group's bias row (kBias).
template <bool kBias, typename OutT>
__device__ __forceinline__ void store_tail_pair(OutT* __restrict__ C, long long ldc, const GroupedTile& t, int row,
                                                int col, float x0, float x1, int N, const elem_t* __restrict__ bias) {
  if (row >= t.row_end) return;
  if constexpr (kBias) add_bias_pair(x0, x1, bias, t.group, col, N);
  OutT* const line = C + static_cast<long long>(row) * ldc;
  store_out_pair_masked(line, col, N, reinterpret_cast<uintptr_t>(line + col) % (2 * sizeof(OutT)) == 0, x0, x1);
}

// The kernel. Grouped along M (kContiguous, kMasked): map_a x (total_rows, K) K-major, box (BK, BM);
// map_b w, rank 3 (K-major: (K, N, E), box (BK, BN, 1); N-major: (N, K, E), box (64, BK, 1)); C out
// (total_rows, N), element (r, c) at C[r * ldc + c]; offs `groups` int32 (kContiguous: cumulative row
// ends; kMasked: valid rows per group of extent / groups); extent the total rows; bias (groups, N)
// contiguous (kBias), else unused; M and group_stride unused. map_c (kTmaStore): out as (N, total_rows), box
// (64, 64), 128B swizzle; a build without the ring gets any map, never read.
// Grouped along K (kAlongK): map_a a (M, total_k) MN-major, globalDim (M, total_k), box (64, BK); map_b
// b (total_k, N) MN-major, globalDim (N, total_k), box (64, BK); C out (groups, M, N), element (e, r, c)
// at C[e * group_stride + r * ldc + c]; offs `groups` int32 cumulative ends along K; extent the total K;
// K and bias unused; map_c (kTmaStore): out as (N, M, groups), box (64, 64, 1), 128B swizzle.
// tma_store: 1 when out's base, pitches and rows of N elements are 16-byte multiples (the launch decides:
// library/grouped.py store_rule and out_map), so the panel ring may write it; 0 stores everything from
// registers. Ignored without the ring.
// partials, counters, tail_idle_min (Cfg::kTail; grouped along M contiguously): the stream-K tail's
// workspace and rule. The device counts the units, so it decides the split (stream_k.cuh
// tail_start_unit with idle_min = tail_idle_min; no split when partials is null): the last partial wave's
// units are split by K iterations over every cluster, and a unit with several contributors is finished
// by the one that arrives last (fragment_partials.cuh). partials: fp32, kCluster x kConsumers regions of
// 2 x clusters slots of 64 x BN, a piece (tail unit u, cluster c) at slot u + c of its CTA rank's and
// consumer's region (the pieces of one unit come from consecutive clusters, so its slots are consecutive
// and u + c names one piece: a cluster's range begins inside at most one unit); counters: int32, one per
// tail unit, rank and consumer, zeroed by the launch.
template <class Cfg>
__device__ __forceinline__ void sm90_grouped_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                  const CUtensorMap& map_b_up,
                                                  const CUtensorMap& map_c, typename Cfg::Out* __restrict__ C,
                                                  long long ldc, long long group_stride, const int* __restrict__ offs,
                                                  int groups, int extent, int M, int N, int K,
                                                  const elem_t* __restrict__ bias, int tma_store,
                                                  float* __restrict__ partials = nullptr,
                                                  int* __restrict__ counters = nullptr, int tail_idle_min = 0) {
  static_assert(config_ok<Cfg>());
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  constexpr bool kAlongK = Cfg::kMode == GroupedMode::kAlongK;
  constexpr int kCluster = Cfg::kCluster;
  constexpr bool kTmaStore = Cfg::kCRing > 0;
  constexpr int kOutBN = Cfg::kSwiglu ? BN / 2 : BN;  // output columns per tile (the schedule's N tile)
  // Panels stored at a tile's end: all but the last (each once the store kCRing panels back has left its
  // buffer); the last waits in registers for the next tile's first K iteration (sm90_gemm.cu's split of
  // level 9's store). Holding more panels' words across the K loop spilled at BN 256. A ring with a
  // buffer for every panel (library/grouped.py RINGS) stores them all at the tile's end: none waits for
  // a buffer there, and no word is held across the next K loop.
  constexpr int kEarlyPanels = !kTmaStore ? 0 : Cfg::kCRing == Cfg::kCPanels ? Cfg::kCPanels : Cfg::kCPanels - 1;
  constexpr int kDeferredPanels = Cfg::kCPanels - kEarlyPanels;

  extern __shared__ uint8_t smem_raw[];
  __shared__ GroupTable table;
  const SmemMap smem(smem_raw);
  // Without the ring no output map is read: b's is prefetched twice.
  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, kTmaStore ? &map_c : &map_b);
  // Its __syncthreads also publish the ring's barriers.
  if constexpr (Cfg::kMode == GroupedMode::kMasked) table.build_masked(offs, groups, extent / groups, BM);
  else if constexpr (kAlongK) table.build(offs, groups, extent, BK);  // tile_start: each group's K tiles
  else table.build(offs, groups, extent, BM);
  int rank = 0;  // this CTA's rank in its cluster: it computes M tile unit_row x kCluster + rank
  if constexpr (kCluster > 1) {
    rank = cluster_cta_rank();
    cluster_sync();  // both CTAs' barriers exist before either producer multicasts or a consumer releases
  }
  const auto sched = [&] {  // GroupedKScheduler along K, else GroupedScheduler; units of kCluster M tiles
    if constexpr (kAlongK) return GroupedKScheduler(table, groups, M, N, BM, BN, kCluster);
    else return GroupedScheduler<Cfg::kTail>(table, groups, N, BM, kOutBN, kCluster);
  }();
  const int k_tiles = (K + BK - 1) / BK;  // grouped along M: every tile's (along K: each group's, below)
  const int total = warp_uniform(sched.total());  // read from the table: broadcast, so the unit loops stay uniform
  // A cluster walks one unit at a time, both CTAs the same units in the same order: their rings' stage
  // counts stay equal, which the shared stages need.
  const int first_unit = blockIdx.x / kCluster, unit_stride = gridDim.x / kCluster;
  // Units [0, whole_end()) are computed whole, unit_stride apart; the rest (Cfg::kTail) are the stream-K
  // tail, cluster first_unit taking its share of their K iterations. A tail build keeps the bound in shared
  // memory, read where it is used: one more live register in the consumers spilled at BN 256.
  __shared__ int tail_first_unit;
  if constexpr (Cfg::kTail) {
    if (threadIdx.x == 0)
      tail_first_unit = partials != nullptr ? tail_start_unit(total, unit_stride, k_tiles, tail_idle_min) : total;
    __syncthreads();
  }
  const auto whole_end = [&] {
    if constexpr (Cfg::kTail) return *static_cast<volatile int*>(&tail_first_unit);
    else return total;
  };
  // The tail's walk, made where a role reaches it (total read again from the table, not kept live). No
  // warp shuffle here: the producer's one thread calls it while the rest of its warp waits at the exit's
  // cluster barrier, and a full-warp __shfl_sync there never completed (the pair's tail hung on an H100).
  const auto tail_of = [&] {
    const int first = whole_end();
    return StreamKTail(first, sched.total() - first, k_tiles, unit_stride);
  };

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingPosition pos{0};
      for (int unit = first_unit; unit < whole_end(); unit += unit_stride) {
        if constexpr (kAlongK) {
          int e, tm, tn;
          bool mine, share;
          sched.template unit<kCluster>(unit, rank, e, tm, tn, mine, share);
          const int k_begin = table.row_begin(e), e_k_tiles = table.tile_start[e + 1] - table.tile_start[e];
          for (int kt = 0; kt < e_k_tiles; ++kt, pos.advance())
            produce_grouped_stage<kCluster>(smem, &map_a, &map_b, pos, k_begin + kt * BK, tm * BM, tn * BN, -1, rank,
                                            share);
        } else {
          const GroupedUnit u = sched.template unit<kCluster>(unit, rank);
          for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
            if constexpr (Cfg::kSwiglu)
              produce_swiglu_stage(smem, &map_a, &map_b, &map_b_up, pos, kt * BK, u.t.row0, u.t.tn * kOutBN, u.t.group);
            else
              produce_grouped_stage<kCluster>(smem, &map_a, &map_b, pos, kt * BK, u.t.row0, u.t.tn * BN, u.t.group,
                                              rank, u.share);
          }
        }
      }
      if constexpr (Cfg::kTail) {  // this cluster's pieces of the tail, in the consumers' order
        const StreamKTail tail = tail_of();
        for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
          const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
          const GroupedUnit u = sched.template unit<kCluster>(seg.unit, rank);
          for (int kt = seg.kb; kt < seg.ke; ++kt, pos.advance())
            produce_grouped_stage<kCluster>(smem, &map_a, &map_b, pos, kt * BK, u.t.row0, u.t.tn * BN, u.t.group, rank,
                                            u.share);
          it = seg.next;
        }
      }
    }
  } else {
    // The register split of sm90_gemm.cu: 2 x 128 x 232 + 128 x 40 registers, the CTA's whole pool.
    setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // releases stages and issues this consumer's TMA stores
    // kTmaStore: this consumer's panel ring, the packed outputs of the last slice stored by TMA, and the
    // unit whose panels are still to store (-1: none). The slice's place is recomputed from the unit when
    // a panel goes, not kept: registers are what the main loop is short of at BN 256.
    uint8_t* const ring = smem.c() + consumer * Cfg::kCRing * GL_SMEM_C_PANEL_BYTES;
    const int bar = kFirstStoreBarrier + consumer;
    const bool tma_ok = kTmaStore && tma_store != 0;
    uint32_t packed[kTmaStore ? BN / 4 : 1];
    int held_unit = -1;
    auto store_held = [&](int p) {
      if constexpr (kTmaStore) {
        if constexpr (kAlongK) {
          int e, tm, tn;
          bool mine, share;
          sched.template unit<kCluster>(held_unit, rank, e, tm, tn, mine, share);
          store_panel(p, packed, ring, &map_c, tn * BN, tm * BM + 64 * consumer, bar, elected, e);
        } else {
          const GroupedTile t = sched.template unit<kCluster>(held_unit, rank).t;
          store_panel(p, packed, ring, &map_c, t.tn * BN, t.row0 + 64 * consumer, bar, elected);
        }
      }
    };
    // store_held is called with a panel index the unrolled loops make constant: a runtime index would
    // dispatch over every panel and keep the early panels' words live across the next tile's K loop.
    // While K tile kt's wgmma runs: the held slice's deferred panel kEarlyPanels + kt.
    auto after_issue = [&](int kt) {
      if constexpr (kDeferredPanels > 0) {
        if (held_unit >= 0) {
#pragma unroll
          for (int p = kEarlyPanels; p < Cfg::kCPanels; ++p)
            if (p == kEarlyPanels + kt) store_held(p);
        }
      }
    };
    // After a tile's K loop: the held panels its K tiles did not cover (fewer K tiles than deferred
    // panels), then nothing is held.
    auto finish_held = [&](int k_done) {
      if constexpr (kTmaStore) {
        if (held_unit >= 0) {
#pragma unroll
          for (int p = kEarlyPanels; p < Cfg::kCPanels; ++p)
            if (p >= kEarlyPanels + k_done) store_held(p);
        }
        held_unit = -1;
      }
    };
    // Pack a finished slice of `unit` (plus the bias row, if any), store its first panels, hold the rest
    // for the next tile.
    auto store_by_tma = [&](float (&d)[BN / 2], int unit, const elem_t* bias_row = nullptr, int col0 = 0) {
      if constexpr (kTmaStore) {
        if constexpr (Cfg::kActivation)
          pack_fragment_activated<BN, Cfg::kBias>(packed, d, bias_row, col0, N, typename Cfg::Activation{});
        else if constexpr (Cfg::kBias) pack_fragment_with_bias<BN>(packed, d, bias_row, col0, N);
        else pack_fragment<BN>(packed, d);
        held_unit = unit;
#pragma unroll
        for (int p = 0; p < kEarlyPanels; ++p) store_held(p);
      }
    };
    // This consumer's slice of unit u's tile from registers, rows masked at the group's end, plus the bias row,
    // then the activation.
    auto store_registers = [&](float (&d)[BN / 2], const GroupedUnit& u) {
      if constexpr (!kAlongK && !Cfg::kSwiglu) {
        const GroupedTile& t = u.t;
        if (u.mine)
          store_fragment_from_registers<BN, !kTmaStore>(C, ldc, d, t.row0 + 64 * consumer, t.tn * BN, t.row_end, N,
                                                        [&](float& x0, float& x1, int, int c) {
                                                          if constexpr (Cfg::kBias) add_bias_pair(x0, x1, bias, t.group, c, N);
                                                          if constexpr (Cfg::kActivation) {
                                                            const typename Cfg::Activation act{};
                                                            x0 = act(x0);
                                                            x1 = act(x1);
                                                          }
                                                        });
      }
    };
    // Grouped along M: store this consumer's slice of `unit`'s finished tile d (nothing when the unit has
    // no tile for this rank): the fused gated MLP's product, by TMA when all 64 rows are the group's, else
    // from registers with the rows masked at the group's end; the bias row added either way.
    auto store_along_m = [&](float (&d)[BN / 2], int unit) {
      if constexpr (!kAlongK) {
        const GroupedUnit u = sched.template unit<kCluster>(unit, rank);
        const GroupedTile& t = u.t;
        const int row0 = t.row0 + 64 * consumer;
        if constexpr (Cfg::kSwiglu) {  // silu(gate) * up of each output pair, rows masked at the group's end
          if (u.mine) {
            float o[BN / 4];
            gate_fragment<BN>(o, d, Silu{});
            store_fragment_from_registers<kOutBN, true>(C, ldc, o, row0, t.tn * kOutBN, t.row_end, N,
                                                        [](float&, float&, int, int) {});
          }
        } else if (tma_ok && u.mine && row0 + 64 <= t.row_end) {  // all 64 rows the group's: no mask needed
          store_by_tma(d, unit, Cfg::kBias ? bias + static_cast<long long>(t.group) * N : nullptr, t.tn * BN);
        } else {
          store_registers(d, u);
        }
      }
    };
    RingPosition pos{0};
    for (int unit = first_unit; unit < whole_end(); unit += unit_stride) {
      // `mine` false (a cluster's last unit of an odd M-tile count, rank 1): walk the unit's stages in
      // step with the peer, compute nothing, store nothing (a constant true with one CTA per cluster).
      // The unit is decoded before its K loop and again after it (not kept live across the loop).
      if constexpr (kAlongK) {
        float d[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;  // an empty group's tile is zeros
        int e_k_tiles;
        {
          int e, tm, tn;
          bool mine, share;
          sched.template unit<kCluster>(unit, rank, e, tm, tn, mine, share);
          const int k_begin = table.row_begin(e), k_end = table.row_end[e];
          e_k_tiles = warp_uniform(table.tile_start[e + 1] - table.tile_start[e]);  // the K loop's bound, uniform
          consume_tile<true, kCluster>(smem, d, consumer, 0, e_k_tiles, k_end - k_begin - (e_k_tiles - 1) * BK, pos,
                                       elected, mine, after_issue);
        }
        finish_held(e_k_tiles);
        int e, tm, tn;
        bool mine, share;
        sched.template unit<kCluster>(unit, rank, e, tm, tn, mine, share);
        if (mine) {
          if (tma_ok) {  // rows >= M and columns >= N clipped by the map
            store_by_tma(d, unit);
          } else {
            store_fragment_from_registers<BN, !kTmaStore>(C + e * group_stride, ldc, d, tm * BM + 64 * consumer, tn * BN, M,
                                                    N, [](float&, float&, int, int) {});
          }
        }
      } else {
        float d[BN / 2];
        {
          const GroupedUnit u = sched.template unit<kCluster>(unit, rank);
          consume_tile<false, kCluster>(smem, d, consumer, 0, k_tiles, BK, pos, elected,
                                        u.mine && u.t.row0 + 64 * consumer < u.t.row_end, after_issue);
        }
        finish_held(k_tiles);
        store_along_m(d, unit);
      }
    }
    if constexpr (Cfg::kTail) {
      // This cluster's pieces of the tail (the producer's order): K tiles [kb, ke) of a unit each. A consumer
      // with rows of the tile's group hands its partial in when the unit has several contributors (all of
      // them agree on which consumers compute: that depends on the unit and rank alone), and the last to
      // arrive stores the sum of the partials, in K order, as it adds them (reduce_each), from registers
      // with the rows masked at the group's end: the sum written into the accumulators made ptxas serialise
      // every wgmma (C7515), and held whole beside them it spilled at BN 256. The tail's tiles are a wave's
      // fraction, so none goes through the panel ring.
      finish_held(0);  // the last whole unit's deferred panels: the tail holds none
      const StreamKTail tail = tail_of();
      for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
        const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
        it = seg.next;
        float d[BN / 2];
        bool compute;
        {
          const GroupedUnit u = sched.template unit<kCluster>(seg.unit, rank);
          compute = warp_uniform(u.mine && u.t.row0 + 64 * consumer < u.t.row_end);
          consume_tile<false, kCluster>(smem, d, consumer, seg.kb, seg.ke, BK, pos, elected, compute, [](int) {});
        }
        if (!compute) continue;  // no row of this slice is the group's: nothing to hand in or store
        if (seg.contributors == 1) {
          store_registers(d, sched.template unit<kCluster>(seg.unit, rank));
          continue;
        }
        const int tail_unit = seg.unit - tail.first_unit, region = rank * Cfg::kConsumers + consumer;
        const PartialSlots<BN> slots{partials + (static_cast<size_t>(region) * 2 * unit_stride + tail_unit +
                                                 (first_unit - seg.mine)) * PartialSlots<BN>::kFloats};
        if (!hand_in_fragment(slots, counters + tail_unit * kCluster * Cfg::kConsumers + region, seg.mine,
                              seg.contributors, d, bar, elected))
          continue;  // another contributor finishes this slice
        const GroupedTile t = sched.template unit<kCluster>(seg.unit, rank).t;
        const int lane = thread_in_warpgroup() % 32;
        const int row = t.row0 + 64 * consumer + 16 * (thread_in_warpgroup() / 32) + lane / 4;
        const int col0 = t.tn * BN + 2 * (lane % 4);
        // float4 v of the sum: columns (col0 + 8v, + 1) of this thread's row and of the row 8 below (epilogue.cuh).
        slots.reduce_each(seg.contributors, [&](int v, float4 x) {
          store_tail_pair<Cfg::kBias>(C, ldc, t, row, col0 + 8 * v, x.x, x.y, N, bias);
          store_tail_pair<Cfg::kBias>(C, ldc, t, row + 8, col0 + 8 * v, x.z, x.w, N, bias);
        });
      }
    }
    if constexpr (kTmaStore) {
      finish_held(0);  // the last slice's deferred panels
      if (elected) tma_store_wait_read<0>();  // no store still reads this CTA's shared memory at its exit
    }
  }
  // In a cluster no CTA exits while its peer may still arrive on its empty barriers or multicast into
  // its stages.
  if constexpr (kCluster > 1) cluster_sync();
}

// ---- The build: its -D constants as the config, and the entry point ------------------------------
// The plan's constants (design/plan.py kernel_defines) and library/grouped.py's: GL_MAX_GROUPS (read by
// grouped_scheduler.cuh), GL_GROUPED_K or GL_MASKED for the mode, GL_BIAS, GL_SWIGLU, GL_GROUPED_TAIL (the stream-K
// tail), GL_OUT_FP32 for a float32 out; GL_GROUPED_ACTIVATION, a macro of the translation unit's text (BuildConfig).
#ifndef GL_GROUPED_K
#define GL_GROUPED_K 0
#endif
struct BuildConfig {
  static constexpr int BM = GL_BM, BN = GL_BN, BK = GL_BK;
  static constexpr int kCluster = GL_CLUSTER, kConsumers = GL_CONSUMERS, kProducerWarpgroups = GL_PRODUCER_WG;
  static constexpr int kAMnMajor = GL_A_MN_MAJOR, kBMnMajor = GL_B_MN_MAJOR;
  static constexpr int kCPanels = GL_C_PANELS, kCRing = GL_C_RING;
#if GL_GROUPED_K
  static constexpr GroupedMode kMode = GroupedMode::kAlongK;
#elif defined(GL_MASKED)
  static constexpr GroupedMode kMode = GroupedMode::kMasked;
#else
  static constexpr GroupedMode kMode = GroupedMode::kContiguous;
#endif
#if defined(GL_BIAS)
  static constexpr bool kBias = true;
#else
  static constexpr bool kBias = false;
#endif
#if defined(GL_SWIGLU)
  static constexpr bool kSwiglu = true;
#else
  static constexpr bool kSwiglu = false;
#endif
#if defined(GL_GROUPED_TAIL)
  static constexpr bool kTail = true;
#else
  static constexpr bool kTail = false;
#endif
#if defined(GL_OUT_FP32)
  using Out = float;
#else
  using Out = elem_t;
#endif
  // GL_GROUPED_ACTIVATION(x): the activation's expression, defined by the translation unit library/grouped.py
  // writes for an activation build (with the header of its device function, fused_epilogue.cuh).
#if defined(GL_GROUPED_ACTIVATION)
  static constexpr bool kActivation = true;
  struct Activation {
    __device__ __forceinline__ float operator()(float x) const { return GL_GROUPED_ACTIVATION(x); }
  };
#else
  static constexpr bool kActivation = false;
  struct Activation {
    __device__ __forceinline__ float operator()(float x) const { return x; }
  };
#endif
};

// The launch's arguments, as library/grouped.py packs them: grouped along M (launch), or along K (launch_k).
// map_c and tma_store in every build (one argument list per mode): a build without the panel ring
// never reads them.
#if GL_GROUPED_K
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        const __grid_constant__ CUtensorMap map_c, BuildConfig::Out* __restrict__ C, long long ldc,
                        long long group_stride, const int* __restrict__ offs, int groups, int total_k, int M, int N,
                        int tma_store) {
  sm90_grouped_gemm<BuildConfig>(map_a, map_b, map_b, map_c, C, ldc, group_stride, offs, groups, total_k, M, N, 0,
                                 nullptr, tma_store);
}
#elif defined(GL_SWIGLU)
// The fused gated MLP: w_up's map after w_gate's (map_b); N the output's columns.
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        const __grid_constant__ CUtensorMap map_b_up, const __grid_constant__ CUtensorMap map_c,
                        BuildConfig::Out* __restrict__ C, long long ldc, const int* __restrict__ offs, int groups,
                        int total_rows, int N, int K, const elem_t* __restrict__ bias, int tma_store) {
  sm90_grouped_gemm<BuildConfig>(map_a, map_b, map_b_up, map_c, C, ldc, 0, offs, groups, total_rows, 0, N, K, bias,
                                 tma_store);
}
#else
// Grouped along M (contiguous or masked): the stream-K tail's workspace and rule last (read by a
// GL_GROUPED_TAIL build only; library/grouped.py passes nulls and 0 to the others).
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        const __grid_constant__ CUtensorMap map_c, BuildConfig::Out* __restrict__ C, long long ldc,
                        const int* __restrict__ offs, int groups, int total_rows, int N, int K,
                        const elem_t* __restrict__ bias, int tma_store, float* __restrict__ partials,
                        int* __restrict__ counters, int tail_idle_min) {
  sm90_grouped_gemm<BuildConfig>(map_a, map_b, map_b, map_c, C, ldc, 0, offs, groups, total_rows, 0, N, K, bias,
                                 tma_store, partials, counters, tail_idle_min);
}
#endif
