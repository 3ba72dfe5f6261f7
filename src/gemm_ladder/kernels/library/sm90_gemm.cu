// Library kernel sm90_gemm: D (M, N) = A (M, K) @ B (N, K)^T for the operand layouts torch.mm hands
// over without a copy (library/gemm.py plans and launches it; library/operand.py names the layouts).
//
// It is level 9's kernel, compiled from the designer's plan for one layout: persistent, a producer
// warpgroup, 2-CTA clusters that multicast B, two consumer warpgroups of 64 rows on a 128 x BN tile,
// each storing through its own panel ring overlapped with the next tile, and a stream-K split. What
// the plan sets, beyond level 9's:
//  - GL_A_MN_MAJOR / GL_B_MN_MAJOR: each operand K-major or MN-major in memory and in shared memory.
//    An MN-major operand's tensor map has M (or N) as its inner dimension: the producer loads it as
//    boxes of 64 elements x BK rows (tma_load_operand, tma_tile.cuh, through stage_ring.cuh's
//    produce_stage), and the consumers read it with wgmma's transpose immediate and the MN-major
//    descriptor (mma_k_tile and desc_mn_major_sw128, ptx/wgmma.cuh, through cluster_ring.cuh's
//    consume_k_range). Every layout difference lives in those headers; level 9's own code is the same
//    for all four layouts.
//  - GL_BN = 128 or 256 (the dispatcher takes 128 where 128 x 256 tiles would leave SMs idle).
// And what the launch sets: the leading dimensions of A, B and D (the tensor maps' global strides),
// and the stream-K split (tail_first_unit: the first unit split by K over every cluster; 0 splits
// every unit, the unit count none).
//
// No line of level 9 is copied here: this file states the library's compile-time contract and then
// compiles level 9's source. A library feature level 9 should not have (a fused epilogue, another
// output dtype) is the point at which this file gets a kernel body of its own.
#include "gemm_ladder/tma_tile.cuh"

static_assert(gl::BM == 128 && GL_CONSUMERS == 2 && GL_CLUSTER == 2 && GL_PRODUCER_WG == 1,
              "sm90_gemm: level 9's 128-row tile, two consumer warpgroups, a 2-CTA cluster and a producer warpgroup");
static_assert(gl::BN == 128 || gl::BN == 256, "sm90_gemm: BN is 128 or 256");
static_assert(gl::BK == 64, "sm90_gemm: BK = 64, one 128-byte swizzle span of K per stage");
static_assert((GL_A_MN_MAJOR == 0 || GL_A_MN_MAJOR == 1) && (GL_B_MN_MAJOR == 0 || GL_B_MN_MAJOR == 1),
              "sm90_gemm: each operand K-major (0) or MN-major (1)");

#include "levels/level9_multi_consumer.cu"
