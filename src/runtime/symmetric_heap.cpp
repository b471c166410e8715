#include "tilelink/runtime/symmetric_heap.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/core/error.hpp"
#include "runtime/heap_layout.hpp"
#include "runtime/nvshmem_backend.hpp"
#include "tilelink/runtime/device_buffer.hpp"

namespace tilelink {
namespace {

constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

namespace detail {

uint64_t heap_layout_word(const std::vector<char*>& bases, int me) {
  const int n = static_cast<int>(bases.size());
  for (char* b : bases) {
    if (b == nullptr) return kUnmappedPeer;
  }
  if (n < 2) return 0;
  // Addresses of separate mappings: compared as integers, not as pointers into one object.
  auto at = [&](int r) { return reinterpret_cast<uintptr_t>(bases[static_cast<size_t>(r % n)]); };
  const uintptr_t mine = at(me);
  if (at(me + 1) <= mine) return 0;
  const uintptr_t stride = at(me + 1) - mine;
  for (int k = 2; k < n; ++k) {
    if (at(me + k) < mine || at(me + k) - mine != stride * uintptr_t(k)) return 0;
  }
  return static_cast<uint64_t>(stride);
}

HeapLayout agree_heap_layout(const std::vector<uint64_t>& words, uint64_t mine) {
  HeapLayout out;
  bool agreed = mine != 0 && mine != kUnmappedPeer;
  for (size_t r = 0; r < words.size(); ++r) {
    if (words[r] == kUnmappedPeer) out.unmapped += (out.unmapped.empty() ? "" : ", ") + std::to_string(r);
    agreed = agreed && words[r] == mine;
  }
  out.stride = agreed && out.unmapped.empty() ? static_cast<size_t>(mine) : 0;
  return out;
}

}  // namespace detail

// ---- SymmetricBuffer -------------------------------------------------------------------------------

SymmetricBuffer::SymmetricBuffer(SymmetricBuffer&& other) noexcept
    : heap_(other.heap_), offset_(other.offset_), bytes_(other.bytes_) {
  other.heap_ = nullptr;
}

SymmetricBuffer& SymmetricBuffer::operator=(SymmetricBuffer&& other) noexcept {
  if (this != &other) {
    release();
    heap_ = other.heap_;
    offset_ = other.offset_;
    bytes_ = other.bytes_;
    other.heap_ = nullptr;
  }
  return *this;
}

SymmetricBuffer::~SymmetricBuffer() { release(); }

void SymmetricBuffer::release() {
  if (heap_ != nullptr) heap_->release(offset_, bytes_);
  heap_ = nullptr;
}

void* SymmetricBuffer::data(int rank) const {
  TL_REQUIRE(heap_ != nullptr, "SymmetricBuffer::data", "this", "empty buffer", "an allocated buffer");
  char* base = heap_->base(rank);
  TL_REQUIRE(base != nullptr, "SymmetricBuffer::data", "rank", rank,
             "a rank whose memory this process maps: under the put_signal transport a peer's copy is reached "
             "only through NVSHMEM (rank_put_signal with this rank's address), never by a pointer");
  return base + offset_;
}

// ---- SymmetricHeap ---------------------------------------------------------------------------------

SymmetricHeap::SymmetricHeap(const World& world, size_t capacity_per_rank)
    : world_(&world), capacity_(align_up(capacity_per_rank, kDefaultAlignment)) {
  TL_REQUIRE(capacity_per_rank > 0, "SymmetricHeap", "capacity_per_rank", capacity_per_rank,
             "a positive number of bytes");
  const int n = world.size();
  bases_.assign(n, nullptr);
  device_tables_.assign(n, nullptr);
  const bool process = world.mode() == WorldMode::kProcess;
  bool one_device = !process;
  for (int r = 1; r < n && one_device; ++r) one_device = world.device(r) == world.device(0);
  try {
    if (process) {
      // One NVSHMEM allocation per process (collective); every peer's twin mapped into this one,
      // except under put_signal, where peers are reached only through NVSHMEM's puts and signals
      // (a peer on another node cannot be mapped): their bases stay null, so a kernel or host path
      // that would load or store a peer's memory faults or is refused instead of working on one
      // node only.
      const int me = world.local_ranks().front();
      world.set_device(me);
      void* mine = detail::nvshmem::malloc(capacity_, "SymmetricHeap (rank " + std::to_string(me) + "'s segment, " +
                                                          format_bytes(capacity_) + ")");
      nvshmem_segment_ = mine;
      const bool map_peers = world.transport() != Transport::kPutSignal;
      int unmapped = -1;  // a peer this process cannot reach by load/store, if any
      for (int r = 0; r < n; ++r) {
        if (r != me && !map_peers) continue;
        bases_[r] = static_cast<char*>(r == me ? mine : detail::nvshmem::peer_pointer(mine, r));
        if (bases_[r] == nullptr && unmapped < 0) unmapped = r;
      }
      if (map_peers && n > 1) {
        // Collective, whatever this process found (a process that threw here alone would leave the
        // others in the gather): each process's affine stride from its own rank, or 0, or
        // kUnmappedPeer (heap_layout.hpp); then every process decides, and throws, alike.
        const uint64_t word = detail::heap_layout_word(bases_, me);
        const detail::HeapLayout layout = detail::agree_heap_layout(
            detail::nvshmem::all_gather_word(word, "SymmetricHeap's peer mappings"), word);
        if (!layout.unmapped.empty()) {  // the world chose load_store because every peer was mapped
          throw Error("SymmetricHeap: rank(s) " + layout.unmapped +
                      " cannot reach every peer's segment by load/store (rank " + std::to_string(me) +
                      (unmapped >= 0 ? " misses rank " + std::to_string(unmapped) : " maps all") +
                      ") although the world's transport is load_store: expected every peer mapped "
                      "(TILELINK_TRANSPORT=put_signal or auto reaches peers through NVSHMEM)");
        }
        process_stride_ = layout.stride;
      }
    } else if (one_device) {
      // Virtual ranks: one allocation, segment r at base + r * capacity (an affine heap).
      void* p = device_malloc(capacity_ * static_cast<size_t>(n), world.device(0),
                              "SymmetricHeap (" + std::to_string(n) + " virtual ranks x " + format_bytes(capacity_) +
                                  " per rank, one allocation)");
      for (int r = 0; r < n; ++r) bases_[r] = static_cast<char*>(p) + capacity_ * static_cast<size_t>(r);
      single_allocation_ = true;
    } else {
      for (int r = 0; r < n; ++r) {
        bases_[r] = static_cast<char*>(
            device_malloc(capacity_, world.device(r), "SymmetricHeap (rank " + std::to_string(r) + "'s segment)"));
      }
    }
    for (int r : world.local_ranks()) {
      void* t = device_malloc(sizeof(char*) * n, world.device(r), "SymmetricHeap (rank " + std::to_string(r) + "'s peer table)");
      device_tables_[r] = static_cast<char**>(t);
      TL_CUDA_CHECK(cudaMemcpy(t, bases_.data(), sizeof(char*) * n, cudaMemcpyHostToDevice));
    }
  } catch (...) {
    free_segments();
    throw;
  }
  free_[0] = capacity_;
}

SymmetricHeap::~SymmetricHeap() { free_segments(); }

void SymmetricHeap::free_segments() {
  for (int r : world_->local_ranks()) {
    cudaSetDevice(world_->device(r));
    if (nvshmem_segment_ == nullptr && (!single_allocation_ || r == 0)) cudaFree(bases_[r]);
    cudaFree(device_tables_[r]);
    device_tables_[r] = nullptr;
  }
  // Collective, like the allocation: every process frees its heap in the same order.
  detail::nvshmem::free(nvshmem_segment_);
  nvshmem_segment_ = nullptr;
  bases_.assign(bases_.size(), nullptr);
}

size_t SymmetricHeap::affine_stride() const {
  const int n = world_->size();
  if (n == 1) return capacity_;
  // A process world's mappings are each process's own: NVSHMEM maps peer (me + k) % n at
  // base + k * stride, affine from its own rank and rotated. The answer was agreed by every
  // process when the heap was made: one that differed between processes would split a collective
  // decision (GemmRs push on some ranks waiting for pushes the others never make).
  if (world_->mode() == WorldMode::kProcess) return process_stride_;
  const std::ptrdiff_t stride = bases_[1] - bases_[0];
  if (stride <= 0) return 0;
  for (int r = 2; r < n; ++r) {
    if (bases_[r] - bases_[0] != stride * r) return 0;
  }
  return static_cast<size_t>(stride);
}

int SymmetricHeap::affine_origin(int rank) const {
  world_->check_rank(rank, "SymmetricHeap::affine_origin");
  return world_->mode() == WorldMode::kProcess ? rank : 0;
}

SymmetricBuffer SymmetricHeap::allocate(size_t bytes, size_t alignment) {
  TL_REQUIRE(bytes > 0, "SymmetricHeap::allocate", "bytes", bytes, "a positive size");
  TL_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0, "SymmetricHeap::allocate",
             "alignment", alignment, "a power of two");
  const size_t reserved = align_up(bytes, kDefaultAlignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const size_t start = it->first, len = it->second;
    const size_t aligned = align_up(start, alignment);
    if (aligned + reserved > start + len) continue;
    free_.erase(it);
    if (aligned > start) free_[start] = aligned - start;
    if (aligned + reserved < start + len) free_[aligned + reserved] = start + len - aligned - reserved;
    return SymmetricBuffer(this, aligned, bytes);
  }
  detail::throw_invalid_argument("SymmetricHeap::allocate", "bytes", bytes,
                                 "at most the largest free range of the heap (" +
                                     std::to_string(bytes_free()) + " bytes free of " +
                                     std::to_string(capacity_) + " per rank)");
}

void SymmetricHeap::release(size_t offset, size_t bytes) {
  size_t start = offset, len = align_up(bytes, kDefaultAlignment);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
}

bool SymmetricHeap::fits(const std::vector<size_t>& bytes) const {
  std::map<size_t, size_t> free = free_;  // allocate()'s first fit, on a copy
  for (size_t b : bytes) {
    if (b == 0) continue;
    const size_t reserved = align_up(b, kDefaultAlignment);
    bool placed = false;
    for (auto it = free.begin(); it != free.end(); ++it) {
      const size_t start = it->first, len = it->second;
      if (reserved > len) continue;  // start is kDefaultAlignment-aligned: ranges are kept aligned
      free.erase(it);
      if (reserved < len) free[start + reserved] = len - reserved;
      placed = true;
      break;
    }
    if (!placed) return false;
  }
  return true;
}

size_t SymmetricHeap::bytes_free() const {
  size_t total = 0;
  for (const auto& [offset, len] : free_) total += len;
  return total;
}

char* SymmetricHeap::base(int rank) const {
  world_->check_rank(rank, "SymmetricHeap::base");
  return bases_[rank];
}

SymmetricView SymmetricHeap::device_view(int rank) const {
  world_->check_local_rank(rank, "SymmetricHeap::device_view");
  return {device_tables_[rank], bases_[rank], capacity_, rank, world_->size()};
}

SymmetricView SymmetricHeap::host_view(int rank) const {
  world_->check_rank(rank, "SymmetricHeap::host_view");
  return {bases_.data(), bases_[rank], capacity_, rank, world_->size()};
}

bool SymmetricHeap::contains(int rank, const void* p, size_t bytes) const {
  return host_view(rank).contains(p, bytes);
}

}  // namespace tilelink
