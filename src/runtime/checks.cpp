// Argument checks shared by the collectives and the ops.
#include "runtime/checks.hpp"

#include "tilelink/core/error.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

std::string check_launch_shape(const World& world, uint32_t num_blocks, uint32_t threads) {
  if (threads < 32 || threads > 1024 || threads % 32 != 0) {
    return "argument 'config.threads' = " + std::to_string(threads) +
           ": expected a multiple of 32 in [32, 1024]";
  }
  if (num_blocks > static_cast<uint32_t>(world.sm_budget(0))) {
    return "argument 'config.num_blocks' = " + std::to_string(num_blocks) +
           ": expected at most the rank's SM budget of " + std::to_string(world.sm_budget(0)) +
           " (all blocks of all ranks must be resident at once)";
  }
  return "";
}

void require_aligned(const char* where, const char* name, const void* p, const std::string& expected) {
  TL_REQUIRE(p != nullptr && reinterpret_cast<uintptr_t>(p) % kTileAlignment == 0, where, name, p, expected);
}

std::string check_symmetric(const World& world, const SymmetricHeap& heap, const SymmetricBuffer* buf,
                            size_t offset, uint64_t bytes, const char* name) {
  const std::string arg = std::string("argument '") + name + "'";
  if (buf == nullptr || !buf->valid()) return arg + " = nullptr: expected a buffer of the symmetric heap";
  if (&heap.world() != &world) return arg + ": expected a heap of the same World";
  if (offset % kTileAlignment != 0) {
    return arg + " offset = " + std::to_string(offset) + ": expected a multiple of 16 bytes";
  }
  if (offset + bytes > buf->bytes()) {
    return arg + " holds " + std::to_string(buf->bytes()) + " bytes: expected at least " +
           std::to_string(offset + bytes) + " (offset " + std::to_string(offset) + " + " +
           std::to_string(bytes) + " bytes of data)";
  }
  for (int r = 0; r < world.size(); ++r) {
    if (heap.base(r) == nullptr) continue;  // a peer this process does not map (put_signal): same offsets
    if (!heap.contains(r, static_cast<char*>(buf->data(r)) + offset, bytes)) {
      return arg + ": expected a buffer of this heap (rank " + std::to_string(r) + ")";
    }
  }
  return "";
}

std::string check_rank_pointers(const World& world, const std::vector<const void*>& ptrs, const char* name) {
  if (ptrs.size() != static_cast<size_t>(world.size())) {
    return std::string("argument '") + name + "' has " + std::to_string(ptrs.size()) +
           " pointers: expected one per rank (" + std::to_string(world.size()) +
           "; in a process world the entries of other processes' ranks are not read and may be null)";
  }
  for (int l : world.local_ranks()) {  // a process world reads only its own rank's entry
    const size_t r = static_cast<size_t>(l);
    if (ptrs[r] == nullptr || reinterpret_cast<uintptr_t>(ptrs[r]) % kTileAlignment != 0) {
      return std::string("argument '") + name + "[" + std::to_string(r) + "]' = " + detail::to_display(ptrs[r]) +
             ": expected a 16-byte aligned device pointer";
    }
  }
  return "";
}

std::string check_load_store_peers(const World& world, const std::string& what) {
  if (world.transport() != Transport::kPutSignal || world.size() == 1) return "";
  return "the world's transport is put_signal, and " + what +
         " loads and stores peers' memory itself; expected a world with transport load_store";
}

}  // namespace tilelink
