// The kernels take CUtensorMap (a TMA descriptor, by value as a __grid_constant__ parameter) from the
// driver API header. That header declares host functions, which NVRTC refuses, so NVRTC builds see
// this one instead: the same type with the same size (16 x 8 bytes) and alignment (128), as cuda.h
// defines it (tests/test_nvrtc.py checks both against the cuda.h found beside the CUDA headers).
#pragma once
#ifndef __cuda_cuda_h__
#define __cuda_cuda_h__
typedef unsigned int cuuint32_t;
typedef unsigned long cuuint64_t;
#define CU_TENSOR_MAP_NUM_QWORDS 16
typedef struct CUtensorMap_st {
  alignas(128) cuuint64_t opaque[CU_TENSOR_MAP_NUM_QWORDS];
} CUtensorMap;
#endif
