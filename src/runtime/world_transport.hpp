// The world's transport (WorldOptions::transport): how it is read and checked. Internal to the
// runtime (world.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// A one-process world's ranks reach each other by load/store only (NVSHMEM's PEs are processes):
// InvalidArgument from `where` unless options.transport is kLoadStore or kAuto.
void require_load_store(const char* where, const WorldOptions& options);

// TILELINK_TRANSPORT (load_store | put_signal | auto), else `fallback`; InvalidArgument for another
// value.
Transport transport_from_env(Transport fallback);

// A process world's transport, decided alike in every process from what each asked for
// (`requested`: kAuto, kLoadStore or kPutSignal) and whether each maps every peer's memory
// (`maps_every_peer`: nvshmem_ptr answered for all; false with a peer on another node). kAuto
// takes kLoadStore when every process maps every peer, else kPutSignal. Collective (NVSHMEM puts
// and barrier: no mapping needed); InvalidArgument in every process when the requests differ, or
// when load_store is asked for and some process cannot map a peer.
Transport decide_transport(int rank, Transport requested, bool maps_every_peer);

// decide_transport's parts: each process's word (what it asked for; kMapsEveryPeer when it maps
// every peer), and the rule applied to every process's word, `rank` being this process -- pure, so
// every process reaches the same answer or the same error.
constexpr uint64_t kMapsEveryPeer = 0x100;
uint64_t transport_word(Transport requested, bool maps_every_peer);
Transport resolve_transport(const std::vector<uint64_t>& words, int rank);

}  // namespace tilelink::detail
