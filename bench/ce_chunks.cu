// Copy-engine bandwidth by chunk size, the way a chunked copy-engine all-gather uses it: on rank
// 0's comm stream, rank_copy_data of each chunk from rank 1's segment, then rank_notify of that
// chunk's channel. A chunk's fixed cost (copy setup plus the stream memop) decides how small a
// copy-engine communication tile may be. Also measured: the same copies without the notifies,
// and the host's enqueue time per chunk (if it exceeds the device time, the device waited for
// the host and the row is host-bound).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/primitives.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/host.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

Table bench_ce_chunks(const PrimitiveOptions& options) {
  TL_REQUIRE(options.world >= 2, "bench_ce_chunks", "world", options.world, ">= 2");
  constexpr size_t kMinChunk = 64 * kKiB;
  constexpr size_t kMaxChunk = 256 * kMiB;
  constexpr size_t kMinTotal = 256 * kMiB;  // each measurement moves at least this much ...
  constexpr size_t kMinChunks = 8;          // ... in at least this many chunks
  constexpr uint32_t kChannels = 64;        // chunk i notifies channel i % kChannels
  const size_t buffer_bytes = kMaxChunk;    // chunk i lives at (i * chunk) % buffer_bytes
  const int reps = options.quick ? 3 : 20;
  const int warmup = 1;

  World world = make_bench_world(options.world);
  SymmetricHeap heap(world, buffer_bytes + kMiB);
  SignalSet signals(heap, kChannels);
  SymmetricBuffer buffer = heap.allocate(buffer_bytes);
  SignalSlice slice = signals.allocate(kChannels, "bench.ce_chunks");
  char* const dst = buffer.as<char>(0);
  const char* const src = buffer.as<char>(1);
  const cudaStream_t stream = world.comm_stream(0);

  world.set_device(1);
  fill_random_words(buffer.as<char>(1), buffer_bytes, rank_seed(options.seed, 1), world.comm_stream(1));
  world.synchronize();
  world.set_device(0);

  Table table;
  table.name = "ce_chunks";
  table.title = "copy-engine chunks: rank_copy_data + rank_notify per chunk, rank 1 -> rank 0";
  table.params = {{"world", int64_t(options.world)},
                  {"min_total_bytes", int64_t(kMinTotal)},
                  {"min_chunks", int64_t(kMinChunks)},
                  {"reps", int64_t(reps)}};
  table.columns = {{"chunk", "chunk", 0},
                   {"chunk_bytes", "bytes", 0},
                   {"chunks", "chunks", 0},
                   {"us_per_chunk", "µs/chunk", 2},
                   {"gb_per_s", "GB/s", 1},
                   {"us_per_chunk_copy_only", "µs/chunk copy only", 2},
                   {"gb_per_s_copy_only", "GB/s copy only", 1},
                   {"host_enqueue_us_per_chunk", "host µs/chunk", 2}};
  table.notes = {ranks_on_gpus()
                     ? "one rank per GPU: this is GPU 1 -> GPU 0 over NVLink through the copy engine"
                     : "virtual ranks share one GPU: this is HBM -> HBM through the copy engine, not NVLink",
                 "GB/s = bytes moved / time, 10^9 bytes/s; copy only = the same copies without rank_notify",
                 "host µs/chunk = host time to enqueue one chunk (copy + notify); a row whose host time "
                 "exceeds its device time is host-bound"};

  StreamTimer timer;
  for (size_t chunk = kMinChunk; chunk <= kMaxChunk; chunk *= 4) {
    const size_t chunks = std::max(kMinChunks, kMinTotal / chunk);
    const double total = double(chunk) * double(chunks);
    double host_us = 0;
    auto enqueue = [&](bool notify) {
      slice.begin_call();
      const SignalView sig = slice.host_view(0);
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < chunks; ++i) {
        const size_t offset = (i * chunk) % buffer_bytes;
        rank_copy_data(stream, dst + offset, src + offset, chunk);
        if (notify) rank_notify(stream, sig, static_cast<uint32_t>(i % kChannels), 0);
      }
      host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    };
    auto timed = [&](bool notify) {
      timer.start(stream);
      enqueue(notify);
      timer.stop(stream);
      world.synchronize();
      return timer.microseconds();
    };

    // Check once: the chunks cover the whole buffer.
    TL_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, buffer_bytes, stream));
    enqueue(true);
    world.synchronize();
    const uint64_t bad = count_mismatches(src, dst, buffer_bytes, stream);
    if (bad != 0) {
      throw Error("ce_chunks: chunks of " + format_bytes(chunk) + ": " + std::to_string(bad) + " of " +
                  std::to_string(buffer_bytes / 16) + " 16-byte words differ from the source");
    }

    std::vector<double> host_samples;
    const Stats with_notify = repeat(warmup, reps, [&] {
      const double us = timed(true);
      host_samples.push_back(host_us);
      return us;
    });
    const Stats copy_only = repeat(warmup, reps, [&] { return timed(false); });
    const Stats host = summarize(host_samples);
    const double n = double(chunks);
    table.add_row({format_bytes(chunk), int64_t(chunk), int64_t(chunks), with_notify.median / n,
                   gb_per_s(total, with_notify.median), copy_only.median / n,
                   gb_per_s(total, copy_only.median), host.median / n});
  }
  return table;
}

}  // namespace tilelink::bench
