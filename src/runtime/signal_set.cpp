#include "tilelink/runtime/signal_set.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "call_barrier.hpp"

namespace tilelink {

// ---- SignalSlice -----------------------------------------------------------------------------------

SignalSlice::SignalSlice(SignalSlice&& o) noexcept
    : set_(o.set_), first_(o.first_), count_(o.count_), op_id_(o.op_id_), epoch_(o.epoch_),
      replayable_(o.replayable_) {
  o.set_ = nullptr;
}

SignalSlice& SignalSlice::operator=(SignalSlice&& o) noexcept {
  if (this != &o) {
    if (set_ != nullptr) set_->release(first_);
    set_ = o.set_;
    first_ = o.first_;
    count_ = o.count_;
    op_id_ = o.op_id_;
    epoch_ = o.epoch_;
    replayable_ = o.replayable_;
    o.set_ = nullptr;
  }
  return *this;
}

SignalSlice::~SignalSlice() {
  if (set_ != nullptr) set_->release(first_);
}

uint64_t SignalSlice::begin_call() {
  TL_REQUIRE(set_ != nullptr, "SignalSlice::begin_call", "this", "empty slice", "a slice from SignalSet");
  if (!replayable_ && set_->capturing()) {
    replayable_ = true;
    set_->heap_->world().errors().forget_stream_waits(op_id_);
  }
  if (!replayable_) return ++epoch_;
  epoch_ = 1;
  set_->reset_for_call(*this);
  return epoch_;
}

void SignalSlice::set_describer(ErrorChannel::ChannelDescriber describer) const {
  TL_REQUIRE(set_ != nullptr, "SignalSlice::set_describer", "this", "empty slice", "a slice from SignalSet");
  set_->heap_->world().errors().set_describer(op_id_, std::move(describer));
}

void SignalSlice::set_state_describer(ErrorChannel::StateDescriber describer) const {
  TL_REQUIRE(set_ != nullptr, "SignalSlice::set_state_describer", "this", "empty slice", "a slice from SignalSet");
  set_->heap_->world().errors().set_state_describer(op_id_, std::move(describer));
}

SignalView SignalSlice::device_view(int rank) const { return make_view(rank, true); }
SignalView SignalSlice::device_view(int rank, const std::string& kernel) const {
  SignalView v = make_view(rank, true);
  v.kernel_id = set_->heap_->world().errors().register_kernel(kernel);
  return v;
}
SignalView SignalSlice::host_view(int rank) const { return make_view(rank, false); }

SignalView SignalSlice::make_view(int rank, bool device) const {
  TL_REQUIRE(set_ != nullptr, "SignalSlice::view", "this", "empty slice", "a slice from SignalSet");
  const World& world = set_->heap_->world();
  if (device) {
    world.check_local_rank(rank, "SignalSlice::device_view");
  } else {
    world.check_rank(rank, "SignalSlice::host_view");
  }
  SignalView v;
  v.peer_channels = device ? set_->device_tables_[rank] : set_->host_tables_.data();
  v.local_channels = set_->host_tables_[rank] + first_;
  v.first = first_;
  v.epoch = epoch_;
  v.num_channels = count_;
  v.rank = rank;
  v.world = world.size();
  v.scope = world.scope();
  v.op_id = op_id_;
  v.replayable = replayable_ ? 1u : 0u;
  v.errors = world.errors().view();
  return v;
}

// ---- SignalSet -------------------------------------------------------------------------------------

SignalSet::SignalSet(SymmetricHeap& heap, uint32_t num_channels)
    : heap_(&heap), num_channels_(num_channels) {
  TL_REQUIRE(num_channels > 0, "SignalSet", "num_channels", num_channels, "at least one channel");
  const World& world = heap.world();
  const size_t bytes = sizeof(uint64_t) * kArrays * num_channels;
  storage_ = heap.allocate(bytes);
  const int n = world.size();
  for (int r = 0; r < n; ++r) {  // a peer under put_signal is not mapped: null in the tables
    host_tables_.push_back(heap.base(r) == nullptr ? nullptr : storage_.as<uint64_t>(r));
  }
  device_tables_.assign(n, nullptr);
  for (int r : world.local_ranks()) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemset(storage_.data(r), 0, bytes));
    void* t = device_malloc(sizeof(uint64_t*) * n, world.device(r), "SignalSet (rank " + std::to_string(r) + "'s peer table)");
    device_tables_[r] = static_cast<uint64_t**>(t);
    TL_CUDA_CHECK(cudaMemcpy(t, host_tables_.data(), sizeof(uint64_t*) * n, cudaMemcpyHostToDevice));
    TL_CUDA_CHECK(cudaDeviceSynchronize());  // the zeroes are in place (the memset is asynchronous)
  }
  detail::preload_call_barrier(world);  // not loaded lazily under a graph capture
  barrier_kernel_id_ = world.errors().register_kernel("call_barrier_kernel");
  world.barrier();  // no peer process signals into channels this one has not zeroed yet
}

SignalSet::~SignalSet() {
  const World& world = heap_->world();
  for (int r : world.local_ranks()) {
    cudaSetDevice(world.device(r));
    cudaFree(device_tables_[r]);
  }
}

SignalSlice SignalSet::slice(uint32_t first, uint32_t count, const std::string& owner) {
  TL_REQUIRE(count > 0, "SignalSet::slice", "count", count, "at least one channel");
  TL_REQUIRE(uint64_t(first) + count <= num_channels_, "SignalSet::slice", "first + count",
             uint64_t(first) + count, "at most the set's " + std::to_string(num_channels_) + " channels");
  for (const Live& l : live_) {
    if (first < l.first + l.count && l.first < first + count) {
      detail::throw_invalid_argument(
          "SignalSet::slice", "first", first,
          "channels [" + std::to_string(first) + ", " + std::to_string(first + count) +
              ") for op '" + owner + "' not to overlap the live slice [" + std::to_string(l.first) +
              ", " + std::to_string(l.first + l.count) + ") of op '" + l.owner + "'");
    }
  }
  // Start from zero on every rank, after whatever earlier work used these channels.
  const World& world = heap_->world();
  for (int r : world.local_ranks()) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaStreamSynchronize(world.comm_stream(r)));
    for (uint32_t a = 0; a < kArrays; ++a) {  // the channels, and the barrier counters at their index
      TL_CUDA_CHECK(cudaMemsetAsync(host_tables_[r] + size_t(a) * num_channels_ + first, 0,
                                    sizeof(uint64_t) * count, world.compute_stream(r)));
    }
    TL_CUDA_CHECK(cudaStreamSynchronize(world.compute_stream(r)));
  }
  // Every process zeroed its channels before any peer's first call can notify into them (slices
  // are claimed collectively: every process builds the same ops in the same order).
  world.barrier();
  live_.push_back({first, count, owner});
  return SignalSlice(this, first, count, world.errors().register_op(owner));
}

SignalSlice SignalSet::allocate(uint32_t count, const std::string& owner) {
  TL_REQUIRE(count > 0, "SignalSet::allocate", "count", count, "at least one channel");
  std::vector<Live> sorted = live_;
  std::sort(sorted.begin(), sorted.end(), [](const Live& a, const Live& b) { return a.first < b.first; });
  uint32_t cursor = 0;
  for (const Live& l : sorted) {
    if (l.first >= cursor + count) break;
    cursor = std::max(cursor, l.first + l.count);
  }
  TL_REQUIRE(uint64_t(cursor) + count <= num_channels_, "SignalSet::allocate", "count", count,
             "at most the free channels of the set (" + std::to_string(num_channels_) + " in all, " +
                 std::to_string(live_.size()) + " live slices)");
  return slice(cursor, count, owner);
}

namespace {

// Whether `waiter` may wait on an event recorded on `other` now: both outside any capture, or both
// in the same one (a capture may not depend on work outside it).
bool may_join(cudaStream_t waiter, cudaStream_t other) {
  cudaStreamCaptureStatus ws = cudaStreamCaptureStatusNone, os = cudaStreamCaptureStatusNone;
  unsigned long long wid = 0, oid = 0;
  TL_CUDA_CHECK(cudaStreamGetCaptureInfo(waiter, &ws, &wid));
  TL_CUDA_CHECK(cudaStreamGetCaptureInfo(other, &os, &oid));
  if (ws == cudaStreamCaptureStatusNone) return os == cudaStreamCaptureStatusNone;
  return os == ws && oid == wid;
}

}  // namespace

bool SignalSet::capturing() const {
  const World& world = heap_->world();
  const std::vector<int>& ranks = world.local_ranks();
  cudaStreamCaptureStatus first = cudaStreamCaptureStatusNone;
  unsigned long long first_id = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    TL_CUDA_CHECK(cudaStreamGetCaptureInfo(world.compute_stream(ranks[i]), &status, &id));
    if (i == 0) {
      first = status;
      first_id = id;
    } else if (status != first || id != first_id) {
      // The call's barrier runs on every rank this process drives: a rank outside the capture
      // would run it now and wait for peers whose barriers only the graph holds.
      detail::throw_invalid_argument(
          "SignalSlice::begin_call", "rank", ranks[i],
          "a compute stream in the same CUDA-graph capture as rank " + std::to_string(ranks[0]) +
              "'s (a captured call captures the compute streams of every rank this process drives)");
    }
  }
  return first != cudaStreamCaptureStatusNone;
}

void SignalSet::reset_for_call(const SignalSlice& slice) {
  const World& world = heap_->world();
  for (int r : world.local_ranks()) {
    world.set_device(r);
    // The previous call's communication (a collective's comm stream need not have joined) is
    // done before the channels it signals are zeroed. Under capture, a comm stream outside this
    // capture holds nothing of the graph: each replay runs whole before the next.
    if (may_join(world.compute_stream(r), world.comm_stream(r))) world.compute_after_comm(r);
    SignalView v = slice.make_view(r, true);
    v.kernel_id = barrier_kernel_id_;
    detail::launch_call_barrier(v, num_channels_, world.transport(), world.compute_stream(r));
  }
}

void SignalSet::release(uint32_t first) {
  live_.erase(std::remove_if(live_.begin(), live_.end(), [&](const Live& l) { return l.first == first; }),
              live_.end());
}

}  // namespace tilelink
