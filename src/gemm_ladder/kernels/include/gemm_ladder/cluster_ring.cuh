// Levels 8-9: the stage ring of a 2-CTA cluster whose CTAs share B by multicast. The producer is
// stage_ring.cuh's (each CTA multicasts its slice of B); the release differs from a single CTA's.
#pragma once
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/tma_tile.cuh"

namespace gl {

// consumer_release of stage s to every CTA of the cluster: each CTA's producer multicasts into this
// CTA's stage, so each must hear that this consumer is done with it (GL_EMPTY_ARRIVALS counts them).
__device__ __forceinline__ void release_stage_to_cluster(const SmemMap& smem, int s) {
  for (int r = 0; r < GL_CLUSTER; ++r) mbarrier_arrive_cluster(smem.empty(s), r);
}

}  // namespace gl
