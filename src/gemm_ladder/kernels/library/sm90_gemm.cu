// Library kernel sm90_gemm: D (M, N) = A (M, K) @ B (N, K)^T for the operand layouts torch.mm hands
// over without a copy (library/gemm.py plans and launches it; library/operand.py names the layouts),
// with an optional fused epilogue (library/epilogue.py generates it; fused_epilogue.cuh).
//
// Level 9's kernel, compiled from the designer's plan for one layout: persistent, a producer
// warpgroup, 2-CTA clusters that multicast B, two consumer warpgroups of 64 rows on a 128 x BN tile,
// each storing through its own panel ring overlapped with the next tile, and a stream-K split. What
// the plan sets, beyond level 9's:
//  - GL_A_MN_MAJOR / GL_B_MN_MAJOR: each operand K-major or MN-major in memory and in shared memory.
//    An MN-major operand's tensor map has M (or N) as its inner dimension: the producer loads it as
//    boxes of 64 elements x BK rows (tma_load_operand, tma_tile.cuh, through stage_ring.cuh's
//    produce_stage), and the consumers read it with wgmma's transpose immediate and the MN-major
//    descriptor (mma_k_tile and desc_mn_major_sw128, ptx/wgmma.cuh, through cluster_ring.cuh's
//    consume_k_range). Every layout difference lives in those headers.
//  - GL_BN = 64, 128 or 256 (the dispatcher's cost model picks it: narrower tiles where wider ones
//    would leave SMs idle). At BN = 64 a tile is one 64-column panel: the plan gives each consumer a
//    ring of one panel buffer (GL_C_RING = 1), so every panel is stored at the end of its tile and
//    none is deferred (kDeferredPanels = 0); the one buffer is refilled once the store that read it,
//    a whole tile earlier, has been read (wait_group.read 0). The cluster's B slices are 32 rows: a
//    K-major B loads them as boxes of 32 rows; an MN-major B, whose box is 64 elements of N wide,
//    splits the stage's K rows instead (stage_ring.cuh's produce_stage, the plan's B box).
// And what the launch sets: the leading dimensions of A, B and D (the tensor maps' global strides),
// and the stream-K split (tail_first_unit: the first unit split by K over every cluster; 0 splits
// every unit, the unit count none).
//
// The body is level 9's (levels/level9_multi_consumer.cu, which stays the ladder's rung), with one
// hook: where level 9 packs a finished fragment to the output dtype (pack_fragment: at the end of
// each whole tile, and in the stream-K tail after the partials are reduced), a build with
// GL_EPILOGUE applies the fused epilogue to each pair of fp32 accumulators first (epilogue_pack):
// its loads and math run in the registers the packing already uses, and the output is rounded
// once. And at the start of each tile (whole or a stream-K segment), before its main loop, each consumer
// prefetches its slice of the epilogue's tile inputs into L2 (epilogue_prefetch), so the loads at the
// tile's end need not wait on DRAM. Without GL_EPILOGUE the kernel is level 9's, instruction for
// instruction, and takes no epilogue argument (tests/test_epilogue.py compares the SASS).
//
// GL_C_FROM_REGISTERS (1: the plan's c_from_registers) builds the kernel for outputs a TMA store cannot
// write (N not a multiple of 16 bytes, a pitch or base not 16-byte aligned; or a float32 output,
// GL_OUT_FP32): the consumers store each finished fragment straight from their accumulator registers
// with masked global stores (register_store.cuh: one store per pair of columns, pairs shifted by a
// column in rows whose even columns are misaligned) at any pitch, instead of the panel rings and TMA
// stores; the kernel takes the output's pointer and row pitch in place of its tensor map, and no
// shared memory holds C (the plan gives it to the stage ring). Each fragment is stored right after
// its last wgmma, so its stores are not overlapped with the next tile's first K iterations as the
// panel ring's deferred panels are; the producer keeps loading meanwhile. Without it (0, the default)
// this file is unchanged.
//
// Two other ways to store and reduce were built, measured no faster where they apply, and removed: a
// staged copy of C through per-warp shared memory with 16-byte stores, and a stream-K fixup distributed
// over a split tile's contributors (docs/library.md says what was measured and where the code is in git).
#include "gemm_ladder/tma_tile.cuh"
#include "gemm_ladder/fused_epilogue_pair.cuh"

static_assert(gl::BM == 128 && GL_CONSUMERS == 2 && GL_CLUSTER == 2 && GL_PRODUCER_WG == 1,
              "sm90_gemm: level 9's 128-row tile, two consumer warpgroups, a 2-CTA cluster and a producer warpgroup");
static_assert(gl::BN == 64 || gl::BN == 128 || gl::BN == 256, "sm90_gemm: BN is 64, 128 or 256");
static_assert(gl::BK == 64, "sm90_gemm: BK = 64, one 128-byte swizzle span of K per stage");
static_assert((GL_A_MN_MAJOR == 0 || GL_A_MN_MAJOR == 1) && (GL_B_MN_MAJOR == 0 || GL_B_MN_MAJOR == 1),
              "sm90_gemm: each operand K-major (0) or MN-major (1)");

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

#ifndef GL_C_FROM_REGISTERS
#define GL_C_FROM_REGISTERS 0
#endif
#if GL_C_FROM_REGISTERS
#include "gemm_ladder/register_store.cuh"
#endif

using namespace gl;

GL_RELEASES_PREVIOUS_STAGE();

static_assert(GL_PRODUCER_WG == 1 && BM == 64 * GL_CONSUMERS, "level 9: each consumer owns 64 rows of the tile");
#if GL_C_FROM_REGISTERS
static_assert(GL_C_PANELS == 0 && GL_C_RING == 0, "sm90_gemm: C from registers: the plan must stage no C (c_from_registers)");
#if defined(GL_OUT_FP32)
using out_t = float;
#else
using out_t = elem_t;
#endif
constexpr int kFirstStoreBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads (the stream-K hand-in)
// The output: element (r, c) of the kernel's M x N output at C[r * ldc + c], in place of map_c.
#define GL_C_ARG out_t* __restrict__ C, long long ldc
#else
static_assert(GL_C_RING >= 1 && GL_C_PANELS % GL_C_RING == 0, "level 9: a ring of panel buffers per consumer");
// Panels stored at once at the end of a tile: one per buffer, whose last stores (the previous tile's,
// issued a whole tile ago) have long been read. The rest wait in registers for the next tile.
constexpr int kEarlyPanels = GL_C_RING < GL_C_PANELS ? GL_C_RING : GL_C_PANELS;
constexpr int kDeferredPanels = GL_C_PANELS - kEarlyPanels;
constexpr int kPrefetchAhead = 8;  // K iterations between a tile's epilogue prefetch and its epilogue
constexpr int kFirstStoreBarrier = 2;  // named barrier 2 + c: consumer c's 128 threads (0 is __syncthreads)
#define GL_C_ARG const __grid_constant__ CUtensorMap map_c
#endif

#if defined(GL_EPILOGUE) && !GL_C_FROM_REGISTERS
// Column panel p (columns 64p.. of BN) of a consumer's finished 64 x BN fragment (rows row0.., columns
// col0.. of the kernel's M x N output) through the fused epilogue, in place, then packed as
// pack_fragment packs it. Pair (4j + 2i, 4j + 2i + 1) sits at row row0 + 16w + l/4 + 8i, columns
// col0 + 8j + 2(l%4) + {0, 1} (epilogue.cuh's fragment layout): two neighbours along a row of the
// kernel's output. The kernel calls it for each panel right before that panel's staging (or, for the
// panels stored later, after the earlier panels' stores): ptxas sinks the math to where the packed
// values are used, and the whole fragment's math sunk into the first panel's store spilled.
__device__ __forceinline__ void epilogue_pack_panel(uint32_t (&packed)[BN / 4], float (&d)[BN / 2], int p, int row0,
                                                    int col0, int M, int N, const EpilogueParams& epi) {
  const int t = thread_in_warpgroup(), warp = t / 32, lane = t % 32;
#pragma unroll
  for (int j = 8 * p; j < 8 * p + 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      epilogue_pair<true>(d[4 * j + 2 * i], d[4 * j + 2 * i + 1], row0 + 16 * warp + lane / 4 + 8 * i,
                          col0 + 8 * j + 2 * (lane % 4), M, N, epi);
  }
#pragma unroll
  for (int q = 16 * p; q < 16 * p + 16; ++q) packed[q] = pack2(d[2 * q], d[2 * q + 1]);
}
#define GL_EPILOGUE_ARG , const __grid_constant__ EpilogueParams epi
#elif defined(GL_EPILOGUE)
#define GL_EPILOGUE_ARG , const __grid_constant__ EpilogueParams epi
#else
#define GL_EPILOGUE_ARG
#endif

extern "C" __global__ void __launch_bounds__(GL_THREADS, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                GL_C_ARG, int M, int N, int K, int tail_first_unit,
                int max_contributors, float* __restrict__ partials, int* __restrict__ counters GL_EPILOGUE_ARG) {
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

#if GL_C_FROM_REGISTERS
  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_b);  // no output map: b's is prefetched twice
#else
  if (threadIdx.x == 0) init_ring(smem, &map_a, &map_b, &map_c);
#endif
  cluster_sync();

  if (warpgroup_index() == 0) {
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
#if GL_C_FROM_REGISTERS
    const int bar = kFirstStoreBarrier + consumer;
    // Store a finished fragment of work unit `unit` from registers, the fused epilogue (if any) applied
    // to each pair right before its store (epilogue.cuh's pairs: neighbours along a kernel row). Pairs
    // shifted into alignment on misaligned rows, except with an epilogue (register_store.cuh: it spilled).
#if defined(GL_EPILOGUE)
    constexpr bool kShiftPairs = false;
#else
    constexpr bool kShiftPairs = true;
#endif
    auto store_fragment = [&](float (&d)[BN / 2], int unit) {
      int um, tn;
      sched.coords(unit, um, tn);
      store_fragment_from_registers<BN, kShiftPairs>(C, ldc, d, (um * GL_CLUSTER + rank) * BM + 64 * consumer, tn * BN, M, N,
                                        [&](float& x0, float& x1, int r, int c) {
#if defined(GL_EPILOGUE)
                                          epilogue_pair<true>(x0, x1, r, c, M, N, epi);
#endif
                                        });
    };
    RingPosition pos{0};
    for (int unit = first_unit; unit < whole_end; unit += unit_stride) {
      float d[BN / 2];
      consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [](int) {});
      store_fragment(d, unit);
    }
#else
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
#if defined(GL_EPILOGUE)
        // This consumer's 64 x BN slice of the epilogue's tile inputs (a residual) into L2, kPrefetchAhead
        // K iterations before the epilogue loads it: late enough that the main loop's operand traffic
        // does not evict it first, early enough to cover DRAM's latency. A hint that orders nothing
        // (fused_epilogue.cuh's epi_prefetch_runs).
        if (kt == (k_tiles > kPrefetchAhead ? k_tiles - kPrefetchAhead : 0))
          epilogue_prefetch<64, BN, 128>(tm * BM + 64 * consumer, tn * BN, M, N, thread_in_warpgroup(), epi);
#endif
      });
      if (unit != first_unit)  // fewer K iterations than deferred panels: finish the previous tile first
        for (int p = kEarlyPanels + k_tiles; p < GL_C_PANELS; ++p)
          store_panel_of(prev, p);
#if defined(GL_EPILOGUE)
      // Each panel's epilogue right before its staging, in the same block: ptxas sinks the math to
      // where the packed values are used, so a panel's inputs stay live only across its own store.
#pragma unroll
      for (int p = 0; p < GL_C_PANELS; ++p) {
        epilogue_pack_panel(packed, d, p, tm * BM + 64 * consumer, tn * BN, M, N, epi);
        if (p < kEarlyPanels) store_panel(p, packed, ring, &map_c, tn * BN, tm * BM + 64 * consumer, bar, elected);
      }
#else
      pack_fragment<BN>(packed, d);
#pragma unroll
      for (int p = 0; p < kEarlyPanels; ++p)
        store_panel(p, packed, ring, &map_c, tn * BN, tm * BM + 64 * consumer, bar, elected);
#endif
    }
    if (first_unit < whole_end) {  // the last whole tile's deferred panels
      const int last = first_unit + (whole_end - 1 - first_unit) / unit_stride * unit_stride;
      for (int p = kEarlyPanels; p < GL_C_PANELS; ++p)
        store_panel_of(last, p);
    }
#endif
    for (int it = tail.begin(first_unit), end = tail.begin(first_unit + 1); it < end;) {
      const StreamKTail::Segment seg = tail.segment(first_unit, it, end);
      it = seg.next;
#if defined(GL_EPILOGUE)
      {  // every contributor of a split tile prefetches (which one finishes it is decided at its end)
        int um, tn;
        sched.coords(seg.unit, um, tn);
        epilogue_prefetch<64, BN, 128>((um * GL_CLUSTER + rank) * BM + 64 * consumer, tn * BN, M, N,
                                       thread_in_warpgroup(), epi);
      }
#endif
      float d[BN / 2];
      consume_k_range(smem, d, consumer, seg.kb, seg.ke, pos, elected, [](int) {});
      if (seg.contributors > 1) {
        const int slot = ((seg.unit - whole_end) * GL_CLUSTER + rank) * GL_CONSUMERS + consumer;
        const PartialSlots<BN> slots{partials + static_cast<size_t>(slot) * max_contributors * PartialSlots<BN>::kFloats};
        if (!hand_in_partial(slots, counters + slot, seg.mine, seg.contributors, d, bar, elected))
          continue;  // another contributor finishes this tile
        slots.reduce(seg.contributors, d);
      }
#if GL_C_FROM_REGISTERS
      store_fragment(d, seg.unit);
#elif defined(GL_EPILOGUE)
#pragma unroll
      for (int p = 0; p < GL_C_PANELS; ++p) {
        {
          int um, tn;
          sched.coords(seg.unit, um, tn);
          epilogue_pack_panel(packed, d, p, (um * GL_CLUSTER + rank) * BM + 64 * consumer, tn * BN, M, N, epi);
        }
        store_panel_of(seg.unit, p);
      }
#else
      pack_fragment<BN>(packed, d);
#pragma unroll
      for (int p = 0; p < GL_C_PANELS; ++p)
        store_panel_of(seg.unit, p);
#endif
    }
#if !GL_C_FROM_REGISTERS
    if (elected) tma_store_wait_read<0>();
#endif
  }
  cluster_sync();
}
