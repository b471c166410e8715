// Driver API entry points, obtained through the runtime so that nothing links libcuda directly
// and CPU-only programs start without a driver.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tilelink/core/error.hpp"

namespace tilelink::detail {

template <class Fn>
Fn driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  TL_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    throw CudaError(std::string("CUDA driver entry point not found: ") + name, static_cast<int>(found));
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace tilelink::detail
