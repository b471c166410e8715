// libtilelink_torchrun.so: hands NVSHMEM's unique id from rank 0 to the other ranks over torchrun's
// own store (c10d::TCPStore at MASTER_ADDR:MASTER_PORT), for C++ programs started by torchrun
// (World::from_launcher without TILELINK_UNIQUE_ID). A plugin the runtime loads with dlopen only
// then, so that neither the library nor the tool links torch; built where torch is
// (TILELINK_BUILD_PYTHON). Only C types cross its boundary.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" __attribute__((visibility("default"))) int tilelink_torch_store_broadcast(
    const char* host, int port, int is_server, const char* key, unsigned char* bytes, size_t n, int rank, int size,
    long timeout_ms, char* error, size_t error_len) {
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = is_server != 0;
    options.waitWorkers = false;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    c10d::TCPStore store(host, options);
    const std::string readers = std::string(key) + "/read";
    if (rank == 0) {
      store.set(key, std::vector<uint8_t>(bytes, bytes + n));
      // Until every rank has read it: when rank 0 serves the store itself (no torchrun agent), the
      // store ends with this function.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      while (store.add(readers, 0) < size - 1) {
        if (std::chrono::steady_clock::now() > deadline) {
          std::snprintf(error, error_len, "rank 0 published the id under '%s', and %lld of %d ranks read it in %ld ms",
                        key, static_cast<long long>(store.add(readers, 0)), size - 1, timeout_ms);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return 0;
    }
    const std::vector<uint8_t> got = store.get(key);  // waits up to the store's timeout
    if (got.size() != n) {
      std::snprintf(error, error_len, "key '%s' holds %zu bytes: expected %zu (an NVSHMEM unique id)", key, got.size(), n);
      return 1;
    }
    std::memcpy(bytes, got.data(), n);
    store.add(readers, 1);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
    return 1;
  } catch (...) {  // nothing may cross the C boundary
    std::snprintf(error, error_len, "an exception that is not a std::exception");
    return 1;
  }
}
