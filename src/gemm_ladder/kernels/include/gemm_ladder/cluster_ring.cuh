// Levels 8-9: the stage ring of a 2-CTA cluster whose CTAs share B by multicast. The producer is
// stage_ring.cuh's (each CTA multicasts its slice of B); the release differs from a single CTA's.
#pragma once
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/tma_tile.cuh"

// K tiles whose wgmma groups may be in flight behind the one just issued (wgmma.wait_group's argument),
// so a stage is released that many K tiles after its own (the ring's release lag). 1 in every shipped
// build; 2 in a measuring build (library_gemm's release_lag) that keeps two groups in flight, for tiles
// whose group is short (64 x 64: 128 tensor-pipe cycles) against the consumer's turnaround.
#ifndef GL_RELEASE_LAG
#define GL_RELEASE_LAG 1
#endif

namespace gl {
static_assert(GL_RELEASE_LAG == 1 || GL_RELEASE_LAG == 2, "one or two wgmma groups in flight behind the newest");
static_assert(STAGES > GL_RELEASE_LAG, "a consumer holds GL_RELEASE_LAG stages while it waits for the next one");

// consumer_release of stage s to every CTA of the cluster: each CTA's producer multicasts into this
// CTA's stage, so each must hear that this consumer is done with it (GL_EMPTY_ARRIVALS counts them).
// A build of one CTA (GL_CLUSTER 1: the library kernel's cluster-1 builds) releases to itself.
__device__ __forceinline__ void release_stage_to_cluster(const SmemMap& smem, int s) {
  if constexpr (GL_CLUSTER == 1) {
    consumer_release(smem, s);
  } else {
    for (int r = 0; r < GL_CLUSTER; ++r) mbarrier_arrive_cluster(smem.empty(s), r);
  }
}

// consume_k_range's extra stage when there is none.
struct NoExtraStage {
  static constexpr bool kOn = false;
};

// What consume_k_range does around each full-barrier wait: nothing, in every build but a measuring one
// (a timeline build's CycleWaitClock, timeline.cuh, adds up the cycles spent waiting for data).
struct NoWaitClock {
  __device__ __forceinline__ void begin() {}
  __device__ __forceinline__ void end() {}
  __device__ __forceinline__ unsigned long long cycles() const { return 0; }
};

// Level 9's consumer warpgroup `consumer` (rows [64c, 64c + 64) of the tile): its K tiles [kb, ke) of
// one unit into d, from ring position `pos` on. Stage k goes back to the cluster once the wgmma of
// k + GL_RELEASE_LAG is issued (wait_group GL_RELEASE_LAG: 1 in shipped builds), the range's last
// GL_RELEASE_LAG (all of a shorter range) once all have completed. after_issue(kt) runs while K
// tile kt's wgmma does (the whole units store deferred panels there). Whole units and stream-K pieces
// share it. The consumer's A rows start 64 x BK elements apart in either major: 64 K-major rows, or
// the consumer's own 64-element MN-major box; the planned majors select the descriptors. wait_clock
// brackets each wait for a stage's data (NoWaitClock: no code). Acc is one 64 x BN fragment, float[BN / 2],
// or a ping-pong consumer's whole tile of R of them, float[R][BN / 2] (its A rows from row 0: consumer 0).
// extra: one more stage after the range that the consumers fill themselves (bias_stage.cuh's ExtraStage,
// where its here(ke)), issued while K tile ke - 1's group is in flight; NoExtraStage: none, no code.
template <class Acc, class AfterIssue, class WaitClock = NoWaitClock, class Extra = NoExtraStage>
__device__ __forceinline__ void consume_k_range(const SmemMap& smem, Acc& d, int consumer, int kb, int ke,
                                                RingPosition& pos, bool elected, AfterIssue&& after_issue,
                                                WaitClock&& wait_clock = NoWaitClock{}, const Extra& extra = Extra{}) {
  static_assert(sizeof(Acc) % (BN / 2 * sizeof(float)) == 0, "whole 64 x BN fp32 fragments");
  const int a_row0 = k_loop_a_row<BN>(consumer);  // uniform where the group is short (ptx/wgmma.cuh)
  for (int kt = kb; kt < ke; ++kt, pos.advance()) {
    const int s = pos.stage();
    wait_clock.begin();
    consumer_wait(smem, pos);
    wait_clock.end();
    wgmma_fence();
    mma_k_tile<BN, A_MN_MAJOR, B_MN_MAJOR>(d, smem.a(s) + a_row0 * BK, smem.b(s), kt > kb);
    wgmma_commit();
    after_issue(kt);
    if constexpr (GL_RELEASE_LAG == 1) {
      wgmma_wait<1>();
      if (kt > kb && elected)
        release_stage_to_cluster(smem, pos.previous_stage());
    } else {
      wgmma_wait<GL_RELEASE_LAG>();  // the group of K tile kt - GL_RELEASE_LAG is complete
      if (kt - kb >= GL_RELEASE_LAG && elected)
        release_stage_to_cluster(smem, (pos.count - GL_RELEASE_LAG) % STAGES);
    }
  }
  if constexpr (Extra::kOn) {
    static_assert(GL_RELEASE_LAG == 1 && sizeof(Acc) == BN / 2 * sizeof(float), "one fragment, one group behind");
    if (extra.here(ke)) {
      const int s = pos.stage();
      consumer_wait(smem, pos);
      extra.step(d, smem.a(s), smem.b(s));  // fills the stage, orders it, issues its wgmma
      wgmma_commit();
      wgmma_wait<1>();  // K tile ke - 1's group: its stage goes back
      if (ke > kb && elected) release_stage_to_cluster(smem, pos.previous_stage());
      pos.advance();
    }
  }
  wgmma_wait<0>();
  fence_accumulators(d);
  if (elected) {
    if constexpr (GL_RELEASE_LAG == 1) {
      release_stage_to_cluster(smem, pos.previous_stage());
    } else {  // the range's last min(GL_RELEASE_LAG, ke - kb) stages, oldest first
      for (int j = (ke - kb < GL_RELEASE_LAG ? ke - kb : GL_RELEASE_LAG); j >= 1; --j)
        release_stage_to_cluster(smem, (pos.count - j) % STAGES);
    }
  }
}

}  // namespace gl
