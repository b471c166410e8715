#include "bench/world_choice.hpp"

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::bench {

bool ranks_on_gpus() {
  const char* value = std::getenv(kRanksVariable);
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "virtual") return false;
  if (v == "gpus") return true;
  throw InvalidArgument(std::string("environment variable ") + kRanksVariable + " = '" + v +
                        "': expected 'gpus' (one rank per GPU), 'virtual' or unset (virtual ranks on device 0)");
}

World make_bench_world(int world) {
  if (!ranks_on_gpus()) return World::virtual_ranks(world);
  const int count = cuda_device_count();
  if (count < world) {
    throw InvalidArgument(std::string(kRanksVariable) + "=gpus runs one rank per GPU: a world of " +
                          std::to_string(world) + " ranks needs " + std::to_string(world) + " GPUs, and " +
                          std::to_string(count) + " are visible (unset " + kRanksVariable +
                          " for virtual ranks on one GPU, or lower --world)");
  }
  std::vector<int> devices(static_cast<size_t>(world));
  std::iota(devices.begin(), devices.end(), 0);
  return World::multi_gpu(devices);
}

std::string ranks_phrase(int world) {
  const std::string n = std::to_string(world);
  if (ranks_on_gpus()) return world == 1 ? "1 rank on 1 GPU" : n + " ranks on " + n + " GPUs";
  return n + (world == 1 ? " virtual rank" : " virtual ranks");
}

std::string ranks_placement(int world) {
  if (!ranks_on_gpus()) return ranks_phrase(world) + " on device 0";
  const std::string gpus = world == 1 ? "GPU 0" : "GPUs 0-" + std::to_string(world - 1);
  return std::to_string(world) + (world == 1 ? " rank on " : " ranks on ") + gpus + " (" + kRanksVariable + "=gpus)";
}

}  // namespace tilelink::bench
