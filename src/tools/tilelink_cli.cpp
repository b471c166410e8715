// tilelink: device information and benchmarks of TileLink's primitives and collectives.
//
//   tilelink info [--world N]
//   tilelink bench primitives [--world 2] [--quick] [--json FILE] [--seed S]
//   tilelink bench all_gather [--world N] [--rows-per-rank R] [--row-bytes B | --cols C]
//       [--resource sm|ce] [--method pull|push] [--path ldst|bulk] [--order mesh|ring]
//       [--comm-rows K] [--blocks k] [--threads T] [--warmup W] [--iters I] [--json FILE]
//   tilelink bench reduce_scatter [same, less --resource and --order]
//   tilelink bench ag_gemm [--world N] [--m --n --k | --shapes paper | --sweep [--svg FILE]] [...]
//   tilelink bench gemm_rs [--world N] [--m --n --k | --shapes paper | --sweep [--svg FILE]] [--scatter pull|push|ce] [...]
//   tilelink bench mlp [--world N] [--model llama3-70b | --hidden H --intermediate I] [--m TOKENS]
//       [--activation swiglu|gelu] [--scatter pull|push|ce] [--granularity tile|row|rank]
//   tilelink bench moe_ag [--world N] [--model mixtral-8x7b | --hidden --intermediate --experts --topk]
//       [--m TOKENS] [--routing uniform|skewed|few_experts] [--gather-blocks G]
//   tilelink bench moe [same as moe_ag] [--activation swiglu|gelu] [--combine-rows R] [--combine-blocks C]
//   tilelink bench sp_attention [--world N] [--seq S] [--q-heads --kv-heads --head-dim] [--non-causal]
//       [--layout contiguous|zigzag] [--resource ce|sm] [--comm-rows R] [--blocks k] [--local-first] [--section-heads H] [--dump DIR]
//   tilelink tune ag_gemm [--world N] [--m --n --k | --shapes paper] [--top K] [--cache FILE] [--dry-run]
//   tilelink tune mlp [--world N] [--m M] [--model NAME | --hidden H --intermediate I] [--activation A] [--top K] [--dry-run]
//   tilelink tune gemm_rs [--world N] [--m --n --k | --shapes paper] [--top K] [--cache FILE] [--dry-run]
//   tilelink tune moe [--world N] [--m M] [--model NAME | --hidden --intermediate --experts --topk] [--top K] [--dry-run]
//   tilelink tune sp_attention [--world N] [--seq S] [--q-heads --kv-heads --head-dim] [--non-causal] [--layout L] [--top K] [--dry-run]
//   tilelink trace ag_gemm [--world N] [--m --n --k] [--resource ce|sm] [--comm-rows R] [--blocks k] [--kernel NAME]
//       [--trace FILE] [--svg FILE] [--capacity N]
//   tilelink trace sp_attention [the options of bench sp_attention, less --dump] [--trace FILE] [--svg FILE] [--capacity N]
//   tilelink trace moe [the options of bench moe, less --json] [--trace FILE] [--svg FILE] [--capacity N]
//   tilelink trace mlp [the options of bench mlp, less --json] [--trace FILE] [--svg FILE] [--capacity N]
//   tilelink trace gemm_rs [--world N] [--m --n --k] [--granularity tile|row|rank] [--scatter pull|push|ce] [--reduce-blocks R]
//       [--gemm-sms G] [--swizzle S] [--trace FILE] [--svg FILE] [--capacity N]
//   tilelink plan ag_gemm [--world N] [--nodes K] [--m --n --k] [--bm --bn] [--comm-rows R]
//       [--resource ce|sm] [--blocks k] [--order mesh|ring] [--trace FILE] [--svg FILE]
//   tilelink plan mlp [--world N] [--model llama3-70b | --hidden H --intermediate I] [--activation swiglu|gelu]
//       [--scatter pull|push|ce] [--trace FILE] [--svg FILE]
//   tilelink plan moe_ag [--world N] [--model M | --hidden --intermediate --experts --topk] [--gather-blocks G]
//       [--trace FILE] [--svg FILE]
//   tilelink plan moe [as plan moe_ag] [--activation swiglu|gelu] [--combine-blocks C] [--combine-rows R]
//   tilelink plan sp_attention [--world N] [--seq S] [--q-heads --kv-heads --head-dim] [--non-causal]
//       [--layout contiguous|zigzag] [--bq B] [--comm-rows R] [--resource ce|sm] [--local-first] [--attention-tflops T] [...]
//   tilelink plan gemm_rs [--world N] [--nodes K] [--m --n --k] [--bm --bn] [--reduce-blocks R]
//       [--granularity tile|row|rank] [--scatter pull|push|ce] [--band B] [--trace FILE] [--svg FILE]
//
// Exit status: 0 success; 1 a benchmark, check or CUDA failure (message on stderr); 2 no CUDA GPU;
// 64 a bad command line.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "bench/report.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"
#include "tilelink/sim/mlp_sim.hpp"
#include "tilelink/sim/moe_sim.hpp"
#include "tilelink/sim/sp_attention_sim.hpp"
#include "tilelink/sim/timeline.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tilelink/tune/gemm_rs_tune.hpp"
#include "tilelink/tune/moe_tune.hpp"
#include "tilelink/tune/sp_attention_tune.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

#ifndef TILELINK_VERSION
#define TILELINK_VERSION "unknown"
#endif

namespace {

namespace tb = tilelink::bench;

constexpr int kExitFailure = 1;
constexpr int kExitNoGpu = 2;
constexpr int kExitUsage = 64;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string gib(size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << double(bytes) / double(1ull << 30) << " GiB";
  return os.str();
}

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

tb::Fields run_meta(const std::string& command, uint64_t seed) {
  const tb::DeviceInfo d = tb::query_device(0);
  return {{"tool", std::string("tilelink " TILELINK_VERSION)},
          {"command", command},
          {"date_utc", utc_now()},
          {"device", d.name},
          {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
          {"sms", int64_t(d.sms)},
          {"driver", cuda_version(d.driver_version)},
          {"runtime", cuda_version(d.runtime_version)},
          {"seed", std::to_string(seed)}};
}

// Fails before a long run rather than after it.
void check_writable(const std::string& path) {
  if (path.empty()) return;
  std::ofstream probe(path);
  if (!probe) throw tilelink::Error("cannot open '" + path + "' for writing");
}

void finish(const std::vector<tb::Table>& tables, const tb::Fields& meta, const std::string& json) {
  if (json.empty()) return;
  tb::write_json(json, meta, tables);
  std::cout << "wrote " << json << "\n";
}

void print_device_header(int world, const std::string& what) {
  const tb::DeviceInfo d = tb::query_device(0);
  std::cout << "tilelink " << what << ": " << d.name << " (sm_" << d.cc_major << d.cc_minor << ", "
            << d.sms << " SMs), " << tb::ranks_placement(world) << "\n\n";
}

int cmd_info(int world_size) {
  const int count = tb::cuda_device_count();
  const tb::DeviceInfo first = tb::query_device(0);
  std::cout << "tilelink " TILELINK_VERSION "\n"
            << "CUDA driver " << cuda_version(first.driver_version) << ", runtime "
            << cuda_version(first.runtime_version) << "\n"
            << "devices: " << count << "\n";
  for (int d = 0; d < count; ++d) {
    const tb::DeviceInfo i = tb::query_device(d);
    std::cout << "  [" << d << "] " << i.name << "  sm_" << i.cc_major << i.cc_minor << "  " << i.sms
              << " SMs  " << gib(i.memory_bytes) << "  L2 " << i.l2_bytes / (1 << 20) << " MiB  smem/block "
              << i.smem_optin_bytes / 1024 << " KiB\n";
  }
  if (count >= 2) {
    std::cout << "peer access:";
    for (int a = 0; a < count; ++a) {
      for (int b = 0; b < count; ++b) {
        if (a == b) continue;
        int ok = 0;
        TL_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
        std::cout << " " << a << "->" << b << (ok ? ":yes" : ":no");
      }
    }
    std::cout << "\n";
  }

  const tilelink::World world = tilelink::World::virtual_ranks(world_size);
  std::cout << "world: " << world.size() << " virtual ranks on device 0 (the benchmarks' mode"
            << (tb::ranks_on_gpus() ? " without TILELINK_RANKS=gpus" : "") << "), scope "
            << (world.scope() == tilelink::MemScope::kGpu ? ".gpu" : ".sys") << "\n";
  for (int r = 0; r < world.size(); ++r) {
    std::cout << "  rank " << r << ": device " << world.device(r) << ", SM budget " << world.sm_budget(r)
              << " of " << world.num_sms(r) << "\n";
  }
  if (world_size >= 2 && count >= world_size) {
    std::cout << "multi_gpu over devices 0.." << world_size - 1
              << " is possible too (one rank per GPU, scope .sys)\n";
  }
  return 0;
}

int cmd_primitives(const tb::PrimitiveOptions& options, const std::string& json, const std::string& command) {
  check_writable(json);
  print_device_header(options.world, std::string("bench primitives") + (options.quick ? " --quick" : ""));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<tb::Table> tables;
  for (auto* bench : {&tb::bench_signal_latency, &tb::bench_sm_bandwidth, &tb::bench_ce_chunks}) {
    tables.push_back(bench(options));
    tb::print_table(std::cout, tables.back());
    std::cout.flush();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "done in " << std::fixed << std::setprecision(1) << seconds << " s\n";
  tb::Fields meta = run_meta(command, options.seed);
  meta.emplace_back("world", int64_t(options.world));
  meta.emplace_back("quick", std::string(options.quick ? "true" : "false"));
  finish(tables, meta, json);
  return 0;
}

// Options shared by the two collective benchmarks, as typed on the command line.
struct CollectiveArgs {
  int world = 2;
  uint32_t rows_per_rank = 1024;
  uint32_t row_bytes = 0;  // 0: not given
  uint32_t cols = 0;       // 0: not given
  std::string resource;    // "": the op's default
  std::string method;
  std::string path;
  std::string order;
  uint32_t comm_rows = 0;  // 0: the op's default
  uint32_t blocks = 0;     // 0: automatic
  uint32_t threads = 512;
  int warmup = 5;
  int iters = 20;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;  // not given: a fresh seed
};

void add_collective_options(CLI::App* app, CollectiveArgs& a, bool all_gather) {
  app->add_option("--world", a.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(2, tilelink::kMaxWorldSize));
  app->add_option("--rows-per-rank", a.rows_per_rank, "rows each rank owns")->capture_default_str()->check(CLI::Range(1u, 1u << 30));
  auto* row_bytes = app->add_option("--row-bytes", a.row_bytes,
                                    all_gather ? "bytes per row; default 16384"
                                               : "bytes per row, a multiple of 4 (C = B / 4); default 32768")
                        ->check(CLI::PositiveNumber);
  auto* cols = app->add_option("--cols", a.cols,
                               all_gather ? "columns per row, bf16 (row bytes = 2 * C); default 8192"
                                          : "fp32 columns per row (row bytes = 4 * C); default 8192")
                   ->check(CLI::PositiveNumber);
  row_bytes->excludes(cols);
  if (all_gather) {
    app->add_option("--resource", a.resource, "communication resource: sm (CTAs) or ce (copy engine); default sm")
        ->check(CLI::IsMember({"sm", "ce"}));
    app->add_option("--order", a.order, "tile order: mesh or ring; default mesh")->check(CLI::IsMember({"mesh", "ring"}));
  }
  app->add_option("--method", a.method, all_gather ? "pull or push; default pull" : "push or pull; default push")
      ->check(CLI::IsMember({"pull", "push"}));
  app->add_option("--path", a.path, "SM data path: ldst or bulk (TMA); default ldst")->check(CLI::IsMember({"ldst", "bulk"}));
  app->add_option("--comm-rows", a.comm_rows,
                  all_gather ? "rows per communication tile; default 128" : "rows per communication tile; default 64")
      ->check(CLI::Range(1u, 1u << 30));
  app->add_option("--blocks", a.blocks, "CTAs per rank; 0 = automatic")->capture_default_str();
  app->add_option("--threads", a.threads, "threads per CTA")->capture_default_str()->check(CLI::Range(32u, 1024u));
  app->add_option("--warmup", a.warmup, "untimed calls before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  app->add_option("--iters", a.iters, "timed calls (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  app->add_option("--json", a.json, "also write the results as JSON to FILE");
  a.seed_option = app->add_option("--seed", a.seed, "random seed of the inputs; default: a fresh one");
}

tilelink::DataPath parse_path(const std::string& s, tilelink::DataPath fallback) {
  if (s.empty()) return fallback;
  return s == "bulk" ? tilelink::DataPath::kBulk : tilelink::DataPath::kLdSt;
}

int cmd_all_gather(const CollectiveArgs& a, const std::string& command) {
  check_writable(a.json);
  tb::AllGatherBenchOptions o;
  o.world = a.world;
  o.rows_per_rank = a.rows_per_rank;
  o.row_bytes = a.row_bytes != 0 ? a.row_bytes : (a.cols != 0 ? 2 * a.cols : 2 * 8192);
  tilelink::AllGatherConfig& c = o.config;
  if (!a.resource.empty()) c.resource = a.resource == "ce" ? tilelink::CommResource::kCopyEngine : tilelink::CommResource::kSm;
  if (!a.method.empty()) c.method = a.method == "push" ? tilelink::AgMethod::kPush : tilelink::AgMethod::kPull;
  c.path = parse_path(a.path, c.path);
  if (!a.order.empty()) c.order = a.order == "ring" ? tilelink::CommOrder::kRing : tilelink::CommOrder::kFullMesh;
  if (a.comm_rows != 0) c.comm_rows = a.comm_rows;
  c.num_blocks = a.blocks;
  c.threads = a.threads;
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;

  print_device_header(a.world, "bench all_gather");
  const tb::Table table = tb::bench_all_gather(o);
  tb::print_table(std::cout, table);
  finish({table}, run_meta(command, a.seed), a.json);
  return 0;
}

int cmd_reduce_scatter(const CollectiveArgs& a, const std::string& command) {
  check_writable(a.json);
  if (a.row_bytes % 4 != 0) {
    throw tilelink::InvalidArgument("--row-bytes " + std::to_string(a.row_bytes) +
                                    ": expected a multiple of 4 (reduce_scatter rows are fp32)");
  }
  tb::ReduceScatterBenchOptions o;
  o.world = a.world;
  o.rows_per_rank = a.rows_per_rank;
  o.cols = a.cols != 0 ? a.cols : (a.row_bytes != 0 ? a.row_bytes / 4 : 8192);
  tilelink::ReduceScatterConfig& c = o.config;
  if (!a.method.empty()) c.method = a.method == "pull" ? tilelink::RsMethod::kPull : tilelink::RsMethod::kPush;
  c.path = parse_path(a.path, c.path);
  if (a.comm_rows != 0) c.comm_rows = a.comm_rows;
  c.num_blocks = a.blocks;
  c.threads = a.threads;
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;

  print_device_header(a.world, "bench reduce_scatter");
  const tb::Table table = tb::bench_reduce_scatter(o);
  tb::print_table(std::cout, table);
  finish({table}, run_meta(command, a.seed), a.json);
  return 0;
}

struct Mnk {
  uint32_t m, n, k;
};

// A sweep's shape: the model it comes from and (m, n, k).
struct LabeledMnk {
  std::string label;
  Mnk shape;
};

// DESIGN.md section 8's dense model shapes (N, K per layer; M = 8192 tokens): AG+GEMM computes
// M x N x K (the column-parallel up projection), GEMM+RS M x K x N (the row-parallel down one).
std::vector<LabeledMnk> model_sweep(bool row_parallel) {
  struct Model {
    const char* name;
    uint32_t n, k;
  };
  static constexpr Model kModels[] = {{"llama-7b", 11008, 4096},      {"llama3-8b", 14336, 4096},
                                      {"llama3-70b", 28672, 8192},    {"llama3-405b", 53248, 16384},
                                      {"qwen2-72b", 29568, 8192},     {"gpt3-175b", 49152, 12288}};
  std::vector<LabeledMnk> out;
  for (const Model& m : kModels) {
    out.push_back({m.name, row_parallel ? Mnk{8192, m.k, m.n} : Mnk{8192, m.n, m.k}});
  }
  return out;
}

// "[#####-----] 3/6 llama3-70b (8192, 28672, 8192)" on stderr, before each shape of a sweep.
void print_progress(size_t done, size_t total, const LabeledMnk& next) {
  constexpr size_t kWidth = 24;
  const size_t filled = total == 0 ? kWidth : done * kWidth / total;
  std::cerr << "[" << std::string(filled, '#') << std::string(kWidth - filled, '-') << "] " << done << "/" << total
            << " " << next.label << " (" << next.shape.m << ", " << next.shape.n << ", " << next.shape.k << ")\n";
}

// The fused row's speedups of each table as an SVG bar chart.
void write_speedup_chart(const std::string& path, const std::string& title, const std::vector<LabeledMnk>& shapes,
                         const std::vector<tb::Table>& tables) {
  tilelink::sim::ChartSeries vs_non{"fused vs non-overlapped", {}}, vs_ideal{"ideal / fused", {}};
  std::vector<std::string> labels;
  for (size_t i = 0; i < tables.size(); ++i) {
    labels.push_back(shapes[i].label);
    double non = std::nan(""), ideal = std::nan("");
    for (const auto& row : tables[i].rows) {
      const auto* name = std::get_if<std::string>(&row.front());
      if (name != nullptr && name->rfind("tilelink fused", 0) == 0) {
        non = std::get<double>(row[6]);
        ideal = std::get<double>(row[7]);
      }
    }
    vs_non.values.push_back(non);
    vs_ideal.values.push_back(ideal);
  }
  std::ofstream(path) << tilelink::sim::to_bar_chart_svg(title, labels, {vs_non, vs_ideal}, "speedup", 1.0);
  std::cout << "wrote " << path << " (SVG chart of the fused op's speedups)\n";
}

// One table per shape, printed as it is measured, then the JSON file if asked. A sweep (more
// than one labeled shape) shows a progress bar and, with `svg`, charts the speedups.
template <class Bench>
std::vector<tb::Table> run_shapes(int world, const std::string& what, const std::vector<Mnk>& shapes,
                                  const std::string& command, uint64_t seed, const std::string& json, Bench&& bench,
                                  const std::vector<LabeledMnk>& sweep = {}, const std::string& svg = "") {
  print_device_header(world, what);
  std::vector<tb::Table> tables;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!sweep.empty()) print_progress(i, shapes.size(), sweep[i]);
    tables.push_back(bench(shapes[i]));
    tb::print_table(std::cout, tables.back());
    std::cout.flush();
  }
  if (!sweep.empty()) std::cerr << "[" << std::string(24, '#') << "] " << shapes.size() << "/" << shapes.size() << " done\n";
  finish(tables, run_meta(command, seed), json);
  if (!svg.empty()) write_speedup_chart(svg, what + ", world " + std::to_string(world), sweep, tables);
  return tables;
}

// The issues' three shapes of each dense op, (m, n, k) as its bench takes them.
const std::vector<Mnk> kAgGemmPaperShapes = {{8192, 28672, 8192}, {8192, 14336, 4096}, {8192, 49152, 12288}};
const std::vector<Mnk> kGemmRsPaperShapes = {{8192, 8192, 28672}, {8192, 4096, 14336}, {8192, 12288, 49152}};

// What a dense op's bench command runs: the model sweep (with its chart file), the paper's three
// shapes, or the one given.
struct ShapeChoice {
  std::vector<Mnk> shapes;
  std::vector<LabeledMnk> sweep;  // empty unless --sweep
  std::string svg;                // the sweep's chart
};

ShapeChoice choose_shapes(bool sweep, bool row_parallel, const std::string& shapes, const std::vector<Mnk>& paper,
                          const Mnk& one, const std::string& svg, const std::string& op) {
  ShapeChoice c;
  if (sweep) {
    c.sweep = model_sweep(row_parallel);
    for (const LabeledMnk& s : c.sweep) c.shapes.push_back(s.shape);
    c.svg = svg.empty() ? "tilelink_" + op + "_sweep.svg" : svg;
  } else {
    c.shapes = shapes == "paper" ? paper : std::vector<Mnk>{one};
  }
  return c;
}

// An op's configuration options (knobs) live in an option group of its command, created on first
// use. Any of them given -- even at its default value (--resource ce) -- is an explicit choice,
// which the tune cache must not replace (any_knob).
CLI::Option_group* knob_group(CLI::App* app, CLI::Option_group*& group) {
  if (group == nullptr) {
    group = app->add_option_group("Configuration", "any of these given turns the tune cache off for the op");
  }
  return group;
}
bool any_knob(const CLI::Option_group* group) { return group != nullptr && group->count_all() > 0; }

// `tilelink bench ag_gemm`: the fused AG+GEMM against its baselines, on one shape or on the
// paper's three (--shapes paper).
struct AgGemmArgs {
  int world = 8;
  uint32_t m = 8192, n = 28672, k = 8192;
  std::string shapes;  // "paper": the three LLaMA shapes instead of --m/--n/--k
  bool sweep = false;  // DESIGN.md section 8's model shapes
  std::string svg;     // sweep: chart file
  std::string resource = "ce", method = "pull", order = "mesh", path = "ldst";
  uint32_t comm_rows = 0, blocks = 0, gemm_sms = 0, swizzle = 0;
  std::string kernel;
  CLI::Option_group* knobs = nullptr;  // the configuration options (knob_group)
  int warmup = 5, iters = 20;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  bool explain = false;  // the main job's reading aid (explain_ag_gemm)
};

// The median time of a GEMM op table's row whose variant starts with `prefix` (NaN if none).
double row_time_us(const tb::Table& table, const std::string& prefix) {
  for (const auto& row : table.rows) {
    const auto* name = std::get_if<std::string>(&row.front());
    if (name != nullptr && name->rfind(prefix, 0) == 0) return std::get<double>(row[1]);
  }
  return std::nan("");
}

tilelink::AgGemmConfig ag_gemm_config(const AgGemmArgs& a) {
  tilelink::AgGemmConfig config;
  tilelink::AllGatherConfig& c = config.comm;
  c.resource = a.resource == "sm" ? tilelink::CommResource::kSm : tilelink::CommResource::kCopyEngine;
  c.method = a.method == "push" ? tilelink::AgMethod::kPush : tilelink::AgMethod::kPull;
  c.order = a.order == "ring" ? tilelink::CommOrder::kRing : tilelink::CommOrder::kFullMesh;
  c.path = parse_path(a.path, c.path);
  c.comm_rows = a.comm_rows;
  c.num_blocks = a.blocks;
  config.gemm_sms = a.gemm_sms;
  config.swizzle = a.swizzle;
  config.kernel = a.kernel;
  config.use_tune_cache = !any_knob(a.knobs);
  return config;
}

// `bench ag_gemm --explain` (the main job, scripts/bench.sh): after the measured tables, what
// they mean where they were measured. On virtual ranks: what the ranks share, the fused kernel
// against cuBLAS at world 1 (measured now, same shapes), and the plan model's prediction for the
// same world of real GPUs of this kind over NVLink -- labelled as a prediction. One rank per GPU:
// the prediction next to the measurement. Ends with one quotable line per shape.
void explain_ag_gemm(const AgGemmArgs& a, const std::vector<Mnk>& shapes, const std::vector<tb::Table>& measured) {
  namespace sim = tilelink::sim;
  const bool virtual_ranks = !tb::ranks_on_gpus() && a.world > 1;
  std::vector<double> world1(shapes.size(), std::nan(""));
  if (virtual_ranks) {
    std::cout << "\n== what the table above means ==\n"
              << a.world << " virtual ranks share ONE GPU: each rank gets " << tb::query_device(0).sms / a.world
              << " SMs, and its \"links\" to the others are that GPU's own HBM, which the ranks' GEMMs also read.\n"
              << "Overlap hides the all-gather's time, but the all-gather still takes HBM bandwidth and SMs from\n"
              << "the GEMMs of the same GPU, so on virtual ranks the fused op can lose to the non-overlapped chain.\n"
              << "They test correctness; the kernel's speed is the world-1 result; the gain on real GPUs is predicted.\n"
              << "Measuring world 1 (one rank, the whole GPU, nothing to communicate) on the same shapes...\n";
    for (size_t i = 0; i < shapes.size(); ++i) {
      tb::AgGemmBenchOptions o;
      o.world = 1;
      o.m = shapes[i].m;
      o.n = shapes[i].n;
      o.k = shapes[i].k;
      o.config = ag_gemm_config(a);
      o.timing = {std::min(a.warmup, 3), std::min(a.iters, 10)};
      o.seed = a.seed;
      const tb::Table t = tb::bench_ag_gemm(o);
      world1[i] = row_time_us(t, "cuBLAS GEMM") / row_time_us(t, "tilelink fused");
    }
  }
  const sim::CostModel cost;  // an H200 with NVLink: the model's defaults, from this repository's measurements
  std::cout << "\n== " << (virtual_ranks ? "predicted" : "predicted next to measured") << ": " << a.world
            << " H200s over NVLink (tilelink plan ag_gemm; a model, not a measurement) ==\n";
  std::vector<sim::AgGemmPrediction> predicted;
  for (const Mnk& s : shapes) {
    sim::AgGemmProblem p;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.world = a.world;
    predicted.push_back(sim::predict_ag_gemm(p, sim::AgGemmPlanConfig{}, cost));
  }
  std::printf("%-22s %12s %12s %12s %12s\n", "(m, n, k)", "non-overl. us", "decomposed", "fused", "ideal");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const sim::AgGemmPrediction& r = predicted[i];
    char shape[64];
    std::snprintf(shape, sizeof(shape), "(%u, %u, %u)", shapes[i].m, shapes[i].n, shapes[i].k);
    std::printf("%-22s %12.0f %12.0f %12.0f %12.0f\n", shape, r.non_overlapped * 1e6, r.decomposed * 1e6,
                r.fused * 1e6, r.ideal * 1e6);
  }
  std::cout << "\n== summary ==\n";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const double fused = row_time_us(measured[i], "tilelink fused");
    const double non = row_time_us(measured[i], "non-overlapped");
    const double ideal = row_time_us(measured[i], "ideal");
    const sim::AgGemmPrediction& r = predicted[i];
    std::printf("AG+GEMM (%u, %u, %u): %s: fused %.2fx non-overlapped, %.2fx ideal", shapes[i].m, shapes[i].n,
                shapes[i].k, tb::ranks_phrase(a.world).c_str(), non / fused, ideal / fused);
    if (virtual_ranks) std::printf(" | world 1: %.2fx cuBLAS", world1[i]);
    std::printf(" | predicted %d x H200: %.2fx non-overlapped, %.2fx ideal\n", a.world,
                r.non_overlapped / r.fused, r.ideal / r.fused);
  }
}

int cmd_ag_gemm(const AgGemmArgs& a, const std::string& command) {
  check_writable(a.json);
  check_writable(a.svg);
  tb::AgGemmBenchOptions o;
  o.world = a.world;
  o.config = ag_gemm_config(a);
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;
  const ShapeChoice run = choose_shapes(a.sweep, false, a.shapes, kAgGemmPaperShapes, {a.m, a.n, a.k}, a.svg, "ag_gemm");
  const std::vector<tb::Table> tables = run_shapes(
      a.world, "bench ag_gemm", run.shapes, command, a.seed, a.json,
      [&](const Mnk& s) {
        o.m = s.m;
        o.n = s.n;
        o.k = s.k;
        return tb::bench_ag_gemm(o);
      },
      run.sweep, run.svg);
  if (a.explain) explain_ag_gemm(a, run.shapes, tables);
  return 0;
}

// `tilelink bench gemm_rs`: the fused GEMM+RS against its baselines.
struct GemmRsArgs {
  int world = 8;
  uint32_t m = 8192, n = 8192, k = 28672;
  std::string shapes;  // "paper": the three shapes of the GEMM+RS issue instead of --m/--n/--k
  bool sweep = false;  // DESIGN.md section 8's model shapes
  std::string svg;     // sweep: chart file
  std::string granularity = "tile";
  std::string scatter = "pull";
  uint32_t reduce_blocks = 0, gemm_sms = 0, swizzle = 0;
  CLI::Option_group* knobs = nullptr;  // the configuration options (knob_group)
  int warmup = 5, iters = 20;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};

tilelink::SignalGranularity parse_granularity(const std::string& g) {
  return g == "rank" ? tilelink::SignalGranularity::kRank
         : g == "row" ? tilelink::SignalGranularity::kTileRow
                      : tilelink::SignalGranularity::kTile;
}

tilelink::GemmRsScatter parse_scatter(const std::string& s) {
  return s == "push" ? tilelink::GemmRsScatter::kEpiloguePush
         : s == "ce" ? tilelink::GemmRsScatter::kCopyEngine
                     : tilelink::GemmRsScatter::kPull;
}

// The options of one GEMM+RS run (bench gemm_rs, trace gemm_rs), less the shape.
tb::GemmRsBenchOptions gemm_rs_options(const GemmRsArgs& a) {
  tb::GemmRsBenchOptions o;
  o.world = a.world;
  o.m = a.m;
  o.n = a.n;
  o.k = a.k;
  o.config.granularity = parse_granularity(a.granularity);
  o.config.scatter = parse_scatter(a.scatter);
  o.config.reduce_blocks = a.reduce_blocks;
  o.config.gemm_sms = a.gemm_sms;
  o.config.swizzle = a.swizzle;
  o.config.use_tune_cache = !any_knob(a.knobs);
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;
  return o;
}

// The options `bench gemm_rs` and `trace gemm_rs` share.
void add_gemm_rs_options(CLI::App* app, GemmRsArgs& a) {
  CLI::Option_group* knobs = knob_group(app, a.knobs);
  app->add_option("--world", a.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  app->add_option("--m", a.m, "rows of the output over all ranks (each rank gets m / world)")->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--n", a.n, "columns of the output")->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--k", a.k, "inner dimension over all ranks (each rank holds k / world)")->capture_default_str()->check(CLI::PositiveNumber);
  knobs->add_option("--granularity", a.granularity, "signal per tile, row (of tiles) or rank (owner block)")
      ->capture_default_str()->check(CLI::IsMember({"tile", "row", "rank"}));
  knobs->add_option("--scatter", a.scatter, "how tiles reach their owner: pull (owners read the senders' partials), push (the GEMM epilogue stores into the owner), ce (copy engine, per signal group: needs --granularity row or rank)")
      ->capture_default_str()->check(CLI::IsMember({"pull", "push", "ce"}));
  knobs->add_option("--reduce-blocks", a.reduce_blocks, "reduction CTAs per rank, rounded up to whole GEMM clusters; 0 = budget / 32")->capture_default_str();
  knobs->add_option("--gemm-sms", a.gemm_sms, "GEMM CTAs per rank; 0 = the rest of the budget")->capture_default_str();
  knobs->add_option("--swizzle", a.swizzle, "tile rasterization swizzle: 1, 2, 4 or 8; 0 = automatic (a band inside one owner block)")->capture_default_str()->check(CLI::IsMember({0u, 1u, 2u, 4u, 8u}));
  app->add_option("--warmup", a.warmup, "untimed calls before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  app->add_option("--iters", a.iters, "timed calls (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  a.seed_option = app->add_option("--seed", a.seed, "random seed of the inputs; default: a fresh one");
}

int cmd_gemm_rs(const GemmRsArgs& a, const std::string& command) {
  check_writable(a.json);
  check_writable(a.svg);
  tb::GemmRsBenchOptions o = gemm_rs_options(a);
  const ShapeChoice run = choose_shapes(a.sweep, true, a.shapes, kGemmRsPaperShapes, {a.m, a.n, a.k}, a.svg, "gemm_rs");
  run_shapes(
      a.world, "bench gemm_rs", run.shapes, command, a.seed, a.json,
      [&](const Mnk& s) {
        o.m = s.m;
        o.n = s.n;
        o.k = s.k;
        return tb::bench_gemm_rs(o);
      },
      run.sweep, run.svg);
  return 0;
}

// `tilelink bench mlp`: the fused tensor-parallel MLP against the non-overlapped chain.
struct MlpArgs {
  int world = 8;
  uint32_t m = 8192, hidden = 8192, intermediate = 28672;
  std::string model;  // sets hidden and intermediate
  std::string activation = "swiglu", scatter = "pull", granularity = "tile";
  CLI::Option_group* knobs = nullptr;  // fc2's configuration options (knob_group)
  int warmup = 3, iters = 10;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};

// Models' MLP shapes (hidden, intermediate), DESIGN.md §8.
struct MlpModel {
  const char* name;
  uint32_t hidden, intermediate;
};
constexpr MlpModel kMlpModels[] = {{"llama3-8b", 4096, 14336}, {"llama3-70b", 8192, 28672}, {"llama3-405b", 16384, 53248}};

// The options of one MLP run (bench mlp, trace mlp); --model sets hidden and intermediate.
tb::MlpBenchOptions mlp_options(MlpArgs a) {
  if (!a.model.empty()) {
    for (const MlpModel& model : kMlpModels) {
      if (a.model == model.name) {
        a.hidden = model.hidden;
        a.intermediate = model.intermediate;
      }
    }
  }
  tb::MlpBenchOptions o;
  o.world = a.world;
  o.m = a.m;
  o.hidden = a.hidden;
  o.intermediate = a.intermediate;
  o.config.activation = a.activation == "gelu" ? tilelink::MlpActivation::kGelu : tilelink::MlpActivation::kSwiGlu;
  o.config.fc2.scatter = parse_scatter(a.scatter);
  o.config.fc2.granularity = parse_granularity(a.granularity);
  o.config.fc2.use_tune_cache = !any_knob(a.knobs);
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;
  return o;
}

// The options `bench mlp` and `trace mlp` share.
void add_mlp_options(CLI::App* app, MlpArgs& a) {
  app->add_option("--world", a.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  app->add_option("--m", a.m, "tokens over all ranks (each rank holds m / world)")->capture_default_str()->check(CLI::PositiveNumber);
  CLI::Option* model = app->add_option("--model", a.model, "take hidden and intermediate from a model: llama3-8b, llama3-70b, llama3-405b")
      ->check(CLI::IsMember({"llama3-8b", "llama3-70b", "llama3-405b"}));
  app->add_option("--hidden", a.hidden, "hidden size H")->capture_default_str()->check(CLI::PositiveNumber)->excludes(model);
  app->add_option("--intermediate", a.intermediate, "intermediate size over all ranks")->capture_default_str()->check(CLI::PositiveNumber)->excludes(model);
  app->add_option("--activation", a.activation, "swiglu (fc1 gives gate and up halves) or gelu")->capture_default_str()->check(CLI::IsMember({"swiglu", "gelu"}));
  CLI::Option_group* knobs = knob_group(app, a.knobs);
  knobs->add_option("--scatter", a.scatter, "fc2's scatter: pull, push or ce (ce needs --granularity row or rank)")->capture_default_str()->check(CLI::IsMember({"pull", "push", "ce"}));
  knobs->add_option("--granularity", a.granularity, "fc2's signal per tile, row (of tiles) or rank")->capture_default_str()->check(CLI::IsMember({"tile", "row", "rank"}));
  app->add_option("--warmup", a.warmup, "untimed calls before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  app->add_option("--iters", a.iters, "timed calls (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  a.seed_option = app->add_option("--seed", a.seed, "random seed of the inputs; default: a fresh one");
}

int cmd_mlp(const MlpArgs& a, const std::string& command) {
  check_writable(a.json);
  const tb::MlpBenchOptions o = mlp_options(a);
  run_shapes(a.world, "bench mlp", {{o.m, o.hidden, o.intermediate}}, command, a.seed, a.json,
             [&](const Mnk&) { return tb::bench_mlp(o); });
  return 0;
}

// `tilelink bench sp_attention`: sequence-parallel attention against the non-overlapped and ring
// schedules of the same kernel.
struct SpAttentionArgs {
  int world = 8;
  uint32_t seq = 32768, q_heads = 32, kv_heads = 8, head_dim = 128;
  bool non_causal = false, local_first = false;
  std::string layout = "contiguous", resource = "ce";
  uint32_t comm_rows = 0, blocks = 0, attention_sms = 0, section_heads = 0;
  CLI::Option_group* knobs = nullptr;  // the configuration options (knob_group)
  std::string dump;
  int warmup = 3, iters = 10;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};

tb::SpAttentionBenchOptions sp_attention_options(const SpAttentionArgs& a) {
  tb::SpAttentionBenchOptions o;
  o.world = a.world;
  o.seq = a.seq;
  o.q_heads = a.q_heads;
  o.kv_heads = a.kv_heads;
  o.head_dim = a.head_dim;
  o.causal = !a.non_causal;
  o.config.layout = a.layout == "zigzag" ? tilelink::SeqLayout::kZigZag : tilelink::SeqLayout::kContiguous;
  o.config.comm.resource = a.resource == "sm" ? tilelink::CommResource::kSm : tilelink::CommResource::kCopyEngine;
  o.config.comm.comm_rows = a.comm_rows;
  o.config.comm.num_blocks = a.blocks;
  o.config.attention_sms = a.attention_sms;
  o.config.local_first = a.local_first;
  o.config.section_kv_heads = a.section_heads;
  o.config.use_tune_cache = !any_knob(a.knobs);
  o.dump = a.dump;
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;
  return o;
}

// The options `bench sp_attention` and `trace sp_attention` share.
// `knobs` false (tune sp_attention): the shape, mask, layout, timing and seed only.
void add_sp_attention_options(CLI::App* app, SpAttentionArgs& a, bool knobs = true) {
  app->add_option("--world", a.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  app->add_option("--seq", a.seq, "tokens over all ranks (a multiple of the world size)")->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--q-heads", a.q_heads, "query heads")->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--kv-heads", a.kv_heads, "K/V heads (GQA: q-heads a multiple of it)")->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--head-dim", a.head_dim, "head dimension: 64 or 128")->capture_default_str()->check(CLI::IsMember({64, 128}));
  app->add_flag("--non-causal", a.non_causal, "no causal mask");
  app->add_option("--layout", a.layout, "sequence sharding: contiguous or zigzag")->capture_default_str()->check(CLI::IsMember({"contiguous", "zigzag"}));
  if (knobs) {
    CLI::Option_group* group = knob_group(app, a.knobs);
    group->add_option("--resource", a.resource, "K/V all-gather on ce (copy engine) or sm (SM pull)")->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
    group->add_option("--comm-rows", a.comm_rows, "tokens per K/V chunk, a multiple of 128 (0: automatic)")->capture_default_str();
    group->add_option("--blocks", a.blocks, "CTAs of the SM all-gather (0: automatic)")->capture_default_str();
    group->add_option("--attention-sms", a.attention_sms, "CTAs of the attention kernel per rank (0: automatic)")->capture_default_str();
    group->add_flag("--local-first", a.local_first, "the fused kernel folds every item's own shard before any remote chunk");
    group->add_option("--section-heads", a.section_heads, "kv heads whose items run together, a divisor of --kv-heads (0: automatic, as many as fit in L2)")->capture_default_str();
  }
  app->add_option("--warmup", a.warmup, "untimed calls before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  app->add_option("--iters", a.iters, "timed calls (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  a.seed_option = app->add_option("--seed", a.seed, "random seed of the inputs; default: a fresh one");
}

int cmd_sp_attention(const SpAttentionArgs& a, const std::string& command) {
  check_writable(a.json);
  const tb::SpAttentionBenchOptions o = sp_attention_options(a);
  run_shapes(a.world, "bench sp_attention", {{a.seq, a.q_heads, a.head_dim}}, command, a.seed, a.json,
             [&](const Mnk&) { return tb::bench_sp_attention(o); });
  return 0;
}

// `tilelink bench moe_ag`: MoE part 1 against the per-expert cuBLAS chain; `tilelink bench moe`:
// the whole layer against the per-expert cuBLAS chain with its collectives.
struct MoeArgs {
  int world = 8;
  uint32_t m = 8192, hidden = 4096, intermediate = 14336, experts = 8, topk = 2;
  std::string model;  // sets hidden, intermediate, experts and topk
  std::string routing = "uniform";
  uint32_t gather_blocks = 0, gemm_sms = 0, swizzle = 0;
  std::string kernel;
  // bench moe only: the activation and part 2's knobs.
  std::string activation = "swiglu";
  uint32_t comm_rows = 0, combine_blocks = 0, weight_sweeps = 0;
  CLI::Option_group* knobs = nullptr;  // the configuration options of both parts (knob_group)
  int warmup = 3, iters = 10;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};

// Models' MoE shapes (hidden, each expert's intermediate, experts, top-k), DESIGN.md §8.
struct MoeModel {
  const char* name;
  uint32_t hidden, intermediate, experts, topk;
};
constexpr MoeModel kMoeModels[] = {{"mixtral-8x7b", 4096, 14336, 8, 2},
                                   {"mixtral-8x22b", 6144, 16384, 8, 2},
                                   {"qwen1.5-moe", 2048, 1408, 60, 4},
                                   {"deepseek-moe", 2048, 1408, 64, 6}};

tilelink::SyntheticRouting parse_routing(const std::string& s) {
  return s == "skewed"        ? tilelink::SyntheticRouting::kSkewed
         : s == "few_experts" ? tilelink::SyntheticRouting::kFewExperts
                              : tilelink::SyntheticRouting::kUniform;
}

// The model's shape into (hidden, intermediate, experts, topk); no change for "" (CLI11 has
// checked the name against kMoeModels).
void apply_moe_model(const std::string& name, uint32_t& hidden, uint32_t& intermediate, uint32_t& experts,
                     uint32_t& topk) {
  for (const MoeModel& model : kMoeModels) {
    if (name == model.name) {
      hidden = model.hidden;
      intermediate = model.intermediate;
      experts = model.experts;
      topk = model.topk;
    }
  }
}

tb::MoeBenchOptions moe_bench_options(MoeArgs a) {
  apply_moe_model(a.model, a.hidden, a.intermediate, a.experts, a.topk);
  tb::MoeBenchOptions o;
  o.world = a.world;
  o.m = a.m;
  o.hidden = a.hidden;
  o.intermediate = a.intermediate;
  o.experts = a.experts;
  o.topk = a.topk;
  o.routing = parse_routing(a.routing);
  o.config.gather_blocks = a.gather_blocks;
  o.config.gemm_sms = a.gemm_sms;
  o.config.swizzle = a.swizzle;
  o.config.kernel = a.kernel;
  o.part2.comm_rows = a.comm_rows;
  o.part2.combine_blocks = a.combine_blocks;
  o.part2.weight_sweeps = a.weight_sweeps;
  o.part2.gemm_sms = a.gemm_sms;
  o.part2.swizzle = a.swizzle;
  o.part2.kernel = a.kernel;
  o.activation = a.activation == "gelu" ? tilelink::MlpActivation::kGelu : tilelink::MlpActivation::kSwiGlu;
  o.use_tune_cache = !any_knob(a.knobs);
  o.timing = {a.warmup, a.iters};
  o.seed = a.seed;
  return o;
}

int cmd_moe_ag(const MoeArgs& a, const std::string& command) {
  check_writable(a.json);
  const tb::MoeBenchOptions o = moe_bench_options(a);
  run_shapes(a.world, "bench moe_ag", {{o.m, o.intermediate, o.hidden}}, command, a.seed, a.json,
             [&](const Mnk&) { return tb::bench_moe_ag(o); });
  return 0;
}

int cmd_moe(const MoeArgs& a, const std::string& command) {
  check_writable(a.json);
  const tb::MoeBenchOptions o = moe_bench_options(a);
  run_shapes(a.world, "bench moe", {{o.m, o.intermediate, o.hidden}}, command, a.seed, a.json,
             [&](const Mnk&) { return tb::bench_moe_layer(o); });
  return 0;
}

// The options `bench moe_ag`, `bench moe` and `trace moe` share (trace: no --json).
// `knobs` false (tune moe): the shape, timing and seed only, no configuration.
void add_moe_options(CLI::App* cmd, MoeArgs& a, bool json = true, bool knobs = true) {
  cmd->add_option("--world", a.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  cmd->add_option("--m", a.m, "tokens over all ranks (each rank holds m / world)")->capture_default_str()->check(CLI::PositiveNumber);
  CLI::Option* model = cmd->add_option("--model", a.model, "take the shape from a model: mixtral-8x7b, mixtral-8x22b, qwen1.5-moe, deepseek-moe")
                           ->check(CLI::IsMember({"mixtral-8x7b", "mixtral-8x22b", "qwen1.5-moe", "deepseek-moe"}));
  cmd->add_option("--hidden", a.hidden, "hidden size H")->capture_default_str()->check(CLI::PositiveNumber)->excludes(model);
  cmd->add_option("--intermediate", a.intermediate, "each expert's intermediate size over all ranks (intermediate / world per rank)")->capture_default_str()->check(CLI::PositiveNumber)->excludes(model);
  cmd->add_option("--experts", a.experts, "experts")->capture_default_str()->check(CLI::Range(1, 1024))->excludes(model);
  cmd->add_option("--topk", a.topk, "experts per token")->capture_default_str()->check(CLI::Range(1, 1024))->excludes(model);
  cmd->add_option("--routing", a.routing, "synthetic routing: uniform, skewed (expert 0 hot) or few_experts")->capture_default_str()->check(CLI::IsMember({"uniform", "skewed", "few_experts"}));
  if (knobs) {
    CLI::Option_group* group = knob_group(cmd, a.knobs);
    group->add_option("--gather-blocks", a.gather_blocks, "gather CTAs per rank (0 = automatic)")->capture_default_str();
    group->add_option("--gemm-sms", a.gemm_sms, "grouped GEMM CTAs per rank (0 = automatic)")->capture_default_str();
    group->add_option("--swizzle", a.swizzle, "rasterization swizzle 1, 2, 4, 8 (0 = automatic)")->capture_default_str()->check(CLI::IsMember({0, 1, 2, 4, 8}));
    group->add_option("--kernel", a.kernel, "grouped GEMM configuration: 128x256x64_c1x2 (default) or 128x128x64_c1x2");
  }
  cmd->add_option("--warmup", a.warmup, "untimed calls before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--iters", a.iters, "timed calls (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  if (json) cmd->add_option("--json", a.json, "also write the results as JSON to FILE");
  a.seed_option = cmd->add_option("--seed", a.seed, "random seed of the inputs and routing; default: a fresh one");
}

// The MoE layer's own options (bench moe, trace moe; tune moe: the activation only), after
// add_moe_options.
void add_moe_layer_options(CLI::App* cmd, MoeArgs& a, bool knobs = true) {
  cmd->add_option("--activation", a.activation, "swiglu (part 1 gives gate and up halves) or gelu")->capture_default_str()->check(CLI::IsMember({"swiglu", "gelu"}));
  if (!knobs) return;
  CLI::Option_group* group = knob_group(cmd, a.knobs);
  group->add_option("--combine-rows", a.comm_rows, "tokens per combine / reduction block (0 = automatic)")->capture_default_str();
  group->add_option("--weight-sweeps", a.weight_sweeps, "part 2's GEMM order: weight sweeps over the combine's rounds (0 = automatic; at least the rounds = token order)")->capture_default_str();
  group->add_option("--combine-blocks", a.combine_blocks, "part 2's combine + reduction CTAs per rank (0 = automatic)")->capture_default_str();
}

// `tilelink tune ag_gemm`: search the design space, store the best config in the tune cache.
struct TuneArgs {
  int world = 8;
  uint32_t m = 8192, n = 28672, k = 8192;
  std::string shapes;  // "paper": the three LLaMA shapes
  size_t top = 6;
  std::string cache = tilelink::TuneCache::default_path();
  bool dry_run = false;
  int sms = 132;  // dry run: SMs of the GPU to plan for
  int warmup = 2, iters = 5;
  std::string json;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};

std::vector<Mnk> tune_shapes(const TuneArgs& a, const std::vector<Mnk>& paper = kAgGemmPaperShapes,
                             const char* op = "ag_gemm") {
  return choose_shapes(false, false, a.shapes, paper, {a.m, a.n, a.k}, "", op).shapes;
}

// --dry-run of `tune <op>`: the candidates the search would time, with the plan model's
// predictions; no GPU. `stages`: the unranked stages' labels and candidates (each around the
// all-automatic configuration, stages[0][0]); `comm(base)` ranks the last stage's around it.
template <class Config, class Comm>
void print_tune_candidates(const std::string& header,
                           const std::vector<std::pair<const char*, std::vector<Config>>>& stages, Comm&& comm) {
  std::cout << header;
  for (const auto& [label, configs] : stages) {
    for (const auto& c : configs) std::printf("%-13s %s\n", label, tilelink::describe(c).c_str());
  }
  for (const auto& c : comm(stages.front().second.front())) {
    std::printf("communication %s  (predicted %.1f us)\n", tilelink::describe(c.config).c_str(), c.predicted_us);
  }
}

// The options of every `tune <op>` search (after the op's shape options).
void add_tune_search_options(CLI::App* app, TuneArgs& a, const char* dry_run_help) {
  app->add_option("--top", a.top, "communication variants to time (the plan model's best)")->capture_default_str()->check(CLI::Range(1, 64));
  app->add_option("--cache", a.cache, "tune cache file to update ('' = do not store); default: $TILELINK_TUNE_CACHE or ~/.cache/tilelink/tune.json")->capture_default_str();
  app->add_flag("--dry-run", a.dry_run, dry_run_help);
  app->add_option("--sms", a.sms, "dry run: SMs of the GPU planned for")->capture_default_str()->check(CLI::PositiveNumber);
}

std::string tune_header(const char* op, const TuneArgs& a, const Mnk& s) {
  return std::string("== tune ") + op + " (dry run), world " + std::to_string(a.world) + ", m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + ", " + std::to_string(a.sms / a.world) +
         " SMs per rank ==\n";
}

int cmd_tune_dry_run(const TuneArgs& a) {
  for (const Mnk& s : tune_shapes(a)) {
    const tilelink::AgGemmTuneShape shape{a.world, a.sms / a.world, s.m / static_cast<uint32_t>(a.world),
                                          s.n / static_cast<uint32_t>(a.world), s.k};
    print_tune_candidates<tilelink::AgGemmConfig>(
        tune_header("ag_gemm", a, s),
        {{"compute", tilelink::ag_gemm_compute_candidates(tilelink::AgGemm::kernel_names())}},
                          [&](const tilelink::AgGemmConfig& base) {
                            return tilelink::ag_gemm_comm_candidates(base, shape, a.top);
                          });
  }
  return 0;
}

int cmd_tune_gemm_rs_dry_run(const TuneArgs& a) {
  for (const Mnk& s : tune_shapes(a, kGemmRsPaperShapes, "gemm_rs")) {
    const tilelink::GemmRsTuneShape shape{a.world, a.sms / a.world, s.m, s.n, s.k / static_cast<uint32_t>(a.world)};
    print_tune_candidates<tilelink::GemmRsConfig>(tune_header("gemm_rs", a, s),
                                                  {{"compute", tilelink::gemm_rs_compute_candidates()}},
                          [&](const tilelink::GemmRsConfig& base) {
                            return tilelink::gemm_rs_comm_candidates(base, shape, a.top);
                          });
  }
  return 0;
}

// `tune ag_gemm|gemm_rs` on the GPUs present: `tune(options, progress)` per shape, Options being
// tilelink::tool::TuneOptions of tb::AgGemmBenchOptions or tb::GemmRsBenchOptions.
template <class Options, class Tune>
int run_tune(const TuneArgs& a, const std::vector<Mnk>& shapes, const char* what, const std::string& command,
             Tune&& tune) {
  check_writable(a.json);
  Options o;
  o.op.world = a.world;
  o.top = a.top;
  o.cache = a.cache;
  o.op.timing = {a.warmup, a.iters};
  o.op.seed = a.seed;
  run_shapes(a.world, what, shapes, command, a.seed, a.json, [&](const Mnk& s) {
    o.op.m = s.m;
    o.op.n = s.n;
    o.op.k = s.k;
    return tune(o, std::cout);
  });
  return 0;
}

int cmd_tune(const TuneArgs& a, const std::string& command) {
  return run_tune<tilelink::tool::TuneOptions<tb::AgGemmBenchOptions>>(a, tune_shapes(a), "tune ag_gemm", command, tilelink::tool::tune_ag_gemm);
}

int cmd_tune_gemm_rs(const TuneArgs& a, const std::string& command) {
  return run_tune<tilelink::tool::TuneOptions<tb::GemmRsBenchOptions>>(a, tune_shapes(a, kGemmRsPaperShapes, "gemm_rs"), "tune gemm_rs", command,
                                         tilelink::tool::tune_gemm_rs);
}

// `tilelink tune mlp`: fc1's AG+GEMM and fc2's GEMM+RS, each searched as tune ag_gemm|gemm_rs
// on the MLP's shapes. --model sets hidden and intermediate; --n and --k are not used.
int cmd_tune_mlp(const TuneArgs& a, const MlpArgs& mlp, const std::string& command) {
  check_writable(a.json);
  MlpArgs shape = mlp;
  shape.world = a.world;
  shape.m = a.m;
  const tb::MlpBenchOptions m = mlp_options(shape);
  tilelink::tool::TuneOptions<tb::MlpBenchOptions> o;
  o.op = m;
  o.top = a.top;
  o.cache = a.cache;
  o.op.timing = {a.warmup, a.iters};
  o.op.seed = a.seed;
  if (a.dry_run) {
    TuneArgs fc1 = a, fc2 = a;
    fc1.n = (m.config.activation == tilelink::MlpActivation::kSwiGlu ? 2 : 1) * m.intermediate;
    fc1.k = m.hidden;
    fc2.n = m.hidden;
    fc2.k = m.intermediate;
    fc1.shapes = fc2.shapes = "";
    const int rc1 = cmd_tune_dry_run(fc1);
    const int rc2 = cmd_tune_gemm_rs_dry_run(fc2);
    return std::max(rc1, rc2);
  }
  run_shapes(a.world, "tune mlp", {{m.m, m.hidden, m.intermediate}}, command, a.seed, a.json,
             [&](const Mnk&) { return tilelink::tool::tune_mlp(o, std::cout); });
  return 0;
}

// `tilelink tune moe`: the MoE layer's three-stage search (tune/moe_tune.hpp) on the GPUs
// present; --dry-run prints the candidates with the plan model's predictions.
int cmd_tune_moe(const TuneArgs& t, const MoeArgs& a, const std::string& command) {
  tilelink::tool::TuneOptions<tb::MoeBenchOptions> o;
  o.op = moe_bench_options(a);
  o.top = t.top;
  o.cache = t.cache;
  if (t.dry_run) {
    const tilelink::MoeTuneShape shape = tilelink::tool::moe_tune_shape(o.op, t.sms / o.op.world);
    const std::vector<tilelink::MoeLayerConfig> kernels = tilelink::moe_kernel_candidates(shape.kernels);
    print_tune_candidates<tilelink::MoeLayerConfig>(
        "== tune moe (dry run), world " + std::to_string(o.op.world) + ", " + std::to_string(o.op.m) +
            " tokens, hidden=" + std::to_string(o.op.hidden) + " intermediate=" + std::to_string(o.op.intermediate) +
            ", " + std::to_string(o.op.experts) + " experts, top-" + std::to_string(o.op.topk) + ", " +
            std::to_string(shape.sm_budget) + " SMs per rank ==\n",
        {{"kernels", kernels}, {"order", tilelink::moe_order_candidates(kernels.front())}},
        [&](const tilelink::MoeLayerConfig& base) { return tilelink::moe_comm_candidates(base, shape, t.top); });
    return 0;
  }
  check_writable(a.json);
  run_shapes(a.world, "tune moe", {{o.op.m, o.op.intermediate, o.op.hidden}}, command, a.seed, a.json,
             [&](const Mnk&) { return tilelink::tool::tune_moe(o, std::cout); });
  return 0;
}

// `tilelink tune sp_attention`: SP attention's two-stage search (tune/sp_attention_tune.hpp).
int cmd_tune_sp_attention(const TuneArgs& t, const SpAttentionArgs& a, const std::string& command) {
  tilelink::tool::TuneOptions<tb::SpAttentionBenchOptions> o;
  o.op = sp_attention_options(a);
  o.top = t.top;
  o.cache = t.cache;
  if (t.dry_run) {
    const tilelink::SpAttentionTuneShape shape = tilelink::tool::sp_attention_tune_shape(o.op, t.sms / a.world);
    print_tune_candidates<tilelink::SpAttentionConfig>(
        "== tune sp_attention (dry run), world " + std::to_string(a.world) + ", seq=" + std::to_string(a.seq) +
            ", heads " + std::to_string(a.q_heads) + "/" + std::to_string(a.kv_heads) + ", head dim " +
            std::to_string(a.head_dim) + (o.op.causal ? ", causal, " : ", non-causal, ") + a.layout + ", " +
            std::to_string(shape.sm_budget) + " SMs per rank ==\n",
        {{"compute", tilelink::sp_attention_compute_candidates(a.kv_heads, shape.layout)}},
        [&](const tilelink::SpAttentionConfig& base) {
          return tilelink::sp_attention_comm_candidates(base, shape, t.top);
        });
    return 0;
  }
  check_writable(a.json);
  run_shapes(a.world, "tune sp_attention", {{a.seq, a.q_heads, a.head_dim}}, command, a.seed, a.json,
             [&](const Mnk&) { return tilelink::tool::tune_sp_attention(o, std::cout); });
  return 0;
}

// The options `tune ag_gemm` and `tune gemm_rs` share (the shape's help differs).
void add_tune_options(CLI::App* app, TuneArgs& a, const char* m_help, const char* n_help, const char* k_help,
                      const char* paper_help) {
  app->add_option("--world", a.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  app->add_option("--m", a.m, m_help)->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--n", a.n, n_help)->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--k", a.k, k_help)->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--shapes", a.shapes, paper_help)->check(CLI::IsMember({"paper"}));
  add_tune_search_options(app, a, "print the candidates and the model's predictions; no GPU needed");
  app->add_option("--warmup", a.warmup, "untimed calls per configuration")->capture_default_str()->check(CLI::Range(0, 1000000));
  app->add_option("--iters", a.iters, "timed calls per configuration (the median counts)")->capture_default_str()->check(CLI::Range(1, 1000000));
  app->add_option("--json", a.json, "also write the results as JSON to FILE");
  a.seed_option = app->add_option("--seed", a.seed, "random seed of the inputs; default: a fresh one");
}

// The table of a plan command (non-overlapped, decomposed, fused, ideal) and its timeline files.
// A timeline as a Chrome / Perfetto trace and an SVG picture (each only if its file is named).
void write_timeline(const std::vector<tilelink::sim::Interval>& timeline, const std::string& trace,
                    const std::string& svg, const std::string& title) {
  namespace sim = tilelink::sim;
  if (!trace.empty()) {
    std::ofstream(trace) << sim::to_chrome_trace(timeline, title);
    std::cout << "wrote " << trace << " (Chrome / Perfetto trace)\n";
  }
  if (!svg.empty()) {
    std::ofstream(svg) << sim::to_svg(timeline, title);
    std::cout << "wrote " << svg << " (SVG timeline)\n";
  }
}

// The arguments of `tilelink trace <op>`: the op's own, the timeline files, the records per rank.
template <class OpArgs>
struct TraceCmdArgs {
  OpArgs op;
  std::string trace, svg;
  uint32_t capacity = 1u << 20;
};
using TraceArgs = TraceCmdArgs<AgGemmArgs>;

// --trace, --svg and --capacity of every `tilelink trace <op>`.
template <class OpArgs>
void add_trace_outputs(CLI::App* app, TraceCmdArgs<OpArgs>& a, const char* capacity_help = "records per rank") {
  app->add_option("--trace", a.trace, "write the timeline as Chrome/Perfetto JSON");
  app->add_option("--svg", a.svg, "write the timeline as an SVG picture");
  app->add_option("--capacity", a.capacity, capacity_help)->capture_default_str()->check(CLI::PositiveNumber);
}

// What `tilelink trace <op>` prints and writes for one traced call: records by kind, the
// recording overhead, the op's ordering check (TraceResult::checked), the timeline files. Exit
// status 1 if the check failed or records were dropped.
int report_trace(const tilelink::tool::TraceResult& r, const std::string& op, int world, const std::string& trace,
                 const std::string& svg) {
  std::map<std::string, uint64_t> kinds;
  for (const tilelink::TraceRecord& rec : r.records) ++kinds[tilelink::to_string(static_cast<tilelink::TraceKind>(rec.kind))];
  std::cout << "records: " << r.records.size() << " (";
  const char* sep = "";
  for (const auto& [kind, count] : kinds) {
    std::cout << sep << count << " " << kind;
    sep = ", ";
  }
  std::cout << ")" << (r.dropped > 0 ? ", " + std::to_string(r.dropped) + " dropped (raise --capacity)" : "") << "\n";
  std::printf("call time: %.1f µs untraced, %.1f µs traced (median of %zu): recording costs %+.1f %%\n",
              r.untraced.median, r.traced.median, r.traced.samples, 100.0 * (r.traced.median / r.untraced.median - 1.0));
  std::cout << r.checked << ": " << r.tiles - r.violations << " of " << r.tiles << "\n";
  std::vector<tilelink::sim::Interval> timeline;
  if (r.parts.empty()) {
    timeline = tilelink::sim::trace_intervals(r.records);
  } else {  // each part's lanes after its name, on one clock
    uint64_t t0 = ~0ull;
    for (const tilelink::TraceRecord& rec : r.records) t0 = std::min(t0, rec.start_ns);
    size_t at = 0;
    for (const auto& [name, count] : r.parts) {
      const std::vector<tilelink::TraceRecord> part(r.records.begin() + static_cast<std::ptrdiff_t>(at),
                                                    r.records.begin() + static_cast<std::ptrdiff_t>(at + count));
      const std::vector<tilelink::sim::Interval> lanes = tilelink::sim::trace_intervals(part, name + " ", t0);
      timeline.insert(timeline.end(), lanes.begin(), lanes.end());
      at += count;
    }
  }
  write_timeline(timeline, trace, svg, "tilelink trace " + op + " (measured, " + std::to_string(world) + " ranks)");
  return r.violations == 0 && r.dropped == 0 ? 0 : 1;
}

// The steps every `tilelink trace <op>` shares around `record` (the traced call; it returns the
// TraceResult and prints the op's one-line description).
template <class OpArgs, class Record>
int run_trace(const TraceCmdArgs<OpArgs>& a, const std::string& op, int world, Record&& record) {
  check_writable(a.trace);
  check_writable(a.svg);
  print_device_header(world, "trace " + op);
  const tilelink::tool::TraceResult r = record();
  return report_trace(r, op, world, a.trace, a.svg);
}

// `tilelink trace ag_gemm|sp_attention|gemm_rs|mlp`: one call's device timeline on every rank
// (mlp: fc1 and fc2 as two parts).
int cmd_trace_ag_gemm(const TraceArgs& a) {
  return run_trace(a, "ag_gemm", a.op.world, [&] {
    tilelink::tool::TraceOptions<tb::AgGemmBenchOptions> o;
    o.op.world = a.op.world;
    o.op.m = a.op.m;
    o.op.n = a.op.n;
    o.op.k = a.op.k;
    o.op.config = ag_gemm_config(a.op);
    o.capacity = a.capacity;
    o.op.timing = {a.op.warmup, a.op.iters};
    o.op.seed = a.op.seed;
    tilelink::tool::TraceResult r = tilelink::tool::trace_ag_gemm(o);
    std::cout << "(m, n, k) = (" << o.op.m << ", " << o.op.n << ", " << o.op.k << "), " << r.config << "\n";
    return r;
  });
}

using SpAttentionTraceArgs = TraceCmdArgs<SpAttentionArgs>;
int cmd_trace_sp_attention(const SpAttentionTraceArgs& a) {
  return run_trace(a, "sp_attention", a.op.world, [&] {
    tilelink::tool::TraceOptions<tb::SpAttentionBenchOptions> o;
    o.op = sp_attention_options(a.op);
    o.capacity = a.capacity;
    tilelink::tool::TraceResult r = tilelink::tool::trace_sp_attention(o);
    std::cout << "seq " << a.op.seq << ", " << a.op.q_heads << "/" << a.op.kv_heads << " heads, head dim "
              << a.op.head_dim << (a.op.non_causal ? ", non-causal, " : ", causal, ") << a.op.layout << ", "
              << r.config << "\n";
    return r;
  });
}

using GemmRsTraceArgs = TraceCmdArgs<GemmRsArgs>;
int cmd_trace_gemm_rs(const GemmRsTraceArgs& a) {
  return run_trace(a, "gemm_rs", a.op.world, [&] {
    tilelink::tool::TraceOptions<tb::GemmRsBenchOptions> o;
    o.op = gemm_rs_options(a.op);
    o.capacity = a.capacity;
    tilelink::tool::TraceResult r = tilelink::tool::trace_gemm_rs(o);
    std::cout << "(m, n, k) = (" << o.op.m << ", " << o.op.n << ", " << o.op.k << "), " << r.config << "\n";
    return r;
  });
}

using MoeTraceArgs = TraceCmdArgs<MoeArgs>;
int cmd_trace_moe(const MoeTraceArgs& a) {
  return run_trace(a, "moe", a.op.world, [&] {
    tilelink::tool::TraceOptions<tb::MoeBenchOptions> o;
    o.op = moe_bench_options(a.op);
    o.capacity = a.capacity;
    tilelink::tool::TraceResult r = tilelink::tool::trace_moe(o);
    std::cout << "tokens " << o.op.m << ", hidden " << o.op.hidden << ", intermediate " << o.op.intermediate << ", "
              << o.op.experts << " experts, top-" << o.op.topk << ", " << r.config << "\n";
    return r;
  });
}

using MlpTraceArgs = TraceCmdArgs<MlpArgs>;
int cmd_trace_mlp(const MlpTraceArgs& a) {
  return run_trace(a, "mlp", a.op.world, [&] {
    tilelink::tool::TraceOptions<tb::MlpBenchOptions> o;
    o.op = mlp_options(a.op);
    o.capacity = a.capacity;
    tilelink::tool::TraceResult r = tilelink::tool::trace_mlp(o);
    std::cout << "m " << o.op.m << ", hidden " << o.op.hidden << ", intermediate " << o.op.intermediate << ", "
              << a.op.activation << ", " << r.config << "\n";
    return r;
  });
}

template <class Prediction>
void print_plan(const std::string& name, const std::string& title, const Prediction& r, const std::string& trace,
                const std::string& svg, const std::string& timeline_title) {
  namespace sim = tilelink::sim;
  tb::Table table;
  table.name = name;
  table.title = title;
  table.columns = {{"variant", "variant", 0}, {"time_us", "time µs", 1}, {"tflops", "TFLOP/s", 1},
                   {"vs_ideal", "time / ideal", 3}};
  auto row = [&](const std::string& variant, double t) {
    table.add_row({variant, t * 1e6, r.flop / t / 1e12, t / r.ideal});
  };
  row("non-overlapped", r.non_overlapped);
  if constexpr (requires { r.decomposed; }) row("decomposed", r.decomposed);
  row("fused (tilelink)", r.fused);
  row("ideal max(comp, comm)", r.ideal);
  char note[160];
  std::snprintf(note, sizeof(note), "T_comp %.1f µs, T_comm %.1f µs; communication hidden: %.0f %%", r.t_comp * 1e6,
                r.t_comm * 1e6,
                r.t_comm > 0 ? 100.0 * std::clamp((r.non_overlapped - r.fused) / r.t_comm, 0.0, 1.0) : 100.0);
  table.notes.push_back(note);
  tb::print_table(std::cout, table);
  write_timeline(r.timeline, trace, svg, timeline_title);
}

// The cost model of a plan command: the H200 defaults of sim::CostModel, any of them overridden
// from the command line (another GPU, or one GPU shared by virtual ranks).
struct CostArgs {
  tilelink::sim::CostModel cost;
  double tflops = 0, nvlink_gbps = 0, network_gbps = 0, ce_gbps = 0, sm_copy_gbps = 0, ce_chunk_us = -1;

  void add_options(CLI::App* app) {
    app->add_option("--sms", cost.sms, "cost model: SMs per rank")->capture_default_str()->check(CLI::Range(1, 1024));
    app->add_option("--tflops", tflops, "cost model: dense bf16 GEMM TFLOP/s per rank (default 790, an H200's cuBLAS)");
    app->add_option("--nvlink-gbps", nvlink_gbps, "cost model: GB/s into a rank from its node (default 390)");
    app->add_option("--network-gbps", network_gbps, "cost model: GB/s into a rank from other nodes (default 50)");
    app->add_option("--ce-gbps", ce_gbps, "cost model: copy-engine GB/s of large chunks (default 2000)");
    app->add_option("--ce-chunk-us", ce_chunk_us, "cost model: fixed µs per copy-engine chunk (default 5)");
    app->add_option("--sm-copy-gbps", sm_copy_gbps, "cost model: one CTA's copy GB/s (default 48)");
  }
  tilelink::sim::CostModel model() const {
    tilelink::sim::CostModel c = cost;
    if (tflops > 0) c.flops = tflops * 1e12;
    if (nvlink_gbps > 0) c.nvlink_bandwidth = nvlink_gbps * 1e9;
    if (network_gbps > 0) c.network_bandwidth = network_gbps * 1e9;
    if (ce_gbps > 0) c.ce_bandwidth = ce_gbps * 1e9;
    if (ce_chunk_us >= 0) c.ce_chunk_overhead = ce_chunk_us * 1e-6;
    if (sm_copy_gbps > 0) c.sm_copy_bandwidth_per_cta = sm_copy_gbps * 1e9;
    return c;
  }
};

struct PlanArgs {
  CostArgs cost;
  tilelink::sim::AgGemmProblem problem;
  tilelink::sim::AgGemmPlanConfig config;
  std::string resource = "ce";
  std::string order = "mesh";
  std::string trace;
  std::string svg;
};

// `tilelink plan moe_ag`: the predicted timeline of MoE part 1 under the cost model. No GPU needed.
struct PlanMoeArgs {
  CostArgs cost;
  tilelink::sim::MoeProblem problem;
  tilelink::sim::MoeAgPlanConfig config;
  tilelink::sim::MoeRsPlanConfig part2;  // plan moe
  std::string activation = "swiglu";  // plan moe
  std::string model;
  std::string routing = "uniform";
  std::string resource = "ce";
  double mapping_us = 0;
  std::string trace;
  std::string svg;
};

// The options `plan moe_ag` and `plan moe` share.
void add_plan_moe_options(CLI::App* cmd, PlanMoeArgs& a) {
  cmd->add_option("--world", a.problem.world, "ranks")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--nodes", a.problem.nodes, "nodes (ranks are node-major)")->capture_default_str();
  cmd->add_option("--m", a.problem.m, "tokens over all ranks")->capture_default_str();
  CLI::Option* model = cmd->add_option("--model", a.model, "take the shape from a model: mixtral-8x7b, mixtral-8x22b, qwen1.5-moe, deepseek-moe")
                                    ->check(CLI::IsMember({"mixtral-8x7b", "mixtral-8x22b", "qwen1.5-moe", "deepseek-moe"}));
  cmd->add_option("--hidden", a.problem.hidden, "hidden size (K)")->capture_default_str()->excludes(model);
  cmd->add_option("--intermediate", a.problem.intermediate, "each expert's columns over all ranks")->capture_default_str()->excludes(model);
  cmd->add_option("--experts", a.problem.experts, "experts")->capture_default_str()->excludes(model);
  cmd->add_option("--topk", a.problem.topk, "experts per token")->capture_default_str()->excludes(model);
  cmd->add_option("--routing", a.routing, "synthetic routing: uniform, skewed (expert 0 hot) or few_experts")->capture_default_str()->check(CLI::IsMember({"uniform", "skewed", "few_experts"}));
  cmd->add_option("--seed", a.problem.seed, "seed of the synthetic routing")->capture_default_str();
  cmd->add_option("--bm", a.config.bm, "tile rows (experts are padded to them)")->capture_default_str();
  cmd->add_option("--bn", a.config.bn, "tile columns")->capture_default_str();
  cmd->add_option("--comm-rows", a.config.op.comm.comm_rows, "rows per communication tile")->capture_default_str();
  cmd->add_option("--resource", a.resource, "ce (copy engine) or sm")->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
  cmd->add_option("--blocks", a.config.op.comm.num_blocks, "CTAs that copy with --resource sm (default 2)");
  cmd->add_option("--gather-blocks", a.config.op.gather_blocks, "CTAs of the gather stage (0 = the op's automatic count)")->capture_default_str();
  cmd->add_option("--mapping-us", a.mapping_us, "µs of the device mapping before gather and GEMM start (bench moe_ag measures it)")->capture_default_str();
  a.cost.add_options(cmd);
  cmd->add_option("--trace", a.trace, "write the predicted timeline of rank 0 as Chrome/Perfetto JSON");
  cmd->add_option("--svg", a.svg, "write the predicted timeline of rank 0 as an SVG picture");
}

// The model's shape, routing and all-gather resource from the command line; the output files
// checked before any work.
void resolve_plan_moe(PlanMoeArgs& a) {
  namespace sim = tilelink::sim;
  apply_moe_model(a.model, a.problem.hidden, a.problem.intermediate, a.problem.experts, a.problem.topk);
  tilelink::AllGatherConfig& comm = a.config.op.comm;
  comm.resource = a.resource == "sm" ? tilelink::CommResource::kSm : tilelink::CommResource::kCopyEngine;
  if (comm.resource == tilelink::CommResource::kSm && comm.num_blocks == 0) comm.num_blocks = 2;
  a.config.mapping_time = a.mapping_us * 1e-6;
  a.problem.routing = parse_routing(a.routing);
  check_writable(a.trace);
  check_writable(a.svg);
}

int cmd_plan_moe_ag(PlanMoeArgs a) {
  namespace sim = tilelink::sim;
  resolve_plan_moe(a);
  const sim::CostModel cost = a.cost.model();
  const sim::MoePrediction r = sim::predict_moe_ag(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan moe_ag: predicted, not measured (cost model: " << cost.flops / 1e12 << " TFLOP/s, "
            << cost.sms << " SMs, one CTA copies " << cost.sm_copy_bandwidth_per_cta / 1e9 << " GB/s)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  tokens=" << p.m << "  hidden=" << p.hidden
            << "  intermediate=" << p.intermediate << "  experts=" << p.experts << "  top-" << p.topk
            << " (" << tilelink::to_string(p.routing) << " routing, seed " << p.seed << ")  bm=" << a.config.bm << "  bn=" << a.config.bn
            << "  gather CTAs=" << r.gather_ctas << "  GEMM CTAs=" << r.gemm_ctas << "  tiles=" << r.tiles
            << "  resource=" << a.resource << "\n\n";
  print_plan("plan_moe_ag", "MoE part 1, predicted per rank", r, a.trace, a.svg,
             "tilelink plan moe_ag, rank 0 (predicted)");
  std::printf("gather alone on the op's CTAs: %.1f us\n", r.t_gather * 1e6);
  return 0;
}

// `tilelink plan moe`: the predicted timeline of the MoE layer (part 1, activation, part 2).
int cmd_plan_moe(PlanMoeArgs a) {
  namespace sim = tilelink::sim;
  resolve_plan_moe(a);
  a.part2.bm = a.config.bm;
  a.part2.bn = a.config.bn;
  const sim::CostModel cost = a.cost.model();
  const tilelink::MlpActivation activation =
      a.activation == "swiglu" ? tilelink::MlpActivation::kSwiGlu : tilelink::MlpActivation::kGelu;
  const sim::MoePrediction r = sim::predict_moe_layer(a.problem, activation, a.config, a.part2, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan moe: predicted, not measured (cost model: " << cost.flops / 1e12 << " TFLOP/s, "
            << cost.sms << " SMs, one CTA copies " << cost.sm_copy_bandwidth_per_cta / 1e9 << " GB/s)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  tokens=" << p.m << "  hidden=" << p.hidden
            << "  intermediate=" << p.intermediate << " (" << a.activation << ")  experts=" << p.experts << "  top-"
            << p.topk << " (" << tilelink::to_string(p.routing) << " routing, seed " << p.seed << ")  tiles=" << r.tiles
            << "  gather CTAs=" << r.gather_ctas << "  combine CTAs=" << r.combine_ctas << "\n\n";
  print_plan("plan_moe", "MoE layer, predicted per rank", r, a.trace, a.svg, "tilelink plan moe, rank 0 (predicted)");
  return 0;
}

// `tilelink plan sp_attention`: the predicted timeline of sequence-parallel attention (the K/V
// all-gather under the attention work items). No GPU needed.
struct PlanAttentionArgs {
  CostArgs cost;
  tilelink::sim::SpAttentionProblem problem;
  tilelink::sim::SpAttentionPlanConfig config;
  std::string layout = "contiguous";
  std::string resource = "ce";
  bool non_causal = false;
  double attention_tflops = 0;
  std::string trace;
  std::string svg;
};

int cmd_plan_sp_attention(PlanAttentionArgs a) {
  namespace sim = tilelink::sim;
  check_writable(a.trace);
  check_writable(a.svg);
  a.problem.causal = !a.non_causal;
  a.config.op.layout = a.layout == "zigzag" ? tilelink::SeqLayout::kZigZag : tilelink::SeqLayout::kContiguous;
  tilelink::AllGatherConfig& comm = a.config.op.comm;
  comm.resource = a.resource == "sm" ? tilelink::CommResource::kSm : tilelink::CommResource::kCopyEngine;
  if (comm.resource == tilelink::CommResource::kSm && comm.num_blocks == 0) comm.num_blocks = 8;
  if (a.attention_tflops > 0) a.config.attention_flops = a.attention_tflops * 1e12;
  const sim::CostModel cost = a.cost.model();
  const sim::SpAttentionPrediction r = sim::predict_sp_attention(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan sp_attention: predicted, not measured (attention at "
            << a.config.attention_flops / 1e12 << " TFLOP/s per GPU, a planning figure)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  seq=" << p.seq << "  heads=" << p.q_heads << "/"
            << p.kv_heads << "  head_dim=" << p.head_dim << "  " << (p.causal ? "causal" : "non-causal") << "  layout="
            << a.layout << "  bq=" << a.config.bq << "  K/V chunk=" << a.config.op.comm.comm_rows << " tokens  items="
            << r.items << "  CTAs=" << r.ctas << "  resource=" << a.resource << "\n\n";
  print_plan("plan_sp_attention", "sequence-parallel attention, predicted per rank", r, a.trace, a.svg,
             "tilelink plan sp_attention, rank 0 (predicted)");
  return 0;
}

// `tilelink plan mlp`: the predicted timeline of the MLP (fc1, activation, fc2). No GPU needed.
struct PlanMlpArgs {
  CostArgs cost;
  tilelink::sim::MlpProblem problem;
  tilelink::sim::MlpPlanConfig config;
  std::string model;
  std::string activation = "swiglu";
  std::string resource = "ce";
  std::string scatter = "pull";
  std::string trace;
  std::string svg;
};

int cmd_plan_mlp(PlanMlpArgs a) {
  namespace sim = tilelink::sim;
  for (const MlpModel& model : kMlpModels) {
    if (a.model == model.name) {
      a.problem.hidden = model.hidden;
      a.problem.intermediate = model.intermediate;
    }
  }
  a.problem.activation =
      a.activation == "swiglu" ? tilelink::MlpActivation::kSwiGlu : tilelink::MlpActivation::kGelu;
  tilelink::AllGatherConfig& comm = a.config.fc1.op.comm;
  comm.resource = a.resource == "sm" ? tilelink::CommResource::kSm : tilelink::CommResource::kCopyEngine;
  if (comm.resource == tilelink::CommResource::kSm && comm.num_blocks == 0) comm.num_blocks = 16;
  a.config.fc2.op.scatter = parse_scatter(a.scatter);
  check_writable(a.trace);
  check_writable(a.svg);
  const sim::CostModel cost = a.cost.model();
  const sim::MlpPrediction r = sim::predict_mlp(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan mlp: predicted, not measured (cost model: " << cost.flops / 1e12 << " TFLOP/s, "
            << cost.sms << " SMs, NVLink " << cost.nvlink_bandwidth / 1e9 << " GB/s per rank)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  tokens=" << p.m << "  hidden=" << p.hidden
            << "  intermediate=" << p.intermediate << "  activation=" << a.activation << "  fc1 all-gather "
            << a.resource << ", " << a.config.fc1.op.comm.comm_rows << "-row tiles  fc2 scatter " << a.scatter << ", "
            << a.config.fc2.op.reduce_blocks << " reduction CTAs\n\n";
  print_plan("plan_mlp", "MLP, predicted per rank", r, a.trace, a.svg, "tilelink plan mlp, rank 0 (predicted)");
  std::printf("activation %.1f us (its bytes at the HBM bandwidth)\n", r.t_act * 1e6);
  return 0;
}

// `tilelink plan ag_gemm`: the predicted timeline of AG+GEMM under the cost model. No GPU needed.
int cmd_plan_ag_gemm(PlanArgs a) {
  namespace sim = tilelink::sim;
  tilelink::AllGatherConfig& comm = a.config.op.comm;
  comm.resource = a.resource == "sm" ? tilelink::CommResource::kSm : tilelink::CommResource::kCopyEngine;
  comm.order = a.order == "ring" ? tilelink::CommOrder::kRing : tilelink::CommOrder::kFullMesh;
  if (comm.resource == tilelink::CommResource::kSm && comm.num_blocks == 0) comm.num_blocks = 16;
  if (!a.trace.empty()) check_writable(a.trace);
  if (!a.svg.empty()) check_writable(a.svg);
  const sim::CostModel cost = a.cost.model();
  const sim::AgGemmPrediction r = sim::predict_ag_gemm(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan ag_gemm: predicted, not measured (cost model: " << cost.flops / 1e12
            << " TFLOP/s, " << cost.sms << " SMs, NVLink " << cost.nvlink_bandwidth / 1e9 << " GB/s, network "
            << cost.network_bandwidth / 1e9 << " GB/s per GPU)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  m=" << p.m << "  n=" << p.n << "  k=" << p.k
            << "  bm=" << a.config.bm << "  bn=" << a.config.bn << "  comm_rows=" << comm.comm_rows
            << "  resource=" << a.resource
            << (comm.resource == tilelink::CommResource::kSm ? " (" + std::to_string(comm.num_blocks) + " CTAs)" : "")
            << "  order=" << a.order << "\n\n";
  print_plan("plan_ag_gemm", "AG+GEMM, predicted per rank", r, a.trace, a.svg,
             "ag_gemm rank 0, predicted: " + std::to_string(p.world) + " ranks, m=" + std::to_string(p.m) +
                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  return 0;
}

struct PlanRsArgs {
  CostArgs cost;
  tilelink::sim::GemmRsProblem problem;
  tilelink::sim::GemmRsPlanConfig config;
  std::string granularity = "tile";
  std::string scatter = "pull";
  std::string trace;
  std::string svg;
};

// `tilelink plan gemm_rs`: the predicted timeline of GEMM+RS under the cost model. No GPU needed.
int cmd_plan_gemm_rs(PlanRsArgs a) {
  namespace sim = tilelink::sim;
  a.config.op.granularity = parse_granularity(a.granularity);
  a.config.op.scatter = parse_scatter(a.scatter);
  if (!a.trace.empty()) check_writable(a.trace);
  if (!a.svg.empty()) check_writable(a.svg);
  const sim::CostModel cost = a.cost.model();
  const sim::GemmRsPrediction r = sim::predict_gemm_rs(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan gemm_rs: predicted, not measured (cost model: " << cost.flops / 1e12
            << " TFLOP/s, " << cost.sms << " SMs, NVLink " << cost.nvlink_bandwidth / 1e9 << " GB/s per rank)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  m=" << p.m << "  n=" << p.n << "  k=" << p.k
            << "  bm=" << a.config.bm << "  bn=" << a.config.bn << "  reduce_ctas=" << a.config.op.reduce_blocks
            << "  granularity=" << a.granularity << "  scatter=" << a.scatter
            << "  band=" << (a.config.band == 0 ? std::string("auto") : std::to_string(a.config.band)) << "\n\n";
  print_plan("plan_gemm_rs", "GEMM+RS, predicted per rank", r, a.trace, a.svg,
             "gemm_rs rank 0, predicted: " + std::to_string(p.world) + " ranks, m=" + std::to_string(p.m) +
                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  return 0;
}

}  // namespace



int main(int argc, char** argv) {
  tilelink::configure_cuda_environment();  // before any CUDA call
  CLI::App app{"TileLink: tile-centric compute/communication overlap. Device information and benchmarks "
               "(virtual ranks on one GPU, or one rank per GPU with TILELINK_RANKS=gpus).",
               "tilelink"};
  app.set_version_flag("--version", TILELINK_VERSION);
  app.require_subcommand(0, 1);  // none: usage error below; unknown words: CLI11's "not expected"
  app.footer("Exit status: 0 ok, 1 failure, 2 no CUDA GPU, 64 bad command line.");

  int info_world = 2;
  CLI::App* info = app.add_subcommand("info", "devices, SMs, world mode and SM budget per rank");
  info->add_option("--world", info_world, "virtual ranks to show the SM budget for")
      ->capture_default_str()
      ->check(CLI::Range(1, tilelink::kMaxWorldSize));

  CLI::App* bench = app.add_subcommand("bench", "run benchmarks");
  bench->require_subcommand(0, 1);

  tb::PrimitiveOptions prim;
  std::string prim_json;
  CLI::App* primitives = bench->add_subcommand(
      "primitives", "micro-benchmarks: signal round trip, SM push/pull bandwidth, copy-engine chunks");
  primitives->add_option("--world", prim.world, "ranks, as for bench ag_gemm (the micro-benchmarks use ranks 0 and 1)")
      ->capture_default_str()
      ->check(CLI::Range(2, tilelink::kMaxWorldSize));
  primitives->add_flag("--quick", prim.quick, "fewer repetitions and a smaller SM transfer: a smoke run");
  primitives->add_option("--json", prim_json, "also write the results as JSON to FILE");
  CLI::Option* prim_seed = primitives->add_option("--seed", prim.seed, "random seed of the data; default: a fresh one");

  CollectiveArgs ag_args;
  CLI::App* all_gather = bench->add_subcommand("all_gather", "time tilelink::AllGather against cudaMemcpyAsync");
  add_collective_options(all_gather, ag_args, true);

  CollectiveArgs rs_args;
  CLI::App* reduce_scatter =
      bench->add_subcommand("reduce_scatter", "time tilelink::ReduceScatter (fp32) against cudaMemcpyAsync");
  add_collective_options(reduce_scatter, rs_args, false);

  AgGemmArgs agg;
  CLI::App* ag_gemm = bench->add_subcommand("ag_gemm", "time tilelink::AgGemm against cuBLAS, non-overlapped and decomposed baselines");
  ag_gemm->add_option("--world", agg.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  ag_gemm->add_option("--m", agg.m, "rows of A and C (all ranks)")->capture_default_str()->check(CLI::PositiveNumber);
  ag_gemm->add_option("--n", agg.n, "columns of C over all ranks (each rank computes n / world)")->capture_default_str()->check(CLI::PositiveNumber);
  ag_gemm->add_option("--k", agg.k, "inner dimension")->capture_default_str()->check(CLI::PositiveNumber);
  CLI::Option* agg_shapes = ag_gemm->add_option("--shapes", agg.shapes, "paper: (8192, 28672, 8192), (8192, 14336, 4096), (8192, 49152, 12288) instead of --m/--n/--k")
      ->check(CLI::IsMember({"paper"}));
  ag_gemm->add_flag("--sweep", agg.sweep, "the model shapes of DESIGN.md section 8 (M = 8192), with a progress bar and an SVG chart of the speedups")->excludes(agg_shapes);
  ag_gemm->add_option("--svg", agg.svg, "sweep: the chart's file (default tilelink_ag_gemm_sweep.svg)");
  CLI::Option_group* agg_knobs = knob_group(ag_gemm, agg.knobs);
  agg_knobs->add_option("--resource", agg.resource, "all-gather by ce (copy engine) or sm (CTAs)")->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
  agg_knobs->add_option("--method", agg.method, "pull or push")->capture_default_str()->check(CLI::IsMember({"pull", "push"}));
  agg_knobs->add_option("--order", agg.order, "mesh or ring")->capture_default_str()->check(CLI::IsMember({"mesh", "ring"}));
  agg_knobs->add_option("--path", agg.path, "SM data path: ldst or bulk")->capture_default_str()->check(CLI::IsMember({"ldst", "bulk"}));
  agg_knobs->add_option("--comm-rows", agg.comm_rows, "rows per communication tile; 0 = automatic (128 on SMs, >= 8 MiB tiles on the copy engine)")->capture_default_str()->check(CLI::Range(0u, 1u << 30));
  agg_knobs->add_option("--blocks", agg.blocks, "all-gather CTAs per rank with --resource sm; 0 = budget / 8")->capture_default_str();
  agg_knobs->add_option("--gemm-sms", agg.gemm_sms, "GEMM CTAs per rank; 0 = the rest of the budget less 2 SMs of slack (world > 1)")->capture_default_str();
  agg_knobs->add_option("--swizzle", agg.swizzle, "tile rasterization swizzle: 1, 2, 4 or 8; 0 = the widest band inside one shard")->capture_default_str()->check(CLI::IsMember({0u, 1u, 2u, 4u, 8u}));
  agg_knobs->add_option("--kernel", agg.kernel, "GEMM kernel configuration; default: the first compiled one");
  ag_gemm->add_option("--warmup", agg.warmup, "untimed calls before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  ag_gemm->add_option("--iters", agg.iters, "timed calls (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  ag_gemm->add_option("--json", agg.json, "also write the results as JSON to FILE");
  agg.seed_option = ag_gemm->add_option("--seed", agg.seed, "random seed of the inputs; default: a fresh one");
  ag_gemm->add_flag("--explain", agg.explain,
                    "after the tables: what they mean here (virtual ranks: the world-1 result against cuBLAS), the "
                    "plan model's prediction for --world H200s over NVLink, and one summary line per shape");

  GemmRsArgs grs;
  CLI::App* gemm_rs = bench->add_subcommand("gemm_rs", "time tilelink::GemmRs against cuBLAS, non-overlapped and decomposed baselines");
  add_gemm_rs_options(gemm_rs, grs);
  CLI::Option* grs_shapes = gemm_rs->add_option("--shapes", grs.shapes, "paper: (8192, 8192, 28672), (8192, 4096, 14336), (8192, 12288, 49152) instead of --m/--n/--k")
      ->check(CLI::IsMember({"paper"}));
  gemm_rs->add_flag("--sweep", grs.sweep, "the model shapes of DESIGN.md section 8 (M = 8192), with a progress bar and an SVG chart of the speedups")->excludes(grs_shapes);
  gemm_rs->add_option("--svg", grs.svg, "sweep: the chart's file (default tilelink_gemm_rs_sweep.svg)");
  gemm_rs->add_option("--json", grs.json, "also write the results as JSON to FILE");

  MoeArgs moe_args;
  CLI::App* moe = bench->add_subcommand("moe_ag", "time tilelink::MoeAgGroupGemm (MoE part 1: all-gather + gather + grouped GEMM) against the per-expert cuBLAS chain");
  add_moe_options(moe, moe_args);
  MoeArgs layer_args;
  CLI::App* moe_layer = bench->add_subcommand("moe", "time tilelink::MoeLayer (part 1 -> activation -> grouped GEMM + top-k combine + reduce-scatter) against the per-expert cuBLAS chain with its collectives");
  add_moe_options(moe_layer, layer_args);
  add_moe_layer_options(moe_layer, layer_args);

  MlpArgs mlp_args;
  CLI::App* mlp = bench->add_subcommand("mlp", "time tilelink::Mlp (AG+GEMM -> activation -> GEMM+RS) against the non-overlapped chain");
  add_mlp_options(mlp, mlp_args);
  mlp->add_option("--json", mlp_args.json, "also write the results as JSON to FILE");

  TuneArgs tune_args;
  CLI::App* tune = app.add_subcommand("tune", "search an op's design space on the GPUs present and store the best config");
  tune->require_subcommand(0, 1);
  CLI::App* tune_ag = tune->add_subcommand("ag_gemm", "AG+GEMM: kernel x swizzle, then the communication variants the plan model ranks best");
  add_tune_options(tune_ag, tune_args, "rows of A and C (all ranks)", "columns of C over all ranks", "inner dimension",
                   "'paper': the three LLaMA shapes instead of --m/--n/--k");
  TuneArgs tune_rs_args;
  tune_rs_args.n = 8192;
  tune_rs_args.k = 28672;
  CLI::App* tune_rs = tune->add_subcommand("gemm_rs", "GEMM+RS: swizzle, then the scatter x signal granularity x reduction CTAs variants the plan model ranks best");
  add_tune_options(tune_rs, tune_rs_args, "rows of the output over all ranks", "columns of the output",
                   "inner dimension over all ranks (each rank holds k / world)",
                   "'paper': (8192, 8192, 28672), (8192, 4096, 14336), (8192, 12288, 49152) instead of --m/--n/--k");
  TuneArgs tune_mlp_args;
  MlpArgs tune_mlp_shape;
  CLI::App* tune_mlp = tune->add_subcommand("mlp", "the MLP: tune ag_gemm on fc1's shape and tune gemm_rs on fc2's, both into the cache");
  tune_mlp->add_option("--world", tune_mlp_args.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  tune_mlp->add_option("--m", tune_mlp_args.m, "tokens over all ranks")->capture_default_str()->check(CLI::PositiveNumber);
  CLI::Option* tune_mlp_model = tune_mlp->add_option("--model", tune_mlp_shape.model, "take hidden and intermediate from a model: llama3-8b, llama3-70b, llama3-405b")
      ->check(CLI::IsMember({"llama3-8b", "llama3-70b", "llama3-405b"}));
  tune_mlp->add_option("--hidden", tune_mlp_shape.hidden, "hidden size H")->capture_default_str()->check(CLI::PositiveNumber)->excludes(tune_mlp_model);
  tune_mlp->add_option("--intermediate", tune_mlp_shape.intermediate, "intermediate size over all ranks")->capture_default_str()->check(CLI::PositiveNumber)->excludes(tune_mlp_model);
  tune_mlp->add_option("--activation", tune_mlp_shape.activation, "swiglu or gelu (fc1's width)")->capture_default_str()->check(CLI::IsMember({"swiglu", "gelu"}));
  add_tune_search_options(tune_mlp, tune_mlp_args, "print both ops' candidates and the model's predictions; no GPU needed");
  tune_mlp->add_option("--warmup", tune_mlp_args.warmup, "untimed calls per configuration")->capture_default_str()->check(CLI::Range(0, 1000000));
  tune_mlp->add_option("--iters", tune_mlp_args.iters, "timed calls per configuration (the median counts)")->capture_default_str()->check(CLI::Range(1, 1000000));
  tune_mlp->add_option("--json", tune_mlp_args.json, "also write the results as JSON to FILE");
  tune_mlp_args.seed_option = tune_mlp->add_option("--seed", tune_mlp_args.seed, "random seed of the inputs; default: a fresh one");
  TuneArgs tune_moe_args;
  MoeArgs tune_moe_shape;
  tune_moe_shape.warmup = 2;
  tune_moe_shape.iters = 5;
  CLI::App* tune_moe = tune->add_subcommand("moe", "the MoE layer: kernel pairs, then part 1 / part 2 orders, then the all-gather x gather x combine variants the plan model ranks best");
  add_moe_options(tune_moe, tune_moe_shape, true, false);
  add_moe_layer_options(tune_moe, tune_moe_shape, false);
  add_tune_search_options(tune_moe, tune_moe_args, "print the candidates and the model's predictions; no GPU needed");
  TuneArgs tune_attn_args;
  SpAttentionArgs tune_attn_shape;
  tune_attn_shape.warmup = 2;
  tune_attn_shape.iters = 5;
  CLI::App* tune_attn = tune->add_subcommand("sp_attention", "SP attention: the kernel's L2 sections, then the K/V all-gather x local-pass-first variants the plan model ranks best");
  add_sp_attention_options(tune_attn, tune_attn_shape, false);
  tune_attn->add_option("--json", tune_attn_shape.json, "also write the results as JSON to FILE");
  add_tune_search_options(tune_attn, tune_attn_args, "print the candidates and the model's predictions; no GPU needed");

  TraceArgs trace_args;
  CLI::App* trace = app.add_subcommand("trace", "record an op's per-tile device timeline (%globaltimer) on every rank");
  trace->require_subcommand(0, 1);
  CLI::App* trace_ag = trace->add_subcommand("ag_gemm", "AG+GEMM: each GEMM tile's wait, loads and epilogue; the SM all-gather's waits, copies and notifies");
  trace_ag->add_option("--world", trace_args.op.world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(1, tilelink::kMaxWorldSize));
  trace_ag->add_option("--m", trace_args.op.m, "rows of A and C (all ranks)")->capture_default_str()->check(CLI::PositiveNumber);
  trace_ag->add_option("--n", trace_args.op.n, "columns of C over all ranks")->capture_default_str()->check(CLI::PositiveNumber);
  trace_ag->add_option("--k", trace_args.op.k, "inner dimension")->capture_default_str()->check(CLI::PositiveNumber);
  CLI::Option_group* trace_ag_knobs = knob_group(trace_ag, trace_args.op.knobs);
  trace_ag_knobs->add_option("--resource", trace_args.op.resource, "all-gather on ce (copy engine: its copies are not recorded) or sm")->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
  trace_ag_knobs->add_option("--comm-rows", trace_args.op.comm_rows, "rows per communication tile (0 = automatic)")->capture_default_str();
  trace_ag_knobs->add_option("--blocks", trace_args.op.blocks, "all-gather CTAs with --resource sm (0 = automatic)")->capture_default_str();
  trace_ag_knobs->add_option("--kernel", trace_args.op.kernel, "GEMM configuration by name (default: the op's)");
  add_trace_outputs(trace_ag, trace_args);
  trace_ag->add_option("--warmup", trace_args.op.warmup, "untimed calls before timing the overhead")->capture_default_str()->check(CLI::Range(0, 1000000));
  trace_ag->add_option("--iters", trace_args.op.iters, "timed calls, traced and untraced each (the median counts)")->capture_default_str()->check(CLI::Range(1, 1000000));
  trace_args.op.seed_option = trace_ag->add_option("--seed", trace_args.op.seed, "random seed of the inputs; default: a fresh one");
  SpAttentionTraceArgs trace_attn_args;
  CLI::App* trace_attn = trace->add_subcommand("sp_attention", "SP attention: per work item each K/V chunk's wait and loads, and the store of O; the SM all-gather's waits, copies and notifies");
  add_sp_attention_options(trace_attn, trace_attn_args.op);
  add_trace_outputs(trace_attn, trace_attn_args);
  GemmRsTraceArgs trace_rs_args;
  trace_rs_args.op.warmup = 3;
  trace_rs_args.op.iters = 10;
  CLI::App* trace_rs = trace->add_subcommand("gemm_rs", "GEMM+RS: each GEMM tile's epilogue and notify; the reduction blocks' waits and per-tile reductions");
  add_gemm_rs_options(trace_rs, trace_rs_args.op);
  add_trace_outputs(trace_rs, trace_rs_args);
  MoeTraceArgs trace_moe_args;
  CLI::App* trace_moe = trace->add_subcommand("moe", "the MoE layer: part 1 (all-gather, gather, grouped GEMM) and part 2 (grouped GEMM, top-k combine + reduce-scatter) as two parts of one timeline");
  add_moe_options(trace_moe, trace_moe_args.op, false);
  add_moe_layer_options(trace_moe, trace_moe_args.op);
  add_trace_outputs(trace_moe, trace_moe_args, "records per rank and part");
  MlpTraceArgs trace_mlp_args;
  CLI::App* trace_mlp = trace->add_subcommand("mlp", "the MLP: fc1 (AG+GEMM) and fc2 (GEMM+RS) recorded as two parts of one timeline");
  add_mlp_options(trace_mlp, trace_mlp_args.op);
  add_trace_outputs(trace_mlp, trace_mlp_args, "records per rank and part");

  CLI::App* plan = app.add_subcommand("plan", "predict an op's timeline from a cost model (no GPU needed)");
  plan->require_subcommand(0, 1);
  PlanMlpArgs plan_mlp_args;
  CLI::App* plan_mlp = plan->add_subcommand("mlp", "the tensor-parallel MLP: AG+GEMM (fc1) -> activation -> GEMM+RS (fc2)");
  plan_mlp->add_option("--world", plan_mlp_args.problem.world, "ranks")->capture_default_str()->check(CLI::Range(1, 4096));
  plan_mlp->add_option("--nodes", plan_mlp_args.problem.nodes, "nodes (ranks are node-major)")->capture_default_str();
  plan_mlp->add_option("--m", plan_mlp_args.problem.m, "tokens over all ranks")->capture_default_str();
  CLI::Option* plan_mlp_model = plan_mlp->add_option("--model", plan_mlp_args.model, "take hidden and intermediate from a model: llama3-8b, llama3-70b, llama3-405b")
                                    ->check(CLI::IsMember({"llama3-8b", "llama3-70b", "llama3-405b"}));
  plan_mlp->add_option("--hidden", plan_mlp_args.problem.hidden, "hidden size")->capture_default_str()->excludes(plan_mlp_model);
  plan_mlp->add_option("--intermediate", plan_mlp_args.problem.intermediate, "intermediate size over all ranks")->capture_default_str()->excludes(plan_mlp_model);
  plan_mlp->add_option("--activation", plan_mlp_args.activation, "swiglu (fc1 gives gate and up halves) or gelu")->capture_default_str()->check(CLI::IsMember({"swiglu", "gelu"}));
  plan_mlp->add_option("--comm-rows", plan_mlp_args.config.fc1.op.comm.comm_rows, "fc1: rows per communication tile")->capture_default_str();
  plan_mlp->add_option("--resource", plan_mlp_args.resource, "fc1's all-gather: ce (copy engine) or sm")->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
  plan_mlp->add_option("--blocks", plan_mlp_args.config.fc1.op.comm.num_blocks, "fc1: CTAs that copy with --resource sm (default 16)");
  plan_mlp->add_option("--reduce-blocks", plan_mlp_args.config.fc2.op.reduce_blocks, "fc2: reduction CTAs")->capture_default_str();
  plan_mlp->add_option("--scatter", plan_mlp_args.scatter, "fc2: pull, push or ce")->capture_default_str()->check(CLI::IsMember({"pull", "push", "ce"}));
  plan_mlp_args.cost.add_options(plan_mlp);
  plan_mlp->add_option("--trace", plan_mlp_args.trace, "write the predicted timeline of rank 0 as Chrome/Perfetto JSON");
  plan_mlp->add_option("--svg", plan_mlp_args.svg, "write the predicted timeline of rank 0 as an SVG picture");

  PlanMoeArgs plan_moe_args;
  CLI::App* plan_moe = plan->add_subcommand("moe_ag", "MoE part 1: all-gather + gather + grouped GEMM, for a synthetic routing");
  add_plan_moe_options(plan_moe, plan_moe_args);
  PlanMoeArgs plan_layer_args;
  CLI::App* plan_layer = plan->add_subcommand("moe", "the MoE layer: part 1 -> activation -> grouped GEMM + top-k combine + reduce-scatter");
  add_plan_moe_options(plan_layer, plan_layer_args);
  plan_layer->add_option("--activation", plan_layer_args.activation, "swiglu (part 1 gives gate and up halves) or gelu")->capture_default_str()->check(CLI::IsMember({"swiglu", "gelu"}));
  plan_layer->add_option("--combine-blocks", plan_layer_args.part2.op.combine_blocks, "part 2: CTAs of the combine and reduction (0 = the op's automatic count)")->capture_default_str();
  plan_layer->add_option("--combine-rows", plan_layer_args.part2.op.comm_rows, "part 2: tokens per combine block")->capture_default_str();

  PlanArgs plan_args;
  CLI::App* plan_ag = plan->add_subcommand("ag_gemm", "AG+GEMM: C = allgather(A) * B, column-parallel");
  plan_ag->add_option("--world", plan_args.problem.world, "ranks")->capture_default_str()->check(CLI::Range(1, 4096));
  plan_ag->add_option("--nodes", plan_args.problem.nodes, "nodes (ranks are node-major)")->capture_default_str();
  plan_ag->add_option("--m", plan_args.problem.m, "rows of A and C")->capture_default_str();
  plan_ag->add_option("--n", plan_args.problem.n, "columns of C over all ranks")->capture_default_str();
  plan_ag->add_option("--k", plan_args.problem.k, "inner dimension")->capture_default_str();
  plan_ag->add_option("--bm", plan_args.config.bm, "compute tile rows")->capture_default_str();
  plan_ag->add_option("--bn", plan_args.config.bn, "compute tile columns")->capture_default_str();
  plan_ag->add_option("--comm-rows", plan_args.config.op.comm.comm_rows, "rows per communication tile")->capture_default_str();
  plan_ag->add_option("--resource", plan_args.resource, "ce (copy engine) or sm")
      ->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
  plan_ag->add_option("--blocks", plan_args.config.op.comm.num_blocks, "CTAs that copy with --resource sm (default 16)");
  plan_ag->add_option("--order", plan_args.order, "mesh or ring")->capture_default_str()->check(CLI::IsMember({"mesh", "ring"}));
  plan_args.cost.add_options(plan_ag);
  plan_ag->add_option("--trace", plan_args.trace, "write the predicted timeline of rank 0 as Chrome/Perfetto JSON");
  plan_ag->add_option("--svg", plan_args.svg, "write the predicted timeline of rank 0 as an SVG picture");

  SpAttentionArgs attn_args;
  CLI::App* attn = bench->add_subcommand("sp_attention", "time tilelink::SpAttention (K/V all-gather + flash attention) against the non-overlapped and ring schedules");
  add_sp_attention_options(attn, attn_args);
  attn->add_option("--dump", attn_args.dump, "write inputs and fused outputs to an existing directory for bench/sdpa_check.py");
  attn->add_option("--json", attn_args.json, "also write the results as JSON to FILE");

  PlanAttentionArgs plan_attn_args;
  CLI::App* plan_attn = plan->add_subcommand("sp_attention", "sequence-parallel attention: K/V all-gather under the flash-attention work items");
  plan_attn->add_option("--world", plan_attn_args.problem.world, "ranks")->capture_default_str()->check(CLI::Range(1, 4096));
  plan_attn->add_option("--nodes", plan_attn_args.problem.nodes, "nodes (ranks are node-major)")->capture_default_str();
  plan_attn->add_option("--seq", plan_attn_args.problem.seq, "tokens over all ranks")->capture_default_str();
  plan_attn->add_option("--q-heads", plan_attn_args.problem.q_heads, "query heads")->capture_default_str();
  plan_attn->add_option("--kv-heads", plan_attn_args.problem.kv_heads, "K/V heads (GQA)")->capture_default_str();
  plan_attn->add_option("--head-dim", plan_attn_args.problem.head_dim, "head dimension")->capture_default_str();
  plan_attn->add_flag("--non-causal", plan_attn_args.non_causal, "no causal mask");
  plan_attn->add_option("--layout", plan_attn_args.layout, "sequence sharding: contiguous or zigzag")->capture_default_str()->check(CLI::IsMember({"contiguous", "zigzag"}));
  plan_attn->add_option("--bq", plan_attn_args.config.bq, "query rows per work item")->capture_default_str();
  plan_attn->add_option("--comm-rows", plan_attn_args.config.op.comm.comm_rows, "tokens per K/V chunk")->capture_default_str();
  plan_attn->add_option("--resource", plan_attn_args.resource, "K/V all-gather on ce (copy engine) or sm")->capture_default_str()->check(CLI::IsMember({"ce", "sm"}));
  plan_attn->add_option("--blocks", plan_attn_args.config.op.comm.num_blocks, "CTAs that copy with --resource sm (default 8)");
  plan_attn->add_option("--comm-slowdown", plan_attn_args.config.comm_slowdown, "the all-gather's slowdown under the attention (virtual ranks: measured 2.4 at world 8 by trace sp_attention)")->capture_default_str();
  plan_attn->add_flag("--local-first", plan_attn_args.config.op.local_first, "every CTA folds its items' own shard before any remote chunk (SpAttentionConfig::local_first)");
  plan_attn->add_option("--attention-tflops", plan_attn_args.attention_tflops, "flash-attention forward TFLOP/s of one GPU (default 550)");
  plan_attn_args.cost.add_options(plan_attn);
  plan_attn->add_option("--trace", plan_attn_args.trace, "write the predicted timeline of rank 0 as Chrome/Perfetto JSON");
  plan_attn->add_option("--svg", plan_attn_args.svg, "write the predicted timeline of rank 0 as an SVG picture");

  PlanRsArgs plan_rs_args;
  CLI::App* plan_rs = plan->add_subcommand("gemm_rs", "GEMM+RS: rank r gets its row block of sum_q A_q * B_q");
  plan_rs->add_option("--world", plan_rs_args.problem.world, "ranks")->capture_default_str()->check(CLI::Range(1, 4096));
  plan_rs->add_option("--nodes", plan_rs_args.problem.nodes, "nodes (ranks are node-major)")->capture_default_str();
  plan_rs->add_option("--m", plan_rs_args.problem.m, "rows of C")->capture_default_str();
  plan_rs->add_option("--n", plan_rs_args.problem.n, "columns of C")->capture_default_str();
  plan_rs->add_option("--k", plan_rs_args.problem.k, "inner dimension over all ranks")->capture_default_str();
  plan_rs->add_option("--bm", plan_rs_args.config.bm, "compute tile rows")->capture_default_str();
  plan_rs->add_option("--bn", plan_rs_args.config.bn, "compute tile columns")->capture_default_str();
  plan_rs->add_option("--reduce-blocks", plan_rs_args.config.op.reduce_blocks, "CTAs of the reduction")->capture_default_str();
  plan_rs->add_option("--scatter", plan_rs_args.scatter, "pull, push or ce (ce needs --granularity row or rank)")
      ->capture_default_str()->check(CLI::IsMember({"pull", "push", "ce"}));
  plan_rs->add_option("--band", plan_rs_args.config.band, "tile rows per band of the compute order; 0 = the op's rule")->capture_default_str();
  plan_rs->add_option("--granularity", plan_rs_args.granularity, "signal per tile, row (of tiles) or rank")
      ->capture_default_str()->check(CLI::IsMember({"tile", "row", "rank"}));
  plan_rs_args.cost.add_options(plan_rs);
  plan_rs->add_option("--trace", plan_rs_args.trace, "write the predicted timeline of rank 0 as Chrome/Perfetto JSON");
  plan_rs->add_option("--svg", plan_rs_args.svg, "write the predicted timeline of rank 0 as an SVG picture");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  if (app.get_subcommands().empty() || (*bench && bench->get_subcommands().empty()) ||
      (*plan && plan->get_subcommands().empty()) || (*tune && tune->get_subcommands().empty()) ||
      (*trace && trace->get_subcommands().empty())) {
    std::cerr << (*bench   ? bench->help("tilelink")
                  : *plan  ? plan->help("tilelink")
                  : *tune  ? tune->help("tilelink")
                  : *trace ? trace->help("tilelink")
                           : app.help())
              << "tilelink: a command is required\n";
    return kExitUsage;
  }


  if (*plan_ag || *plan_rs || *plan_moe || *plan_layer || *plan_attn || *plan_mlp || (*tune_ag && tune_args.dry_run) ||
      (*tune_rs && tune_rs_args.dry_run) ||
      (*tune_mlp && tune_mlp_args.dry_run) || (*tune_moe && tune_moe_args.dry_run) ||
      (*tune_attn && tune_attn_args.dry_run)) {  // no GPU needed
    try {
      if (*tune_moe) return cmd_tune_moe(tune_moe_args, tune_moe_shape, "");
      if (*tune_attn) return cmd_tune_sp_attention(tune_attn_args, tune_attn_shape, "");
      if (*tune_ag) return cmd_tune_dry_run(tune_args);
      if (*tune_rs) return cmd_tune_gemm_rs_dry_run(tune_rs_args);
      if (*tune_mlp) return cmd_tune_mlp(tune_mlp_args, tune_mlp_shape, "");
      if (*plan_mlp) return cmd_plan_mlp(plan_mlp_args);
      if (*plan_moe) return cmd_plan_moe_ag(plan_moe_args);
      if (*plan_layer) return cmd_plan_moe(plan_layer_args);
      if (*plan_attn) return cmd_plan_sp_attention(plan_attn_args);
      return *plan_ag ? cmd_plan_ag_gemm(plan_args) : cmd_plan_gemm_rs(plan_rs_args);
    } catch (const std::exception& e) {
      std::cerr << "tilelink: error: " << e.what() << "\n";
      return kExitFailure;
    }
  }

  std::string command = "tilelink";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];

  if (tb::cuda_device_count() == 0) {
    std::cerr << "tilelink: no CUDA GPU found; benchmarks need one\n";
    return kExitNoGpu;
  }

  try {
    if (*info) return cmd_info(info_world);
    if (*primitives) {
      if (prim_seed->count() == 0) prim.seed = fresh_seed();
      return cmd_primitives(prim, prim_json, command);
    }
    if (*all_gather) {
      if (ag_args.seed_option->count() == 0) ag_args.seed = fresh_seed();
      return cmd_all_gather(ag_args, command);
    }
    if (*ag_gemm) {
      if (agg.seed_option->count() == 0) agg.seed = fresh_seed();
      return cmd_ag_gemm(agg, command);
    }
    if (*gemm_rs) {
      if (grs.seed_option->count() == 0) grs.seed = fresh_seed();
      return cmd_gemm_rs(grs, command);
    }
    if (*moe) {
      if (moe_args.seed_option->count() == 0) moe_args.seed = fresh_seed();
      return cmd_moe_ag(moe_args, command);
    }
    if (*moe_layer) {
      if (layer_args.seed_option->count() == 0) layer_args.seed = fresh_seed();
      return cmd_moe(layer_args, command);
    }
    if (*trace_attn) {
      if (trace_attn_args.op.seed_option->count() == 0) trace_attn_args.op.seed = fresh_seed();
      return cmd_trace_sp_attention(trace_attn_args);
    }
    if (*trace_moe) {
      if (trace_moe_args.op.seed_option->count() == 0) trace_moe_args.op.seed = fresh_seed();
      return cmd_trace_moe(trace_moe_args);
    }
    if (*trace_mlp) {
      if (trace_mlp_args.op.seed_option->count() == 0) trace_mlp_args.op.seed = fresh_seed();
      return cmd_trace_mlp(trace_mlp_args);
    }
    if (*trace_rs) {
      if (trace_rs_args.op.seed_option->count() == 0) trace_rs_args.op.seed = fresh_seed();
      return cmd_trace_gemm_rs(trace_rs_args);
    }
    if (*trace_ag) {
      if (trace_args.op.seed_option->count() == 0) trace_args.op.seed = fresh_seed();
      return cmd_trace_ag_gemm(trace_args);
    }
    if (*tune_moe) {
      if (tune_moe_shape.seed_option->count() == 0) tune_moe_shape.seed = fresh_seed();
      return cmd_tune_moe(tune_moe_args, tune_moe_shape, command);
    }
    if (*tune_attn) {
      if (tune_attn_shape.seed_option->count() == 0) tune_attn_shape.seed = fresh_seed();
      return cmd_tune_sp_attention(tune_attn_args, tune_attn_shape, command);
    }
    if (*tune_mlp) {
      if (tune_mlp_args.seed_option->count() == 0) tune_mlp_args.seed = fresh_seed();
      return cmd_tune_mlp(tune_mlp_args, tune_mlp_shape, command);
    }
    if (*tune_rs) {
      if (tune_rs_args.seed_option->count() == 0) tune_rs_args.seed = fresh_seed();
      return cmd_tune_gemm_rs(tune_rs_args, command);
    }
    if (*tune_ag) {
      if (tune_args.seed_option->count() == 0) tune_args.seed = fresh_seed();
      return cmd_tune(tune_args, command);
    }
    if (*attn) {
      if (attn_args.seed_option->count() == 0) attn_args.seed = fresh_seed();
      return cmd_sp_attention(attn_args, command);
    }
    if (*mlp) {
      if (mlp_args.seed_option->count() == 0) mlp_args.seed = fresh_seed();
      return cmd_mlp(mlp_args, command);
    }
    if (*reduce_scatter) {
      if (rs_args.seed_option->count() == 0) rs_args.seed = fresh_seed();
      return cmd_reduce_scatter(rs_args, command);
    }
  } catch (const tilelink::TimeoutError& e) {
    std::cerr << "tilelink: " << e.what() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "tilelink: error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;  // unreachable: every command is dispatched above
}
