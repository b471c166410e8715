// SymmetricHeap: per-rank segments of equal size; every allocation has the same offset on every
// rank, so one offset names the same object everywhere. Each rank's device holds a table of all
// ranks' segment bases (SymmetricView::peer_bases) for the device primitives.
//
// In a process world (World::process) each process's segment is an NVSHMEM allocation and its
// peers' segments are mapped by nvshmem_ptr (not under put_signal: see base()); constructing and destroying a heap are then
// collective (every process, same capacity, same order), and so is allocate(): every process makes
// the same allocations in the same order, so that one offset names the same object everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "tilelink/primitives/symmetric.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

class SymmetricHeap;

// One symmetric allocation. Move-only; returns its range to the heap on destruction.
class SymmetricBuffer {
 public:
  SymmetricBuffer() = default;
  SymmetricBuffer(SymmetricBuffer&& other) noexcept;
  SymmetricBuffer& operator=(SymmetricBuffer&& other) noexcept;
  ~SymmetricBuffer();

  size_t offset() const { return offset_; }
  size_t bytes() const { return bytes_; }
  bool valid() const { return heap_ != nullptr; }
  // This allocation in `rank`'s segment. InvalidArgument for a peer this process does not map (a
  // process world under put_signal).
  void* data(int rank) const;
  template <class T>
  T* as(int rank) const {
    return static_cast<T*>(data(rank));
  }

 private:
  friend class SymmetricHeap;
  SymmetricBuffer(SymmetricHeap* heap, size_t offset, size_t bytes)
      : heap_(heap), offset_(offset), bytes_(bytes) {}
  void release();
  SymmetricHeap* heap_ = nullptr;
  size_t offset_ = 0;
  size_t bytes_ = 0;
};

class SymmetricHeap {
 public:
  static constexpr size_t kDefaultAlignment = 256;

  SymmetricHeap(const World& world, size_t capacity_per_rank);
  ~SymmetricHeap();
  SymmetricHeap(const SymmetricHeap&) = delete;
  SymmetricHeap& operator=(const SymmetricHeap&) = delete;

  // Collective allocation of `bytes` on every rank (first fit). Throws InvalidArgument when the
  // request is zero, the alignment is not a power of two, or no free range fits.
  SymmetricBuffer allocate(size_t bytes, size_t alignment = kDefaultAlignment);

  const World& world() const { return *world_; }
  size_t capacity() const { return capacity_; }
  size_t bytes_free() const;
  // Whether allocate() of each of `bytes`, in order (zeros skipped), would succeed now: an op's
  // can_implement asks before its constructor allocates (free ranges, not only free bytes).
  bool fits(const std::vector<size_t>& bytes) const;
  // `rank`'s segment as this process maps it; null for a peer under the put_signal transport (a
  // process world reaches peers only through NVSHMEM then, as it must on another node).
  char* base(int rank) const;
  // Device view for kernels of `rank` (peer table in rank's device memory).
  SymmetricView device_view(int rank) const;
  // Host view (peer table in host memory) for host code and validation.
  SymmetricView host_view(int rank) const;
  // True if [p, p + bytes) lies inside `rank`'s segment.
  bool contains(int rank, const void* p, size_t bytes) const;
  // The distance in bytes from each rank's segment to the next when, as `rank` maps them, the
  // segments lie at base(affine_origin(rank)) + ((r - affine_origin(rank)) mod P) * stride in one
  // virtual address range (an affine heap: one TMA descriptor with a rank mode addresses every
  // rank's copy of an allocation), else 0. Ranks on one device share one allocation: affine from
  // rank 0 for every rank. A process world's NVSHMEM mapping puts peer (me + k) mod P at
  // base(me) + k * stride: affine from the process's own rank, where every process found it so
  // (decided together when the heap is made, so all of them take the same path).
  size_t affine_stride() const;
  // The rank whose segment starts `rank`'s affine view (0, or `rank` itself in a process world).
  int affine_origin(int rank) const;

 private:
  friend class SymmetricBuffer;
  void release(size_t offset, size_t bytes);
  void free_segments();

  const World* world_;
  bool single_allocation_ = false;
  void* nvshmem_segment_ = nullptr;  // a process world's own segment (NVSHMEM)
  size_t process_stride_ = 0;        // a process world's rotated affine stride, agreed by every process
  size_t capacity_;
  std::vector<char*> bases_;           // host copy of the peer table
  std::vector<char**> device_tables_;  // per rank, on rank's device
  std::map<size_t, size_t> free_;      // offset -> bytes, coalesced
};

}  // namespace tilelink
