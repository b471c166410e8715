// The option sets the tool's commands share (as the CUTLASS profiler's options.h): ranks, timing,
// seed, JSON output, an op's knobs and enum-valued options, the plan's cost model and outputs, the
// trace's outputs and the tune search's options. Each is defined here once; the commands' files
// (tool_<op>.cpp) add the ones they take.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "bench/options.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/ops/common/parse_enum.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::tool {

namespace tb = tilelink::bench;

// --world of a command that runs on the GPUs: ranks as tb::make_bench_world places them, at least
// `min`.
void add_world(CLI::App* app, int& world, int min = 1);

// --world and --nodes of a plan: the ranks of the machine modelled.
void add_plan_world(CLI::App* app, int& world, int& nodes);

// --warmup and --iters, worded for what the timed calls are.
enum class Timed {
  kBench,  // the variants of a benchmark
  kTune,   // every configuration of a search
  kTrace,  // traced and untraced calls, for the recording's overhead
};
void add_timing(CLI::App* app, tb::TimingOptions& timing, Timed timed = Timed::kBench);

// --seed of a GPU command. Not given, the command runs on a fresh seed: main draws it (resolve)
// once the command is known to run on a GPU, so that the GPU-free paths stay deterministic.
struct Seed {
  uint64_t* value = nullptr;
  CLI::Option* option = nullptr;
  void resolve() const;
};
Seed add_seed(CLI::App* app, uint64_t& value, const char* help = "random seed of the inputs; default: a fresh one");

// --json FILE.
void add_json(CLI::App* app, std::string& file);

// An op's configuration options (knobs) live in an option group of its command, created on first
// use. Any of them given -- even at its default value (--resource ce) -- is an explicit choice,
// which the tune cache must not replace (any_knob).
CLI::Option_group* knob_group(CLI::App* app, CLI::Option_group*& group);
bool any_knob(const CLI::Option_group* group);

// An option whose values are the names (to_string) of `values`, parsed into `target` with
// parse_enum; its help shows the names and, with `show_default`, `target`'s value as the default.
template <class E>
CLI::Option* add_enum_option(CLI::App* app, const std::string& name, E& target, std::initializer_list<E> values,
                             const std::string& help, bool show_default = true) {
  std::vector<std::string> names;
  for (E e : values) names.push_back(to_string(e));
  CLI::Option* option = app->add_option_function<std::string>(
      name,
      [&target, values = std::vector<E>(values), name](const std::string& text) {
        target = parse_enum(text, values, name);
      },
      help);
  option->check(CLI::IsMember(names));
  if (show_default) option->default_str(to_string(target));
  return option;
}

// --dtype bf16|e4m3 and --scaling tensor|row|block: the operands of a GEMM op's bench, tune,
// trace or plan. `fp8_what` says what e4m3 means there (the help reads "operands: bf16, or e4m3
// (<fp8_what>)").
void add_operand_options(CLI::App* app, DType& dtype, Fp8Scaling& scaling, const std::string& fp8_what);

// The cost model of a plan command: the H200 defaults of sim::CostModel, any of them overridden
// from the command line (another GPU, or one GPU shared by virtual ranks).
struct CostOptions {
  sim::CostModel cost;
  double tflops = 0, fp8_tflops = 0, nvlink_gbps = 0, network_gbps = 0, ce_gbps = 0, sm_copy_gbps = 0, epilogue_sum_gbps = 0,
         epilogue_store_gbps = 0, ce_chunk_us = -1;

  void add_to(CLI::App* app);
  sim::CostModel model() const;
};

// --trace and --svg of a plan: rank 0's predicted timeline.
struct PlanOutputs {
  std::string trace, svg, json;
  void add_to(CLI::App* app);
  void check_writable() const;
};

// The all-gather options of a plan (--comm-rows, --resource, --blocks), as the model takes them:
// no automatic comm rows; on SMs `sm_blocks` copying CTAs unless --blocks says
// (resolve_plan_blocks). `what` prefixes the helps ("fc1: "; "" for the op's only all-gather).
void add_plan_all_gather(CLI::App* app, AllGatherConfig& comm, uint32_t sm_blocks, const std::string& what = "");
void resolve_plan_blocks(AllGatherConfig& comm, uint32_t sm_blocks);

// --trace, --svg and --capacity of a trace command: the measured timeline.
struct TraceOutputs {
  std::string trace, svg;
  uint32_t capacity = 1u << 20;
  void add_to(CLI::App* app, const char* capacity_help = "records per rank");
};

// The options of every tune search: --top, --cache, --dry-run and --sms (the dry run's GPU).
struct TuneSearch {
  size_t top = 6;
  std::string cache;  // the default cache file, read when the options are added
  bool dry_run = false;
  int sms = 132;
  void add_to(CLI::App* app, const char* dry_run_help);
};

// The file-naming options' check: fails before a long run rather than after it.
void check_writable(const std::string& path);

}  // namespace tilelink::tool
