// The standalone collectives on virtual ranks or one rank per GPU: AllGather::run /
// ReduceScatter::run timed across all ranks (RankTimer: every rank released together, slowest
// rank per call), against the copy-engine baseline that moves the same bytes with
// cudaMemcpyAsync D2D and no signals.
// Each result is checked once against a host reference computed from the random seeds.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/collectives.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {
namespace {

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// A heap for `data_bytes` of symmetric buffers plus a SignalSet of `channels`, with slack for the
// allocator's alignment.
size_t heap_capacity(size_t data_bytes, uint32_t channels) {
  return align_up(data_bytes, kMiB) + align_up(size_t(channels) * sizeof(uint64_t), kMiB) + 4 * kMiB;
}

// The signal channels each op claims, from its protocol's plan.
uint32_t channels_needed(int world, uint32_t rows_per_rank, const AllGatherConfig& c) {
  AllGatherPlan plan;
  plan.map = RowShardMapping{rows_per_rank, c.comm_rows, static_cast<uint32_t>(world)};
  plan.method = c.method;
  plan.order = c.order;
  return plan.num_channels();
}

uint32_t channels_needed(int world, uint32_t rows_per_rank, const ReduceScatterConfig& c) {
  ReduceScatterPlan plan;
  plan.map = RowShardMapping{rows_per_rank, c.comm_rows, static_cast<uint32_t>(world)};
  plan.method = c.method;
  return plan.num_channels();
}

struct Measured {
  Stats op;
  Stats baseline;
  bool op_gated;
  bool baseline_gated;
};

Measured measure(const World& world, const TimingOptions& timing, const std::function<void()>& op,
                 const std::function<void()>& baseline) {
  RankTimer op_timer(world);
  const Stats op_stats = repeat(timing.warmup, timing.iters, [&] { return op_timer.time(op); });
  RankTimer baseline_timer(world);
  const Stats baseline_stats =
      repeat(timing.warmup, timing.iters, [&] { return baseline_timer.time(baseline); });
  return {op_stats, baseline_stats, op_timer.gated(), baseline_timer.gated()};
}

// `size`: bytes per rank by the nccl-tests convention (all-gather: the gathered output;
// reduce-scatter and all-reduce: the input), so algbw and busbw compare with theirs; `bus_factor`
// theirs too: (world - 1) / world, 2 (world - 1) / world for an all-reduce (by its size, whatever
// the algorithm).
void add_results(Table& table, const std::string& op_name, int world, double size, const Measured& m,
                 double bus_factor = 0) {
  table.columns = {{"variant", "variant", 0},
                   {"time_us", "time µs", 1},
                   {"min_us", "min µs", 1},
                   {"max_us", "max µs", 1},
                   {"algbw_gb_per_s", "algbw GB/s", 1},
                   {"busbw_gb_per_s", "busbw GB/s", 1},
                   {"speed_vs_memcpy", "vs memcpy", 2}};
  if (bus_factor == 0) bus_factor = double(world - 1) / double(world);
  auto row = [&](const std::string& name, const Stats& s) {
    const double algbw = gb_per_s(size, s.median);
    table.add_row({name, s.median, s.min, s.max, algbw, algbw * bus_factor, m.baseline.median / s.median});
  };
  row("tilelink " + op_name, m.op);
  row("cudaMemcpyAsync D2D", m.baseline);
  table.notes.push_back("time = slowest rank's CUDA-event time per call; median, min and max of " +
                        std::to_string(m.op.samples) + " calls after warm-up");
  table.notes.push_back("algbw = size / time, busbw = algbw * " +
                        std::string(bus_factor > double(world - 1) / double(world) ? "2 (world - 1)" : "(world - 1)") +
                        " / world (nccl-tests), 10^9 bytes/s");
  table.notes.push_back("vs memcpy = memcpy time / time (> 1: faster than the copy-engine baseline)");
  table.notes.push_back(ranks_on_gpus() ? "one rank per GPU: peer traffic crosses NVLink"
                                        : "virtual ranks share one GPU: peer traffic is HBM -> HBM, not NVLink");
  if (m.op.samples < 20) table.notes.push_back("fewer than 20 timed calls: the median is a rough one");
  if (!m.op_gated || !m.baseline_gated) {
    table.notes.push_back(std::string("host enqueue time is included for: ") +
                          (!m.op_gated ? "tilelink " : "") + (!m.baseline_gated ? "memcpy" : "") +
                          " (a call blocked the host while the streams were held)");
  }
}

}  // namespace

Table bench_all_gather(const AllGatherBenchOptions& o) {
  const char* where = "bench_all_gather";
  TL_REQUIRE(o.world >= 2, where, "world", o.world, ">= 2");
  TL_REQUIRE(o.config.comm_rows >= 1, where, "comm_rows", o.config.comm_rows, ">= 1");
  TL_REQUIRE(o.row_bytes % 4 == 0, where, "row_bytes", o.row_bytes, "a multiple of 4");
  const int w = o.world;
  const size_t shard = size_t(o.rows_per_rank) * o.row_bytes;
  const size_t gathered_bytes = shard * size_t(w);

  World world = make_bench_world(w);
  const uint32_t channels = channels_needed(w, o.rows_per_rank, o.config);
  SymmetricHeap heap(world, heap_capacity(gathered_bytes, channels));
  SignalSet signals(heap, channels);
  SymmetricBuffer gathered = heap.allocate(gathered_bytes);
  AllGatherArguments args;
  args.gathered = &gathered;
  args.rows_per_rank = o.rows_per_rank;
  args.row_bytes = o.row_bytes;
  args.config = o.config;
  if (const std::string why = AllGather::can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("bench all_gather: " + why);
  }
  AllGather op(world, heap, signals, args, "bench.all_gather");

  // Inputs: each rank's own rows random, every other row poisoned.
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    char* g = gathered.as<char>(r);
    TL_CUDA_CHECK(cudaMemsetAsync(g, 0xFF, gathered_bytes, world.comm_stream(r)));
    fill_random_words(g + size_t(r) * shard, shard, rank_seed(o.seed, r), world.comm_stream(r));
  }
  world.synchronize();
  op.run();
  world.synchronize();

  // Check: every rank holds every rank's shard.
  std::vector<uint32_t> expected(gathered_bytes / 4);
  const size_t shard_words = shard / 4;
  for (int p = 0; p < w; ++p) {
    const uint64_t seed = rank_seed(o.seed, p);
    for (size_t j = 0; j < shard_words; ++j) expected[size_t(p) * shard_words + j] = random_word(seed, j);
  }
  std::vector<uint32_t> got(expected.size());
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemcpy(got.data(), gathered.data(r), gathered_bytes, cudaMemcpyDeviceToHost));
    if (std::memcmp(got.data(), expected.data(), gathered_bytes) == 0) continue;
    size_t bad = 0, first = expected.size();
    for (size_t i = 0; i < expected.size(); ++i) {
      if (got[i] != expected[i]) {
        if (bad++ == 0) first = i;
      }
    }
    const size_t byte = first * 4;
    throw Error("all_gather check failed on rank " + std::to_string(r) + ": " + std::to_string(bad) +
                " of " + std::to_string(expected.size()) + " words differ; first at row " +
                std::to_string(byte / o.row_bytes) + " (rank " + std::to_string(byte / shard) +
                "'s shard), byte " + std::to_string(byte % o.row_bytes) + ": got " +
                std::to_string(got[first]) + ", expected " + std::to_string(expected[first]));
  }

  auto run_op = [&] { op.run(); };
  auto run_baseline = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      for (int p = 0; p < w; ++p) {
        if (p == r) continue;
        TL_CUDA_CHECK(cudaMemcpyAsync(gathered.as<char>(r) + size_t(p) * shard,
                                      gathered.as<char>(p) + size_t(p) * shard, shard,
                                      cudaMemcpyDeviceToDevice, world.comm_stream(r)));
      }
    }
  };
  const Measured m = measure(world, o.timing, run_op, run_baseline);

  Table table;
  table.name = "all_gather";
  table.title = "all-gather, " + ranks_phrase(w) + ", " + format_bytes(gathered_bytes) +
                " gathered per rank";
  const AllGatherConfig& c = o.config;
  table.params = {{"world", int64_t(w)},
                  {"rows_per_rank", int64_t(o.rows_per_rank)},
                  {"row_bytes", int64_t(o.row_bytes)},
                  {"size_bytes", int64_t(gathered_bytes)},
                  {"resource", std::string(to_string(c.resource))},
                  {"method", std::string(to_string(c.method))},
                  {"path", std::string(to_string(c.path))},
                  {"order", std::string(to_string(c.order))},
                  {"comm_rows", int64_t(c.comm_rows)},
                  {"ctas", c.resource == CommResource::kSm ? Value{int64_t(op.num_blocks())} : Value{}},
                  {"threads", int64_t(c.threads)},
                  {"warmup", int64_t(o.timing.warmup)},
                  {"iters", int64_t(o.timing.iters)},
                  {"seed", std::to_string(o.seed)},
                  {"check", std::string("passed")}};
  add_results(table, "all_gather", w, double(gathered_bytes), m);
  table.notes.push_back("memcpy baseline: each rank copies every peer's shard with cudaMemcpyAsync on "
                        "its comm stream (the op's bytes, no signals)");
  return table;
}

Table bench_reduce_scatter(const ReduceScatterBenchOptions& o) {
  const char* where = "bench_reduce_scatter";
  TL_REQUIRE(o.world >= 2, where, "world", o.world, ">= 2");
  TL_REQUIRE(o.config.comm_rows >= 1, where, "comm_rows", o.config.comm_rows, ">= 1");
  const int w = o.world;
  const size_t block_elems = size_t(o.rows_per_rank) * o.cols;  // one owner's rows
  const size_t partial_elems = block_elems * size_t(w);
  const size_t partial_bytes = partial_elems * sizeof(float);

  World world = make_bench_world(w);
  // The op allocates a receive buffer as large as `partial` from the same heap.
  const uint32_t channels = channels_needed(w, o.rows_per_rank, o.config);
  SymmetricHeap heap(world, heap_capacity(2 * align_up(partial_bytes, kMiB), channels));
  SignalSet signals(heap, channels);
  SymmetricBuffer partial = heap.allocate(partial_bytes);
  std::vector<DeviceBuffer> out;
  for (int r = 0; r < w; ++r) out.emplace_back(block_elems * sizeof(float), world.device(r));
  ReduceScatterArguments args;
  args.partial = &partial;
  for (const DeviceBuffer& b : out) args.out.push_back(b.get<float>());
  args.rows_per_rank = o.rows_per_rank;
  args.cols = o.cols;
  args.config = o.config;
  if (const std::string why = ReduceScatter::can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("bench reduce_scatter: " + why);
  }
  ReduceScatter op(world, heap, signals, args, "bench.reduce_scatter");

  // Inputs random, outputs poisoned with NaN (all bits set).
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    fill_random_floats(partial.as<float>(r), partial_elems, rank_seed(o.seed, r), world.comm_stream(r));
    TL_CUDA_CHECK(cudaMemsetAsync(out[r].get(), 0xFF, out[r].bytes(), world.comm_stream(r)));
  }
  world.synchronize();
  op.run();
  world.synchronize();

  // Check: rank r's output is the sum over ranks of their partial block r. random_float's grid
  // makes the sum exact in any order, so equality is required.
  std::vector<float> expected(block_elems);
  std::vector<float> got(block_elems);
  for (int r = 0; r < w; ++r) {
    std::fill(expected.begin(), expected.end(), 0.0f);
    for (int q = 0; q < w; ++q) {
      const uint64_t seed = rank_seed(o.seed, q);
      const size_t base = size_t(r) * block_elems;
      for (size_t i = 0; i < block_elems; ++i) expected[i] += random_float(seed, base + i);
    }
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemcpy(got.data(), out[r].get(), out[r].bytes(), cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < block_elems; ++i) {
      if (!(got[i] == expected[i])) {
        if (bad++ == 0) first = i;
      }
    }
    if (bad != 0) {
      throw Error("reduce_scatter check failed on rank " + std::to_string(r) + ": " + std::to_string(bad) +
                  " of " + std::to_string(block_elems) + " values differ; first at row " +
                  std::to_string(first / o.cols) + ", col " + std::to_string(first % o.cols) + ": got " +
                  std::to_string(got[first]) + ", expected " + std::to_string(expected[first]));
    }
  }

  // Baseline: each rank fetches its block from every peer into a scratch buffer.
  std::vector<DeviceBuffer> scratch;
  for (int r = 0; r < w; ++r) scratch.emplace_back(size_t(w - 1) * block_elems * sizeof(float), world.device(r));
  auto run_op = [&] { op.run(); };
  auto run_baseline = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      for (int s = 1; s < w; ++s) {
        const int p = (r + s) % w;
        TL_CUDA_CHECK(cudaMemcpyAsync(scratch[r].get<float>() + size_t(s - 1) * block_elems,
                                      partial.as<float>(p) + size_t(r) * block_elems,
                                      block_elems * sizeof(float), cudaMemcpyDeviceToDevice,
                                      world.comm_stream(r)));
      }
    }
  };
  const Measured m = measure(world, o.timing, run_op, run_baseline);

  Table table;
  table.name = "reduce_scatter";
  table.title = "reduce-scatter (fp32), " + ranks_phrase(w) + ", " +
                format_bytes(partial_bytes) + " input per rank";
  const ReduceScatterConfig& c = o.config;
  table.params = {{"world", int64_t(w)},
                  {"rows_per_rank", int64_t(o.rows_per_rank)},
                  {"cols", int64_t(o.cols)},
                  {"size_bytes", int64_t(partial_bytes)},
                  {"method", std::string(to_string(c.method))},
                  {"path", std::string(to_string(c.path))},
                  {"comm_rows", int64_t(c.comm_rows)},
                  {"ctas", c.num_blocks == 0 ? Value{std::string("auto")} : Value{int64_t(c.num_blocks)}},
                  {"threads", int64_t(c.threads)},
                  {"warmup", int64_t(o.timing.warmup)},
                  {"iters", int64_t(o.timing.iters)},
                  {"seed", std::to_string(o.seed)},
                  {"check", std::string("passed")}};
  add_results(table, "reduce_scatter", w, double(partial_bytes), m);
  table.notes.push_back("memcpy baseline: each rank copies its block from every peer with cudaMemcpyAsync "
                        "on its comm stream (the op's bytes, no signals, no reduction)");
  return table;
}

Table bench_all_reduce(const AllReduceBenchOptions& o) {
  const char* where = "bench_all_reduce";
  TL_REQUIRE(o.world >= 2, where, "world", o.world, ">= 2");
  const int w = o.world;
  const size_t elems = size_t(o.rows) * o.cols, bytes = elems * sizeof(float);
  World world = make_bench_world(w);
  // Two ops (one-shot, two-shot), each with world slots of staging, plus partial and out.
  SymmetricHeap heap(world, heap_capacity(size_t(2 * w + 2) * align_up(bytes, kMiB), 1 << 14));
  SignalSet signals(heap, 1 << 14);
  SymmetricBuffer partial = heap.allocate(bytes), out = heap.allocate(bytes);
  AllReduceArguments args;
  args.partial = &partial;
  args.out = &out;
  args.rows = o.rows;
  args.cols = o.cols;
  args.config = o.config;
  if (const std::string why = AllReduce::can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("bench all_reduce: " + why);
  }
  args.config.method = AllReduceMethod::kOneShot;
  AllReduce one_shot(world, heap, signals, args, "bench.all_reduce.one_shot");
  args.config.method = AllReduceMethod::kTwoShot;
  AllReduce two_shot(world, heap, signals, args, "bench.all_reduce.two_shot");

  // Check both: every rank's out is the sum over ranks (random_float's grid makes it exact).
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    fill_random_floats(partial.as<float>(r), elems, rank_seed(o.seed, r), world.comm_stream(r));
  }
  std::vector<float> expected(elems, 0.0f), got(elems);
  for (int q = 0; q < w; ++q) {
    for (size_t i = 0; i < elems; ++i) expected[i] += random_float(rank_seed(o.seed, q), i);
  }
  for (AllReduce* op : {&one_shot, &two_shot}) {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      TL_CUDA_CHECK(cudaMemsetAsync(out.data(r), 0xFF, bytes, world.comm_stream(r)));
    }
    world.synchronize();
    op->run();
    world.synchronize();
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      TL_CUDA_CHECK(cudaMemcpy(got.data(), out.data(r), bytes, cudaMemcpyDeviceToHost));
      if (std::memcmp(got.data(), expected.data(), bytes) != 0) {
        throw Error(std::string("all_reduce check failed (") + (op == &one_shot ? "one-shot" : "two-shot") +
                    ") on rank " + std::to_string(r));
      }
    }
  }

  std::vector<DeviceBuffer> scratch;
  for (int r = 0; r < w; ++r) scratch.emplace_back(size_t(w - 1) * bytes, world.device(r));
  auto run_baseline = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      for (int s = 1; s < w; ++s) {
        TL_CUDA_CHECK(cudaMemcpyAsync(scratch[r].get<char>() + size_t(s - 1) * bytes, partial.data((r + s) % w), bytes,
                                      cudaMemcpyDeviceToDevice, world.comm_stream(r)));
      }
    }
  };
  const Measured m1 = measure(world, o.timing, [&] { one_shot.run(); }, run_baseline);
  const Measured m2 = measure(world, o.timing, [&] { two_shot.run(); }, run_baseline);

  Table table;
  table.name = "all_reduce";
  table.title = "all-reduce (fp32), " + ranks_phrase(w) + ", " + std::to_string(o.rows) + " x " +
                std::to_string(o.cols) + " (" + format_bytes(bytes) + " per rank)";
  table.params = {{"world", int64_t(w)},
                  {"rows", int64_t(o.rows)},
                  {"cols", int64_t(o.cols)},
                  {"size_bytes", int64_t(bytes)},
                  {"path", std::string(to_string(o.config.path))},
                  {"auto_picks", std::string(to_string(AllReduce::auto_method(w, bytes)))},
                  {"chunks", int64_t(one_shot.plan().num_chunks())},
                  {"ctas", int64_t(one_shot.num_blocks())},
                  {"warmup", int64_t(o.timing.warmup)},
                  {"iters", int64_t(o.timing.iters)},
                  {"seed", std::to_string(o.seed)},
                  {"check", std::string("passed")}};
  const double bus_factor = 2.0 * double(w - 1) / double(w);  // nccl-tests' all-reduce factor
  add_results(table, "all_reduce one_shot", w, double(bytes), m1, bus_factor);
  const double algbw = gb_per_s(double(bytes), m2.op.median);
  table.add_row({std::string("tilelink all_reduce two_shot"), m2.op.median, m2.op.min, m2.op.max, algbw,
                 algbw * bus_factor, m2.baseline.median / m2.op.median});
  table.notes.push_back("memcpy baseline: each rank copies every peer's partial with cudaMemcpyAsync (one-shot's "
                        "bytes, no signals, no sum)");
  return table;
}

}  // namespace tilelink::bench
