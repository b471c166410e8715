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

// Throws InvalidArgument naming `where`, the argument `name`, its value and `expected` unless `p` is
// a non-null, 16-byte aligned pointer (an operand the kernels read or write with TMA or 16-byte
// vectors): the ops' set_operands.
void require_aligned(const char* where, const char* name, const void* p, const std::string& expected);

// SM-path launch shape: threads a multiple of 32 in [32, 1024], blocks within the SM budget.
std::string check_launch_shape(const World& world, uint32_t num_blocks, uint32_t threads);

// `bytes` from `offset` of a buffer of `heap` (of `world`), 16-byte aligned.
std::string check_symmetric(const World& world, const SymmetricHeap& heap, const SymmetricBuffer* buf,
                            size_t offset, uint64_t bytes, const char* name);

// One pointer per rank, non-null and 16-byte aligned for every rank this process drives (a process
// world's other entries are not read).
std::string check_rank_pointers(const World& world, const std::vector<const void*>& ptrs, const char* name);

// "" unless the world's transport is put_signal and it has peers: then why `what` (a kernel that
// loads and stores peers' memory itself) cannot run on it.
std::string check_load_store_peers(const World& world, const std::string& what);
template <class T>
std::string check_rank_pointers(const World& world, const std::vector<T*>& ptrs, const char* name) {
  return check_rank_pointers(world, std::vector<const void*>(ptrs.begin(), ptrs.end()), name);
}

}  // namespace tilelink
