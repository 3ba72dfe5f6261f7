// Levels 6+: which output tile a persistent CTA (or cluster) computes next.
#pragma once

// The group height is the plan's (design.plan.GROUP_M, emitted by kernel_defines() as GL_GROUP_M), so
// the designer's unit_coords and this header walk the same order.
#ifndef GL_GROUP_M
#error "GL_GROUP_M (the tile order's group height) comes from the designer's kernel_defines()"
#endif

namespace gl {

// Grouped ("super-tile") order: consecutive tile indices walk down a column of kGroupM tile rows
// before moving right, so the CTAs resident at one moment share A rows and B columns in L2 instead
// of streaming a whole row of B each. Rows are counted in units of `rows_per_unit` M tiles so that a
// cluster of CTAs stacked along M moves as one unit.
struct TileScheduler {
  static constexpr int kGroupM = GL_GROUP_M;
  int units_m, tiles_n, total;

  __host__ __device__ __forceinline__ TileScheduler(int M, int N, int tile_m, int tile_n, int rows_per_unit) {
    const int tiles_m = (M + tile_m - 1) / tile_m;
    units_m = (tiles_m + rows_per_unit - 1) / rows_per_unit;
    tiles_n = (N + tile_n - 1) / tile_n;
    total = units_m * tiles_n;
  }

  // Unit index -> (unit row, tile column).
  __host__ __device__ __forceinline__ void coords(int unit, int& um, int& tn) const {
    const int per_group = kGroupM * tiles_n;
    const int group = unit / per_group, first = group * kGroupM;
    const int rows = min(units_m - first, kGroupM);
    const int within = unit % per_group;
    um = first + within % rows;
    tn = within / rows;
  }
};

}  // namespace gl
