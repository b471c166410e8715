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
  TL_REQUIRE(options.transport == Transport::kLoadStore || options.transport == Transport::kAuto, where,
             "options.transport", to_string(options.transport),
             "load_store or auto (put_signal goes through NVSHMEM, whose PEs are processes: World::process)");
}

Transport transport_from_env(Transport fallback) {
  const char* v = std::getenv("TILELINK_TRANSPORT");
  if (v == nullptr) return fallback;
  const std::string s = v;
  if (s == "load_store") return Transport::kLoadStore;
  if (s == "put_signal") return Transport::kPutSignal;
  if (s == "auto") return Transport::kAuto;
  throw_invalid_argument("World::process", "TILELINK_TRANSPORT", s, "load_store, put_signal or auto");
}

uint64_t transport_word(Transport requested, bool maps_every_peer) {
  return static_cast<uint64_t>(requested) | (maps_every_peer ? kMapsEveryPeer : 0u);
}

Transport resolve_transport(const std::vector<uint64_t>& words, int rank) {
  TL_REQUIRE(rank >= 0 && size_t(rank) < words.size(), "World::process", "rank", rank,
             "a rank in [0, " + std::to_string(words.size()) + ")");
  const auto requested = static_cast<Transport>(words[size_t(rank)] & 0xffu);
  int unmapped = -1;
  for (size_t p = 0; p < words.size(); ++p) {
    const auto asked = static_cast<Transport>(words[p] & 0xffu);
    if (asked != requested) {
      throw InvalidArgument("World::process: rank " + std::to_string(rank) + " asks for transport " +
                            to_string(requested) + ", rank " + std::to_string(p) + " for " + to_string(asked) +
                            ": expected every process alike (TILELINK_TRANSPORT, WorldOptions::transport)");
    }
    if ((words[p] & kMapsEveryPeer) == 0 && unmapped < 0) unmapped = static_cast<int>(p);
  }
  if (requested == Transport::kAuto) return unmapped < 0 ? Transport::kLoadStore : Transport::kPutSignal;
  if (requested == Transport::kLoadStore && unmapped >= 0) {
    throw InvalidArgument("World::process: transport load_store, but rank " + std::to_string(unmapped) +
                          " cannot map every peer's memory (a peer on another node, or no peer access): expected "
                          "TILELINK_TRANSPORT=put_signal or auto (peers then reached through NVSHMEM's "
                          "put-with-signal)");
  }
  return requested;
}

Transport decide_transport(int rank, Transport requested, bool maps_every_peer) {
  return resolve_transport(
      nvshmem::all_gather_word(transport_word(requested, maps_every_peer), "World::process's transport choice"), rank);
}

}  // namespace tilelink::detail
