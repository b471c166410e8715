// The NVSHMEM host library behind a process-per-GPU World (World::process): initialisation from a
// unique id, the symmetric allocations the SymmetricHeap is carved from, peer mappings and the host
// barrier. Host calls only, so no translation unit needs relocatable device code; every call is
// checked and a failure throws, naming the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/runtime/world.hpp"

namespace tilelink::detail::nvshmem {

// Initialises NVSHMEM for this process as PE `rank` of `size` (once per process, for its lifetime; a
// later call must name the same rank and size, and then does nothing). NVLink multicast stays off
// (NVSHMEM_DISABLE_NVLS=1 unless the environment already says otherwise). The device must be
// current.
void init(int rank, int size, const UniqueId& id);

// Collective: every PE calls it with the same size, in the same order.
void* malloc(size_t bytes, const std::string& what);
void free(void* p);
// The address of `local`'s symmetric twin on `pe`, mapped into this process, or nullptr when the
// PE is not reachable by load/store (another node).
void* peer_pointer(void* local, int pe);
// Host barrier over every PE (all of this process's prior NVSHMEM operations complete first).
void barrier_all();
// Collective: every PE's `mine`, in PE order. Moved by NVSHMEM puts into a symmetric array, so it
// needs no load/store mapping of any peer (a PE on another node takes part alike).
std::vector<uint64_t> all_gather_word(uint64_t mine, const std::string& what);

}  // namespace tilelink::detail::nvshmem
