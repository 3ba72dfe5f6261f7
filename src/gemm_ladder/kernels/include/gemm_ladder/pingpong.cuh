// The ping-pong consumer schedule (design/plan.py SCHEDULES "pingpong"; its ring proved by
// audit/ring.py RingConfig.pingpong): the consumer warpgroups take a CTA's tiles in turn, each a whole
// tile in its own accumulators, so one stores its tile (the epilogue) while the other runs its main
// loop. Every consumer walks the one stage ring, stepping over the stages of the other consumers'
// tiles, and the main loops run in tile order: consumer c waits on order[c] before each of its tiles
// and, after its tile's last full wait, arrives on order[(c + 1) % GL_CONSUMERS]. Without the order a
// consumer could wait on a full barrier one whole ring round early, whose parity matches a phase
// that is not its load's (the auditor finds that interleaving when `ordered` is off).
#pragma once
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/tma_tile.cuh"

namespace gl {

// Templates on the shared-memory map so that a cooperative build, whose plan has no order barriers
// (SmemMap::order exists with GL_SMEM_ORDER_BAR_OFFSET only), compiles the schedule's discarded
// branch without instantiating them.

// Thread 0, beside init_ring (before the CTA barrier that publishes them): one arrival completes a turn.
template <class Smem>
__device__ __forceinline__ void init_order_barriers(const Smem& smem) {
  for (int c = 0; c < GL_CONSUMERS; ++c) mbarrier_init(smem.order(c), 1);
}

// Every thread of consumer c before the main loop of its `turn`-th tile (0, 1, ...). Consumer c's turn
// t follows tile t x GL_CONSUMERS + c - 1 of the CTA, the previous consumer's, whose arrival is that
// consumer's (t or t - 1)-th on order[c]: phase t for c > 0, t - 1 for consumer 0, whose first turn
// is free.
template <class Smem>
__device__ __forceinline__ void wait_turn(const Smem& smem, int consumer, int turn) {
  const int phase = consumer == 0 ? turn - 1 : turn;
  if (phase >= 0) mbarrier_wait(smem.order(consumer), phase & 1);
}

// Consumer c's elected thread, once it has passed its tile's last full wait: the next consumer's turn.
template <class Smem>
__device__ __forceinline__ void pass_turn(const Smem& smem, int consumer) {
  mbarrier_arrive(smem.order((consumer + 1) % GL_CONSUMERS));
}

}  // namespace gl
