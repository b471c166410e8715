// ctest torchrun_store_exchange: started by torchrun (--no-python; no GPU needed), every rank takes
// NVSHMEM's unique id the way World::from_launcher does without TILELINK_UNIQUE_ID -- rank 0 makes
// it and publishes it on torchrun's store, the others read it there (libtilelink_torchrun.so) --
// and writes it to $TILELINK_STORE_CHECK_DIR/<run id>_rank_<r>. Rank 0 then requires every rank's
// file to hold its own id, byte for byte. Exit 0: they all agree.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "runtime/torchrun_store.hpp"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

int main() {
  const std::string dir = env("TILELINK_STORE_CHECK_DIR");
  if (dir.empty() || env("RANK").empty() || env("WORLD_SIZE").empty()) {
    std::cerr << "store_check: run under torchrun with TILELINK_STORE_CHECK_DIR set\n";
    return 2;
  }
  const int rank = std::stoi(env("RANK")), size = std::stoi(env("WORLD_SIZE"));
  try {
    const std::string id = tilelink::detail::unique_id_from_torch_store(rank, size).to_hex();
    std::filesystem::create_directories(dir);
    const std::string prefix = dir + "/" + env("TORCHELASTIC_RUN_ID") + "_rank_";
    {
      std::ofstream(prefix + std::to_string(rank) + ".tmp") << id;
      std::filesystem::rename(prefix + std::to_string(rank) + ".tmp", prefix + std::to_string(rank));
    }
    if (rank != 0) return 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r = 1; r < size; ++r) {
      const std::string path = prefix + std::to_string(r);
      while (!std::filesystem::exists(path)) {
        if (std::chrono::steady_clock::now() > deadline) {
          std::cerr << "store_check: rank " << r << " wrote no id in 60 s\n";
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      std::string theirs;
      std::ifstream(path) >> theirs;
      if (theirs != id) {
        std::cerr << "store_check: rank " << r << " got id " << theirs.substr(0, 32) << "..., rank 0 made "
                  << id.substr(0, 32) << "...\n";
        return 1;
      }
    }
    std::cout << "store_check: " << size << " ranks hold rank 0's unique id (" << id.substr(0, 16) << "...)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "store_check: rank " << rank << ": " << e.what() << "\n";
    return 1;
  }
}
