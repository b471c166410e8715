#include "runtime/torchrun_store.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tilelink/core/error.hpp"

namespace tilelink::detail {
namespace {

constexpr const char* kPlugin = "libtilelink_torchrun.so";
constexpr const char* kSymbol = "tilelink_torch_store_broadcast";
using Broadcast = int (*)(const char*, int, int, const char*, unsigned char*, size_t, int, int, long, char*, size_t);

// TILELINK_TORCHRUN_LIBRARY, else beside the executable or one folder up (the build tree: the
// tool, tests/) or in ../lib (an install), else the loader's own search (LD_LIBRARY_PATH).
Broadcast load_plugin() {
  std::vector<std::string> tried;
  if (const char* path = std::getenv("TILELINK_TORCHRUN_LIBRARY")) {
    tried.push_back(path);
  } else {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      tried.push_back((exe.parent_path() / kPlugin).string());
      tried.push_back((exe.parent_path().parent_path() / kPlugin).string());
      tried.push_back((exe.parent_path().parent_path() / "lib" / kPlugin).string());  // an install's bin/ and lib/
    }
    tried.push_back(kPlugin);
  }
  std::string why;
  for (const std::string& path : tried) {
    if (path.find('/') != std::string::npos && !std::filesystem::exists(path)) {
      why += "\n  " + path + ": no such file";
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      why += "\n  " + path + ": " + dlerror();
      continue;
    }
    if (void* f = dlsym(handle, kSymbol)) return reinterpret_cast<Broadcast>(f);
    why += "\n  " + path + ": no symbol " + kSymbol;
  }
  throw Error(std::string("World::from_launcher: TILELINK_UNIQUE_ID is unset, so the NVSHMEM unique id travels over "
                          "torchrun's store, which needs ") + kPlugin +
              " (built where torch is installed: cmake -DTILELINK_BUILD_PYTHON=ON; or set TILELINK_TORCHRUN_LIBRARY). "
              "Tried:" + why + "\nOr start the ranks with `tilelink launch --nproc N -- ...`");
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

bool under_torchrun() { return std::getenv("MASTER_ADDR") != nullptr && std::getenv("MASTER_PORT") != nullptr; }

UniqueId unique_id_from_torch_store(int rank, int size) {
  const std::string host = env_or_empty("MASTER_ADDR");
  const std::string port_text = env_or_empty("MASTER_PORT");
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  TL_REQUIRE(!port_text.empty() && *end == '\0' && port > 0 && port < 65536, "World::from_launcher", "MASTER_PORT",
             port_text, "a TCP port (torchrun sets it)");
  TL_REQUIRE(!host.empty(), "World::from_launcher", "MASTER_ADDR", "empty", "a host name (torchrun sets it)");
  // torchrun's agent serves the store (TORCHELASTIC_USE_AGENT_STORE=True); without it rank 0 does,
  // as torch.distributed's env:// rendezvous would.
  const bool agent_store = env_or_empty("TORCHELASTIC_USE_AGENT_STORE") == "True";
  const std::string restart = env_or_empty("TORCHELASTIC_RESTART_COUNT");
  const std::string key = "tilelink/attempt_" + (restart.empty() ? std::string("0") : restart) + "/nvshmem_unique_id";
  const Broadcast broadcast = load_plugin();  // first: a missing plugin fails alike on every rank
  UniqueId id;
  if (rank == 0) id = make_unique_id();
  char error[1024] = {0};
  constexpr long kTimeoutMs = 600'000;  // torch.distributed's default for its own rendezvous
  if (broadcast(host.c_str(), static_cast<int>(port), !agent_store && rank == 0, key.c_str(), id.bytes.data(),
                id.bytes.size(), rank, size, kTimeoutMs, error, sizeof(error)) != 0) {
    throw Error("World::from_launcher: rank " + std::to_string(rank) + " could not exchange the NVSHMEM unique id over "
                "torchrun's store at " + host + ":" + port_text + " (key '" + key + "'): " + error);
  }
  return id;
}

}  // namespace tilelink::detail
