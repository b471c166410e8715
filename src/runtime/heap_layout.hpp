// A process world's symmetric heap: how its processes agree on the affine view the epilogue push
// stores through (SymmetricHeap::affine_stride). Internal to the runtime (symmetric_heap.cpp);
// pure, so every process reaches the same answer, or the same error, from the same words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tilelink::detail {

// This process's word: `bases` as process `me` maps every rank's segment (null: not mapped) --
// the stride s when rank (me + k) mod P sits at bases[me] + k * s for every k (s > 0), 0 when they
// do not, kUnmappedPeer when some rank is not mapped.
constexpr uint64_t kUnmappedPeer = ~uint64_t(0);
uint64_t heap_layout_word(const std::vector<char*>& bases, int me);

// Every process's word, in rank order, and this process's: the stride every process found
// (`stride`, 0 unless all found the same one) and the ranks that could not map every peer
// (`unmapped`, "" if none; "1, 3" otherwise).
struct HeapLayout {
  size_t stride = 0;
  std::string unmapped;
};
HeapLayout agree_heap_layout(const std::vector<uint64_t>& words, uint64_t mine);

}  // namespace tilelink::detail
