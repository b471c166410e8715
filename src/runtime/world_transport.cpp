#include "runtime/world_transport.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/nvshmem_backend.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::detail {

void require_load_store(const char* where, const WorldOptions& options) {
  TL_REQUIRE(options.transport == Transport::kLoadStore, where, "options.transport", to_string(options.transport),
             "load_store (put_signal goes through NVSHMEM, whose PEs are processes: World::process)");
}

Transport transport_from_env(Transport fallback) {
  const char* v = std::getenv("TILELINK_TRANSPORT");
  if (v == nullptr) return fallback;
  const std::string s = v;
  if (s == "load_store") return Transport::kLoadStore;
  if (s == "put_signal") return Transport::kPutSignal;
  throw_invalid_argument("World::process", "TILELINK_TRANSPORT", s, "load_store or put_signal");
}

// Each process writes its own into every process's slot array; each then compares.
void check_same_transport(int rank, int size, Transport mine) {
  auto* slots = static_cast<uint32_t*>(
      nvshmem::malloc(sizeof(uint32_t) * size_t(size), "World::process's transport check"));
  const uint32_t v = static_cast<uint32_t>(mine);
  for (int p = 0; p < size; ++p) {
    auto* base = static_cast<uint32_t*>(p == rank ? slots : nvshmem::peer_pointer(slots, p));
    TL_REQUIRE(base != nullptr, "World::process", "rank", p, "a rank this GPU reaches by load/store");
    TL_CUDA_CHECK(cudaMemcpy(base + rank, &v, sizeof(v), cudaMemcpyHostToDevice));
  }
  TL_CUDA_CHECK(cudaDeviceSynchronize());
  nvshmem::barrier_all();
  std::vector<uint32_t> all(static_cast<size_t>(size));
  TL_CUDA_CHECK(cudaMemcpy(all.data(), slots, sizeof(uint32_t) * all.size(), cudaMemcpyDeviceToHost));
  nvshmem::free(slots);  // collective: every process, before any of them throws
  for (int p = 0; p < size; ++p) {
    if (all[static_cast<size_t>(p)] == v) continue;
    throw InvalidArgument("World::process: rank " + std::to_string(rank) + " runs transport " + to_string(mine) +
                          ", rank " + std::to_string(p) + " " +
                          to_string(static_cast<Transport>(all[static_cast<size_t>(p)])) +
                          ": expected every process alike (TILELINK_TRANSPORT, WorldOptions::transport)");
  }
}

}  // namespace tilelink::detail
