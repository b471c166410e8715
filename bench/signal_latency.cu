// Notify -> wait round-trip latency between two ranks (virtual, on two GPUs, or two processes
// under `tilelink launch`, TILELINK_RANKS=processes). One single-thread CTA per rank
// plays ping-pong on two channels; all round trips run inside one launch, so the launch cost is
// spread over 10^4 round trips. Each round trip uses its own epoch (the kernel copies the view
// and sets epoch = first + i), exactly as consecutive op calls would.
#include <string>
#include <utility>

#include "bench/primitives.hpp"
#include "bench/harness.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {
namespace {

constexpr uint32_t kPing = 0;  // rank 0 -> rank 1
constexpr uint32_t kPong = 1;  // rank 1 -> rank 0
constexpr uint32_t kChannels = 2;
constexpr uint32_t kRoundTrips = 10'000;

enum class Pattern : uint32_t {
  kPush = 0,  // the sender writes the receiver's channel: peer_tile_notify -> consumer_tile_wait
  kPoll = 1,  // the sender writes its own channel, the receiver polls it: producer_tile_notify -> peer_tile_wait
};

const char* pattern_name(Pattern p) {
  return p == Pattern::kPush ? "peer_tile_notify -> consumer_tile_wait"
                             : "producer_tile_notify -> peer_tile_wait";
}

const char* mode_name(NotifyMode m) { return m == NotifyMode::kSet ? "set" : "add"; }

uint64_t read_channel(const uint64_t* channel) {
  uint64_t v = 0;
  TL_CUDA_CHECK(cudaMemcpy(&v, channel, sizeof(v), cudaMemcpyDeviceToHost));
  return v;
}

__global__ void ping_pong_kernel(SignalView sig, uint64_t first_epoch, uint32_t round_trips,
                                 Pattern pattern, NotifyMode mode) {
  const int other = 1 - sig.rank;
  auto send = [&](const SignalView& s, uint32_t channel) {
    if (pattern == Pattern::kPush) {
      peer_tile_notify(s, channel, other, mode);
    } else {
      producer_tile_notify(s, channel, mode);
    }
  };
  auto receive = [&](const SignalView& s, uint32_t channel) {
    if (pattern == Pattern::kPush) {
      consumer_tile_wait(s, channel);
    } else {
      peer_tile_wait(s, channel, other);
    }
  };
  for (uint32_t i = 0; i < round_trips; ++i) {
    SignalView s = sig;
    s.epoch = first_epoch + i;
    if (sig.rank == 0) {
      send(s, kPing);
      receive(s, kPong);
    } else {
      receive(s, kPing);
      send(s, kPong);
    }
  }
}

}  // namespace

Table bench_signal_latency(const PrimitiveOptions& options) {
  TL_REQUIRE(options.world >= 2, "bench_signal_latency", "world", options.world, ">= 2");
  const int reps = options.quick ? 3 : 20;

  World world = make_bench_world(options.world, /*processes=*/true);
  SymmetricHeap heap(world, kMiB);
  SignalSet signals(heap, 16);
  RankTimer timer(world);
  preload_kernel(ping_pong_kernel);  // its first launch happens while the streams are held

  Table table;
  table.name = "signal_latency";
  table.title = "notify -> wait round trip, rank 0 <-> rank 1, one single-thread CTA each";
  table.params = {{"world", int64_t(options.world)},
                  {"scope", std::string(world.scope() == MemScope::kGpu ? "gpu" : "sys")},
                  {"ranks", ranks_phrase(options.world)},
                  {"round_trips_per_launch", int64_t(kRoundTrips)},
                  {"launches", int64_t(reps)}};
  table.columns = {{"pattern", "pattern", 0},
                   {"mode", "mode", 0},
                   {"round_trip_us", "round trip µs", 3},
                   {"round_trip_min_us", "min µs", 3},
                   {"one_way_us", "one way µs", 3}};

  for (const Pattern pattern : {Pattern::kPush, Pattern::kPoll}) {
    for (const NotifyMode mode : {NotifyMode::kSet, NotifyMode::kAdd}) {
      // A fresh slice starts at zero, so kAdd's count after round trip i equals its epoch i.
      SignalSlice slice = signals.allocate(kChannels, "bench.signal_latency");
      slice.begin_call();
      // The step advances the epochs itself, so a retaken sample (RankTimer) uses fresh ones.
      uint64_t next_epoch = 1;
      auto step = [&] {
        for (int r : world.local_ranks()) {
          if (r > 1) continue;  // ranks 0 and 1 play; the others idle
          world.set_device(r);
          ping_pong_kernel<<<1, 1, 0, world.compute_stream(r)>>>(slice.device_view(r), next_epoch, kRoundTrips,
                                                                 pattern, mode);
          TL_CUDA_CHECK(cudaGetLastError());
        }
        next_epoch += kRoundTrips;
      };
      const Stats s = repeat(1, reps, [&] { return timer.time(step) / kRoundTrips; });

      // Every round trip happened exactly once: both channels hold the last epoch (in add mode,
      // that is the number of notifies).
      const int ping_owner = pattern == Pattern::kPush ? 1 : 0;
      const uint64_t last = next_epoch - 1;
      for (const auto& [channel, owner] : {std::pair{kPing, ping_owner}, std::pair{kPong, 1 - ping_owner}}) {
        if (!world.is_local(owner)) continue;  // the owner's process checks it
        const uint64_t v = read_channel(slice.host_view(owner).local(channel));
        if (v != last) {
          throw Error(std::string("signal_latency (") + pattern_name(pattern) + ", " + mode_name(mode) +
                      "): channel " + std::to_string(channel) + " on rank " + std::to_string(owner) +
                      " holds " + std::to_string(v) + " after the run, expected " + std::to_string(last));
        }
      }
      table.add_row({std::string(pattern_name(pattern)),
                     std::string(mode_name(mode)), s.median, s.min,
                     s.median / 2});
    }
  }
  return table;
}

}  // namespace tilelink::bench
