// Helpers shared by the CPU suite: seeded random data, poison, a rank-local fence that lets one
// Executor::run hold several consecutive calls of an op, and the message of a refusal.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"

namespace tilelink::test {

// The message of the InvalidArgument `call` throws, or "" if it throws none.
template <class F>
std::string refusal(F&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

constexpr unsigned char kPoison = 0xA5;

inline void fill_random(std::mt19937_64& rng, void* dst, size_t bytes) {
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng());
}

inline std::vector<unsigned char> random_bytes(std::mt19937_64& rng, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  fill_random(rng, v.data(), bytes);
  return v;
}

// "" if `got` holds the bits of `want`; else "<where()> = got, expected want" (`where` is called on
// a mismatch only: the runners check every element).
template <class Where>
std::string float_mismatch(float got, float want, Where&& where) {
  if (std::memcmp(&got, &want, sizeof(float)) == 0) return "";
  return where() + " = " + std::to_string(got) + ", expected " + std::to_string(want);
}

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Options for protocol tests: frequent short delays (stragglers and reorderings) and a wait
// bound far above any legitimate wait on a loaded 2-core machine.
// A block that MPS would not make resident yet: spins until released() is true, at most 20 s, so
// that a protocol that needs this block fails by the executor's timeout report rather than hanging
// here.
template <class Released>
void hold_until(Released&& released) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!released() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}

// "" when every rank's work queue is back at 0 after a call (for_each_queued_unit's last draw
// resets it for the next kernel), else which rank's is not, for `what` (e.g. "call 3").
inline std::string check_queues_reset(const std::vector<cpu::WorkQueue>& queues, const std::string& what) {
  for (size_t r = 0; r < queues.size(); ++r) {
    if (const uint32_t q = queues[r].value(); q != 0) {
      return what + ", rank " + std::to_string(r) + ": the work queue ended at " + std::to_string(q) +
             ", expected 0 (reset by its last draw)";
    }
  }
  return "";
}

inline cpu::ExecutorOptions stress_options(uint64_t seed) {
  cpu::ExecutorOptions o;
  o.seed = seed;
  o.max_delay_us = 40;
  o.delay_probability = 0.3;
  o.wait_timeout = std::chrono::milliseconds(10000);
  return o;
}

// Joins every thread of one rank, as the boundary between two kernels on a rank's stream does,
// without any cross-rank synchronisation. One channel per fence; add mode, so generation g
// (1, 2, ...; never reused on the same channel) completes at g * threads_per_rank.
struct RankFence {
  const cpu::Executor* ex = nullptr;
  uint32_t channel = 0;
  uint32_t op_id = 0;
  uint32_t threads_per_rank = 1;

  void arrive_and_wait(cpu::BlockCtx& ctx, uint64_t generation) const {
    const SignalView s = ex->signals(ctx.rank(), channel, 1, generation, op_id);
    ctx.producer_tile_notify(s, 0, NotifyMode::kAdd);
    ctx.consumer_tile_wait(s, 0, 1, threads_per_rank);
  }
};

}  // namespace tilelink::test
