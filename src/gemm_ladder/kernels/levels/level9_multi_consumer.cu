// Level 9 - several consumer warpgroups on one larger tile (cooperative), epilogue overlapped.
//
// Level 8's cluster and multicast, with a 128 x 256 tile shared by GL_CONSUMERS consumer
// warpgroups: consumer c owns rows [64c, 64c + 64) of the tile and all 256 columns (one
// m64n256k16 wgmma per k16 step, 128 fp32 accumulators per thread). Both read the same B stage, so
// each staged byte of B feeds twice the math of level 8, and the stage is released only when every
// consumer of both CTAs has arrived (GL_EMPTY_ARRIVALS = consumers x cluster).
//
// Epilogue: each consumer stores its 64 x 256 fragment by itself, one 64 x 64 panel at a time,
// through its own ring of GL_C_RING panel buffers (8 KiB each; panel_ring.cuh) and its own store issuer (its
// thread 0); a buffer is refilled once wait_group.read GL_C_RING - 1 says the store that last read
// it is done. The 32 KiB this takes instead of a whole-tile 64 KiB staging pays for a fourth stage.
// The epilogue overlaps the next tile's main loop: at the end of a tile the accumulators are packed
// to the output dtype (64 registers), and panel p is staged and stored in K iteration p of the
// next tile, right after that iteration's wgmma is issued, so the tensor cores are not left idle
// while the outputs drain.
//
// Stream-K tail: the units after the last whole wave of clusters (from tail_first_unit on) are
// split by K iterations over every cluster (stream_k.cuh), so the last wave does not leave SMs idle.
// A tile several clusters contributed to is reduced from fp32 partials in global memory and stored
// by whichever contributor arrives last. tail_first_unit = the unit count turns the tail off.
#include "gemm_ladder/cluster_ring.cuh"
#include "gemm_ladder/epilogue.cuh"
#include "gemm_ladder/panel_ring.cuh"
#include "gemm_ladder/ptx/cluster.cuh"
#include "gemm_ladder/ptx/fence.cuh"
#include "gemm_ladder/ptx/mbarrier.cuh"
#include "gemm_ladder/ptx/tma.cuh"
#include "gemm_ladder/ptx/wgmma.cuh"
#include "gemm_ladder/stage_ring.cuh"
#include "gemm_ladder/stream_k.cuh"
#include "gemm_ladder/tile_scheduler.cuh"
#include "gemm_ladder/tma_tile.cuh"

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

static_assert(GL_PRODUCER_WG == 1 && BM == 64 * GL_CONSUMERS, "level 9: each consumer owns 64 rows of the tile");
static_assert(GL_C_RING >= 1 && GL_C_PANELS % GL_C_RING == 0, "level 9: a ring of panel buffers per consumer");
// Panels stored at once at the end of a tile: one per buffer, whose last stores (the previous tile's,
// issued a whole tile ago) have long been read. The rest wait in registers for the next tile.
constexpr int kEarlyPanels = GL_C_RING < GL_C_PANELS ? GL_C_RING : GL_C_PANELS;
constexpr int kDeferredPanels = GL_C_PANELS - kEarlyPanels;
constexpr int kFirstStoreBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads (0 is __syncthreads)

extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K, int tail_first_unit,
                int max_contributors, float* __restrict__ partials, int* __restrict__ counters) {
  extern __shared__ uint8_t smem_raw[];
  const SmemMap smem(smem_raw);
  const TileScheduler sched(M, N, BM, BN, GL_CLUSTER);
  const int k_tiles = (K + BK - 1) / BK;
  const int rank = cluster_cta_rank();
  const int first_unit = blockIdx.x / GL_CLUSTER, unit_stride = gridDim.x / GL_CLUSTER;
  // Units [0, whole_end) are computed whole, unit_stride apart. The launch splits a tail only with at
  // least one K iteration per cluster (design/stream_k.py); any other argument runs whole, so it
  // cannot miscount a tile's contributors.
  const int tail_units = sched.total - tail_first_unit;
  const bool split = tail_first_unit >= 0 && tail_units > 0 && tail_units * k_tiles >= unit_stride;
  const int whole_end = split ? tail_first_unit : sched.total;
  const StreamKTail tail(whole_end, sched.total - whole_end, k_tiles, unit_stride);

  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_c);
  cluster_sync();

  if (warp_uniform(warpgroup_index()) == 0) {  // a uniform branch: uniform registers in the roles
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingPosition pos = produce_units(smem, &map_a, &map_b, sched, k_tiles, rank, first_unit, unit_stride, whole_end);
      for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
        const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
        int um, tn;
        sched.coords(seg.unit, um, tn);
        produce_k_range(smem, &map_a, &map_b, um, tn, seg.kb, seg.ke, rank, pos);
        it = seg.next;
      }
    }
  } else {
    // 232 and the producer's 40 use the whole pool the launch gives the CTA (168 x 384 = 2 x 128 x 232 +
    // 128 x 40 registers): an increase past it cannot be granted (a 240 / 32 split never finished:
    // docs/measured-choices.md). ptxas uses all 232: one added line in this role (a sleep) spills.
    setmaxnreg_inc<232>();
    const int consumer = warpgroup_index() - 1;
    const bool elected = thread_in_warpgroup() == 0;  // releases stages and issues this consumer's stores
    uint8_t* const ring = smem.c() + consumer * GL_C_RING * GL_SMEM_C_PANEL_BYTES;
    const int bar = kFirstStoreBarrier + consumer;
    uint32_t packed[BN / 4];  // the previous tile's outputs; its last kDeferredPanels are still to be stored
    // Store panel p of this consumer's rows of work unit `unit`, its place recomputed from the unit
    // rather than kept from the tile before: registers are what this loop is short of.
    auto store_panel_of = [&](int unit, int p) {
      int um, tn;
      sched.coords(unit, um, tn);
      store_panel(p, packed, ring, &map_c, tn * BN, (um * GL_CLUSTER + rank) * BM + 64 * consumer, bar, elected);
    };
    RingPosition pos{0};
    for (int unit = first_unit; unit < whole_end; unit += unit_stride) {
      int um, tn;
      sched.coords(unit, um, tn);
      const int tm = um * GL_CLUSTER + rank;
      const int prev = unit - unit_stride;  // the previous tile of this CTA, if unit != first_unit
      float d[BN / 2];
      consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [&](int kt) {
        if (kt < kDeferredPanels && unit != first_unit)  // runs while this K iteration's wgmma does
          store_panel_of(prev, kEarlyPanels + kt);
      });
      if (unit != first_unit)  // fewer K iterations than deferred panels: finish the previous tile first
        for (int p = kEarlyPanels + k_tiles; p < GL_C_PANELS; ++p)
          store_panel_of(prev, p);
      pack_fragment<BN>(packed, d);
#pragma unroll
      for (int p = 0; p < kEarlyPanels; ++p)
        store_panel(p, packed, ring, &map_c, tn * BN, tm * BM + 64 * consumer, bar, elected);
    }
    if (first_unit < whole_end) {  // the last whole tile's deferred panels
      const int last = first_unit + (whole_end - 1 - first_unit) / unit_stride * unit_stride;
      for (int p = kEarlyPanels; p < GL_C_PANELS; ++p)
        store_panel_of(last, p);
    }
    for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
      const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
      it = seg.next;
      float d[BN / 2];
      consume_k_range(smem, d, consumer, seg.kb, seg.ke, pos, elected, [](int) {});
      if (seg.contributors > 1) {
        const int slot = ((seg.unit - whole_end) * GL_CLUSTER + rank) * GL_CONSUMERS + consumer;
        const PartialSlots<BN> slots{partials + static_cast<size_t>(slot) * max_contributors * PartialSlots<BN>::kFloats};
        if (!hand_in_fragment(slots, counters + slot, seg.mine, seg.contributors, d, bar, elected))
          continue;  // another contributor finishes this tile
        slots.reduce(seg.contributors, d);
      }
      pack_fragment<BN>(packed, d);
#pragma unroll
      for (int p = 0; p < GL_C_PANELS; ++p)
        store_panel_of(seg.unit, p);
    }
    if (elected) tma_store_wait_read<0>();
  }
  cluster_sync();
}
