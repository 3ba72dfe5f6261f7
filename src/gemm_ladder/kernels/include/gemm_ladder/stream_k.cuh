// Level 9's stream-K tail: the work units left over after the last whole wave are split by K
// iterations, evenly over every resident cluster, instead of leaving part of the GPU idle while
// the last partial wave runs. The same integer arithmetic is in gemm_ladder/design/stream_k.py
// (which sizes the workspace and is what the CPU tests check); keep the two alike.
//
// The tail's K iterations are numbered it = u * k_tiles + kt over tail units u; cluster c owns
// [begin(c), begin(c + 1)) with begin(c) = floor(c * total / clusters). A unit whose iterations
// span several clusters gets one fp32 partial per contributing cluster; the contributor that
// arrives last (an atomic counter per tile and consumer) adds them in K order and stores the tile.
// The launch splits a tail only when it has at least one iteration per cluster (total >= clusters):
// every range is then non-empty, so owner(last) - owner(first) + 1 counts exactly the contributors
// that will arrive.
#pragma once
#include "gemm_ladder/fragment_partials.cuh"
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

struct StreamKTail {
  int first_unit;  // units [0, first_unit) are whole (data-parallel); the tail follows
  int units, k_tiles, clusters;
  int total;  // units * k_tiles; the launch keeps (clusters + 1) * total below 2^31, so 32-bit math holds

  __host__ __device__ StreamKTail(int first_unit_, int units_, int k_tiles_, int clusters_)
      : first_unit(first_unit_), units(units_), k_tiles(k_tiles_), clusters(clusters_), total(units_ * k_tiles_) {}

  __host__ __device__ int begin(int c) const { return c * total / clusters; }
  // The cluster whose range holds iteration `it`: the largest c with begin(c) <= it.
  __host__ __device__ int owner(int it) const { return ((it + 1) * clusters + total - 1) / total - 1; }

  // The piece of cluster c's range [it, end) that starts at `it`: K tiles [kb, ke) of one unit
  // (counted over all units: the tail's first is first_unit), the cluster's place among the unit's
  // contributors, and where the next piece starts. Walk a range with
  //   for (int it = t.begin(c), end = t.begin(c + 1); it < end; it = seg.next) { seg = t.segment(c, it, end); ... }
  struct Segment {
    int unit, kb, ke, mine, contributors, next;
  };
  __host__ __device__ Segment segment(int c, int it, int end) const {
    const int u = it / k_tiles, base = u * k_tiles;
    const int ke = end - base < k_tiles ? end - base : k_tiles;
    const int first = owner(base), last = owner(base + k_tiles - 1);
    return {first_unit + u, it - base, ke, c - first, last - first + 1, base + ke};
  }
};

// The end of a persistent launch's whole units: `tail_first_unit` when the launch splits the units from
// it on by K over its `stride` clusters, else `units`. A split needs at least one K iteration of the tail
// per cluster (the tail's contributor counts assume it: design/stream_k.py); any other argument runs
// every unit whole, so it cannot miscount a unit's contributors.
__host__ __device__ __forceinline__ int whole_units_end(int units, int tail_first_unit, int k_tiles, int stride) {
  const int tail_units = units - tail_first_unit;
  return tail_first_unit >= 0 && tail_units > 0 && tail_units * k_tiles >= stride ? tail_first_unit : units;
}

// The first unit of the stream-K tail a launch decides on the device, where the host does not know the
// unit count (the grouped kernel: its units depend on group sizes it reads on the GPU): design/stream_k.py
// plan_tail's rule in integers. The last partial wave (units mod clusters) is split when there is more
// than one wave, more than `idle_min` clusters would sit idle in it (the host passes floor(min_idle x
// clusters), which is plan_tail's fraction test exactly), the tail has a K iteration per cluster at
// least, and the 32-bit arithmetic of StreamKTail holds; else `units` (no tail).
__host__ __device__ __forceinline__ int tail_start_unit(int units, int clusters, int k_tiles, int idle_min) {
  const int tail = units % clusters;
  const bool split = units > clusters && tail > 0 && clusters - tail > idle_min &&
                     static_cast<long long>(tail) * k_tiles >= clusters &&
                     static_cast<long long>(clusters + 1) * tail * k_tiles < (1LL << 31);
  return split ? units - tail : units;
}

// Partials of one consumer's 64 x BN fragment (BN / 2 fp32 accumulators a thread): the fragment
// partials of fragment_partials.cuh, which every split kernel shares; hand_in_fragment hands them in.
template <int BN>
using PartialSlots = FragmentPartials<BN / 2>;

}  // namespace gl
