// One extra stream per rank for an op's third concurrent part (GEMM+RS's copy-engine scatter,
// MoE's gather stage), with the events that splice it into the rank's other streams.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "tilelink/runtime/world.hpp"

namespace tilelink {

class SideStreams {
 public:
  SideStreams() = default;
  // A non-blocking stream per rank of `world`, at the device's highest priority when `high`.
  SideStreams(const World& world, bool high);
  // The rank's own comm stream in place of a stream of its own (not owned): for an op whose third
  // part can run after its communication, where another stream would not get a hardware queue of
  // its own (World::check_extra_streams). shares_comm() says so; the op orders its launches.
  static SideStreams on_comm_streams(const World& world);
  ~SideStreams();
  SideStreams(SideStreams&& other) noexcept;
  SideStreams& operator=(SideStreams&& other) noexcept;
  SideStreams(const SideStreams&) = delete;
  SideStreams& operator=(const SideStreams&) = delete;

  bool empty() const { return streams_.empty(); }
  bool shares_comm() const { return shares_comm_; }
  cudaStream_t stream(int rank) const { return streams_[static_cast<size_t>(rank)]; }
  // Work enqueued next on stream(rank) runs after everything enqueued so far on `from`.
  void fork_from(int rank, cudaStream_t from);
  // Work enqueued next on `into` runs after everything enqueued so far on stream(rank).
  void join_into(int rank, cudaStream_t into);

 private:
  void release() noexcept;

  const World* world_ = nullptr;
  bool shares_comm_ = false;  // streams_ are the world's comm streams: not destroyed here
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> fork_, join_;
};

}  // namespace tilelink
