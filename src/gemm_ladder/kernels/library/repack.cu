// Repack: a strided 2-D copy of 2-byte (or 4-byte) elements, for the strides TMA cannot describe.
//
// A tensor map needs a 16-byte aligned base and row pitches that are multiples of 16 bytes (CUDA
// Driver API, cuTensorMapEncodeTiled: globalAddress, globalStrides). An operand that breaks either
// rule (K or N not a multiple of 8, a padded pitch, an offset view, a view that is neither row- nor
// column-major) is copied here into an aligned workspace, and an output TMA cannot write is copied
// back from one. The bytes are moved, never converted.
//
// One job copies source element (r, c), r < rows, c < cols, at src + (r * src_rs + c * src_cs) * E
// to destination element (r, c) at dst + (r * dst_rs + c * dst_cs) * E, and writes zeros at every
// (r, c) with r < rows_pad, c < cols_pad outside rows x cols (a K padded with zeros adds nothing to
// the products). One launch runs one or two jobs (both operands of a GEMM): CTAs [first_block of
// job 1, ...) take job 1.
//
// Work split: a thread owns 16-byte windows of one destination row, aligned in memory (so a full
// window is one 16-byte store): window w of row r covers columns [w V - head_r, w V - head_r + V),
// V = 16 / E elements, head_r the row start's misalignment in elements (0 for an aligned
// workspace). A CTA of 256 threads covers TR rows x TC windows (TC a power of two at most 256, the
// host's choice from the row's window count), so narrow rows still fill the CTA. Consecutive
// threads take consecutive windows: the stores of a warp are 512 contiguous bytes, and its loads,
// for a row-contiguous source, two aligned 16-byte loads per window joined by a funnel shift.
// All offsets are 64-bit.
#include <cstdint>

namespace gl_repack {

struct CopyJob {
  const uint8_t* src;
  uint8_t* dst;
  long long rows, cols;          // the source extent copied
  long long rows_pad, cols_pad;  // the destination extent written (zeros outside rows x cols)
  long long src_rs, src_cs;      // source strides, elements
  long long dst_rs, dst_cs;      // destination strides, elements
  long long windows;             // 16-byte windows per destination row
  long long first_block;         // this job's first CTA
  int log2_tc;                   // threads per row = 1 << log2_tc; rows per CTA = THREADS >> log2_tc
  int no_head;                   // 1: window w starts at column w V (rows start 16-byte aligned, or
                                 // dst_cs != 1 and every store is element-wise); 0: at -head_r
};

struct RepackArgs {
  CopyJob job[2];
  int jobs;
};

constexpr int THREADS = 256;

template <int E> struct Word;
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };

// Bytes [mis, mis + 16) of the 32 bytes lo:hi, mis a multiple of 2 in (0, 16).
__device__ __forceinline__ uint4 join_windows(const uint4& lo, const uint4& hi, uint32_t mis) {
  const uint32_t q = mis >> 2, shift = (mis & 3) * 8;
  uint32_t v0, v1, v2, v3, v4;  // words q .. q + 4 of lo:hi (registers: no indexed array)
  if (q == 0) { v0 = lo.x; v1 = lo.y; v2 = lo.z; v3 = lo.w; v4 = hi.x; }
  else if (q == 1) { v0 = lo.y; v1 = lo.z; v2 = lo.w; v3 = hi.x; v4 = hi.y; }
  else if (q == 2) { v0 = lo.z; v1 = lo.w; v2 = hi.x; v3 = hi.y; v4 = hi.z; }
  else { v0 = lo.w; v1 = hi.x; v2 = hi.y; v3 = hi.z; v4 = hi.w; }
  return make_uint4(__funnelshift_r(v0, v1, shift), __funnelshift_r(v1, v2, shift),
                    __funnelshift_r(v2, v3, shift), __funnelshift_r(v3, v4, shift));
}

template <int E>
__device__ __forceinline__ void copy_window(const CopyJob& j, long long r, long long w) {
  using T = typename Word<E>::type;
  constexpr int V = 16 / E;
  uint8_t* dst_row = j.dst + r * j.dst_rs * E;
  const long long head = j.no_head ? 0 : (reinterpret_cast<uintptr_t>(dst_row) & 15) / E;
  const long long c0 = w * V - head;
  if (c0 >= j.cols_pad) return;
  const bool full = c0 >= 0 && c0 + V <= j.cols_pad;
  const bool in_rows = r < j.rows;

  union { uint4 v; T e[V]; } x;
  x.v = make_uint4(0, 0, 0, 0);
  if (in_rows) {
    const uint8_t* src_row = j.src + r * j.src_rs * E;
    if (j.src_cs == 1 && c0 >= 0 && c0 + V <= j.cols) {
      // The whole window lies in the source row: one or two aligned 16-byte loads. Both hold
      // elements of this window, so no load touches a 16-byte granule without a source element in
      // it: never outside the allocation (allocations are at least 256-byte aligned and torch's
      // caching allocator rounds their sizes to 512 bytes).
      const uint8_t* s = src_row + c0 * E;
      const uint32_t mis = reinterpret_cast<uintptr_t>(s) & 15;
      const uint4* base = reinterpret_cast<const uint4*>(s - mis);
      x.v = mis == 0 ? __ldg(base) : join_windows(__ldg(base), __ldg(base + 1), mis);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const long long c = c0 + i;
        if (c >= 0 && c < j.cols) x.e[i] = *reinterpret_cast<const T*>(src_row + c * j.src_cs * E);
      }
    }
  }
  if (full && j.dst_cs == 1) {
    *reinterpret_cast<uint4*>(dst_row + c0 * E) = x.v;  // 16-byte aligned by the window's choice
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const long long c = c0 + i;
      if (c >= 0 && c < j.cols_pad) *reinterpret_cast<T*>(dst_row + c * j.dst_cs * E) = x.e[i];
    }
  }
}

template <int E>
__device__ __forceinline__ void run(const RepackArgs& args) {
  const CopyJob& j = (args.jobs > 1 && blockIdx.x >= args.job[1].first_block) ? args.job[1] : args.job[0];
  const int tc_mask = (1 << j.log2_tc) - 1;
  const long long r = (static_cast<long long>(blockIdx.x) - j.first_block) * (THREADS >> j.log2_tc)
                      + (threadIdx.x >> j.log2_tc);
  if (r >= j.rows_pad) return;
  for (long long w = threadIdx.x & tc_mask; w < j.windows; w += tc_mask + 1) copy_window<E>(j, r, w);
}

}  // namespace gl_repack

// GL_REPACK_BYTES (2 or 4, a -D of the build) is the element size: one entry point per build, so the
// loader's cache (one function per cubin) holds each.
#ifndef GL_REPACK_BYTES
#error "define GL_REPACK_BYTES (2 or 4)"
#endif

extern "C" __global__ void __launch_bounds__(gl_repack::THREADS)
    repack_kernel(const __grid_constant__ gl_repack::RepackArgs args) {
  gl_repack::run<GL_REPACK_BYTES>(args);
}
