// Measurement harness shared by the benchmarks: statistics, CUDA-event timers, a stream gate that
// keeps host enqueue time out of multi-rank timings, random fills and device-side comparisons.
// Host-only declarations: the CLI (plain C++) includes this header too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

struct Stats {
  double median = 0;
  double min = 0;
  double max = 0;
  size_t samples = 0;
  double p99 = 0;  // the 99th percentile (nearest rank)
};
// Throws Error if `samples` is empty.
Stats summarize(std::vector<double> samples);

// Bytes per microsecond == MB/s; the benchmarks report GB/s = 10^9 bytes per second.
inline double gb_per_s(double bytes, double microseconds) { return bytes / microseconds * 1e-3; }

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;
// "64 KiB", "256 MiB", "3 B".
std::string format_bytes(size_t bytes);

struct DeviceInfo {
  int device = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sms = 0;
  size_t memory_bytes = 0;
  int l2_bytes = 0;
  int smem_optin_bytes = 0;
  int driver_version = 0;
  int runtime_version = 0;
};
// Number of CUDA devices; 0 when the runtime finds none or no driver (never throws).
int cuda_device_count();
DeviceInfo query_device(int device);

// Fills `bytes` (a multiple of 4) with random_word(seed, i) for 32-bit word i.
void fill_random_words(void* dst, size_t bytes, uint64_t seed, cudaStream_t stream);
// Fills `count` floats with random_float(seed, i).
void fill_random_floats(float* dst, size_t count, uint64_t seed, cudaStream_t stream);
// Number of 16-byte words in which `a` and `b` differ (`bytes` a multiple of 16, both 16-byte
// aligned). Synchronises `stream`.
uint64_t count_mismatches(const void* a, const void* b, size_t bytes, cudaStream_t stream);

// Runs `count` (which launches kernels that atomically add to the counter it is given) on
// `stream` of the current device and returns the counter. Synchronises `stream`.
uint64_t count_on_device(cudaStream_t stream, const std::function<void(unsigned long long*)>& count);

// CUDA events around work on one stream.
class StreamTimer {
 public:
  StreamTimer();
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  void start(cudaStream_t stream);
  void stop(cudaStream_t stream);
  // Elapsed time between start and stop; the stop event must have completed.
  double microseconds() const;

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Holds streams behind a one-thread kernel that spins on a flag in mapped host memory, so that
// everything enqueued behind it starts together once the host opens the gate. The spin is
// bounded: if the host does not open the gate within `timeout_ms` (an enqueue call blocked on the
// held stream), the kernel gives up and expired() reports it.
class StreamGate {
 public:
  explicit StreamGate(uint32_t timeout_ms = 1000);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Starts a new round; every hold() until the next arm() waits for this round's open().
  void arm();
  void hold(cudaStream_t stream);
  void open();
  // After the held streams completed: whether a gate of this round timed out.
  bool expired() const;

 private:
  volatile uint32_t* flag_ = nullptr;     // mapped pinned host memory: the open round
  volatile uint32_t* expired_ = nullptr;  // mapped pinned host memory: set by a gate that timed out
  uint32_t* flag_device_ = nullptr;
  uint32_t* expired_device_ = nullptr;
  uint32_t round_ = 0;
  uint64_t timeout_ns_;
};

// Times one multi-rank step. Events bracket both of every rank's streams (compute and comm), all
// ranks are released together by a StreamGate, and the step's time is the slowest rank's. If the
// gate expires (the step blocks the host on a held stream), the sample is retaken without the
// gate and gating stays off; gated() then says that host enqueue time is included.
class RankTimer {
 public:
  explicit RankTimer(const World& world);
  ~RankTimer();
  RankTimer(const RankTimer&) = delete;
  RankTimer& operator=(const RankTimer&) = delete;

  // Enqueues `step` between the events, waits for the world (World::synchronize, so a device
  // timeout surfaces as TimeoutError) and returns the slowest rank's time in microseconds -- of
  // the ranks this process drives: in a process world, its own (the processes pass a barrier
  // before each step, so their steps start together, and the gate is off: a retake decided by one
  // process alone would desynchronise the ranks).
  double time(const std::function<void()>& step);
  bool gated() const { return gated_; }

 private:
  std::optional<double> time_once(const std::function<void()>& step, bool gated);

  const World* world_;
  StreamGate gate_;
  bool gated_ = true;
  std::vector<cudaEvent_t> start_;
  std::vector<cudaEvent_t> compute_done_;
  std::vector<cudaEvent_t> stop_;
};

// Runs `warmup` untimed and `iters` timed calls of `timed` and summarises the timed ones.
Stats repeat(int warmup, int iters, const std::function<double()>& timed);

// Times several variants of one multi-rank step round-robin (one call of each per round, each
// with its own RankTimer), so that clock and power drift during the run fall on all of them
// alike. `gated` is false if any timer had to include host enqueue time.
std::vector<Stats> repeat_interleaved(const World& world, int warmup, int iters,
                                      const std::vector<std::function<void()>>& steps, bool* gated);

}  // namespace tilelink::bench
