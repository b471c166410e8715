#include "tilelink/runtime/side_streams.hpp"

#include <utility>

#include "tilelink/core/error.hpp"

namespace tilelink {

SideStreams::SideStreams(const World& world, bool high) : world_(&world) {
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    int least = 0, greatest = 0;
    TL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    TL_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high ? greatest : least));
    streams_.push_back(s);
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    fork_.push_back(fork);
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    join_.push_back(join);
  }
}

SideStreams::~SideStreams() { release(); }

SideStreams::SideStreams(SideStreams&& other) noexcept
    : world_(other.world_),
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
    cudaSetDevice(world_->device(static_cast<int>(r)));
    cudaStreamSynchronize(streams_[r]);
    cudaStreamDestroy(streams_[r]);
  }
  for (cudaEvent_t e : fork_) cudaEventDestroy(e);
  for (cudaEvent_t e : join_) cudaEventDestroy(e);
  streams_.clear();
  fork_.clear();
  join_.clear();
}

}  // namespace tilelink
