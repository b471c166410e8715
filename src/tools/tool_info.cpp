// `tilelink info`: the devices, the world mode and each rank's SM budget.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "bench/harness.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"
#include "tools/command.hpp"
#include "tools/output.hpp"

#ifndef TILELINK_VERSION
#define TILELINK_VERSION "unknown"
#endif

namespace tilelink::tool {
namespace {

std::string gib(size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << double(bytes) / double(1ull << 30) << " GiB";
  return os.str();
}

int info(int world_size) {
  const int count = tb::cuda_device_count();
  const tb::DeviceInfo first = tb::query_device(0);
  std::cout << "tilelink " TILELINK_VERSION "\n"
            << "CUDA driver " << cuda_version(first.driver_version) << ", runtime "
            << cuda_version(first.runtime_version) << "\n"
            << "devices: " << count << "\n";
  for (int d = 0; d < count; ++d) {
    const tb::DeviceInfo i = tb::query_device(d);
    std::cout << "  [" << d << "] " << i.name << "  sm_" << i.cc_major << i.cc_minor << "  " << i.sms
              << " SMs  " << gib(i.memory_bytes) << "  L2 " << i.l2_bytes / (1 << 20) << " MiB  smem/block "
              << i.smem_optin_bytes / 1024 << " KiB\n";
  }
  if (count >= 2) {
    std::cout << "peer access:";
    for (int a = 0; a < count; ++a) {
      for (int b = 0; b < count; ++b) {
        if (a == b) continue;
        int ok = 0;
        TL_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
        std::cout << " " << a << "->" << b << (ok ? ":yes" : ":no");
      }
    }
    std::cout << "\n";
  }

  const World world = World::virtual_ranks(world_size);
  std::cout << "world: " << world.size() << " virtual ranks on device 0 (the benchmarks' mode"
            << (tb::ranks_on_gpus() ? " without TILELINK_RANKS=gpus" : "") << "), scope "
            << (world.scope() == MemScope::kGpu ? ".gpu" : ".sys") << "\n";
  for (int r = 0; r < world.size(); ++r) {
    std::cout << "  rank " << r << ": device " << world.device(r) << ", SM budget " << world.sm_budget(r) << " of "
              << world.num_sms(r) << "\n";
  }
  if (world_size >= 2 && count >= world_size) {
    std::cout << "multi_gpu over devices 0.." << world_size - 1 << " is possible too (one rank per GPU, scope .sys)\n";
  }
  return 0;
}

}  // namespace

void register_info(Tool& tool) {
  auto world = std::make_shared<int>(2);
  Command& c = tool.add("info", "devices, SMs, world mode and SM budget per rank");
  c.app->add_option("--world", *world, "virtual ranks to show the SM budget for")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxWorldSize));
  c.run = [world](const std::string&) { return info(*world); };
}

}  // namespace tilelink::tool
