#include "bench/world_choice.hpp"

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::bench {

namespace {

// TILELINK_RANKS as one of "virtual", "gpus", "processes".
std::string placement() {
  const char* value = std::getenv(kRanksVariable);
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "virtual") return "virtual";
  if (v == "gpus" || v == "processes") return v;
  throw InvalidArgument(std::string("environment variable ") + kRanksVariable + " = '" + v +
                        "': expected 'gpus' (one rank per GPU), 'processes' (one rank per process, under "
                        "`tilelink launch`), 'virtual' or unset (virtual ranks on device 0)");
}

}  // namespace

bool ranks_on_gpus() { return placement() == "gpus"; }
bool ranks_in_processes() { return placement() == "processes"; }

World make_bench_world(int world, bool processes) {
  if (ranks_in_processes()) {
    if (!processes) {
      throw InvalidArgument(std::string(kRanksVariable) +
                            "=processes: this benchmark drives every rank from one process; on process worlds "
                            "`bench primitives` (its signal round trip) runs, the ops from PyTorch (bench/torch_ops.py)");
    }
    World w = World::from_launcher();
    if (w.size() != world) {
      throw InvalidArgument(std::string(kRanksVariable) + "=processes: the launcher started " + std::to_string(w.size()) +
                            " processes (WORLD_SIZE) and the benchmark asks for --world " + std::to_string(world) +
                            ": expected the same number");
    }
    return w;
  }
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
  if (ranks_in_processes()) return world == 1 ? "1 process" : n + " processes";
  if (ranks_on_gpus()) return world == 1 ? "1 rank on 1 GPU" : n + " ranks on " + n + " GPUs";
  return n + (world == 1 ? " virtual rank" : " virtual ranks");
}

std::string ranks_placement(int world) {
  if (ranks_in_processes()) return ranks_phrase(world) + ", one rank each (" + kRanksVariable + "=processes)";
  if (!ranks_on_gpus()) return ranks_phrase(world) + " on device 0";
  const std::string gpus = world == 1 ? "GPU 0" : "GPUs 0-" + std::to_string(world - 1);
  return std::to_string(world) + (world == 1 ? " rank on " : " ranks on ") + gpus + " (" + kRanksVariable + "=gpus)";
}

}  // namespace tilelink::bench
