// Library kernel sm90_grouped_gemm: the grouped GEMM of mixture-of-experts layers, torch._grouped_mm's
// contiguous layout. x (total_rows, K) row-major, its rows split into groups by `offs` (an int32 device
// array of cumulative row ends: group e has rows [offs[e - 1], offs[e]), group 0 from row 0), times w
// (E, N, K), one (N, K) weight per group (nn.Linear's layout):
//   out[r, :] = x[r, :] @ w[e]^T  for each row r of group e,
// fp32 accumulation, out in the inputs' dtype (or fp32, GL_OUT_FP32), optionally plus a bias row per
// group (GL_BIAS: bias (E, N)). library/grouped.py plans, binds and launches it.
//
// Level 9's roles on one CTA (no cluster): a producer warpgroup whose one thread issues the TMA loads,
// two consumer warpgroups of 64 rows each on a 128 x BN tile (BN 128 or 256, BK 64), the stage ring of
// stage_ring.cuh (producer_acquire / producer_commit / consumer_wait / consumer_release; the consumers'
// loop is cluster_ring.cuh's consume_k_range releasing to this CTA alone), persistent CTAs. What differs from sm90_gemm.cu:
//  - The schedule (grouped_scheduler.cuh): every CTA reads `offs` at its start and builds the prefix of
//    the groups' M-tile counts in shared memory; tile index -> (M tile over all groups, N tile) in the
//    library's grouped order, M tile -> its group by a binary search. No group size reaches the host, so
//    a launch is the same for every routing (CUDA graphs, torch.compile).
//  - The loads: one 2-D map over all of x's rows (a group's last tile loads the next group's first rows,
//    or zeros past the last row: TMA's out-of-bounds fill), and one 3-D map over w, (K, N, E) innermost
//    first, the group as its outer coordinate. With GL_B_MN_MAJOR the weight is read N-major, (N, K, E):
//    w given as (E, K, N) row-major per group (the backward's grad_x = grad_out @ w[e]), BN / 64 boxes
//    of 64 N x BK K per stage, as tma_tile.cuh's tma_load_operand loads an MN-major operand.
//  - The store: straight from the accumulator registers (register_store.cuh), rows masked to the
//    group's end, so the rows a tile borrowed from the next group are never written, and any pitch.
// Rows past offs[E - 1] are not written (torch._grouped_mm leaves them too).
//
// GL_MASKED builds the masked layout of decode under CUDA graphs: x (E x M_max, K), group e's rows
// start at e x M_max, and `offs` holds each group's count of valid rows (on the device); rows past a
// count are neither loaded into a tile of their own, computed nor written (a group with no row has no
// tile).
//
// GL_GROUPED_K builds the other grouped problem, the weight gradient: out[e] (M, N) = a[:, K_e] @ b[K_e, :]
// over group e's range K_e = [offs[e - 1], offs[e]) of the shared K (torch._grouped_mm of a 2-D a and a
// 2-D b), with a (M, total K) and b (total K, N) both read MN-major (a = grad_y^T or x^T, b = x or grad_y:
// rows of the forward's operands, M or N contiguous). Every group owns all M x N tiles; an empty group's
// tiles are zeros. A group's K range starts anywhere: its K tiles start at its first row, and its last
// K tile, which reaches into the next group's rows, is masked in shared memory before its wgmma: the
// consumers overwrite those K lines of every A and B box with zeros (a K line of an MN-major box is one
// 128-byte line whatever the swizzle, which permutes 16-byte chunks inside a line), fence the writes
// to the async proxy and meet at a named barrier, so no value of another group (not even a NaN or an Inf)
// enters the sum.
#include "gemm_ladder/tma_tile.cuh"

#ifndef GL_GROUPED_K
#define GL_GROUPED_K 0
#endif

static_assert(gl::BM == 128 && GL_CONSUMERS == 2 && GL_CLUSTER == 1 && GL_PRODUCER_WG == 1,
              "sm90_grouped_gemm: a 128-row tile, two consumer warpgroups, one CTA per cluster, a producer warpgroup");
static_assert(gl::BN == 128 || gl::BN == 256, "sm90_grouped_gemm: BN is 128 or 256");
static_assert(gl::BK == 64, "sm90_grouped_gemm: BK = 64, one 128-byte swizzle span of K per stage");
static_assert(GL_GROUPED_K ? (GL_A_MN_MAJOR == 1 && GL_B_MN_MAJOR == 1) : GL_A_MN_MAJOR == 0,
              "sm90_grouped_gemm: x K-major (grouped along M); a and b MN-major (grouped along K)");
static_assert(GL_C_PANELS == 0 && GL_C_RING == 0, "sm90_grouped_gemm: C is stored from registers (c_from_registers)");

#include "gemm_ladder/grouped_scheduler.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/register_store.cuh"
#include "gemm_ladder/stage_ring.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

#if defined(GL_OUT_FP32)
using out_t = float;
#else
using out_t = elem_t;
#endif

constexpr int kMaskBarrier = 1;  // named barrier 1: the two consumer warpgroups (256 threads) after masking

// K tile at K offset k0 of an MN-major operand's rows [r0, r0 + ROWS) into `dst`: ROWS / 64 boxes of
// 64 rows x BK K lines, kMnGroupBytes apart (tma_tile.cuh's tma_load_operand, at any K offset). `z`: the
// group coordinate of a rank-3 map, or -1 for a rank-2 one.
template <int ROWS>
__device__ __forceinline__ void load_mn_major(elem_t* dst, const CUtensorMap* map, uint64_t* bar, int k0, int r0, int z) {
#pragma unroll
  for (int i = 0; i < ROWS / kMnBoxElems; ++i) {
    if (z >= 0) tma_load_3d(dst + i * kMnBoxElems * BK, map, bar, r0 + i * kMnBoxElems, k0, z);
    else tma_load_2d(dst + i * kMnBoxElems * BK, map, bar, r0 + i * kMnBoxElems, k0);
  }
}

// The producer's one step: producer_acquire the stage at `pos`, producer_commit its full barrier with
// the stage's bytes, load A's BM rows and B's BN rows of the K tile at K offset k0.
//  grouped along M: A = x rows [a_row0, +BM) (K-major), B = w[group] rows [b_row0, +BN) (K-major, or
//    N-major boxes with GL_B_MN_MAJOR), group the 3-D map's outer coordinate;
//  grouped along K: A = a's M rows [a_row0, +BM), B = b's N rows [b_row0, +BN), both MN-major, group -1.
__device__ __forceinline__ void produce_grouped_stage(const SmemMap& smem, const CUtensorMap* map_a,
                                                      const CUtensorMap* map_b, RingPosition pos, int k0, int a_row0,
                                                      int b_row0, int group) {
  const int s = pos.stage();
  producer_acquire(smem, pos);
  mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);  // producer_commit
  if constexpr (A_MN_MAJOR) load_mn_major<BM>(smem.a(s), map_a, smem.full(s), k0, a_row0, -1);
  else tma_load_2d(smem.a(s), map_a, smem.full(s), k0, a_row0);
  if constexpr (!B_MN_MAJOR) tma_load_3d(smem.b(s), map_b, smem.full(s), k0, b_row0, group);
  else load_mn_major<BN>(smem.b(s), map_b, smem.full(s), k0, b_row0, group);
}

// Zero K lines [valid, BK) of every box of the stage (grouped along K: the last K tile of a group, whose
// other lines are the next group's rows), then make the writes visible to wgmma: each writing thread
// fences them to the async proxy, and both consumer warpgroups meet before either reads the stage.
// Consumer c clears its own A box (its 64 rows) and B boxes c, c + 2, ...
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

// A consumer warpgroup's K tiles [0, k_tiles) of one tile into d, from ring position `pos` on (the loop
// of cluster_ring.cuh's consume_k_range, releasing to this CTA alone: consumer_release). Stage k goes back
// once the wgmma of k + 1 is issued (wait_group 1), the last once all have completed. `valid_last`: K
// lines of the last K tile that belong to the tile's group (BK: all; fewer: mask_k_lines first).
// `compute` false (grouped along M: none of this consumer's 64 rows is in the tile's group, a small
// group's last tile): the consumer still waits for each stage and releases it, in the ring's order, but
// issues no wgmma, so the other consumer's run alone; its accumulators are garbage and never stored.
__device__ __forceinline__ void consume_tile(const SmemMap& smem, float (&d)[BN / 2], int consumer, int k_tiles,
                                             int valid_last, RingPosition& pos, bool elected, bool compute = true) {
  if (!compute) {
    for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
      consumer_wait(smem, pos);
      if (elected) consumer_release(smem, pos.stage());
    }
    return;
  }
  for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
    const int s = pos.stage();
    consumer_wait(smem, pos);
    if (GL_GROUPED_K && kt == k_tiles - 1 && valid_last < BK) mask_k_lines(smem, s, consumer, valid_last);
    wgmma_fence();
    mma_k_tile<BN, A_MN_MAJOR, B_MN_MAJOR>(d, smem.a(s) + consumer * 64 * BK, smem.b(s), kt > 0);
    wgmma_commit();
    wgmma_wait<1>();
    if (kt > 0 && elected) consumer_release(smem, pos.previous_stage());
  }
  wgmma_wait<0>();
  fence_accumulators(d);
  if (k_tiles > 0 && elected) consumer_release(smem, pos.previous_stage());
}

#if !GL_GROUPED_K
// map_a: x (total_rows, K) K-major, box (BK, BM). map_b: w, rank 3 (GL_B_MN_MAJOR 0: (K, N, E), box
// (BK, BN, 1); 1: (N, K, E), box (64, BK, 1)). C: out (total_rows, N), element (r, c) at C[r * ldc + c].
// offs: `groups` int32 cumulative row ends. bias: (groups, N) contiguous (GL_BIAS), else unused.
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        out_t* __restrict__ C, long long ldc, const int* __restrict__ offs, int groups, int total_rows,
                        int N, int K, const elem_t* __restrict__ bias) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ GroupTable table;
  const SmemMap smem(smem_raw);
  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_b);  // no output map: b's is prefetched twice
#if defined(GL_MASKED)
  table.build_masked(offs, groups, total_rows / groups, BM);  // offs: valid rows per group of total_rows / groups
#else
  table.build(offs, groups, total_rows, BM);  // its __syncthreads also publish the ring's barriers
#endif
  const GroupedScheduler sched(table, groups, N, BM, BN);
  const int k_tiles = (K + BK - 1) / BK;
  const int total = sched.total();

  if (warpgroup_index() == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingPosition pos{0};
      for (int unit = blockIdx.x; unit < total; unit += gridDim.x) {
        const GroupedTile t = sched.tile(unit);
        for (int kt = 0; kt < k_tiles; ++kt, pos.advance())
          produce_grouped_stage(smem, &map_a, &map_b, pos, kt * BK, t.row0, t.tn * BN, t.group);
      }
    }
  } else {
    // The register split of sm90_gemm.cu: 2 x 128 x 232 + 128 x 40 registers, the CTA's whole pool.
    setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // releases stages
    RingPosition pos{0};
    for (int unit = blockIdx.x; unit < total; unit += gridDim.x) {
      float d[BN / 2];
      const GroupedTile t = sched.tile(unit);
      consume_tile(smem, d, consumer, k_tiles, BK, pos, elected, t.row0 + 64 * consumer < t.row_end);
      store_fragment_from_registers<BN, true>(C, ldc, d, t.row0 + 64 * consumer, t.tn * BN, t.row_end, N,
                                              [&](float& x0, float& x1, int, int c) {
#if defined(GL_BIAS)
                                                const elem_t* b = bias + static_cast<long long>(t.group) * N;
                                                if (c < N) x0 += static_cast<float>(b[c]);
                                                if (c + 1 < N) x1 += static_cast<float>(b[c + 1]);
#endif
                                              });
    }
  }
}
#else
// map_a: a (M, total_k) MN-major, globalDim (M, total_k), box (64, BK). map_b: b (total_k, N) MN-major,
// globalDim (N, total_k), box (64, BK). C: out (groups, M, N), element (e, r, c) at
// C[e * group_stride + r * ldc + c]. offs: `groups` int32 cumulative ends along K.
extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        out_t* __restrict__ C, long long ldc, long long group_stride, const int* __restrict__ offs,
                        int groups, int total_k, int M, int N) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ GroupTable table;
  const SmemMap smem(smem_raw);
  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_b);
  table.build(offs, groups, total_k, BK);  // tile_start: each group's K tiles
  const GroupedKScheduler sched(table, groups, M, N, BM, BN);
  const int total = sched.total();

  if (warpgroup_index() == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingPosition pos{0};
      for (int unit = blockIdx.x; unit < total; unit += gridDim.x) {
        int e, tm, tn;
        sched.coords(unit, e, tm, tn);
        const int k_begin = table.row_begin(e), k_tiles = table.tile_start[e + 1] - table.tile_start[e];
        for (int kt = 0; kt < k_tiles; ++kt, pos.advance())
          produce_grouped_stage(smem, &map_a, &map_b, pos, k_begin + kt * BK, tm * BM, tn * BN, -1);
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;
    RingPosition pos{0};
    for (int unit = blockIdx.x; unit < total; unit += gridDim.x) {
      int e, tm, tn;
      sched.coords(unit, e, tm, tn);
      const int k_begin = table.row_begin(e), k_end = table.row_end[e];
      const int k_tiles = table.tile_start[e + 1] - table.tile_start[e];
      float d[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;  // an empty group's tile is zeros
      consume_tile(smem, d, consumer, k_tiles, k_end - k_begin - (k_tiles - 1) * BK, pos, elected);
      store_fragment_from_registers<BN, true>(C + e * group_stride, ldc, d, tm * BM + 64 * consumer, tn * BN, M, N,
                                              [](float&, float&, int, int) {});
    }
  }
}
#endif
