// Shared helpers of the GPU suite: the no-GPU skip, a world (virtual ranks, or one rank per GPU
// with TILELINK_RANKS=gpus) with its heap and signals, device buffers, reproducible host random
// data, poison, byte comparison, and the few device helpers the test kernels share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/tilelink.hpp"
#include "tilelink/tune/tune_cache.hpp"

namespace tilelink::test {

inline bool gpu_present() {
  static const bool present = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return present;
}

}  // namespace tilelink::test

// First statement of every GPU test: without a device the test is reported as skipped, visibly.
#define TL_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                           \
    if (!::tilelink::test::gpu_present()) {                                      \
      GTEST_SKIP() << "no CUDA GPU found: GPU test skipped";                     \
    }                                                                            \
  } while (0)

// After every kernel launch: a bad configuration surfaces here, not at the next synchronize.
#define TL_CHECK_LAUNCH() TL_CUDA_CHECK(cudaGetLastError())

namespace tilelink::test {

// Fill byte of every output before the call that should overwrite it.
constexpr uint8_t kPoison = 0xA5;

// Whether TILELINK_RANKS=gpus asks for one rank per GPU ("virtual" or unset: virtual ranks on
// device 0). Any other value throws InvalidArgument.
inline bool ranks_on_gpus() {
  const char* value = std::getenv("TILELINK_RANKS");
  const std::string mode = value == nullptr ? "" : value;
  if (mode != "" && mode != "virtual" && mode != "gpus") {
    throw InvalidArgument("environment variable TILELINK_RANKS = '" + mode +
                          "': expected 'gpus' (one rank per GPU), 'virtual' or unset (virtual ranks on device 0)");
  }
  return mode == "gpus";
}

// A test's world of `ranks` ranks: one per GPU (devices 0..ranks-1) when ranks_on_gpus() and this
// process sees that many GPUs, else virtual ranks on device 0 as always. A world larger than the
// GPU count falls back to virtual ranks, and the first such fallback says so on stderr.
inline World make_test_world(int ranks, WorldOptions options = {}) {
  if (ranks_on_gpus()) {
    int count = 0;
    TL_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (ranks <= count) {
      std::vector<int> devices(static_cast<size_t>(ranks));
      std::iota(devices.begin(), devices.end(), 0);
      return World::multi_gpu(devices, options);
    }
    static bool said = false;
    if (!said) {
      said = true;
      std::cerr << "TILELINK_RANKS=gpus: " << count << " GPU(s) visible; tests with more ranks than that (first: "
                << ranks << ") run on virtual ranks of device 0\n";
    }
  }
  return World::virtual_ranks(ranks, 0, options);
}

// The world, heap and signal set of one test, in construction order (the heap keeps a pointer to
// the world, the signal set to the heap): never moved.
struct TestWorld {
  World world;
  SymmetricHeap heap;
  SignalSet signals;

  TestWorld(int ranks, size_t heap_bytes_per_rank, uint32_t channels, WorldOptions options = {})
      : world(make_test_world(ranks, options)),
        heap(world, heap_bytes_per_rank),
        signals(heap, channels) {}
  TestWorld(const TestWorld&) = delete;
  TestWorld& operator=(const TestWorld&) = delete;

  // The smallest SM budget over the ranks: grids of at most this many blocks per rank are all
  // resident at once.
  int min_sm_budget() const {
    int budget = world.sm_budget(0);
    for (int r = 1; r < world.size(); ++r) budget = std::min(budget, world.sm_budget(r));
    return budget;
  }
};

// SplitMix64: small, fast, and reproducible across platforms (a failure can be replayed).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Finite floats of varied magnitude and sign, so that a different summation order gives a
  // different rounding.
  float next_float() {
    const uint64_t bits = next();
    const float mantissa = 1.0f + float(bits & 0xFFFFFF) / float(1 << 24);
    const int exponent = int((bits >> 24) % 21) - 10;
    const float sign = (bits >> 32) & 1 ? -1.0f : 1.0f;
    return sign * std::ldexp(mantissa, exponent);
  }

 private:
  uint64_t state_;
};

inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng.next();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

inline std::vector<float> random_floats(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.next_float();
  return v;
}

// A seed that differs per test case, rank and call.
inline uint64_t seed_of(uint64_t test, uint64_t rank, uint64_t call) {
  return (test << 40) ^ (rank << 20) ^ call ^ 0x5EEDull;
}

// Host <-> device transfers and poison. They run on the legacy stream, which the world's
// non-blocking streams do not wait for (and a pageable cudaMemcpy may return before its DMA
// lands), so upload() and poison() end with settle(): every device (every GPU when
// ranks_on_gpus()) idle. A test's inputs and poison are then in place before the op it runs next;
// a raw cudaMemset in a test still needs its own settle().
inline void settle() {
  if (!ranks_on_gpus()) {
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  int current = 0, count = 0;
  TL_CUDA_CHECK(cudaGetDevice(&current));
  TL_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int d = 0; d < count; ++d) {
    TL_CUDA_CHECK(cudaSetDevice(d));
    TL_CUDA_CHECK(cudaDeviceSynchronize());
  }
  TL_CUDA_CHECK(cudaSetDevice(current));
}
inline void upload(void* dst, const void* src, size_t bytes) {
  TL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  settle();
}
template <class T>
std::vector<T> download(const void* src, size_t count) {
  std::vector<T> v(count);
  TL_CUDA_CHECK(cudaMemcpy(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}
inline void poison(void* p, size_t bytes) {
  if (!ranks_on_gpus()) {
    TL_CUDA_CHECK(cudaMemset(p, kPoison, bytes));
    settle();
    return;
  }
  // On the memory's own device: a multi-GPU world's buffers live on several.
  cudaPointerAttributes attributes{};
  TL_CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
  int current = 0;
  TL_CUDA_CHECK(cudaGetDevice(&current));
  TL_CUDA_CHECK(cudaSetDevice(attributes.type == cudaMemoryTypeDevice ? attributes.device : current));
  TL_CUDA_CHECK(cudaMemset(p, kPoison, bytes));
  TL_CUDA_CHECK(cudaSetDevice(current));
  settle();
}

// bf16 values uniform in [-1, 1).
inline std::vector<__nv_bfloat16> random_bf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> v(n);
  for (auto& x : v) x = __float2bfloat16(dist(rng));
  return v;
}

// An op refuses `args`: can_implement's reason contains `needle` (the argument and its value),
// and the constructor throws InvalidArgument.
template <class Op, class Args>
void expect_refused(TestWorld& env, const Args& args, const std::string& needle) {
  const std::string why = Op::can_implement(env.world, env.heap, args);
  EXPECT_NE(why.find(needle), std::string::npos) << "'" << why << "' does not name " << needle;
  EXPECT_THROW(Op(env.world, env.heap, env.signals, args), InvalidArgument);
}

// One bad variation of a valid argument set: `change` spoils a copy of it, and the op must refuse
// the result naming `needle` (expect_refused).
template <class Args>
struct Refusal {
  std::function<void(Args&)> change;
  std::string needle;
};

// expect_refused for every case of `refusals`, each a change to its own copy of `good`.
template <class Op, class Args>
void expect_refusals(TestWorld& env, const Args& good, const std::vector<Refusal<Args>>& refusals) {
  for (const Refusal<Args>& refusal : refusals) {
    Args bad = good;
    refusal.change(bad);
    expect_refused<Op>(env, bad, refusal.needle);
  }
}

// Byte-exact comparison with the first mismatch and the number of mismatching bytes.
inline ::testing::AssertionResult bytes_equal(const std::vector<uint8_t>& got,
                                              const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t first = got.size(), count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (count++ == 0) first = i;
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  // One stream for the whole message: AssertionResult's operator<< starts a new one per value, so
  // std::hex passed to it is lost.
  std::ostringstream message;
  message << count << " of " << got.size() << " bytes differ; first at byte " << first << ": got 0x" << std::hex
          << int(got[first]) << ", want 0x" << int(want[first]) << std::dec
          << (got[first] == kPoison ? " (poison: never written)" : "");
  return ::testing::AssertionFailure() << message.str();
}

inline bool all_poison(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == kPoison; });
}

// TILELINK_TUNE_CACHE pointed at a fresh file of this scope (the suite runs with the cache "off"),
// restored and the file removed at its end: the ops' tune-cache tests.
class ScopedTuneCache {
 public:
  explicit ScopedTuneCache(const std::string& name) {
    std::mt19937_64 rng(std::random_device{}());
    path_ = std::string(::testing::TempDir()) + "tilelink_" + name + "_" + std::to_string(rng()) + ".json";
    if (const char* saved = std::getenv("TILELINK_TUNE_CACHE")) saved_ = saved, had_ = true;
    setenv("TILELINK_TUNE_CACHE", path_.c_str(), 1);
  }
  ~ScopedTuneCache() {
    if (had_) {
      setenv("TILELINK_TUNE_CACHE", saved_.c_str(), 1);
    } else {
      unsetenv("TILELINK_TUNE_CACHE");
    }
    std::remove(path_.c_str());
  }
  ScopedTuneCache(const ScopedTuneCache&) = delete;
  ScopedTuneCache& operator=(const ScopedTuneCache&) = delete;

  const std::string& path() const { return path_; }
  // Stores `entry` under `key` in the file.
  void put(const TuneKey& key, const TuneEntry& entry) const {
    TuneCache cache = TuneCache::load(path_);
    cache.put(key, entry);
    cache.save();
  }

 private:
  std::string path_, saved_;
  bool had_ = false;
};

inline std::string world_name(const ::testing::TestParamInfo<int>& info) {
  return "world" + std::to_string(info.param);
}

constexpr int kWorldSizes[] = {1, 2, 4, 8};

}  // namespace tilelink::test

#if defined(__CUDACC__)
namespace tilelink::test {

// The block copies `bytes` (a multiple of 16, 16-byte aligned pointers) with 16-byte vectors.
__device__ inline void block_copy16(void* dst, const void* src, uint64_t bytes) {
  int4* d = static_cast<int4*>(dst);
  const int4* s = static_cast<const int4*>(src);
  for (uint64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
}

// A 32-bit word that depends on every argument (murmur3 finaliser): stale data from another
// trial, pair or position never matches.
__host__ __device__ inline uint32_t pattern_word(uint32_t trial, uint32_t pair, uint32_t word) {
  uint32_t h = trial * 0x9E3779B9u ^ (pair + 1) * 0x85EBCA6Bu ^ (word + 1) * 0xC2B2AE35u;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

}  // namespace tilelink::test
#endif
