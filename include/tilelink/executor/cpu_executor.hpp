// The CPU protocol executor: runs an op's protocol with threads as ranks and blocks.
//
// The protocol code is the op's own (__host__ __device__ templates over a context type; see
// comm/all_gather.hpp). Here the context is BlockCtx: the same nine primitives over host memory,
// with std::atomic_ref release/acquire for the signals, memcpy for the data, a random delay
// before every primitive (stragglers, reorderings) and bounded waits. A wait that exceeds the
// bound is a deadlock: the executor stops every thread and Executor::run throws TimeoutError
// naming the op, rank, block, tile and channel, the same report the GPU produces.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink::cpu {

struct ExecutorOptions {
  uint64_t seed = 1;
  uint32_t max_delay_us = 100;       // upper bound of one random delay
  double delay_probability = 0.2;    // chance of a delay before each primitive
  std::chrono::milliseconds wait_timeout{3000};
};

class Executor;

// The context a protocol role runs with on the CPU. One instance per thread.
class BlockCtx {
 public:
  int rank() const { return rank_; }
  int world() const { return world_; }
  uint32_t block() const { return block_; }
  uint32_t num_blocks() const { return num_blocks_; }
  // One thread does a block's work on the CPU.
  Lanes lanes() const { return {0, 1}; }
  void sync() {}

  void producer_tile_notify(const SignalView& sig, uint32_t channel,
                            NotifyMode mode = NotifyMode::kSet);
  void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count = 1,
                          uint32_t arrivals = 1, int32_t tile = -1);
  // consumer_tile_wait on a set of tiles (not a range; repeats allowed): for i in [0, n), the
  // channels_per_tile channels from channel0 + tile_of(i) * channels_per_tile. On the GPU the
  // block's lanes share the waits.
  template <class TileOf>
  void consumer_tiles_wait(const SignalView& sig, uint32_t channel0, uint32_t n, TileOf&& tile_of,
                           uint32_t channels_per_tile = 1) {
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t tile = tile_of(i);
      consumer_tile_wait(sig, channel0 + tile * channels_per_tile, channels_per_tile, 1,
                         static_cast<int32_t>(tile));
    }
  }
  // producer_tile_notify (kSet) of channels [channel0, channel0 + n): on the GPU the block's lanes
  // share the stores.
  void producer_tiles_notify(const SignalView& sig, uint32_t channel0, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) producer_tile_notify(sig, channel0 + i);
  }
  void peer_tile_notify(const SignalView& sig, uint32_t channel, int peer,
                        NotifyMode mode = NotifyMode::kSet);
  void peer_tile_wait(const SignalView& sig, uint32_t channel, int peer, uint32_t arrivals = 1,
                      int32_t tile = -1);
  void tile_push_data(const SymmetricView& heap, TileRef dst_sym, int peer, TileShape shape,
                      TileRef src);
  void tile_pull_data(TileRef dst, const SymmetricView& heap, TileRef src_sym, int peer,
                      TileShape shape);

  // Host primitives: this thread plays the rank's stream, so they run in call order.
  void rank_notify(const SignalView& sig, uint32_t channel, int peer);
  void rank_wait(const SignalView& sig, uint32_t channel, uint32_t arrivals = 1);
  void rank_copy_data(void* dst, const void* src, size_t bytes);
  // Rows into peer's counterpart of `dst` (this rank's heap), then peer's channel set.
  void rank_put_signal(const SymmetricView& heap, void* dst, const void* src, uint64_t pitch, TileShape shape,
                       const SignalView& sig, uint32_t channel, int peer);

  // A random delay (called before every primitive; roles may add their own).
  void jitter();

 private:
  friend class Executor;
  BlockCtx(Executor* ex, int rank, int world, uint32_t block, uint32_t num_blocks, uint64_t seed);
  void wait_on(const SignalView& sig, const uint64_t* addr, uint64_t expected, WaitKind kind,
               uint32_t channel, int peer, int32_t tile);
  void notify(const SignalView& sig, uint64_t* addr, NotifyMode mode);

  Executor* ex_;
  int rank_, world_;
  uint32_t block_, num_blocks_;
  std::mt19937_64 rng_;
};

// The CPU stand-in for a rank's device work queue (comm/block_work_queue.cuh): units 0, 1,
// 2, ... each to the one block that asks first.
class WorkQueue {
 public:
  uint32_t next(uint32_t /*bound*/ = 0) { return counter_.fetch_add(1); }
  void reset() { counter_.store(0); }
  uint32_t value() const { return counter_.load(); }

 private:
  std::atomic<uint32_t> counter_{0};
};

// One role of a protocol (e.g. "comm" blocks and "consumer" blocks): `instances` threads per rank.
struct Role {
  std::string name;
  uint32_t instances = 1;
  std::function<void(BlockCtx&)> body;
};

class Executor {
 public:
  Executor(int world, size_t heap_bytes_per_rank, uint32_t num_channels, ExecutorOptions options = {});
  ~Executor();

  int world() const { return world_; }
  const ExecutorOptions& options() const { return options_; }

  // Symmetric host "heap": bump allocation, same offset on every rank. Contents are poisoned
  // (0xA5) at allocation.
  size_t allocate(size_t bytes, size_t alignment = 256);
  char* base(int rank) { return bases_[rank]; }
  template <class T>
  T* at(int rank, size_t offset) {
    return reinterpret_cast<T*>(bases_[rank] + offset);
  }
  SymmetricView heap(int rank) const;

  // Channels [first, first + count) as a slice named `op` at `epoch`, seen from `rank`.
  // Channels start at zero and are never reset, as on the GPU.
  SignalView signals(int rank, uint32_t first, uint32_t count, uint64_t epoch, uint32_t op_id) const;
  uint32_t register_op(const std::string& name);

  // Runs every role on every rank, one thread per (rank, role, instance), all started together.
  // Returns when all finish. Throws the first failure: TimeoutError for a deadlock, or whatever a
  // role threw; the other threads are stopped.
  void run(const std::vector<Role>& roles);

 private:
  friend class BlockCtx;
  int world_;
  ExecutorOptions options_;
  size_t heap_bytes_;
  size_t heap_used_ = 0;
  std::vector<std::unique_ptr<char[]>> segments_;
  std::vector<char*> bases_;
  std::vector<uint64_t> channel_storage_;      // world * num_channels
  std::vector<uint64_t*> channel_bases_;       // [world]
  uint32_t num_channels_;
  std::vector<std::string> op_names_;
  // Written by waiters through the views that signals() hands out.
  mutable uint32_t claim_ = 0;
  mutable ErrorRecord record_{};
  std::atomic<bool> abort_{false};
  uint64_t runs_ = 0;
};

}  // namespace tilelink::cpu
