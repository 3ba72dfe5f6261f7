// The kernels' side of a fused epilogue (fused_epilogue.cuh): from the kernel's output coordinates to
// the caller's, then the generated gl_epilogue_pair. Included by a kernel after the translation unit's
// generated code (library/epilogue.py), so that function is declared; without GL_EPILOGUE, only
// NoEpilogue.
//
// A library kernel takes its epilogue as a template parameter `Epi` (NoEpilogue or FusedEpilogue) and an
// object of it, and applies it under `if constexpr (Epi::kFused)`: the calls name members of a dependent
// type, so a build without the generated code compiles them not at all.
//
// A kernel's entry point takes the epilogue's parameters as its last argument, with an epilogue only:
// GL_EPILOGUE_ARG is that parameter (with its leading comma; empty without an epilogue) and
// GL_EPILOGUE_OBJ the kernel's Epi object made from it (FusedEpilogue{epi}, or NoEpilogue{}). Defined
// here once for every kernel: this header is included once per translation unit, after the generated
// code defines GL_EPILOGUE (library/epilogue.py's source; the generated code itself includes only
// fused_epilogue.cuh), so the branch taken is the build's.
#pragma once
#include "gemm_ladder/fused_epilogue.cuh"

namespace gl {
// A plain GEMM: no epilogue, no kernel argument for one.
struct NoEpilogue {
  static constexpr bool kFused = false;
};
}  // namespace gl

#if defined(GL_EPILOGUE)
#define GL_EPILOGUE_ARG , const __grid_constant__ EpilogueParams epi
#define GL_EPILOGUE_OBJ FusedEpilogue{epi}
#else
#define GL_EPILOGUE_ARG
#define GL_EPILOGUE_OBJ NoEpilogue{}
#endif

#if defined(GL_EPILOGUE)
#ifndef GL_EPI_SWAP
#error "a fused epilogue names its orientation: GL_EPI_SWAP 0 or 1"
#endif
namespace gl {
// The kernel's accumulators x0 (its row kr, column kc) and x1 (the next column when kPairAlongCols,
// else the next row) of a kernel output of kernel_rows x kernel_cols, in place.
template <bool kPairAlongCols>
__device__ __forceinline__ void epilogue_pair(float& x0, float& x1, int kr, int kc, int kernel_rows, int kernel_cols,
                                              const EpilogueParams& p) {
  if constexpr (GL_EPI_SWAP) {
    gl_epilogue_pair<!kPairAlongCols>(x0, x1, kc, kr, kernel_cols, kernel_rows, p);
  } else {
    gl_epilogue_pair<kPairAlongCols>(x0, x1, kr, kc, kernel_rows, kernel_cols, p);
  }
}
// The L2 prefetch of the epilogue's tile inputs over a block of the kernel's output (rows kr0 + [0,
// kKernelRows), columns kc0 + [0, kKernelCols), of a kernel output of kernel_rows x kernel_cols) by kThreads
// threads (t: this one's index), 8 K iterations before the block's epilogue; the generated
// gl_epilogue_prefetch holds one epi_prefetch_runs per tile input with a contiguous direction (none for
// vectors and scalars).
template <int kKernelRows, int kKernelCols, int kThreads>
__device__ __forceinline__ void epilogue_prefetch(int kr0, int kc0, int kernel_rows, int kernel_cols, int t,
                                                  const EpilogueParams& p) {
  if constexpr (GL_EPI_SWAP) {
    gl_epilogue_prefetch<kKernelCols, kKernelRows, kThreads>(kc0, kr0, kernel_cols, kernel_rows, t, p);
  } else {
    gl_epilogue_prefetch<kKernelRows, kKernelCols, kThreads>(kr0, kc0, kernel_rows, kernel_cols, t, p);
  }
}
// The translation unit's generated epilogue with its parameters (the kernel's last argument, which stays
// in parameter space: `p` refers to it), as a kernel's `Epi`.
struct FusedEpilogue {
  static constexpr bool kFused = true;
  const EpilogueParams& p;
  // x1 is the kernel output's next column (row kr, column kc + 1): the general kernel's pairs.
  __device__ __forceinline__ void pair_along_row(float& x0, float& x1, int kr, int kc, int kernel_rows,
                                                 int kernel_cols) const {
    epilogue_pair<true>(x0, x1, kr, kc, kernel_rows, kernel_cols, p);
  }
  // x1 is the kernel output's next row (row kr + 1, column kc): the small-M kernel's pairs.
  __device__ __forceinline__ void pair_along_col(float& x0, float& x1, int kr, int kc, int kernel_rows,
                                                 int kernel_cols) const {
    epilogue_pair<false>(x0, x1, kr, kc, kernel_rows, kernel_cols, p);
  }
  template <int kKernelRows, int kKernelCols, int kThreads>
  __device__ __forceinline__ void prefetch(int kr0, int kc0, int kernel_rows, int kernel_cols, int t) const {
    epilogue_prefetch<kKernelRows, kKernelCols, kThreads>(kr0, kc0, kernel_rows, kernel_cols, t, p);
  }
};
}  // namespace gl
#endif
