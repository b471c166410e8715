#include "bench/harness.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <utility>

#include "bench/random.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::bench {
namespace {

constexpr uint32_t kFillThreads = 256;
constexpr uint32_t kMaxFillBlocks = 4096;

uint32_t fill_blocks(uint64_t items) {
  const uint64_t blocks = (items + kFillThreads - 1) / kFillThreads;
  return static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, kMaxFillBlocks));
}

__global__ void fill_words_kernel(uint32_t* dst, uint64_t count, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    dst[i] = random_word(seed, i);
  }
}

__global__ void fill_floats_kernel(float* dst, uint64_t count, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    dst[i] = random_float(seed, i);
  }
}

__global__ void mismatch_kernel(const uint4* a, const uint4* b, uint64_t count,
                                unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint4 x = a[i];
    const uint4 y = b[i];
    local += (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) ? 1 : 0;
  }
  if (local != 0) atomicAdd(mismatches, local);
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The host opens round `round` by storing it into `flag`; rounds compare wrap-safely.
__global__ void gate_kernel(const volatile uint32_t* flag, uint32_t round, uint64_t timeout_ns,
                            volatile uint32_t* expired) {
  const uint64_t start = globaltimer_ns();
  while (static_cast<int32_t>(*flag - round) < 0) {
    if (globaltimer_ns() - start > timeout_ns) {
      *expired = 1;
      return;
    }
    __nanosleep(500);
  }
}

}  // namespace

Stats summarize(std::vector<double> samples) {
  if (samples.empty()) throw Error("summarize: no samples (iterations must be >= 1)");
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  Stats s;
  s.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  s.samples = n;
  s.p99 = samples[std::min(n - 1, (99 * n + 99) / 100 - 1)];
  return s;
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  size_t unit = 0;
  while (unit + 1 < std::size(units) && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so that later calls do not report it again
    return 0;
  }
  return count;
}

DeviceInfo query_device(int device) {
  DeviceInfo info;
  info.device = device;
  cudaDeviceProp prop{};
  TL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  info.name = prop.name;
  info.memory_bytes = prop.totalGlobalMem;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&info.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device));
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&info.l2_bytes, cudaDevAttrL2CacheSize, device));
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&info.smem_optin_bytes,
                                       cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TL_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  TL_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}


// ---- fills and checks ------------------------------------------------------------------------------

void fill_random_words(void* dst, size_t bytes, uint64_t seed, cudaStream_t stream) {
  TL_REQUIRE(bytes % 4 == 0, "fill_random_words", "bytes", bytes, "a multiple of 4");
  const uint64_t words = bytes / 4;
  if (words == 0) return;
  fill_words_kernel<<<fill_blocks(words), kFillThreads, 0, stream>>>(static_cast<uint32_t*>(dst),
                                                                     words, seed);
  TL_CUDA_CHECK(cudaGetLastError());
}

void fill_random_floats(float* dst, size_t count, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_floats_kernel<<<fill_blocks(count), kFillThreads, 0, stream>>>(dst, count, seed);
  TL_CUDA_CHECK(cudaGetLastError());
}

uint64_t count_mismatches(const void* a, const void* b, size_t bytes, cudaStream_t stream) {
  TL_REQUIRE(bytes % 16 == 0, "count_mismatches", "bytes", bytes, "a multiple of 16");
  TL_REQUIRE(reinterpret_cast<uintptr_t>(a) % 16 == 0, "count_mismatches", "a", a, "16-byte aligned");
  TL_REQUIRE(reinterpret_cast<uintptr_t>(b) % 16 == 0, "count_mismatches", "b", b, "16-byte aligned");
  const uint64_t words = bytes / 16;
  if (words == 0) return 0;
  return count_on_device(stream, [&](unsigned long long* counter) {
    mismatch_kernel<<<fill_blocks(words), kFillThreads, 0, stream>>>(
        static_cast<const uint4*>(a), static_cast<const uint4*>(b), words, counter);
  });
}

uint64_t count_on_device(cudaStream_t stream, const std::function<void(unsigned long long*)>& count) {
  int device = 0;
  TL_CUDA_CHECK(cudaGetDevice(&device));
  DeviceBuffer counter(sizeof(unsigned long long), device);
  TL_CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, counter.bytes(), stream));
  count(counter.get<unsigned long long>());
  TL_CUDA_CHECK(cudaGetLastError());
  unsigned long long result = 0;
  TL_CUDA_CHECK(cudaMemcpyAsync(&result, counter.get(), sizeof(result), cudaMemcpyDeviceToHost, stream));
  TL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

// ---- StreamTimer -----------------------------------------------------------------------------------

StreamTimer::StreamTimer() {
  TL_CUDA_CHECK(cudaEventCreate(&start_));
  TL_CUDA_CHECK(cudaEventCreate(&stop_));
}

StreamTimer::~StreamTimer() {
  (void)cudaEventDestroy(start_);
  (void)cudaEventDestroy(stop_);
}

void StreamTimer::start(cudaStream_t stream) { TL_CUDA_CHECK(cudaEventRecord(start_, stream)); }
void StreamTimer::stop(cudaStream_t stream) { TL_CUDA_CHECK(cudaEventRecord(stop_, stream)); }

double StreamTimer::microseconds() const {
  float ms = 0;
  TL_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return double(ms) * 1e3;
}

// ---- StreamGate ------------------------------------------------------------------------------------

StreamGate::StreamGate(uint32_t timeout_ms) : timeout_ns_(uint64_t(timeout_ms) * 1'000'000ull) {
  void* host = nullptr;
  TL_CUDA_CHECK(cudaHostAlloc(&host, 2 * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  auto* words = static_cast<uint32_t*>(host);
  words[0] = 0;
  words[1] = 0;
  flag_ = words;
  expired_ = words + 1;
  void* device = nullptr;
  TL_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  flag_device_ = static_cast<uint32_t*>(device);
  expired_device_ = flag_device_ + 1;
  preload_kernel(gate_kernel);
}

StreamGate::~StreamGate() {
  if (flag_ != nullptr) {
    *flag_ = round_;  // let any gate still waiting finish
    (void)cudaFreeHost(const_cast<uint32_t*>(flag_));
  }
}

void StreamGate::arm() {
  ++round_;
  *expired_ = 0;
}

void StreamGate::hold(cudaStream_t stream) {
  gate_kernel<<<1, 1, 0, stream>>>(flag_device_, round_, timeout_ns_, expired_device_);
  TL_CUDA_CHECK(cudaGetLastError());
}

void StreamGate::open() {
  // Volatile store to pinned memory; the spinning kernels read it over the bus.
  *flag_ = round_;
}

bool StreamGate::expired() const { return *expired_ != 0; }

// ---- RankTimer -------------------------------------------------------------------------------------

RankTimer::RankTimer(const World& world)
    : world_(&world),
      // In a process world each process would decide alone whether its gate expired and retake
      // the sample, so one process could run the step once more than its peers: no gate there
      // (the processes' barrier before each step keeps them together; host enqueue time counts).
      gated_(world.local_ranks().size() == size_t(world.size())) {
  const int n = world.size();
  start_.assign(n, nullptr);
  compute_done_.assign(n, nullptr);
  stop_.assign(n, nullptr);
  for (int r : world.local_ranks()) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaEventCreate(&start_[r]));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_[r], cudaEventDisableTiming));
    TL_CUDA_CHECK(cudaEventCreate(&stop_[r]));
  }
}

RankTimer::~RankTimer() {
  for (size_t r = 0; r < start_.size(); ++r) {
    if (start_[r] != nullptr) (void)cudaEventDestroy(start_[r]);
    if (compute_done_[r] != nullptr) (void)cudaEventDestroy(compute_done_[r]);
    if (stop_[r] != nullptr) (void)cudaEventDestroy(stop_[r]);
  }
}

std::optional<double> RankTimer::time_once(const std::function<void()>& step, bool gated) {
  const World& w = *world_;
  const std::vector<int>& ranks = w.local_ranks();
  // Other processes' ranks start their step when their host gets there: start together.
  if (ranks.size() < size_t(w.size())) w.barrier();
  if (gated) gate_.arm();
  for (int r : ranks) {
    w.set_device(r);
    if (gated) gate_.hold(w.comm_stream(r));
    TL_CUDA_CHECK(cudaEventRecord(start_[r], w.comm_stream(r)));
    TL_CUDA_CHECK(cudaStreamWaitEvent(w.compute_stream(r), start_[r], 0));
  }
  step();
  for (int r : ranks) {
    w.set_device(r);
    TL_CUDA_CHECK(cudaEventRecord(compute_done_[r], w.compute_stream(r)));
    TL_CUDA_CHECK(cudaStreamWaitEvent(w.comm_stream(r), compute_done_[r], 0));
    TL_CUDA_CHECK(cudaEventRecord(stop_[r], w.comm_stream(r)));
  }
  if (gated) gate_.open();
  w.synchronize();
  if (gated && gate_.expired()) return std::nullopt;
  double slowest = 0;
  for (int r : ranks) {
    float ms = 0;
    TL_CUDA_CHECK(cudaEventElapsedTime(&ms, start_[r], stop_[r]));
    slowest = std::max(slowest, double(ms) * 1e3);
  }
  return slowest;
}

double RankTimer::time(const std::function<void()>& step) {
  if (gated_) {
    if (const std::optional<double> us = time_once(step, true)) return *us;
    gated_ = false;
    std::fprintf(stderr,
                 "tilelink bench: a step blocked the host while its streams were held; timing "
                 "without the gate from now on (host enqueue time is included)\n");
  }
  return *time_once(step, false);
}

Stats repeat(int warmup, int iters, const std::function<double()>& timed) {
  for (int i = 0; i < warmup; ++i) (void)timed();
  std::vector<double> samples;
  samples.reserve(iters > 0 ? iters : 0);
  for (int i = 0; i < iters; ++i) samples.push_back(timed());
  return summarize(std::move(samples));
}

std::vector<Stats> repeat_interleaved(const World& world, int warmup, int iters,
                                      const std::vector<std::function<void()>>& steps, bool* gated) {
  std::vector<std::unique_ptr<RankTimer>> timers;
  for (size_t v = 0; v < steps.size(); ++v) timers.push_back(std::make_unique<RankTimer>(world));
  std::vector<std::vector<double>> samples(steps.size());
  for (int i = 0; i < warmup + iters; ++i) {
    for (size_t v = 0; v < steps.size(); ++v) {
      const double t = timers[v]->time(steps[v]);
      if (i >= warmup) samples[v].push_back(t);
    }
  }
  std::vector<Stats> stats;
  *gated = true;
  for (size_t v = 0; v < steps.size(); ++v) {
    stats.push_back(summarize(std::move(samples[v])));
    *gated = *gated && timers[v]->gated();
  }
  return stats;
}

}  // namespace tilelink::bench
