// Levels 5+: where a role stands in the stage ring, the ring's handoffs, and the producer's one step.
//
// A role counts the K iterations it has passed through the ring over every tile of its CTA (so
// stage and phase carry across tiles without re-arming a barrier). Iteration `count` uses stage
// count % STAGES in round count / STAGES; each barrier of a stage completes one phase per round, so
// the parity to wait for is the round's: consumers wait full[s] with round & 1 (the producer's
// bytes of this round), the producer waits empty[s] with the opposite parity (the consumers'
// releases of the round before; a fresh barrier counts as having completed the phase before phase 0,
// so round 0 finds every stage free at once). The handoffs carry CuTe's pipeline names:
//   producer_acquire  the producer waits until a stage is free;
//   producer_commit   it arms the stage's full barrier with the bytes its loads will complete;
//   consumer_wait     a consumer waits until the stage is full;
//   consumer_release  a consumer says it no longer reads the stage (levels 8-9: to every CTA of the
//                     cluster, cluster_ring.cuh).
#pragma once
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

namespace gl {

struct RingPosition {
  int count;  // K iterations this role has passed through the ring so far
  __device__ __forceinline__ int stage() const { return count % STAGES; }
  __device__ __forceinline__ int phase() const { return (count / STAGES) & 1; }
  __device__ __forceinline__ int previous_stage() const { return (count - 1) % STAGES; }  // the stage of count - 1
  __device__ __forceinline__ void advance() { ++count; }
};

__device__ __forceinline__ void producer_acquire(const SmemMap& smem, RingPosition pos) {
  mbarrier_wait(smem.empty(pos.stage()), pos.phase() ^ 1);
}

__device__ __forceinline__ void consumer_wait(const SmemMap& smem, RingPosition pos) {
  mbarrier_wait(smem.full(pos.stage()), pos.phase());
}

__device__ __forceinline__ void consumer_release(const SmemMap& smem, int stage) { mbarrier_arrive(smem.empty(stage)); }

// Where CTA rank r of a cluster loads its slice of the shared B stage from (GL_B_BOX_ROWS rows, into
// rows [r x GL_B_BOX_ROWS, (r + 1) x GL_B_BOX_ROWS) of the stage, multicast to every CTA):
//   kOfTile      rows tn x BN + r x GL_B_BOX_ROWS, ... of the one B map: the slices make up one B
//                tile (levels 8-9, the library GEMM);
//   kPerRankMap  rows tn x GL_B_BOX_ROWS, ... of the map the rank is given, a different one per rank:
//                the stage stacks the same rows of several matrices (library/sm90_swiglu.cu: rank 0
//                loads w_gate, rank 1 w_up, so one stage holds both weights of 128 output columns).
enum class BSlice { kOfTile, kPerRankMap };

// The producer's one step (levels 5-9): producer_acquire the stage at `pos`, producer_commit its full
// barrier (arrive.expect_tx with the whole stage's bytes, which the copy engine then completes), and
// load K tile kt of output tile (tm, tn)'s A rows and B rows into it, each in its planned major
// (tma_load_operand). In a cluster (GL_CLUSTER > 1,
// levels 8-9) the B tile is shared: CTA `rank` loads its slice, rows [rank x GL_B_BOX_ROWS, (rank + 1)
// x GL_B_BOX_ROWS) of the tile, and multicasts it into the same stage of every CTA of the cluster.
// The tile coordinates, not row offsets, come in: the offsets are computed after the waits, which
// keeps the levels' SASS as it was before this helper existed.
// `Slice` says where CTA rank r's slice of B comes from (BSlice below); the levels take the default.
template <BSlice Slice = BSlice::kOfTile>
__device__ __forceinline__ void produce_stage(const SmemMap& smem, const CUtensorMap* map_a, const CUtensorMap* map_b,
                                              RingPosition pos, int kt, int tm, int tn, int rank = 0) {
  const int s = pos.stage();
  producer_acquire(smem, pos);
  mbarrier_arrive_expect_tx(smem.full(s), GL_EXPECT_TX_BYTES);  // producer_commit
  tma_load_operand<A_MN_MAJOR, BM>(smem.a(s), map_a, smem.full(s), kt, tm * BM);
  static_assert(Slice == BSlice::kOfTile || GL_CLUSTER > 1, "a slice per rank's own map needs a cluster");
  if constexpr (GL_CLUSTER == 1) {
    tma_load_operand<B_MN_MAJOR, BN>(smem.b(s), map_b, smem.full(s), kt, tn * BN);
  } else if constexpr (B_MN_MAJOR && GL_B_BOX_ROWS < kMnBoxElems) {
    // An MN-major B tile of one 64-element box (the library GEMM at BN = 64): a slice of 32 N rows would
    // not be a whole 128-byte box, so the cluster splits the stage's BK lines instead. Rank r loads
    // lines [r x BK / GL_CLUSTER, ...) of the box (the plan's B box: 64 x BK / GL_CLUSTER), which TMA
    // writes at line r x BK / GL_CLUSTER of the stage, a multiple of 8 lines (1024-byte aligned), so the
    // 128B swizzle of the whole box is kept.
    static_assert(Slice == BSlice::kOfTile && BN == kMnBoxElems && (BK / GL_CLUSTER) % 8 == 0,
                  "a K-split MN-major B slice: one 64-element box per tile, whole 8-line atoms per CTA");
    constexpr int kLines = BK / GL_CLUSTER;
    tma_load_2d_multicast(smem.b(s) + rank * kLines * kMnBoxElems, map_b, smem.full(s), tn * BN, kt * BK + rank * kLines,
                          (1 << GL_CLUSTER) - 1);
  } else {
    const int b_row = Slice == BSlice::kOfTile ? tn * BN + rank * GL_B_BOX_ROWS : tn * GL_B_BOX_ROWS;
    tma_load_operand<B_MN_MAJOR, GL_B_BOX_ROWS>(smem.b(s) + rank * GL_B_BOX_ROWS * BK, map_b, smem.full(s), kt, b_row,
                                                (1 << GL_CLUSTER) - 1);
  }
}

// A stage with nothing to load, which the consumers fill themselves (the library kernel's bias stage,
// bias_stage.cuh): producer_acquire it, then its full barrier's one arrival with no transaction bytes.
__device__ __forceinline__ void produce_empty_stage(const SmemMap& smem, RingPosition& pos) {
  producer_acquire(smem, pos);
  mbarrier_arrive(smem.full(pos.stage()));
  pos.advance();
}

// K tiles [kb, ke) of work unit (um, tn) into the ring from `pos` on (levels 7-9; a unit is a stack of
// GL_CLUSTER M tiles, of which CTA `rank` computes M tile um * GL_CLUSTER + rank).
template <BSlice Slice = BSlice::kOfTile>
__device__ __forceinline__ void produce_k_range(const SmemMap& smem, const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                int um, int tn, int kb, int ke, int rank, RingPosition& pos) {
  const int tm = um * GL_CLUSTER + rank;
  for (int kt = kb; kt < ke; ++kt, pos.advance()) produce_stage<Slice>(smem, map_a, map_b, pos, kt, tm, tn, rank);
}

// The producer thread's whole life (levels 7-9): every K tile of each work unit first_unit,
// first_unit + unit_stride, ... < end_unit, and with kEmptyStage one empty stage after each unit's K tiles
// (produce_empty_stage). Returns the ring position reached.
template <BSlice Slice = BSlice::kOfTile, bool kEmptyStage = false>
__device__ __forceinline__ RingPosition produce_units(const SmemMap& smem, const CUtensorMap* map_a,
                                                      const CUtensorMap* map_b, const TileScheduler& sched, int k_tiles,
                                                      int rank, int first_unit, int unit_stride, int end_unit) {
  RingPosition pos{0};
  for (int unit = first_unit; unit < end_unit; unit += unit_stride) {
    int um, tn;
    sched.coords(unit, um, tn);
    produce_k_range<Slice>(smem, map_a, map_b, um, tn, 0, k_tiles, rank, pos);
    if constexpr (kEmptyStage) produce_empty_stage(smem, pos);
  }
  return pos;
}

}  // namespace gl
