#include "tilelink/runtime/world.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdlib>
#include <string>
#include <thread>

namespace tilelink {

struct World::Impl {
  WorldMode mode = WorldMode::kVirtual;
  std::vector<int> devices;  // per rank
  std::vector<int> sm_budget;
  std::vector<int> num_sms;
  std::vector<cudaStream_t> compute;
  std::vector<cudaStream_t> comm;
  std::vector<cudaEvent_t> compute_done;
  std::unique_ptr<ErrorChannel> errors;

  void create_streams() {
    for (size_t r = 0; r < devices.size(); ++r) {
      TL_CUDA_CHECK(cudaSetDevice(devices[r]));
      int least = 0, greatest = 0;
      TL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      cudaStream_t compute_s = nullptr, comm_s = nullptr;
      TL_CUDA_CHECK(cudaStreamCreateWithPriority(&compute_s, cudaStreamNonBlocking, least));
      compute.push_back(compute_s);
      TL_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_s, cudaStreamNonBlocking, greatest));
      comm.push_back(comm_s);
      cudaEvent_t ev = nullptr;
      TL_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      compute_done.push_back(ev);
    }
  }

  ~Impl() {
    // Destructors do not throw; after a trap these calls fail and there is nothing to do.
    for (size_t r = 0; r < devices.size(); ++r) {
      cudaSetDevice(devices[r]);
      if (r < compute.size()) cudaStreamDestroy(compute[r]);
      if (r < comm.size()) cudaStreamDestroy(comm[r]);
      if (r < compute_done.size()) cudaEventDestroy(compute_done[r]);
    }
  }
};

namespace {

uint64_t timeout_from_env(uint64_t fallback) {
  if (const char* ms = std::getenv("TILELINK_WAIT_TIMEOUT_MS")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(ms, &end, 10);
    TL_REQUIRE(end != ms && *end == '\0', "World", "TILELINK_WAIT_TIMEOUT_MS", ms,
               "a whole number of milliseconds");
    return v * 1'000'000ull;
  }
  return fallback;
}

int device_count() {
  int n = 0;
  TL_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

}  // namespace

World::World(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
World::World(World&&) noexcept = default;
World& World::operator=(World&&) noexcept = default;
World::~World() = default;

World World::virtual_ranks(int world_size, int device, WorldOptions options) {
  TL_REQUIRE(world_size >= 1 && world_size <= kMaxWorldSize, "World::virtual_ranks", "world_size",
             world_size, "1 to " + std::to_string(kMaxWorldSize) + " ranks");
  const int count = device_count();
  TL_REQUIRE(device >= 0 && device < count, "World::virtual_ranks", "device", device,
             "a device in [0, " + std::to_string(count) + ")");
  int sms = 0;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TL_REQUIRE(world_size <= sms, "World::virtual_ranks", "world_size", world_size,
             "at most one rank per SM (" + std::to_string(sms) + " SMs)");

  auto w = std::make_unique<Impl>();
  w->mode = WorldMode::kVirtual;
  w->devices.assign(world_size, device);
  w->num_sms.assign(world_size, sms);
  // Equal budgets that fit together: every rank's persistent kernel can be resident at once.
  w->sm_budget.assign(world_size, sms / world_size);
  w->create_streams();
  w->errors = std::make_unique<ErrorChannel>(device, timeout_from_env(options.wait_timeout_ns));
  return World(std::move(w));
}

World World::multi_gpu(const std::vector<int>& devices, WorldOptions options) {
  const int n = static_cast<int>(devices.size());
  TL_REQUIRE(n >= 1 && n <= kMaxWorldSize, "World::multi_gpu", "devices.size()", n,
             "1 to " + std::to_string(kMaxWorldSize) + " devices");
  const int count = device_count();
  for (int i = 0; i < n; ++i) {
    TL_REQUIRE(devices[i] >= 0 && devices[i] < count, "World::multi_gpu", "devices[i]", devices[i],
               "a device in [0, " + std::to_string(count) + ")");
    for (int j = 0; j < i; ++j) {
      TL_REQUIRE(devices[i] != devices[j], "World::multi_gpu", "devices[i]", devices[i],
                 "distinct devices (use virtual_ranks for several ranks on one GPU)");
    }
  }
  auto w = std::make_unique<Impl>();
  w->mode = WorldMode::kMultiGpu;
  w->devices = devices;
  for (int i = 0; i < n; ++i) {
    int sms = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, devices[i]));
    w->num_sms.push_back(sms);
    w->sm_budget.push_back(sms);
    TL_CUDA_CHECK(cudaSetDevice(devices[i]));
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      TL_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, devices[i], devices[j]));
      if (!can) {
        throw Error("World::multi_gpu: device " + std::to_string(devices[i]) +
                    " cannot access device " + std::to_string(devices[j]) + " (no peer access)");
      }
      const cudaError_t st = cudaDeviceEnablePeerAccess(devices[j], 0);
      if (st == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // clear the non-sticky error
      } else {
        TL_CUDA_CHECK(st);
      }
    }
  }
  w->create_streams();
  w->errors = std::make_unique<ErrorChannel>(devices[0], timeout_from_env(options.wait_timeout_ns));
  return World(std::move(w));
}

int World::size() const { return static_cast<int>(impl_->devices.size()); }
WorldMode World::mode() const { return impl_->mode; }
MemScope World::scope() const {
  return impl_->mode == WorldMode::kVirtual ? MemScope::kGpu : MemScope::kSys;
}
int World::device(int rank) const {
  check_rank(rank, "World::device");
  return impl_->devices[rank];
}
int World::sm_budget(int rank) const {
  check_rank(rank, "World::sm_budget");
  return impl_->sm_budget[rank];
}
int World::num_sms(int rank) const {
  check_rank(rank, "World::num_sms");
  return impl_->num_sms[rank];
}
cudaStream_t World::compute_stream(int rank) const {
  check_rank(rank, "World::compute_stream");
  return impl_->compute[rank];
}
cudaStream_t World::comm_stream(int rank) const {
  check_rank(rank, "World::comm_stream");
  return impl_->comm[rank];
}
ErrorChannel& World::errors() const { return *impl_->errors; }

void preload_kernel(const void* kernel) {
  cudaFuncAttributes attributes{};
  TL_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
}

void World::preload_kernel(const void* kernel) const {
  for (int r = 0; r < size(); ++r) {
    set_device(r);
    tilelink::preload_kernel(kernel);
  }
}

void World::comm_after_compute(int rank) const {
  set_device(rank);
  TL_CUDA_CHECK(cudaEventRecord(impl_->compute_done[rank], impl_->compute[rank]));
  TL_CUDA_CHECK(cudaStreamWaitEvent(impl_->comm[rank], impl_->compute_done[rank], 0));
}

void World::check_rank(int rank, const char* where) const {
  TL_REQUIRE(rank >= 0 && rank < size(), where, "rank", rank,
             "a rank in [0, " + std::to_string(size()) + ")");
}

void World::set_device(int rank) const {
  check_rank(rank, "World::set_device");
  TL_CUDA_CHECK(cudaSetDevice(impl_->devices[rank]));
}

namespace {

uint64_t read_u64(int device, const uint64_t* address) {
  TL_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t side = nullptr;
  TL_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  uint64_t value = 0;
  TL_CUDA_CHECK(cudaMemcpyAsync(&value, address, sizeof(value), cudaMemcpyDefault, side));
  TL_CUDA_CHECK(cudaStreamSynchronize(side));
  TL_CUDA_CHECK(cudaStreamDestroy(side));
  return value;
}

void write_u64(int device, uint64_t* address, uint64_t value) {
  TL_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t side = nullptr;
  TL_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  TL_CUDA_CHECK(cudaMemcpyAsync(address, &value, sizeof(value), cudaMemcpyDefault, side));
  TL_CUDA_CHECK(cudaStreamSynchronize(side));
  TL_CUDA_CHECK(cudaStreamDestroy(side));
}

// The first registered rank_wait on `stream` whose channel has not reached its value: the
// stream's waits complete in order, so that is where the stream stands if it is held by one.
// Each channel is read once.
std::optional<std::pair<StreamWait, uint64_t>> first_unsatisfied(const World& world, int rank,
                                                                 cudaStream_t stream) {
  std::vector<std::pair<const uint64_t*, uint64_t>> observed;
  for (const StreamWait& w : world.errors().stream_waits(stream)) {
    auto it = std::find_if(observed.begin(), observed.end(), [&](auto& o) { return o.first == w.address; });
    if (it == observed.end()) {
      observed.emplace_back(w.address, read_u64(world.device(rank), w.address));
      it = observed.end() - 1;
    }
    if (!epoch_reached(it->second, w.expected)) return std::make_pair(w, it->second);
  }
  return std::nullopt;
}

// Reports a stalled rank_wait: the stream is released first (the channel is set to the expected
// value) so that the process can tear down, then TimeoutError is thrown.
[[noreturn]] void report_stall(const World& world, int rank, const StreamWait& w, uint64_t observed,
                               uint64_t elapsed_ns) {
  write_u64(world.device(rank), const_cast<uint64_t*>(w.address), w.expected);
  world.errors().clear_stream_waits();
  ErrorRecord rec{};
  rec.state = ErrorRecord::kValid;
  rec.kind = WaitKind::kRankWait;
  rec.op_id = w.op_id;
  rec.rank = w.rank;
  rec.block = -1;
  rec.tile = -1;
  rec.channel = w.channel;
  rec.peer = w.rank;
  rec.expected = w.expected;
  rec.observed = observed;
  rec.elapsed_ns = elapsed_ns;
  world.errors().throw_timeout(rec);
}

}  // namespace

void World::synchronize() const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const uint64_t timeout = impl_->errors->timeout_ns();
  uint64_t next_check = timeout;
  for (int r = 0; r < size(); ++r) {
    for (cudaStream_t s : {impl_->comm[r], impl_->compute[r]}) {
      const uint64_t* suspect_address = nullptr;  // the first unsatisfied wait at the last check
      uint64_t suspect_expected = 0;
      for (;;) {
        const cudaError_t st = cudaStreamQuery(s);
        if (st == cudaSuccess) break;
        if (st != cudaErrorNotReady) {
          if (impl_->errors->has_device_error()) impl_->errors->throw_timeout(impl_->errors->device_record());
          TL_CUDA_CHECK(st);
        }
        const uint64_t elapsed = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
        // Device waits bound themselves (they trap); stream memop waits need the host. A wait is
        // reported when it is still the stream's first unsatisfied one a whole timeout later.
        if (timeout != 0 && elapsed > next_check) {
          const auto now = first_unsatisfied(*this, r, s);
          if (now && now->first.address == suspect_address && now->first.expected == suspect_expected) {
            report_stall(*this, r, now->first, now->second, elapsed);
          }
          suspect_address = now ? now->first.address : nullptr;
          suspect_expected = now ? now->first.expected : 0;
          next_check = elapsed + timeout;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  impl_->errors->clear_stream_waits();
}

}  // namespace tilelink
