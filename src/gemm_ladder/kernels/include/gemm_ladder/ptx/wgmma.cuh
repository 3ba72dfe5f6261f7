// Warpgroup matrix multiply (wgmma) and warpgroup register control, sm_90a.
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" and "setmaxnreg".
#pragma once
#include "gemm_ladder/ptx/common.cuh"
#include "gemm_ladder/ptx/wgmma_ops.cuh"

namespace gl {

// Shared-memory matrix descriptors (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4,
// 16-29 leading byte offset (LBO) >> 4, 32-45 stride byte offset (SBO) >> 4, 49-51 base offset (0:
// every start below is 1024-byte aligned or, K-major, inside the first 128 bytes of an aligned atom),
// 62-63 layout type (1 = 128B swizzle).
__host__ __device__ constexpr uint64_t desc_sw128_at(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(lbo_bytes >> 4) << 16) | (uint64_t(sbo_bytes >> 4) << 32) |
         (uint64_t(1) << 62);
}

// An MN-major tile's 64-element groups are whole TMA boxes of BK = 64 rows x 128 bytes.
constexpr uint32_t kMnGroupBytes = 64 * 128;

// Where k16 step k of a BK = 64 operand tile starts, in bytes from the tile: 16 elements along a K-major
// row (32 bytes), or 16 rows of an MN-major box (2048 bytes).
template <int MnMajor>
__host__ __device__ constexpr uint32_t k_step_bytes(int k) {
  return MnMajor ? k * 16 * 128 : k * 16 * 2;
}

// The descriptor of an operand's k16 step starting at shared-window address `addr` (the tile,
// 1024-byte aligned, plus k_step_bytes), in the 128-byte swizzle layout TMA writes (PTX ISA "Shared
// Memory Matrix Layout"). Pure arithmetic, so the host checks it against a model of the TMA box
// (tests/test_library_gemm.py).
//
// K-major (MnMajor = 0): rows of 64 elements (128 bytes), 8-row swizzle atoms of 1024 bytes. SBO is
// the step between atoms along M/N (8 rows, 1024 bytes); LBO is unused by swizzled K-major layouts
// (16, encoded 1). A k16 step moves the start 32 bytes inside the atom.
//
// MN-major (MnMajor = 1), as TMA writes it from a tensor map whose inner dimension is M (or N): boxes
// of 64 elements (128 bytes) x 64 K rows, one K row per 128-byte line, 8-line atoms of 1024 bytes,
// consecutive 64-element groups in consecutive boxes kMnGroupBytes apart. Why these fields: the PTX
// ISA's canonical MN-major layout with 128B swizzle is, in 16-byte units,
// ((8, n), (8, k)) : ((1, LBO), (8, SBO)): eight 16-byte chunks (64 elements) of M/N are contiguous,
// then the next 64 elements LBO away; eight K rows 128 bytes apart, then the next eight SBO away
// (CuTe's make_gmma_desc<Major::MN> reads the same two strides). So LBO = kMnGroupBytes (the next
// box) and SBO = 1024 (the next atom down K). A k16 step reads 16 K rows, two whole atoms: the start
// moves by 16 x 128 = 2048 bytes, stays 1024-byte aligned, and the base offset stays 0.
template <int MnMajor>
__host__ __device__ constexpr uint64_t operand_desc_at(uint32_t addr) {
  return desc_sw128_at(addr, MnMajor ? kMnGroupBytes : 16, 1024);
}

// The descriptor of the same layout `bytes` further on (a multiple of 16): the start-address field plus
// bytes >> 4. Equal to operand_desc_at(addr + bytes) while (addr & 0x3FFFF) + bytes < 2^18: the field holds
// address bits 4-17 (a CTA's shared-window address carries its cluster rank from bit 24, which
// desc_sw128_at masks off), and a CTA's shared memory is 228 KiB at most on sm_90, so a step inside it
// never carries into LBO. Checked on the host against operand_desc_at at every 16-byte offset of the
// window, with and without a cluster rank (tests/test_library_gemm.py). The fp8 kernel's k32 steps are
// the K-major ones (32 bytes).
__host__ __device__ constexpr uint64_t desc_step(uint64_t desc, uint32_t bytes) {
  // A 32-bit add on the low word: no carry to propagate, the high word (SBO, layout) kept as it is.
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + (bytes >> 4));
}

// Orders register accesses before the first wgmma that reads or writes the accumulators.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most `pending` committed wgmma groups are still in flight.
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

// Keep the compiler from moving accumulator reads above a wgmma_wait (the registers are written
// asynchronously, which the compiler cannot see).
template <int n>
__device__ __forceinline__ void fence_accumulators(float (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same over a consumer's several 64-row fragments (a ping-pong consumer's 128-row tile).
template <int r, int n>
__device__ __forceinline__ void fence_accumulators(float (&d)[r][n]) {
#pragma unroll
  for (int i = 0; i < r; ++i) fence_accumulators(d[i]);
}

// Hand registers between warpgroups (PTX ISA "setmaxnreg"); needs a register cap at kernel entry.
template <int regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(regs));
}
template <int regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(regs));
}

// Whether a K tile's wgmma group at width BN is short (BN <= 128: at most 256 tensor-pipe cycles), so that
// the consumer's path from a stage's full barrier to its last wgmma shows: there the K loops step their
// descriptors (mma_k_tile) and keep the consumer's A row uniform (k_loop_a_row). At BN 192 and 256 the
// group hides that path, and registers are what those builds lack: the stepped descriptors spilled the
// grouped BN 256 build with a four-panel output ring and a cluster of two, the uniform A row a BN 256
// build with a fused epilogue and 64-bit offsets (docs/where-time-goes.md).
template <int BN>
inline constexpr bool kShortGroup = BN <= 128;

// The first A row of consumer `consumer` in a K loop at width BN: warp-uniform (ptx/common.cuh's
// warp_uniform) where the group is short, per-thread otherwise (kShortGroup). The warp must be converged.
template <int BN>
__device__ __forceinline__ int k_loop_a_row(int consumer) {
  if constexpr (kShortGroup<BN>) return warp_uniform(consumer) * 64;
  return consumer * 64;
}

// One BK = 64 K tile for a 64-row slice of A: four k16 steps. TransA / TransB = 1: that operand is
// MN-major in shared memory (the wgmma transpose immediate and the MN-major descriptor).
// Where the group is short (kShortGroup), each operand's descriptor is made once and a later step adds its
// byte offset >> 4 to the start-address field (desc_step, as CUTLASS's descriptor iterator does): one add a
// step instead of a fresh descriptor's add, mask, shift and or. Otherwise a fresh one each step.
template <int BN, int TransA = 0, int TransB = 0>
__device__ __forceinline__ void mma_k_tile(float (&d)[BN / 2], const elem_t* a_rows, const elem_t* b, int scale_d) {
  static_assert(sizeof(elem_t) == 2, "k_step_bytes assumes 2-byte elements");
  const uint64_t da = operand_desc_at<TransA>(smem_u32(a_rows)), db = operand_desc_at<TransB>(smem_u32(b));
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t a_off = k_step_bytes<TransA>(k), b_off = k_step_bytes<TransB>(k);
    if constexpr (kShortGroup<BN>) {
      Wgmma<BN, elem_t>::template mma<TransA, TransB>(d, desc_step(da, a_off), desc_step(db, b_off), (k > 0) ? 1 : scale_d);
    } else {  // the pointer moves before its conversion to a shared-window address (the other order changed SASS)
      Wgmma<BN, elem_t>::template mma<TransA, TransB>(
          d, operand_desc_at<TransA>(smem_u32(reinterpret_cast<const uint8_t*>(a_rows) + a_off)),
          operand_desc_at<TransB>(smem_u32(reinterpret_cast<const uint8_t*>(b) + b_off)), (k > 0) ? 1 : scale_d);
    }
  }
}

// One K tile for R 64-row slices of A (a ping-pong consumer that holds a whole 128-row tile): slice r's
// rows start 64 x 64 elements into the stage in either major (64 K-major rows, or the r-th 64-element
// MN-major box), as a cooperative consumer's do, and go into fragment d[r]; all in the caller's one group.
template <int BN, int TransA = 0, int TransB = 0, int R>
__device__ __forceinline__ void mma_k_tile(float (&d)[R][BN / 2], const elem_t* a_rows, const elem_t* b, int scale_d) {
#pragma unroll
  for (int r = 0; r < R; ++r) mma_k_tile<BN, TransA, TransB>(d[r], a_rows + r * 64 * 64, b, scale_d);
}

}  // namespace gl
