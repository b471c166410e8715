#include "tilelink/runtime/work_counters.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/core/error.hpp"

namespace tilelink {

std::vector<DeviceBuffer> zeroed_buffers(const World& world, size_t bytes) {
  std::vector<DeviceBuffer> buffers(static_cast<size_t>(world.size()));
  for (int r : world.local_ranks()) {
    DeviceBuffer b(bytes, world.device(r));  // leaves the rank's device current
    TL_CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
    // The memset runs on the legacy stream, which the ranks' non-blocking streams do not wait
    // for: the memory must be zero before any kernel on those streams reads it.
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    buffers[static_cast<size_t>(r)] = std::move(b);
  }
  return buffers;
}

std::vector<DeviceBuffer> zeroed_work_counters(const World& world, size_t words) {
  return zeroed_buffers(world, words * sizeof(uint32_t));
}

}  // namespace tilelink
