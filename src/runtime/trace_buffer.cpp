#include "tilelink/runtime/trace_buffer.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"

namespace tilelink {

TraceBuffer::TraceBuffer(const World& world, uint32_t capacity) : world_(&world), capacity_(capacity) {
  TL_REQUIRE(capacity > 0, "TraceBuffer", "capacity", capacity, "> 0");
  records_.resize(static_cast<size_t>(world.size()));  // other processes' ranks: empty
  cursors_.resize(static_cast<size_t>(world.size()));
  for (int r : world.local_ranks()) {
    records_[static_cast<size_t>(r)] = DeviceBuffer(size_t(capacity) * sizeof(TraceRecord), world.device(r));
    cursors_[static_cast<size_t>(r)] = DeviceBuffer(sizeof(uint32_t), world.device(r));
  }
  clear();
}

TraceView TraceBuffer::view(int rank) const {
  world_->check_local_rank(rank, "TraceBuffer::view");
  const size_t i = static_cast<size_t>(rank);
  return {records_[i].get<TraceRecord>(), cursors_[i].get<uint32_t>(), capacity_, static_cast<uint32_t>(rank)};
}

void TraceBuffer::clear() {
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    TL_CUDA_CHECK(cudaMemset(cursors_[static_cast<size_t>(r)].get(), 0, sizeof(uint32_t)));
  }
}

std::vector<uint32_t> TraceBuffer::cursor_values() const {
  std::vector<uint32_t> v(static_cast<size_t>(world_->size()), 0);  // other processes' ranks: 0
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    uint32_t c = 0;
    TL_CUDA_CHECK(cudaMemcpy(&c, cursors_[static_cast<size_t>(r)].get(), sizeof(c), cudaMemcpyDeviceToHost));
    v[static_cast<size_t>(r)] = c;
  }
  return v;
}

std::vector<TraceRecord> TraceBuffer::records() const {
  const std::vector<uint32_t> counts = cursor_values();
  std::vector<TraceRecord> out;
  for (int r : world_->local_ranks()) {
    const uint32_t n = std::min(counts[static_cast<size_t>(r)], capacity_);
    const size_t at = out.size();
    out.resize(at + n);
    world_->set_device(r);
    TL_CUDA_CHECK(cudaMemcpy(out.data() + at, records_[static_cast<size_t>(r)].get(), size_t(n) * sizeof(TraceRecord),
                             cudaMemcpyDeviceToHost));
  }
  return out;
}

uint64_t TraceBuffer::dropped() const {
  uint64_t d = 0;
  for (uint32_t c : cursor_values()) d += c > capacity_ ? c - capacity_ : 0;
  return d;
}

}  // namespace tilelink
