// `tilelink bench primitives|all_gather|reduce_scatter|all_reduce`: the micro-benchmarks of the primitives
// and the collectives the ops are built from.
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/collectives.hpp"
#include "bench/primitives.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tools/command.hpp"
#include "tools/output.hpp"

namespace tilelink::tool {
namespace {

int run_primitives(const tb::PrimitiveOptions& o, const std::string& json, const std::string& line) {
  check_writable(json);
  // One rank per process (under `tilelink launch`): the signal round trip between two processes;
  // rank 0 reports. The bandwidth benchmarks drive both ranks' memory from one process.
  const bool processes = tb::ranks_in_processes();
  const char* rank = std::getenv("RANK");
  const bool report = !processes || (rank != nullptr && std::string(rank) == "0");
  if (report) print_device_header(o.world, std::string("bench primitives") + (o.quick ? " --quick" : ""));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<tb::Table> tables;
  std::vector<tb::Table (*)(const tb::PrimitiveOptions&)> benches = {&tb::bench_signal_latency};
  if (!processes) {
    benches.push_back(&tb::bench_sm_bandwidth);
    benches.push_back(&tb::bench_ce_chunks);
  }
  for (auto* bench : benches) {
    tables.push_back(bench(o));
    if (report) tb::print_table(std::cout, tables.back());
    std::cout.flush();
  }
  if (!report) return 0;
  if (processes) std::cout << "(process world: sm_bandwidth and ce_chunks run on virtual ranks or GPUs only)\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "done in " << std::fixed << std::setprecision(1) << seconds << " s\n";
  tb::Fields meta = run_meta(line, o.seed);
  meta.emplace_back("world", int64_t(o.world));
  meta.emplace_back("quick", std::string(o.quick ? "true" : "false"));
  finish(tables, meta, json);
  return 0;
}

void add_primitives(Tool& tool) {
  struct Args {
    tb::PrimitiveOptions o;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  Command& c = tool.add("bench", "primitives",
                       "micro-benchmarks: signal round trip, SM push/pull bandwidth, copy-engine chunks");
  c.app->add_option("--world", a->o.world, "ranks, as for bench ag_gemm (the micro-benchmarks use ranks 0 and 1)")
      ->capture_default_str()
      ->check(CLI::Range(2, kMaxWorldSize));
  c.app->add_flag("--quick", a->o.quick, "fewer repetitions and a smaller SM transfer: a smoke run");
  add_json(c.app, a->json);
  c.seed = add_seed(c.app, a->o.seed, "random seed of the data; default: a fresh one");
  c.run = [a](const std::string& line) { return run_primitives(a->o, a->json, line); };
}

// bench all_gather and bench reduce_scatter: the collective's options (Options:
// tb::AllGatherBenchOptions or tb::ReduceScatterBenchOptions) and the row size as typed.
template <class Options>
struct CollectiveArgs {
  static constexpr bool kAllGather = std::is_same_v<Options, tb::AllGatherBenchOptions>;
  Options o;
  uint32_t row_bytes = 0;  // 0: not given
  uint32_t cols = 0;       // 0: not given
  std::string json;
};

template <class Options>
void add_collective_options(Command& c, CollectiveArgs<Options>& a) {
  constexpr bool ag = CollectiveArgs<Options>::kAllGather;
  CLI::App* app = c.app;
  auto& config = a.o.config;
  add_world(app, a.o.world, 2);
  app->add_option("--rows-per-rank", a.o.rows_per_rank, "rows each rank owns")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  auto* row_bytes = app->add_option("--row-bytes", a.row_bytes,
                                    ag ? "bytes per row; default 16384"
                                       : "bytes per row, a multiple of 4 (C = B / 4); default 32768")
                        ->check(CLI::PositiveNumber);
  auto* cols = app->add_option("--cols", a.cols,
                               ag ? "columns per row, bf16 (row bytes = 2 * C); default 8192"
                                  : "fp32 columns per row (row bytes = 4 * C); default 8192")
                   ->check(CLI::PositiveNumber);
  row_bytes->excludes(cols);
  if constexpr (ag) {
    add_enum_option(app, "--resource", config.resource, {CommResource::kSm, CommResource::kCopyEngine},
                    "communication resource: sm (CTAs) or ce (copy engine); default sm", false);
    add_enum_option(app, "--order", config.order, {CommOrder::kFullMesh, CommOrder::kRing},
                    "tile order: mesh or ring; default mesh", false);
    add_enum_option(app, "--method", config.method, {AgMethod::kPull, AgMethod::kPush}, "pull or push; default pull",
                    false);
  } else {
    add_enum_option(app, "--method", config.method, {RsMethod::kPull, RsMethod::kPush}, "push or pull; default push",
                    false);
  }
  add_enum_option(app, "--path", config.path, {DataPath::kLdSt, DataPath::kBulk},
                  "SM data path: ldst or bulk (TMA); default ldst", false);
  app->add_option("--comm-rows", config.comm_rows,
                  ag ? "rows per communication tile; default 128" : "rows per communication tile; default 64")
      ->check(CLI::Range(1u, 1u << 30));
  app->add_option("--blocks", config.num_blocks, "CTAs per rank; 0 = automatic")->capture_default_str();
  app->add_option("--threads", config.threads, "threads per CTA")->capture_default_str()->check(CLI::Range(32u, 1024u));
  add_timing(app, a.o.timing);
  add_json(app, a.json);
  c.seed = add_seed(app, a.o.seed);
}

void add_all_gather(Tool& tool) {
  auto a = std::make_shared<CollectiveArgs<tb::AllGatherBenchOptions>>();
  Command& c = tool.add("bench", "all_gather", "time tilelink::AllGather against cudaMemcpyAsync");
  add_collective_options(c, *a);
  c.run = [a](const std::string& line) {
    tb::AllGatherBenchOptions o = a->o;
    o.row_bytes = a->row_bytes != 0 ? a->row_bytes : (a->cols != 0 ? 2 * a->cols : 2 * 8192);
    return run_once(o.world, "bench all_gather", line, o.seed, a->json, [&] { return tb::bench_all_gather(o); });
  };
}

void add_reduce_scatter(Tool& tool) {
  auto a = std::make_shared<CollectiveArgs<tb::ReduceScatterBenchOptions>>();
  Command& c = tool.add("bench", "reduce_scatter", "time tilelink::ReduceScatter (fp32) against cudaMemcpyAsync");
  add_collective_options(c, *a);
  c.run = [a](const std::string& line) {
    if (a->row_bytes % 4 != 0) {
      throw InvalidArgument("--row-bytes " + std::to_string(a->row_bytes) +
                            ": expected a multiple of 4 (reduce_scatter rows are fp32)");
    }
    tb::ReduceScatterBenchOptions o = a->o;
    o.cols = a->cols != 0 ? a->cols : (a->row_bytes != 0 ? a->row_bytes / 4 : 8192);
    return run_once(o.world, "bench reduce_scatter", line, o.seed, a->json,
                    [&] { return tb::bench_reduce_scatter(o); });
  };
}

void add_all_reduce(Tool& tool) {
  struct Args {
    tb::AllReduceBenchOptions o;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  Command& c = tool.add("bench", "all_reduce",
                        "time tilelink::AllReduce (fp32), one-shot and two-shot, against cudaMemcpyAsync");
  CLI::App* app = c.app;
  add_world(app, a->o.world, 2);
  app->add_option("--rows", a->o.rows, "rows (tokens; decode: 1 ... 512)")->capture_default_str()->check(CLI::Range(1u, 1u << 24));
  app->add_option("--cols", a->o.cols, "fp32 columns per row, a multiple of 4 (the hidden size)")
      ->capture_default_str()
      ->check(CLI::Range(4u, 1u << 24));
  add_enum_option(app, "--path", a->o.config.path, {DataPath::kLdSt, DataPath::kBulk},
                  "SM data path: ldst or bulk (TMA); default ldst", false);
  app->add_option("--comm-rows", a->o.config.comm_rows, "rows per chunk; 0 = automatic")->capture_default_str();
  app->add_option("--blocks", a->o.config.num_blocks, "CTAs per rank; 0 = automatic")->capture_default_str();
  add_timing(app, a->o.timing);
  add_json(app, a->json);
  c.seed = add_seed(app, a->o.seed);
  c.run = [a](const std::string& line) {
    if (a->o.cols % 4 != 0) {
      throw InvalidArgument("--cols " + std::to_string(a->o.cols) + ": expected a multiple of 4 (rows move as 16-byte vectors)");
    }
    return run_once(a->o.world, "bench all_reduce", line, a->o.seed, a->json,
                    [&] { return tb::bench_all_reduce(a->o); });
  };
}

}  // namespace

void register_collectives(Tool& tool) {
  add_primitives(tool);
  add_all_gather(tool);
  add_reduce_scatter(tool);
  add_all_reduce(tool);
}

}  // namespace tilelink::tool
