// Device-visible view of a symmetric heap and the tile geometry the data primitives move.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink {

// Every rank's heap segment has the same size and the same allocation offsets, so an address in
// this rank's segment names the same object on every peer.
struct SymmetricView {
  char* const* peer_bases = nullptr;  // [world]
  char* local_base = nullptr;         // == peer_bases[rank]
  size_t capacity = 0;
  int32_t rank = 0;
  int32_t world = 0;

  // Address on `peer` of the object at `local` (an address inside this rank's segment).
  template <class T>
  TL_HOST_DEVICE T* translate(T* local, int peer) const {
    const auto offset = reinterpret_cast<const char*>(local) - local_base;
    return reinterpret_cast<T*>(peer_bases[peer] + offset);
  }
  TL_HOST_DEVICE bool contains(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    return c >= local_base && c + bytes <= local_base + capacity;
  }
};

// The threads that cooperate on an ld/st data primitive: this thread is `id` of `count`.
struct Lanes {
  uint32_t id;
  uint32_t count;
};

// A 2D block of bytes: `rows` rows of `row_bytes` contiguous bytes.
struct TileShape {
  uint32_t rows = 0;
  uint32_t row_bytes = 0;
  TL_HOST_DEVICE uint64_t bytes() const { return uint64_t(rows) * row_bytes; }
};

// Where a tile lives: its first byte and the distance in bytes between its rows.
struct TileRef {
  void* ptr = nullptr;
  uint64_t pitch = 0;
  TL_HOST_DEVICE char* row(uint32_t r) const { return static_cast<char*>(ptr) + uint64_t(r) * pitch; }
};

// The ld/st data path moves 16-byte vectors: pointers, pitches and row widths must be multiples
// of 16. The TMA bulk path has the same requirement (cp.async.bulk sizes and addresses).
constexpr uint32_t kTileAlignment = 16;

TL_HOST_DEVICE bool tile_is_aligned(const TileRef& t, const TileShape& s) {
  return (reinterpret_cast<uintptr_t>(t.ptr) % kTileAlignment) == 0 && t.pitch % kTileAlignment == 0 &&
         s.row_bytes % kTileAlignment == 0 && (s.rows <= 1 || t.pitch >= s.row_bytes);
}

}  // namespace tilelink
