// Launching a helper kernel (reduction, combine) next to a clustered persistent GEMM: its CTAs in
// clusters of the GEMM's cluster size. Single CTAs placed first would split the SM pairs the
// GEMM's clusters need, leaving some of its persistent clusters unplaced until others exit.
//
// `early`: a programmatic dependent launch (PDL) on the previous kernel of the stream. The CTAs
// may be placed while that kernel's last tiles finish (CUTLASS's GEMMs release their dependents
// at their last tile when built with CUTLASS_ENABLE_GDC_FOR_SM90); the kernel must begin with
// wait_for_previous_grid(), which returns once the previous grid has completed and its writes
// are visible. Without a previous kernel the launch is an ordinary one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/core/error.hpp"

namespace tilelink::detail {

enum class LaunchOrder { kAfterPrevious, kEarly };

#ifdef __CUDACC__
// The first statement of a kernel launched LaunchOrder::kEarly (a no-op otherwise).
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#endif

template <class... KernelArgs, class... Args>
void launch_in_clusters(void (*kernel)(KernelArgs...), uint32_t blocks, uint32_t threads, uint32_t cluster,
                        cudaStream_t stream, LaunchOrder order, Args&&... args) {
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = cluster;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3((blocks + cluster - 1) / cluster * cluster);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = order == LaunchOrder::kEarly ? 2 : 1;
  TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelArgs>(args)...));
}

}  // namespace tilelink::detail
