// Qualifiers for code shared by the GPU kernels and the CPU protocol executor.
#pragma once

#if defined(__CUDACC__)
#define TL_HOST_DEVICE __host__ __device__ __forceinline__
#define TL_DEVICE __device__ __forceinline__
#else
#define TL_HOST_DEVICE inline
#endif

#if defined(__CUDA_ARCH__)
#define TL_ON_DEVICE 1
#else
#define TL_ON_DEVICE 0
#endif
