// EMBER_HD marks small arithmetic helpers that the CUDA kernels share with host code:
// __host__ __device__ under nvcc, plain inline everywhere else.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__ __forceinline__
#else
#define EMBER_HD inline
#endif
