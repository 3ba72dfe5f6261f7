// Levels 8-9: the stage ring of a 2-CTA cluster whose CTAs share B by multicast.
// The producer loop and the consumer release are the same in both levels, so they live here once.
#pragma once
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

namespace gl {

// Load K tiles [kb, ke) of work unit (um, tn) into the ring, `count` being the ring position
// (K iterations so far): acquire the next stage (empty barrier, parity flipped: round 0 passes at
// once), arm its full barrier with the stage's bytes, load this CTA's A tile and its 1/GL_CLUSTER
// slice of the shared B tile, multicast to every CTA of the cluster.
__device__ __forceinline__ void produce_k_range(const SmemMap& smem, const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                int um, int tn, int kb, int ke, int rank, int& count) {
  const int tm = um * GL_CLUSTER + rank;
  for (int kt = kb; kt < ke; ++kt, ++count) {
    const int s = count % STAGES;
    mbarrier_wait(smem.empty(s), ((count / STAGES) & 1) ^ 1);
    mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);
    tma_load_2d(smem.a(s), map_a, smem.full(s), kt * BK, tm * BM);
    tma_load_2d_multicast(smem.b(s) + rank * GL_B_BOX_ROWS * BK, map_b, smem.full(s), kt * BK,
                          tn * BN + rank * GL_B_BOX_ROWS, (1 << GL_CLUSTER) - 1);
  }
}

// The producer thread's whole life: every K tile of each work unit of this cluster (unit =
// first_unit, first_unit + unit_stride, ... < end_unit). Returns the ring position reached.
__device__ __forceinline__ int produce_multicast_stages(const SmemMap& smem, const CUtensorMap* map_a,
                                                        const CUtensorMap* map_b, const TileScheduler& sched,
                                                        int k_tiles, int rank, int first_unit, int unit_stride,
                                                        int end_unit) {
  int count = 0;
  for (int unit = first_unit; unit < end_unit; unit += unit_stride) {
    int um, tn;
    sched.coords(unit, um, tn);
    produce_k_range(smem, map_a, map_b, um, tn, 0, k_tiles, rank, count);
  }
  return count;
}

// consumer_release of stage s to every CTA of the cluster: each CTA's producer multicasts into this
// CTA's stage, so each must hear that this consumer is done with it (GL_EMPTY_ARRIVALS counts them).
__device__ __forceinline__ void release_stage_to_cluster(const SmemMap& smem, int s) {
  for (int r = 0; r < GL_CLUSTER; ++r) mbarrier_arrive_cluster(smem.empty(s), r);
}

}  // namespace gl
