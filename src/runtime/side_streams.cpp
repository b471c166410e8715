#include "tilelink/runtime/side_streams.hpp"

#include <utility>

#include "tilelink/core/error.hpp"

namespace tilelink {

SideStreams::SideStreams(const World& world, bool high) : world_(&world) {
  // One entry per rank; those of other processes' ranks stay null.
  const size_t n = static_cast<size_t>(world.size());
  streams_.assign(n, nullptr);
  fork_.assign(n, nullptr);
  join_.assign(n, nullptr);
  for (int r : world.local_ranks()) {
    world.set_device(r);
    int least = 0, greatest = 0;
    TL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TL_CUDA_CHECK(cudaStreamCreateWithPriority(&streams_[r], cudaStreamNonBlocking, high ? greatest : least));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&fork_[r], cudaEventDisableTiming));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&join_[r], cudaEventDisableTiming));
  }
}

SideStreams SideStreams::on_comm_streams(const World& world) {
  SideStreams s;
  s.world_ = &world;
  s.shares_comm_ = true;
  const size_t n = static_cast<size_t>(world.size());
  s.streams_.assign(n, nullptr);
  s.fork_.assign(n, nullptr);
  s.join_.assign(n, nullptr);
  for (int r : world.local_ranks()) {
    world.set_device(r);
    s.streams_[r] = world.comm_stream(r);
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork_[r], cudaEventDisableTiming));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&s.join_[r], cudaEventDisableTiming));
  }
  return s;
}

SideStreams::~SideStreams() { release(); }

SideStreams::SideStreams(SideStreams&& other) noexcept
    : world_(other.world_),
      shares_comm_(other.shares_comm_),
      streams_(std::move(other.streams_)),
      fork_(std::move(other.fork_)),
      join_(std::move(other.join_)) {
  other.streams_.clear();
  other.fork_.clear();
  other.join_.clear();
}

SideStreams& SideStreams::operator=(SideStreams&& other) noexcept {
  if (this != &other) {
    release();
    world_ = other.world_;
    shares_comm_ = other.shares_comm_;
    streams_ = std::move(other.streams_);
    fork_ = std::move(other.fork_);
    join_ = std::move(other.join_);
    other.streams_.clear();
    other.fork_.clear();
    other.join_.clear();
  }
  return *this;
}

void SideStreams::fork_from(int rank, cudaStream_t from) {
  const size_t r = static_cast<size_t>(rank);
  world_->set_device(rank);
  TL_CUDA_CHECK(cudaEventRecord(fork_[r], from));
  TL_CUDA_CHECK(cudaStreamWaitEvent(streams_[r], fork_[r], 0));
}

void SideStreams::join_into(int rank, cudaStream_t into) {
  const size_t r = static_cast<size_t>(rank);
  world_->set_device(rank);
  TL_CUDA_CHECK(cudaEventRecord(join_[r], streams_[r]));
  TL_CUDA_CHECK(cudaStreamWaitEvent(into, join_[r], 0));
}

// Destructor path: errors are not thrown (the streams may belong to a failed call).
void SideStreams::release() noexcept {
  for (size_t r = 0; r < streams_.size(); ++r) {
    if (streams_[r] == nullptr) continue;
    cudaSetDevice(world_->device(static_cast<int>(r)));
    cudaStreamSynchronize(streams_[r]);
    if (!shares_comm_) cudaStreamDestroy(streams_[r]);  // the world's comm streams are the world's
  }
  for (cudaEvent_t e : fork_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : join_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  streams_.clear();
  fork_.clear();
  join_.clear();
}

}  // namespace tilelink
