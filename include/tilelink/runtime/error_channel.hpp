// The host side of timeout reporting: owns the device claim word and the mapped record, names
// ops and what their channels carry, and watches stream-memop waits (which the device cannot
// bound). Every live channel answers the core's sticky-error explainer (core/error.hpp): a trap
// that CUDA reports at a later call still names the waiter.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tilelink/core/error.hpp"
#include "tilelink/primitives/error_channel_view.hpp"
#include "tilelink/primitives/host.hpp"

namespace tilelink {

class ErrorChannel final : public StreamWaitObserver {
 public:
  // `device`: where the claim word lives. `timeout_ns`: bound of every wait (0 = unbounded).
  ErrorChannel(int device, uint64_t timeout_ns);
  ~ErrorChannel();
  ErrorChannel(const ErrorChannel&) = delete;
  ErrorChannel& operator=(const ErrorChannel&) = delete;

  ErrorChannelView view();
  uint64_t timeout_ns() const { return timeout_ns_; }

  // Op names for reports. Ids are small integers, stable for the channel's lifetime.
  uint32_t register_op(const std::string& name);
  std::string op_name(uint32_t op_id) const;

  // What a channel of op `op_id`'s slice carries, for timeout reports: given the channel (slice-
  // relative), the waiting rank and the rank whose memory holds the channel, whose data the
  // waiter needed ("rows [256, 384) of the gathered tensor: rank 2's shard, rows [0, 128) of
  // it"). Set by the op that owns the slice (SignalSlice::set_describer).
  // Kernel names for reports: the id of `name` (the same id for the same name), for
  // SignalView::kernel_id.
  uint32_t register_kernel(const std::string& name);

  using ChannelDescriber = std::function<std::string(uint32_t channel, int waiter, int peer)>;
  void set_describer(uint32_t op_id, ChannelDescriber describer);
  // What the slice's state at the time says (ErrorRecord::snapshot; "" when nothing to add), for a
  // wait that failed because of something upstream: the all-gather names the ranks that had not
  // entered the call when a tile they held up never came.
  using StateDescriber = std::function<std::string(const ErrorRecord& record)>;
  void set_state_describer(uint32_t op_id, StateDescriber describer);

  // A device waiter timed out (the record is complete).
  bool has_device_error() const;
  ErrorRecord device_record() const;
  std::string describe(const ErrorRecord& record) const;
  [[noreturn]] void throw_timeout(const ErrorRecord& record) const;

  // Keeps every rank_wait of views of this channel, for World::synchronize.
  void note_stream_wait(const StreamWaitRecord& wait) override;
  // The waits noted on `stream` since the last clear, oldest first.
  std::vector<StreamWaitRecord> stream_waits(cudaStream_t stream) const;
  void clear_stream_waits();
  // Drops the waits of op `op_id` (its slice turned replayable: its channels are zeroed each call,
  // so an earlier wait's value would read as a stall).
  void forget_stream_waits(uint32_t op_id);

 private:
  int device_;
  uint64_t timeout_ns_;
  uint32_t* claim_ = nullptr;     // device memory
  ErrorRecord* record_ = nullptr; // mapped pinned host memory
  mutable std::mutex mutex_;
  std::vector<std::string> op_names_;
  std::vector<ChannelDescriber> describers_;
  std::vector<StateDescriber> state_describers_;  // by op id; empty: none
  std::vector<std::string> kernel_names_;  // by kernel id; 0 is unnamed  // by op id; empty: none
  std::vector<StreamWaitRecord> stream_waits_;
};

}  // namespace tilelink
