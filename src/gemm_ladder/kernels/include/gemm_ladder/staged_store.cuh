// Storing a consumer warpgroup's finished 64 x BN fragment through shared memory into a row-major
// output of any pitch and any element-aligned base, with 16-byte vector stores: the library kernel's
// build for outputs TMA cannot write (sm90_gemm.cu, GL_C_STAGED), beside the register store
// (register_store.cuh), whose bf16 pair stores cover 16 bytes of a row per warp instruction (half a
// 32-byte sector; its fp32 pairs cover 32).
//
// Each warp owns a buffer of kStagedWarpBytes in shared memory (the plan's c_staged: design/smem.py)
// and stores its own 16 rows of the fragment through it, R rows at a time (R = 16, 8 or 4: as many
// whole fragment rows of BN output elements as fit the buffer; at most 8 with kTight). Per chunk:
//  1. stage: each lane writes its pairs (epilogue.cuh's fragment: d[4j + 2i + c] = D[16w + l/4 + 8i]
//     [8j + 2(l%4) + c]), converted to the output dtype, into the buffer: row r at r * BN * e bytes,
//     its 16-byte chunk k at chunk k ^ (r % 8) (an XOR swizzle: the 8 rows one store instruction
//     covers land in 8 different chunk positions: bf16's 32 lanes hit 32 different banks, fp32's
//     8-byte stores take the two wavefronts their 256 bytes need);
//  2. __syncwarp (orders the shared-memory writes before the other lanes' reads: CUDA C++ Programming
//     Guide, "Synchronization Functions", __syncwarp);
//  3. copy out: the output row's bytes [a, a + n e) (a the address of column col0, n the columns
//     left before the N edge, at most BN) are covered by the aligned 16-byte windows that overlap
//     them; lane l takes slots l, l + 32, ... of the chunk's R x (BN e / 16 + 1) (row, window) slots,
//     so consecutive lanes write consecutive windows of a row (a warp writes contiguous bytes). A
//     window entirely inside the row goes out as one 16-byte store (st.global.v4); its bytes are
//     bytes [16w - s, 16w - s + 16) of the staged row, s = a % 16: one 16-byte shared load when s = 0,
//     else two joined by a funnel shift (shift_window). Only the row's first and last window, when
//     they stick out of [a, a + n e) (s != 0, or the N edge inside a window), are written element by
//     element, and only their bytes inside the row: columns >= N, rows >= M, the bytes before the
//     base and the pitch padding are never written;
//  4. __syncwarp again before the next chunk's staging overwrites the buffer.
// No warp waits for another: the buffer is the warp's own, so there is no named barrier and no
// mbarrier; the producer keeps loading the next tile's stages meanwhile. The copy is synchronous: the
// warp's next tile starts after its stores are issued (as the register store's).
#pragma once
#include "gemm_ladder/ptx/common.cuh"

namespace gl {

// Bytes of shared memory per consumer warp (design/smem.py's STAGED_WARP_BYTES: keep the two equal).
constexpr int kStagedWarpBytes = 4096;

// The shared-memory accesses, as PTX, and the global stores (tests/staged_store_host/ compiles this
// header for the host with GL_STAGED_STORE_HOST_MODEL and its own versions of these, which check
// alignment and count the stores, to test the copy byte for byte on a CPU).
#ifndef GL_STAGED_STORE_HOST_MODEL
__device__ __forceinline__ void sts_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void sts_v2b32(uint32_t addr, uint32_t x, uint32_t y) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(addr), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ uint4 lds_v4b32(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void stg_v4(uint8_t* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ void stg_u16(uint8_t* p, uint16_t v) { *reinterpret_cast<uint16_t*>(p) = v; }
__device__ __forceinline__ void stg_u32(uint8_t* p, uint32_t v) { *reinterpret_cast<uint32_t*>(p) = v; }
// x, through an instruction the compiler cannot see into: values computed from it are not shared with
// those computed from x before (kTight below).
__device__ __forceinline__ int opaque(int x) {
  asm volatile("mov.b32 %0, %0;" : "+r"(x));
  return x;
}
#endif

// Bytes [mis, mis + 16) of the 32 bytes lo:hi (lo first, little-endian), mis in 0..15 (a multiple of
// 2 here). The word offset mis / 4 is selected explicitly, so nothing is indexed at run time (which
// would put the words in local memory).
__device__ __forceinline__ uint4 shift_window(const uint4& lo, const uint4& hi, uint32_t mis) {
  const uint32_t q = mis >> 2, shift = (mis & 3) * 8;
  uint32_t w0, w1, w2, w3, w4;  // words q .. q + 4 of lo:hi
  if (q == 0) { w0 = lo.x; w1 = lo.y; w2 = lo.z; w3 = lo.w; w4 = hi.x; }
  else if (q == 1) { w0 = lo.y; w1 = lo.z; w2 = lo.w; w3 = hi.x; w4 = hi.y; }
  else if (q == 2) { w0 = lo.z; w1 = lo.w; w2 = hi.x; w3 = hi.y; w4 = hi.z; }
  else { w0 = lo.w; w1 = hi.x; w2 = hi.y; w3 = hi.z; w4 = hi.w; }
  // funnelshift_r(x, y, n): the low 32 bits of (y:x) >> n (n < 32): bytes of x from n / 8 on, then y's.
  return make_uint4(__funnelshift_r(w0, w1, shift), __funnelshift_r(w1, w2, shift), __funnelshift_r(w2, w3, shift),
                    __funnelshift_r(w3, w4, shift));
}

__device__ __forceinline__ void stage_pair(uint32_t addr, elem_t*, float x0, float x1) { sts_b32(addr, pack2(x0, x1)); }
__device__ __forceinline__ void stage_pair(uint32_t addr, float*, float x0, float x1) {
  sts_v2b32(addr, __float_as_uint(x0), __float_as_uint(x1));
}

// Bytes [lo, hi) of window v (both multiples of the element size) to dst .. dst + 15, one element
// store each (the ends of a row only), in a loop that is not unrolled (few registers: the copy runs
// beside a live half fragment).
template <typename OutT>
__device__ __forceinline__ void store_window_part(uint8_t* dst, const uint4& v, int lo, int hi) {
#pragma unroll 1
  for (int b = lo; b < hi; b += static_cast<int>(sizeof(OutT))) {
    const int q = b >> 2;
    const uint32_t word = q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
    if constexpr (sizeof(OutT) == 2)
      stg_u16(dst + b, static_cast<uint16_t>(word >> (8 * (b & 3))));
    else
      stg_u32(dst + b, word);
  }
}

// Store a consumer's 64 x BN fragment `d` at rows row0.., columns col0.. of a rows x cols output whose
// element (r, c) is C[r * ldc + c] (64-bit: the output may span more than 2^31 elements), through this
// warp's shared-memory buffer `warp_buf` (kStagedWarpBytes, 16-byte aligned). Rows >= rows and columns
// >= cols are not written; col0 < cols. `pair_op(x0, x1, r, c)` runs on each pair (a fused epilogue, or
// nothing) right before it is staged, once per pair. Every lane of the warp must call it (__syncwarp).
// kTight, for builds whose registers are short (a fused epilogue's): at most 8 rows per chunk, each
// later chunk's places laundered (opaque), and the copy loop not unrolled. Without it the compiler
// computed later chunks' epilogue (its loads, a bias shared by column) ahead of the earlier chunks' copy,
// where the register store's global stores kept them apart, and the BN = 128 and 256 builds spilled
// (nvcc 13: 40 to 800 bytes). With it, BN 64 and 128 build clean; BN 256 still spilled 8-16 bytes,
// so sm90_gemm.cu stores that build's fragments from registers (GL_STAGED_COPY).
template <int BN, bool kTight = false, typename OutT, typename PairOp>
__device__ __forceinline__ void store_fragment_staged(OutT* __restrict__ C, long long ldc, const float (&d)[BN / 2],
                                                      int row0, int col0, int rows, int cols, uint8_t* warp_buf,
                                                      PairOp&& pair_op) {
  constexpr int E = static_cast<int>(sizeof(OutT));
  constexpr int kRowBytes = BN * E;  // one staged row: 128 .. 1024 bytes, a whole number of swizzle spans
  constexpr int kFit = kStagedWarpBytes / kRowBytes < 16 ? kStagedWarpBytes / kRowBytes : 16;
  constexpr int kRows = kTight && kFit > 8 ? 8 : kFit;  // rows per chunk: at most 8 (one i) with kTight
  constexpr int kChunks = 16 / kRows;
  constexpr int kWindows = kRowBytes / 16;          // 16-byte chunks of a staged row
  constexpr int kSlots = kRows * (kWindows + 1);    // a misaligned row overlaps one window more
  static_assert(kRowBytes % 128 == 0 && kRows >= 4 && 16 % kRows == 0, "staged store: whole rows, 4 to 16 per chunk");
  const int lane = threadIdx.x % 32, warp = thread_in_warpgroup() / 32, q = lane % 4;
  const uint32_t buf = smem_u32(warp_buf);
  const int n_bytes = (cols - col0 < BN ? cols - col0 : BN) * E;  // the row's bytes left of the N edge
  const int warp_row0 = row0 + 16 * warp;
  // The shared-memory address of pair (row r of the chunk, columns 8j + 2q, + 1).
  auto staged_at = [&](int r, int j) -> uint32_t {
    const int byte = (8 * j + 2 * q) * E;
    return buf + r * kRowBytes + (((byte / 16) ^ (r & 7)) << 4) + byte % 16;
  };
  // Copy chunk ch's kRows staged rows to global memory (steps 2-3 above).
  auto copy_chunk = [&](int ch) {
    __syncwarp();  // the chunk is staged: every lane may read any row
    // One (row, window) slot of the chunk per lane and iteration.
    auto copy_slot = [&](int it) {
      const int slot = lane + 32 * it;
      const int r = slot / (kWindows + 1), w = slot % (kWindows + 1);
      const int row = warp_row0 + ch * kRows + r;
      if (slot >= kSlots || row >= rows) return;
      uint8_t* const line = reinterpret_cast<uint8_t*>(C + static_cast<long long>(row) * ldc + col0);
      const int s = static_cast<int>(reinterpret_cast<uintptr_t>(line) % 16);  // the row's misalignment
      const int end = s + n_bytes;                                             // past its last byte, from a - s
      if (16 * w >= end) return;                                               // no byte of the row in this window
      const uint32_t row_addr = buf + r * kRowBytes, sw = r & 7;
      const int k_hi = w < kWindows ? w : kWindows - 1, k_lo = w > 0 ? w - 1 : 0;  // clamped: bytes unused there
      const uint4 hi = lds_v4b32(row_addr + ((k_hi ^ sw) << 4));
      uint4 v = hi;
      if (s != 0) v = shift_window(lds_v4b32(row_addr + ((k_lo ^ sw) << 4)), hi, 16 - s);
      uint8_t* const dst = line - s + 16 * w;
      const int lo_b = w == 0 ? s : 0, hi_b = end - 16 * w < 16 ? end - 16 * w : 16;
      if (lo_b == 0 && hi_b == 16)
        stg_v4(dst, v);
      else
        store_window_part<OutT>(dst, v, lo_b, hi_b);
    };
    if constexpr (kTight) {
#pragma unroll 1
      for (int it = 0; it < (kSlots + 31) / 32; ++it) copy_slot(it);
    } else {
#pragma unroll
      for (int it = 0; it < (kSlots + 31) / 32; ++it) copy_slot(it);
    }
    __syncwarp();  // every lane's reads of the buffer are done: it may be refilled
  };
#pragma unroll
  for (int ch = 0; ch < kChunks; ++ch) {
    // kTight: this chunk's rows and columns through an opaque move, so the compiler computes nothing of
    // a later chunk's epilogue (its loads, the values shared with an earlier chunk's: a bias by column)
    // before the earlier chunks are copied out.
    int pair_row0 = warp_row0, pair_col0 = col0 + 2 * q;
    if (kTight && ch > 0) pair_row0 = opaque(pair_row0), pair_col0 = opaque(pair_col0);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (8 * i + 8 <= ch * kRows || ch * kRows + kRows <= 8 * i) continue;  // compile time: rows of this chunk?
      const int lr = lane / 4 + 8 * i, r = lr - ch * kRows;                  // the pair's row: warp's, chunk's
      if (kRows < 8 && (r < 0 || r >= kRows)) continue;                      // half the lanes, at 4 rows per chunk
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        float x0 = d[4 * j + 2 * i], x1 = d[4 * j + 2 * i + 1];
        pair_op(x0, x1, pair_row0 + lr, pair_col0 + 8 * j);
        stage_pair(staged_at(r, j), C, x0, x1);
      }
    }
    copy_chunk(ch);
  }
}

}  // namespace gl
