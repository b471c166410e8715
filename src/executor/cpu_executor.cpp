// The CPU protocol executor: threads as ranks and blocks, host memory as the symmetric heap.
#include "tilelink/executor/cpu_executor.hpp"

#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::cpu {
namespace {

// Thrown in every thread still running once another one failed; run() swallows it and reports
// the first real failure instead.
struct Aborted {};

// Segments are aligned to this, so that an offset aligned to `a` <= kSegmentAlignment is an
// address aligned to `a` on every rank.
constexpr size_t kSegmentAlignment = 4096;
constexpr unsigned char kPoison = 0xA5;

// Waits spin with yields first (a notifier on another core lands within microseconds), then
// sleep briefly so that many waiting threads do not starve the ones that would notify them.
constexpr uint32_t kYieldSpins = 64;
constexpr std::chrono::microseconds kSpinSleep{20};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t thread_seed(uint64_t seed, int rank, size_t role, uint32_t instance, uint64_t run) {
  uint64_t s = splitmix64(seed);
  for (uint64_t v : {uint64_t(rank), uint64_t(role), uint64_t(instance), run}) s = splitmix64(s ^ v);
  return s;
}

// Extent in bytes of a tile: from its first byte to the end of its last row.
uint64_t tile_extent(const TileRef& t, const TileShape& s) {
  return s.rows == 0 ? 0 : uint64_t(s.rows - 1) * t.pitch + s.row_bytes;
}

void copy_rows(TileRef dst, TileRef src, TileShape shape) {
  for (uint32_t r = 0; r < shape.rows; ++r) std::memcpy(dst.row(r), src.row(r), shape.row_bytes);
}

void check_view(const SignalView& sig, int rank, int world, const char* where) {
  TL_REQUIRE(sig.local_channels != nullptr && sig.peer_channels != nullptr, where, "sig.local_channels",
             static_cast<const void*>(sig.local_channels), "a view made by Executor::signals");
  TL_REQUIRE(sig.rank == rank && sig.world == world, where, "sig.rank", sig.rank,
             "the rank of the calling block (" + std::to_string(rank) + ") in a world of " +
                 std::to_string(world));
}

void check_channels(const SignalView& sig, uint32_t channel, uint32_t count, const char* where) {
  TL_REQUIRE(uint64_t(channel) + count <= sig.num_channels, where, "channel", channel,
             (count == 1 ? std::string("< ") : "+ count (" + std::to_string(count) + ") <= ") +
                 std::to_string(sig.num_channels) + " (the slice's channels)");
}

void check_peer(int peer, int world, const char* where) {
  TL_REQUIRE(peer >= 0 && peer < world, where, "peer", peer,
             "a rank in [0, " + std::to_string(world) + ")");
}

void check_heap(const SymmetricView& heap, int rank, int world, const char* where) {
  TL_REQUIRE(heap.peer_bases != nullptr && heap.rank == rank && heap.world == world, where,
             "heap.rank", heap.rank,
             "the calling block's rank (" + std::to_string(rank) + "): a view made by Executor::heap");
}

void check_tile(const TileRef& t, const TileShape& s, const char* where, const char* name) {
  TL_REQUIRE(tile_is_aligned(t, s), where, name, t.ptr,
             "16-byte aligned pointer, pitch and row_bytes, pitch >= row_bytes (pitch " +
                 std::to_string(t.pitch) + ", row_bytes " + std::to_string(s.row_bytes) + ")");
}

void check_symmetric(const SymmetricView& heap, const TileRef& t, const TileShape& s,
                     const char* where, const char* name) {
  TL_REQUIRE(heap.contains(t.ptr, tile_extent(t, s)), where, name, t.ptr,
             "a tile inside this rank's heap segment (" + std::to_string(tile_extent(t, s)) +
                 " bytes from the pointer)");
}

// A tile copy's checks, in the order a caller reads its arguments: the peer, the heap view, both
// tiles (destination first), then that the symmetric one (`dst` if `dst_is_sym`, else `src`)
// lies in this rank's heap segment.
void check_copy(const SymmetricView& heap, int peer, int rank, int world, const TileRef& dst, const char* dst_name,
                const TileRef& src, const char* src_name, bool dst_is_sym, const TileShape& shape, const char* where) {
  check_peer(peer, world, where);
  check_heap(heap, rank, world, where);
  check_tile(dst, shape, where, dst_name);
  check_tile(src, shape, where, src_name);
  check_symmetric(heap, dst_is_sym ? dst : src, shape, where, dst_is_sym ? dst_name : src_name);
}

}  // namespace

// ---- BlockCtx --------------------------------------------------------------------------------------

BlockCtx::BlockCtx(Executor* ex, int rank, int world, uint32_t block, uint32_t num_blocks,
                   uint64_t seed)
    : ex_(ex), rank_(rank), world_(world), block_(block), num_blocks_(num_blocks), rng_(seed) {}

void BlockCtx::jitter() {
  if (ex_->abort_.load(std::memory_order_relaxed)) throw Aborted{};
  const ExecutorOptions& o = ex_->options_;
  if (o.delay_probability <= 0.0 || o.max_delay_us == 0) return;
  if (std::uniform_real_distribution<double>(0.0, 1.0)(rng_) >= o.delay_probability) return;
  const uint32_t us = std::uniform_int_distribution<uint32_t>(0, o.max_delay_us)(rng_);
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

void BlockCtx::notify(const SignalView& sig, uint64_t* addr, NotifyMode mode) {
  // Release: this block's data writes are visible to whoever acquires the new value.
  std::atomic_ref<uint64_t> flag(*addr);
  if (mode == NotifyMode::kSet) {
    flag.store(sig.set_value(), std::memory_order_release);
  } else {
    flag.fetch_add(1, std::memory_order_release);
  }
}

void BlockCtx::wait_on(const SignalView& sig, const uint64_t* addr, uint64_t expected,
                       WaitKind kind, uint32_t channel, int peer, int32_t tile) {
  // Acquire: data loads after the wait see what the notifier wrote before its release.
  std::atomic_ref<uint64_t> flag(*const_cast<uint64_t*>(addr));
  const auto start = std::chrono::steady_clock::now();
  const auto timeout = ex_->options_.wait_timeout;
  for (uint32_t spins = 0;; ++spins) {
    const uint64_t observed = flag.load(std::memory_order_acquire);
    if (epoch_reached(observed, expected)) return;
    if (ex_->abort_.load(std::memory_order_relaxed)) throw Aborted{};
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed >= timeout) {
      // Only the first waiter to expire writes the record; the others just stop.
      uint32_t unclaimed = 0;
      if (!std::atomic_ref<uint32_t>(ex_->claim_).compare_exchange_strong(
              unclaimed, 1u, std::memory_order_acq_rel)) {
        ex_->abort_.store(true, std::memory_order_relaxed);
        throw Aborted{};
      }
      ErrorRecord& r = ex_->record_;
      r.state = ErrorRecord::kWriting;
      r.kind = kind;
      r.op_id = sig.op_id;
      r.rank = rank_;
      r.block = kind == WaitKind::kRankWait ? -1 : static_cast<int32_t>(block_);  // -1: a stream
      r.tile = tile;
      r.channel = channel;
      r.peer = peer;
      r.expected = expected;
      r.observed = observed;
      r.elapsed_ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
      r.state = ErrorRecord::kValid;
      const ErrorRecord record = r;
      ex_->abort_.store(true, std::memory_order_relaxed);
      const std::string name = sig.op_id < ex_->op_names_.size() ? ex_->op_names_[sig.op_id]
                                                                 : "op#" + std::to_string(sig.op_id);
      throw TimeoutError(describe_timeout(record, name), record, name);
    }
    if (spins < kYieldSpins) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kSpinSleep);
    }
  }
}

void BlockCtx::producer_tile_notify(const SignalView& sig, uint32_t channel, NotifyMode mode) {
  constexpr const char* where = "cpu::BlockCtx::producer_tile_notify";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, 1, where);
  notify(sig, sig.local(channel), mode);
}

void BlockCtx::consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count,
                                  uint32_t arrivals, int32_t tile) {
  constexpr const char* where = "cpu::BlockCtx::consumer_tile_wait";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, count, where);
  const uint64_t expected = sig.expected(arrivals);
  for (uint32_t c = channel; c < channel + count; ++c) {
    wait_on(sig, sig.local(c), expected, WaitKind::kConsumerTile, c, rank_, tile);
  }
}

void BlockCtx::peer_tile_notify(const SignalView& sig, uint32_t channel, int peer, NotifyMode mode) {
  constexpr const char* where = "cpu::BlockCtx::peer_tile_notify";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, 1, where);
  check_peer(peer, world_, where);
  notify(sig, sig.on(peer, channel), mode);
}

void BlockCtx::peer_tile_wait(const SignalView& sig, uint32_t channel, int peer, uint32_t arrivals,
                              int32_t tile) {
  constexpr const char* where = "cpu::BlockCtx::peer_tile_wait";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, 1, where);
  check_peer(peer, world_, where);
  wait_on(sig, sig.on(peer, channel), sig.expected(arrivals), WaitKind::kPeerTile, channel, peer,
          tile);
}

void BlockCtx::tile_push_data(const SymmetricView& heap, TileRef dst_sym, int peer,
                              TileShape shape, TileRef src) {
  constexpr const char* where = "cpu::BlockCtx::tile_push_data";
  jitter();
  check_copy(heap, peer, rank_, world_, dst_sym, "dst_sym", src, "src", true, shape, where);
  copy_rows({heap.translate(static_cast<char*>(dst_sym.ptr), peer), dst_sym.pitch}, src, shape);
}

void BlockCtx::tile_pull_data(TileRef dst, const SymmetricView& heap, TileRef src_sym, int peer,
                              TileShape shape) {
  constexpr const char* where = "cpu::BlockCtx::tile_pull_data";
  jitter();
  check_copy(heap, peer, rank_, world_, dst, "dst", src_sym, "src_sym", false, shape, where);
  copy_rows(dst, {heap.translate(static_cast<char*>(src_sym.ptr), peer), src_sym.pitch}, shape);
}

void BlockCtx::rank_notify(const SignalView& sig, uint32_t channel, int peer) {
  constexpr const char* where = "cpu::BlockCtx::rank_notify";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, 1, where);
  check_peer(peer, world_, where);
  notify(sig, sig.on(peer, channel), NotifyMode::kSet);
}

void BlockCtx::rank_wait(const SignalView& sig, uint32_t channel, uint32_t arrivals) {
  constexpr const char* where = "cpu::BlockCtx::rank_wait";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, 1, where);
  wait_on(sig, sig.local(channel), sig.expected(arrivals), WaitKind::kRankWait, channel, rank_, -1);
}

void BlockCtx::rank_copy_data(void* dst, const void* src, size_t bytes) {
  constexpr const char* where = "cpu::BlockCtx::rank_copy_data";
  jitter();
  if (bytes == 0) return;
  TL_REQUIRE(dst != nullptr, where, "dst", dst, "a valid pointer");
  TL_REQUIRE(src != nullptr, where, "src", src, "a valid pointer");
  std::memcpy(dst, src, bytes);
}

void BlockCtx::rank_put_signal(const SymmetricView& heap, void* dst, const void* src, uint64_t pitch,
                               TileShape shape, const SignalView& sig, uint32_t channel, int peer) {
  constexpr const char* where = "cpu::BlockCtx::rank_put_signal";
  jitter();
  check_view(sig, rank_, world_, where);
  check_channels(sig, channel, 1, where);
  check_peer(peer, world_, where);
  TL_REQUIRE(pitch >= shape.row_bytes, where, "pitch", pitch, "at least the row's bytes");
  if (shape.rows != 0) {
    TL_REQUIRE(src != nullptr, where, "src", src, "a valid pointer");
    TL_REQUIRE(heap.contains(dst, uint64_t(shape.rows - 1) * pitch + shape.row_bytes), where, "dst", dst,
               "rows inside this rank's symmetric heap segment");
    copy_rows({heap.translate(static_cast<char*>(dst), peer), pitch}, {const_cast<void*>(src), pitch}, shape);
  }
  notify(sig, sig.on(peer, channel), NotifyMode::kSet);
}

// ---- Executor --------------------------------------------------------------------------------------

Executor::Executor(int world, size_t heap_bytes_per_rank, uint32_t num_channels,
                   ExecutorOptions options)
    : world_(world), options_(options), heap_bytes_(heap_bytes_per_rank), num_channels_(num_channels) {
  constexpr const char* where = "cpu::Executor";
  TL_REQUIRE(world >= 1 && world <= kMaxWorldSize, where, "world", world,
             "1 <= world <= " + std::to_string(kMaxWorldSize));
  TL_REQUIRE(num_channels >= 1, where, "num_channels", num_channels, ">= 1");
  TL_REQUIRE(options.wait_timeout.count() > 0, where, "options.wait_timeout (ms)",
             options.wait_timeout.count(), "> 0: every wait is bounded");
  TL_REQUIRE(options.delay_probability >= 0.0 && options.delay_probability <= 1.0, where,
             "options.delay_probability", options.delay_probability, "a probability in [0, 1]");
  segments_.reserve(world);
  bases_.reserve(world);
  for (int r = 0; r < world; ++r) {
    segments_.emplace_back(new char[heap_bytes_ + kSegmentAlignment]);
    const auto raw = reinterpret_cast<uintptr_t>(segments_.back().get());
    char* base = reinterpret_cast<char*>((raw + kSegmentAlignment - 1) & ~uintptr_t(kSegmentAlignment - 1));
    std::memset(base, kPoison, heap_bytes_);
    bases_.push_back(base);
  }
  channel_storage_.assign(size_t(world) * num_channels, 0);
  for (int r = 0; r < world; ++r) channel_bases_.push_back(channel_storage_.data() + size_t(r) * num_channels);
}

Executor::~Executor() = default;

size_t Executor::allocate(size_t bytes, size_t alignment) {
  constexpr const char* where = "cpu::Executor::allocate";
  TL_REQUIRE(alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= kSegmentAlignment,
             where, "alignment", alignment,
             "a power of two <= " + std::to_string(kSegmentAlignment));
  const size_t offset = (heap_used_ + alignment - 1) & ~(alignment - 1);
  TL_REQUIRE(offset <= heap_bytes_ && bytes <= heap_bytes_ - offset, where, "bytes", bytes,
             "at most " + std::to_string(offset <= heap_bytes_ ? heap_bytes_ - offset : 0) +
                 " (free bytes of the " + std::to_string(heap_bytes_) + "-byte segment)");
  heap_used_ = offset + bytes;
  for (char* base : bases_) std::memset(base + offset, kPoison, bytes);
  return offset;
}

SymmetricView Executor::heap(int rank) const {
  TL_REQUIRE(rank >= 0 && rank < world_, "cpu::Executor::heap", "rank", rank,
             "a rank in [0, " + std::to_string(world_) + ")");
  return SymmetricView{bases_.data(), bases_[rank], heap_bytes_, rank, world_};
}

SignalView Executor::signals(int rank, uint32_t first, uint32_t count, uint64_t epoch,
                             uint32_t op_id) const {
  constexpr const char* where = "cpu::Executor::signals";
  TL_REQUIRE(rank >= 0 && rank < world_, where, "rank", rank,
             "a rank in [0, " + std::to_string(world_) + ")");
  TL_REQUIRE(count >= 1 && uint64_t(first) + count <= num_channels_, where, "count", count,
             ">= 1 with first (" + std::to_string(first) + ") + count <= " +
                 std::to_string(num_channels_) + " (the executor's channels)");
  TL_REQUIRE(epoch >= 1, where, "epoch", epoch, ">= 1 (call e of an op uses epoch e)");
  TL_REQUIRE(op_id < op_names_.size(), where, "op_id", op_id, "an id returned by register_op");
  SignalView v;
  v.peer_channels = channel_bases_.data();
  v.local_channels = channel_bases_[rank] + first;
  v.first = first;
  v.epoch = epoch;
  v.num_channels = count;
  v.rank = rank;
  v.world = world_;
  v.scope = MemScope::kGpu;
  v.op_id = op_id;
  // The views only carry the record for parity with the GPU; waits report through the
  // executor's own claim word and record (the same objects).
  v.errors = ErrorChannelView{&claim_, &record_,
                              static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                        options_.wait_timeout)
                                                        .count()),
                              nullptr};
  return v;
}

uint32_t Executor::register_op(const std::string& name) {
  op_names_.push_back(name);
  return static_cast<uint32_t>(op_names_.size() - 1);
}

void Executor::run(const std::vector<Role>& roles) {
  constexpr const char* where = "cpu::Executor::run";
  for (const Role& role : roles) {
    TL_REQUIRE(role.instances >= 1, where, "role.instances", role.instances,
               ">= 1 (role '" + role.name + "')");
    TL_REQUIRE(static_cast<bool>(role.body), where, "role.body", "empty",
               "a callable (role '" + role.name + "')");
  }
  ++runs_;
  abort_.store(false);
  std::atomic_ref<uint32_t>(claim_).store(0);
  record_ = ErrorRecord{};

  std::mutex failure_mutex;
  std::exception_ptr failure;
  std::atomic<bool> go{false};
  auto fail = [&](std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::move(e);
    }
    abort_.store(true);
  };

  std::vector<std::thread> threads;
  size_t total = 0;
  for (const Role& role : roles) total += size_t(world_) * role.instances;
  threads.reserve(total);
  try {
    for (int rank = 0; rank < world_; ++rank) {
      for (size_t ri = 0; ri < roles.size(); ++ri) {
        const Role& role = roles[ri];
        for (uint32_t i = 0; i < role.instances; ++i) {
          const uint64_t seed = thread_seed(options_.seed, rank, ri, i, runs_);
          threads.emplace_back([this, &role, &go, &fail, rank, i, seed] {
            BlockCtx ctx(this, rank, world_, i, role.instances, seed);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            try {
              ctx.jitter();
              role.body(ctx);
            } catch (const Aborted&) {
            } catch (...) {
              fail(std::current_exception());
            }
          });
        }
      }
    }
  } catch (...) {
    fail(std::current_exception());  // could not start a thread: stop the ones that run
  }
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace tilelink::cpu
