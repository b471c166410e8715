// Argument checks shared by the collectives' and the ops' can_implement: each returns "" when
// the argument is usable, else "argument '<name>' = <value>: expected <what>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

// SM-path launch shape: threads a multiple of 32 in [32, 1024], blocks within the SM budget.
std::string check_launch_shape(const World& world, uint32_t num_blocks, uint32_t threads);

// "" unless `world` is a process world (World::process) and `op` does not run on one yet.
std::string check_one_process_world(const World& world, const char* op);

// `bytes` from `offset` of a buffer of `heap` (of `world`), 16-byte aligned.
std::string check_symmetric(const World& world, const SymmetricHeap& heap, const SymmetricBuffer* buf,
                            size_t offset, uint64_t bytes, const char* name);

// One pointer per rank, non-null and 16-byte aligned for every rank this process drives (a process
// world's other entries are not read).
std::string check_rank_pointers(const World& world, const std::vector<const void*>& ptrs, const char* name);
template <class T>
std::string check_rank_pointers(const World& world, const std::vector<T*>& ptrs, const char* name) {
  return check_rank_pointers(world, std::vector<const void*>(ptrs.begin(), ptrs.end()), name);
}

}  // namespace tilelink
