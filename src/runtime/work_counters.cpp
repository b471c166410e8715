#include "tilelink/runtime/work_counters.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/core/error.hpp"

namespace tilelink {

std::vector<DeviceBuffer> zeroed_work_counters(const World& world, size_t words) {
  std::vector<DeviceBuffer> counters(static_cast<size_t>(world.size()));
  for (int r : world.local_ranks()) {
    DeviceBuffer b(words * sizeof(uint32_t), world.device(r));
    TL_CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
    counters[static_cast<size_t>(r)] = std::move(b);
  }
  return counters;
}

}  // namespace tilelink
