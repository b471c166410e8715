// Signals: symmetric 64-bit channels with per-call epochs.
//
// A SignalView is one op's slice of a SignalSet as seen by one rank during one call. It is a
// plain struct: the GPU kernels receive it by value, the CPU protocol executor builds the same
// struct over host memory, and the mapping/order code is shared.
//
// Epoch rule (no memset between calls): a slice's channels start at 0 when it is created. Call
// number e (e = 1, 2, ...) of the op that owns the slice uses epoch e.
//  - NotifyMode::kSet stores e.            Waiters expect e (arrivals = 1).
//  - NotifyMode::kAdd adds 1.              With k notifies per channel per call, waiters expect
//                                          e * k (arrivals = k); k must be the same every call.
// A wait completes when (int64_t)(observed - expected) >= 0, which survives wrap-around.
//
// Replayable slices (CUDA graphs): a captured call keeps the epoch it was captured with, so a
// slice that is ever captured switches for good to epoch 1 on every call, and every call first
// zeroes the slice's channels on every rank between two device barriers (SignalSlice::begin_call).
// Values stay immediate, so stream memops (rank_notify / rank_wait) replay as they are.
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"
#include "tilelink/primitives/error_channel_view.hpp"

namespace tilelink {

// Scope of the release/acquire that guards data: kGpu when every rank of the world lives on one
// GPU (virtual ranks), kSys when ranks are on different GPUs.
enum class MemScope : uint32_t { kGpu = 0, kSys = 1 };

enum class NotifyMode : uint32_t { kSet = 0, kAdd = 1 };

TL_HOST_DEVICE bool epoch_reached(uint64_t observed, uint64_t expected) {
  return static_cast<int64_t>(observed - expected) >= 0;
}

struct SignalView {
  uint64_t* const* peer_channels = nullptr;  // [world]: channel 0 of the SignalSet on each rank
  uint64_t* local_channels = nullptr;        // this slice's channel 0 on this rank
  uint32_t first = 0;                        // this slice's first channel within the set
  uint64_t epoch = 0;                        // this call's epoch, >= 1
  uint32_t num_channels = 0;
  int32_t rank = 0;
  int32_t world = 0;
  MemScope scope = MemScope::kGpu;
  uint32_t op_id = 0;
  uint32_t kernel_id = 0;  // the kernel this view is handed to, named in timeout reports (0: none)
  uint32_t replayable = 0;  // 1: the slice is replayable (epoch 1 every call, channels reset)
  ErrorChannelView errors;

  TL_HOST_DEVICE uint64_t* local(uint32_t channel) const { return local_channels + channel; }
  TL_HOST_DEVICE uint64_t* on(int peer, uint32_t channel) const {
    return peer_channels[peer] + first + channel;
  }
  TL_HOST_DEVICE uint64_t expected(uint32_t arrivals) const { return epoch * arrivals; }
  TL_HOST_DEVICE uint64_t set_value() const { return epoch; }
};

}  // namespace tilelink
