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
  // The current call's epoch: what views carry (always 1 once the slice is replayable).
  uint64_t epoch() const { return epoch_; }
  bool valid() const { return set_ != nullptr; }

  // Starts the next call and returns its epoch: 1, 2, ... Collective over the ranks this process
  // drives; call it before enqueuing anything of the call.
  //
  // When any of those ranks' compute streams is capturing a CUDA graph, the slice becomes
  // replayable, for good: a captured call cannot take a new epoch at each replay, so every later
  // call -- captured or not -- uses epoch 1, and begin_call enqueues on each rank's compute stream
  // (after the rank's comm stream, where the capture allows) a small kernel that waits until every
  // rank has entered the call, zeroes this rank's channels of the slice, and waits again until
  // every rank has zeroed them. Under the put_signal transport the arrivals at the peers are
  // NVSHMEM's stream signal ops (no peer is mapped), enqueued before each half of the kernel, and
  // are captured with it. The barriers' waits are bounded like every device wait
  // (WaitKind::kCallBarrier). A stream memop wait (rank_wait) of a replayable slice is not
  // watched by World::synchronize: its channel takes the same value in every call.
  //
  // Capture is collective: every process captures the same calls, and a process captures the
  // compute streams of every rank it drives in one capture (else InvalidArgument, before anything
  // is enqueued). The previous call's work on the ranks' other streams must be complete or joined
  // into the compute streams before a captured call replays (the ops join theirs at the end of a
  // call; a bare collective's comm stream is joined here where the capture allows it).
  uint64_t begin_call();
  // Makes the slice replayable now (e.g. to run the same path before and during capture).
  void make_replayable() { replayable_ = true; }
  bool replayable() const { return replayable_; }
  // Names what each channel carries in timeout reports (ErrorChannel::set_describer).
  void set_describer(ErrorChannel::ChannelDescriber describer) const;
  // What the slice's channels at the time of a timeout say (ErrorChannel::set_state_describer).
  void set_state_describer(ErrorChannel::StateDescriber describer) const;

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
  bool replayable_ = false;
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

  // The storage holds three arrays of num_channels() words per rank: the channels, the entry
  // barrier counters of replayable slices (peers add into them) and each rank's count of the
  // barriers it passed (local). A slice's counters sit at its first channel's index.
  static constexpr uint32_t kArrays = 3;

 private:
  friend class SignalSlice;
  struct Live {
    uint32_t first, count;
    std::string owner;
  };
  void release(uint32_t first);
  // The replayable slice's per-call reset (see SignalSlice::begin_call).
  void reset_for_call(const SignalSlice& slice);
  bool capturing() const;  // a compute stream of a rank this process drives is capturing

  SymmetricHeap* heap_;
  uint32_t num_channels_;
  SymmetricBuffer storage_;
  std::vector<uint64_t*> host_tables_;                // every rank's channel 0 (host array)
  std::vector<uint64_t**> device_tables_;             // per rank, on rank's device
  std::vector<Live> live_;
  uint32_t barrier_kernel_id_ = 0;
};

}  // namespace tilelink
