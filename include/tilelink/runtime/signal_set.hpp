// SignalSet: a symmetric array of 64-bit channels. Ops own disjoint slices of it; a slice keeps
// its own epoch, so no channel is ever reset between calls (see primitives/signal.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/primitives/signal.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"

namespace tilelink {

class SignalSet;

// One op's channels. Move-only; releases its range when destroyed.
class SignalSlice {
 public:
  SignalSlice() = default;
  SignalSlice(SignalSlice&& other) noexcept;
  SignalSlice& operator=(SignalSlice&& other) noexcept;
  ~SignalSlice();

  uint32_t first() const { return first_; }
  uint32_t count() const { return count_; }
  uint32_t op_id() const { return op_id_; }
  uint64_t epoch() const { return epoch_; }
  bool valid() const { return set_ != nullptr; }

  // Starts the next call: advances the epoch (1, 2, ...) and returns it.
  uint64_t begin_call() { return ++epoch_; }
  // Names what each channel carries in timeout reports (ErrorChannel::set_describer).
  void set_describer(ErrorChannel::ChannelDescriber describer) const;

  // Views at the current epoch, for kernels of `rank` / for host code and host primitives.
  SignalView device_view(int rank) const;
  // The same, for the kernel named `kernel`: a timeout of a wait in it names the kernel.
  SignalView device_view(int rank, const std::string& kernel) const;
  SignalView host_view(int rank) const;

 private:
  friend class SignalSet;
  SignalSlice(SignalSet* set, uint32_t first, uint32_t count, uint32_t op_id)
      : set_(set), first_(first), count_(count), op_id_(op_id) {}
  SignalView make_view(int rank, bool device) const;
  SignalSet* set_ = nullptr;
  uint32_t first_ = 0;
  uint32_t count_ = 0;
  uint32_t op_id_ = 0;
  uint64_t epoch_ = 0;
};

class SignalSet {
 public:
  SignalSet(SymmetricHeap& heap, uint32_t num_channels);
  ~SignalSet();
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  uint32_t num_channels() const { return num_channels_; }

  // Claims channels [first, first + count) for op `owner` and zeroes them on every rank (waiting
  // for each rank's streams first). Throws InvalidArgument if the range is empty, out of the set,
  // or overlaps a live slice -- the message names the slice's owner.
  SignalSlice slice(uint32_t first, uint32_t count, const std::string& owner);
  // Claims the first free range of `count` channels.
  SignalSlice allocate(uint32_t count, const std::string& owner);

 private:
  friend class SignalSlice;
  struct Live {
    uint32_t first, count;
    std::string owner;
  };
  void release(uint32_t first);

  SymmetricHeap* heap_;
  uint32_t num_channels_;
  SymmetricBuffer storage_;
  std::vector<uint64_t*> host_tables_;                // every rank's channel 0 (host array)
  std::vector<uint64_t**> device_tables_;             // per rank, on rank's device
  std::vector<Live> live_;
};

}  // namespace tilelink
