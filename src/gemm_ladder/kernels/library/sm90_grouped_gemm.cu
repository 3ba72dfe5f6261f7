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
// stage_ring.cuh / cluster_ring.cuh (its releases, to a cluster of one, are the ring's consumer_release),
// persistent CTAs. What differs from sm90_gemm.cu:
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
#include "gemm_ladder/tma_tile.cuh"

static_assert(gl::BM == 128 && GL_CONSUMERS == 2 && GL_CLUSTER == 1 && GL_PRODUCER_WG == 1,
              "sm90_grouped_gemm: a 128-row tile, two consumer warpgroups, one CTA per cluster, a producer warpgroup");
static_assert(gl::BN == 128 || gl::BN == 256, "sm90_grouped_gemm: BN is 128 or 256");
static_assert(gl::BK == 64, "sm90_grouped_gemm: BK = 64, one 128-byte swizzle span of K per stage");
static_assert(GL_A_MN_MAJOR == 0, "sm90_grouped_gemm: x is read K-major (row-major)");
static_assert(GL_C_PANELS == 0 && GL_C_RING == 0, "sm90_grouped_gemm: C is stored from registers (c_from_registers)");

#include "gemm_ladder/cluster_ring.cuh"
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

// K tile kt of group e's weight rows [n0, n0 + BN) into `dst`: one box of BN rows x BK (K-major), or
// BN / 64 boxes of 64 N x BK K lines, kMnGroupBytes apart (N-major), which the wgmma descriptors read.
__device__ __forceinline__ void load_weight_tile(elem_t* dst, const CUtensorMap* map_w, uint64_t* bar, int kt, int n0,
                                                 int e) {
  if constexpr (!B_MN_MAJOR) {
    tma_load_3d(dst, map_w, bar, kt * BK, n0, e);
  } else {
#pragma unroll
    for (int i = 0; i < BN / kMnBoxElems; ++i) tma_load_3d(dst + i * kMnBoxElems * BK, map_w, bar, n0 + i * kMnBoxElems, kt * BK, e);
  }
}

extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                        out_t* __restrict__ C, long long ldc, const int* __restrict__ offs, int groups, int total_rows,
                        int N, int K, const elem_t* __restrict__ bias) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ GroupTable table;
  const SmemMap smem(smem_raw);
  if (threadIdx.x == 0) init_ring(smem, &map_x, &map_w, &map_w);  // no output map: w's is prefetched twice
  table.build(offs, groups, total_rows, BM);  // its __syncthreads also publish the ring's barriers
  const GroupedScheduler sched(table, groups, N, BM, BN);
  const int k_tiles = (K + BK - 1) / BK;
  const int total = sched.total();

  if (warpgroup_index() == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingPosition pos{0};
      for (int unit = blockIdx.x; unit < total; unit += gridDim.x) {
        const GroupedTile t = sched.tile(unit);
        for (int kt = 0; kt < k_tiles; ++kt, pos.advance()) {
          const int s = pos.stage();
          producer_acquire(smem, pos);
          mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);  // producer_commit
          tma_load_2d(smem.a(s), &map_x, smem.full(s), kt * BK, t.row0);
          load_weight_tile(smem.b(s), &map_w, smem.full(s), kt, t.tn * BN, t.group);
        }
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
      consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [](int) {});
      const GroupedTile t = sched.tile(unit);
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
