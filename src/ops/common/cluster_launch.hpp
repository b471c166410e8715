// Launching a helper kernel (reduction, combine) next to a clustered persistent GEMM: its CTAs in
// clusters of the GEMM's cluster size. Single CTAs placed first would split the SM pairs the
// GEMM's clusters need, leaving some of its persistent clusters unplaced until others exit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/core/error.hpp"

namespace tilelink::detail {

template <class... KernelArgs, class... Args>
void launch_in_clusters(void (*kernel)(KernelArgs...), uint32_t blocks, uint32_t threads, uint32_t cluster,
                        cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3((blocks + cluster - 1) / cluster * cluster);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelArgs>(args)...));
}

}  // namespace tilelink::detail
