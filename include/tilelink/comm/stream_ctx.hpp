// One rank's stream as a protocol context (copy-engine paths): the host primitives, enqueued on
// the stream in program order. Host code only; kernels use DeviceBlockCtx (device_ctx.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tilelink/primitives/host.hpp"

namespace tilelink {

struct StreamCtx {
  int rank_;
  int world_;
  cudaStream_t stream_;
  Transport transport_ = Transport::kLoadStore;  // how the stream reaches peers (World::transport)

  int rank() const { return rank_; }
  int world() const { return world_; }
  void rank_notify(const SignalView& sig, uint32_t channel, int peer) {
    tilelink::rank_notify(stream_, sig, channel, peer, transport_);
  }
  void rank_put_signal(const SymmetricView& heap, void* dst, const void* src, uint64_t pitch, TileShape shape,
                       const SignalView& sig, uint32_t channel, int peer) {
    tilelink::rank_put_signal(stream_, heap, dst, src, pitch, shape, sig, channel, peer, transport_);
  }
  void rank_wait(const SignalView& sig, uint32_t channel, uint32_t arrivals = 1) {
    tilelink::rank_wait(stream_, sig, channel, arrivals);
  }
  void rank_copy_data(void* dst, const void* src, size_t bytes) {
    tilelink::rank_copy_data(stream_, dst, src, bytes);
  }
};

}  // namespace tilelink
