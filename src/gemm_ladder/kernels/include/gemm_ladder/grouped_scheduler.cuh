// The grouped GEMM's tile scheduler (kernels/library/sm90_grouped_gemm.cu): the output rows are split
// into groups by a device array of cumulative row ends (torch._grouped_mm's `offs`: group e has rows
// [offs[e - 1], offs[e]), group 0 from row 0), and a persistent CTA walks the M x N tiles of every group
// in one order, with a problem index (the group) for each tile.
//
// No group size reaches the host: each CTA reads `offs` at its start and builds, in shared memory, the
// prefix of the groups' M-tile counts (GroupTable). A tile index then maps to (M tile, N tile) in
// tile_scheduler.cuh's grouped order over the M tiles of all groups stacked, and the M tile to its group
// by a binary search of the prefix. A group's M tiles start at its first row, so a group's last tile may
// reach into the next group's rows: the load reads them (one tensor map over all rows), the store masks
// them (rows >= the group's end are never written). Empty groups own no tile.
//
// A 2-CTA cluster (the kernel's kCluster = 2) walks units of two vertically adjacent M tiles in the
// same order (tile_scheduler.cuh's rows_per_unit): CTA rank r computes M tile 2u + r of unit row u.
// Both CTAs derive the same unit, and from it the same `share` (both tiles exist and read the same
// weight rows, so each CTA loads half of the B tile and multicasts it), from the unit index and the
// group table alone, so their producers never disagree about whose bytes land in which stage.
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/tile_scheduler.cuh"

#ifndef GL_MAX_GROUPS
#error "GL_MAX_GROUPS (the most groups one launch takes) comes from the grouped plan's kernel_defines()"
#endif

namespace gl {

constexpr int kMaxGroups = GL_MAX_GROUPS;

// Per CTA, in shared memory. Group e has rows [row_begin(e), row_end[e]) and M tiles
// [tile_start[e], tile_start[e + 1]); tile_start[groups] is every group's M tiles together.
struct GroupTable {
  int tile_start[kMaxGroups + 1];
  int row_end[kMaxGroups];
  int rows_per_group;  // 0: contiguous groups (offs); > 0: the masked layout, group e's rows start at e x this

  __device__ __forceinline__ int row_begin(int e) const {
    return rows_per_group ? e * rows_per_group : (e ? row_end[e - 1] : 0);
  }

  // The masked layout (decode): group e owns rows [e x m_max, e x m_max + counts[e]) of an (E x m_max)-row
  // x, counts clamped to [0, m_max]; the rows past a group's count are neither computed nor written,
  // so an expert with no token costs nothing. Every thread of the CTA calls it (it holds __syncthreads).
  __device__ __forceinline__ void build_masked(const int* __restrict__ counts, int groups, int m_max, int bm) {
    const int t = threadIdx.x;
    if (t == 0) rows_per_group = m_max;
    if (t < 32) {  // warp 0: the prefix of the tile counts, 32 groups at a time
      int tile_carry = 0;
      for (int base = 0; base < groups; base += 32) {
        const int e = base + t;
        const int rows = e < groups ? min(max(counts[e], 0), m_max) : 0;
        int tiles = (rows + bm - 1) / bm;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
          const int up = __shfl_up_sync(0xffffffffu, tiles, d);
          if (t >= d) tiles += up;
        }
        if (e < groups) {
          row_end[e] = e * m_max + rows;
          tile_start[e + 1] = tile_carry + tiles;
        }
        tile_carry += __shfl_sync(0xffffffffu, tiles, 31);
      }
      if (t == 0) tile_start[0] = 0;
    }
    __syncthreads();
  }

  // Fill the table from `offs` (groups entries, cumulative row ends) with every thread of the CTA (it
  // holds __syncthreads). Each end is clamped to [0, total_rows] and to the previous end, so offsets
  // that break the contract (decreasing, past the rows) give empty groups, never a row out of range.
  __device__ __forceinline__ void build(const int* __restrict__ offs, int groups, int total_rows, int bm) {
    const int t = threadIdx.x;
    if (t == 0) rows_per_group = 0;
    for (int e = t; e < groups; e += blockDim.x) row_end[e] = min(max(offs[e], 0), total_rows);
    __syncthreads();
    if (t < 32) {  // warp 0: the running maximum of the ends, then the prefix of tile counts, 32 groups at a time
      int end_carry = 0, tile_carry = 0;
      for (int base = 0; base < groups; base += 32) {
        const int e = base + t;
        int end = e < groups ? row_end[e] : 0;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
          const int up = __shfl_up_sync(0xffffffffu, end, d);
          if (t >= d) end = max(end, up);
        }
        end = max(end, end_carry);
        int prev = __shfl_up_sync(0xffffffffu, end, 1);
        if (t == 0) prev = end_carry;
        int tiles = e < groups ? (end - prev + bm - 1) / bm : 0;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
          const int up = __shfl_up_sync(0xffffffffu, tiles, d);
          if (t >= d) tiles += up;
        }
        if (e < groups) {
          row_end[e] = end;
          tile_start[e + 1] = tile_carry + tiles;
        }
        end_carry = __shfl_sync(0xffffffffu, end, 31);
        tile_carry += __shfl_sync(0xffffffffu, tiles, 31);
      }
      if (t == 0) tile_start[0] = 0;
    }
    __syncthreads();
  }

  // The group of M tile `mt` (< tile_start[groups]): the first e with tile_start[e + 1] > mt, which
  // skips the empty groups before it.
  __device__ __forceinline__ int group_of(int mt, int groups) const {
    int lo = 0, hi = groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (tile_start[mid + 1] > mt) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
};

// One output tile of a grouped problem: rows [row0, row0 + BM) of the output (masked to row_end), N
// tile tn, weights of group `group`.
struct GroupedTile {
  int group, row0, row_end, tn;
};

// A cluster's work unit as CTA rank r sees it: its tile; `mine` false when the unit has no M tile for
// this rank (the last unit of an odd M-tile count, rank 1: `t` is then rank 0's tile, whose rows the
// rank loads so the ring's bytes stay uniform, and it computes and stores nothing); `share` when every
// rank has a tile of one group (one weight, one N tile: B is loaded once, half by each rank, multicast).
struct GroupedUnit {
  GroupedTile t;
  bool mine, share;
};

// The walk: tile_scheduler.cuh's order over (all groups' M tiles stacked) x (N tiles), each M tile
// placed in its group; with `cluster` 2, over pairs of M tiles (units of rows_per_unit 2).
// kRowsFromTable: the order's unit rows (and so its total) are read from the table where they are used
// instead of kept in a register (the stream-K tail's builds: one more live value in the consumers spilled
// at BN 256); the same walk.
template <bool kRowsFromTable = false>
struct GroupedScheduler {
  const GroupTable& table;
  int groups, bm, rows_per_unit;
  TileScheduler order;
  __device__ __forceinline__ GroupedScheduler(const GroupTable& t, int groups_, int n, int bm_, int bn, int cluster = 1)
      : table(t), groups(groups_), bm(bm_), rows_per_unit(cluster),
        order(t.tile_start[groups_] * bm_, n, bm_, bn, cluster) {}
  __device__ __forceinline__ TileScheduler walk() const {
    if constexpr (kRowsFromTable) {
      TileScheduler o = order;
      o.units_m = (*static_cast<const volatile int*>(&table.tile_start[groups]) + rows_per_unit - 1) / rows_per_unit;
      o.total = o.units_m * o.tiles_n;
      return o;
    } else {
      return order;
    }
  }
  __device__ __forceinline__ int total() const { return walk().total; }
  __device__ __forceinline__ GroupedTile tile_at(int mt, int tn) const {
    const int e = table.group_of(mt, groups);
    return GroupedTile{e, table.row_begin(e) + (mt - table.tile_start[e]) * bm, table.row_end[e], tn};
  }
  // One CTA per cluster: unit = tile.
  __device__ __forceinline__ GroupedTile tile(int unit) const {
    int mt, tn;
    walk().coords(unit, mt, tn);
    return tile_at(mt, tn);
  }
  // Unit `unit` as CTA `rank` of a kCluster-CTA cluster sees it (the order built with cluster = kCluster).
  // Groups own contiguous M tiles, so the unit's first and last tiles in one group put all in it.
  template <int kCluster>
  __device__ __forceinline__ GroupedUnit unit(int unit, int rank) const {
    if constexpr (kCluster == 1) {
      return GroupedUnit{tile(unit), true, false};
    } else {
      static_assert(kCluster == 2, "a unit is a pair of M tiles");
      int um, tn;
      walk().coords(unit, um, tn);
      const int first = um * kCluster, last = first + kCluster - 1, tiles = table.tile_start[groups];
      const GroupedTile head = tile_at(first, tn);
      const bool both = last < tiles;
      const GroupedTile tail = both ? tile_at(last, tn) : head;
      const bool mine = rank == 0 || both;
      return GroupedUnit{rank == 0 ? head : tail, mine, both && tail.group == head.group};
    }
  }
};

// The walk of the K-grouped problem (the weight gradient, GL_GROUPED_K): out[e] (M, N) = the product over
// group e's K range [row_begin(e), row_end[e]) (a GroupTable built with bm = BK: tile_start counts each
// group's K tiles). Every group owns the same M x N tiles, empty groups included (their tiles are zeros);
// units run group by group, tile_scheduler.cuh's order inside a group.
struct GroupedKScheduler {
  const GroupTable& table;
  int groups, per_group, tiles_m;
  TileScheduler order;
  __device__ __forceinline__ GroupedKScheduler(const GroupTable& t, int groups_, int m, int n, int bm, int bn,
                                               int cluster = 1)
      : table(t), groups(groups_), order(m, n, bm, bn, cluster) {
    per_group = order.total;
    tiles_m = (m + bm - 1) / bm;
  }
  __device__ __forceinline__ int total() const { return groups * per_group; }
  // Unit -> (group e, M tile tm, N tile tn) (one CTA per cluster: unit = tile).
  __device__ __forceinline__ void coords(int unit, int& e, int& tm, int& tn) const {
    e = unit / per_group;
    order.coords(unit - e * per_group, tm, tn);
  }
  // Unit -> (group e, this rank's M tile tm, N tile tn) in a kCluster-CTA cluster (the order built with
  // cluster = kCluster); `mine` and `share` as GroupedUnit's: every tile of a unit is group e's at N
  // tile tn, so B is shared whenever every rank has a tile. A rank without one takes rank 0's tm.
  template <int kCluster>
  __device__ __forceinline__ void unit(int unit, int rank, int& e, int& tm, int& tn, bool& mine, bool& share) const {
    if constexpr (kCluster == 1) {
      coords(unit, e, tm, tn);
      mine = true;
      share = false;
    } else {
      int um;
      coords(unit, e, um, tn);
      const int first = um * kCluster;
      share = first + kCluster - 1 < tiles_m;
      mine = first + rank < tiles_m;
      tm = mine ? first + rank : first;
    }
  }
};

}  // namespace gl
