// The standalone collectives' launch of one rank's protocol kernel on its comm stream.
#pragma once

#include <cuda_runtime_api.h>

#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// A collective kernel's prologue: on the bulk path thread 0 sets up the staging ring in dynamic
// shared memory `smem` (the one thread that issues the bulk copies); the ld/st path needs none.
template <bool kBulk>
__device__ __forceinline__ BulkStaging collective_staging(char* smem) {
  BulkStaging staging{};
  if constexpr (kBulk) {
    if (threadIdx.x == 0) staging = BulkSmem::init(smem);
    __syncthreads();
  }
  return staging;
}

// Shared memory (the bulk path's staging ring) and launch for one rank.
template <class Kernel, class... Args>
void launch(const World& world, int rank, Kernel kernel, bool bulk, uint32_t blocks, uint32_t threads, Args... args) {
  world.set_device(rank);
  const size_t smem = bulk ? BulkSmem::bytes() : 0;
  if (bulk) {
    TL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  kernel<<<blocks, threads, smem, world.comm_stream(rank)>>>(args...);
  TL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tilelink::detail
