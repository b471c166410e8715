#include "tools/options.hpp"

#include <fstream>
#include <random>

#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::tool {

void add_world(CLI::App* app, int& world, int min) {
  app->add_option("--world", world, tb::kWorldOptionHelp)->capture_default_str()->check(CLI::Range(min, kMaxWorldSize));
}

void add_plan_world(CLI::App* app, int& world, int& nodes) {
  app->add_option("--world", world, "ranks")->capture_default_str()->check(CLI::Range(1, 4096));
  app->add_option("--nodes", nodes, "nodes (ranks are node-major)")->capture_default_str();
}

void add_timing(CLI::App* app, tb::TimingOptions& timing, Timed timed) {
  const char* warmup = timed == Timed::kBench  ? "untimed calls before timing"
                       : timed == Timed::kTune ? "untimed calls per configuration"
                                               : "untimed calls before timing the overhead";
  const char* iters = timed == Timed::kBench  ? "timed calls (the median is reported)"
                      : timed == Timed::kTune ? "timed calls per configuration (the median counts)"
                                              : "timed calls, traced and untraced each (the median counts)";
  app->add_option("--warmup", timing.warmup, warmup)->capture_default_str()->check(CLI::Range(0, 1000000));
  app->add_option("--iters", timing.iters, iters)->capture_default_str()->check(CLI::Range(1, 1000000));
}

void Seed::resolve() const {
  if (value == nullptr || option->count() > 0) return;
  std::random_device rd;
  *value = (uint64_t(rd()) << 32) | rd();
}

Seed add_seed(CLI::App* app, uint64_t& value, const char* help) {
  return {&value, app->add_option("--seed", value, help)};
}

void add_json(CLI::App* app, std::string& file) {
  app->add_option("--json", file, "also write the results as JSON to FILE");
}

CLI::Option_group* knob_group(CLI::App* app, CLI::Option_group*& group) {
  if (group == nullptr) {
    group = app->add_option_group("Configuration", "any of these given turns the tune cache off for the op");
  }
  return group;
}

bool any_knob(const CLI::Option_group* group) { return group != nullptr && group->count_all() > 0; }

void CostOptions::add_to(CLI::App* app) {
  app->add_option("--sms", cost.sms, "cost model: SMs per rank")->capture_default_str()->check(CLI::Range(1, 1024));
  app->add_option("--tflops", tflops, "cost model: dense bf16 GEMM TFLOP/s per rank (default 790, an H200's cuBLAS)");
  app->add_option("--fp8-tflops", fp8_tflops,
                  "cost model: dense e4m3 GEMM TFLOP/s per rank (--dtype e4m3; default 2x bf16's, cuBLASLt's ratio "
                  "measured on an H100)");
  app->add_option("--nvlink-gbps", nvlink_gbps, "cost model: GB/s into a rank from its node (default 390)");
  app->add_option("--network-gbps", network_gbps, "cost model: GB/s into a rank from other nodes (default 50)");
  app->add_option("--ce-gbps", ce_gbps, "cost model: copy-engine GB/s of large chunks (default 2000)");
  app->add_option("--ce-chunk-us", ce_chunk_us, "cost model: fixed µs per copy-engine chunk (default 5)");
  app->add_option("--sm-copy-gbps", sm_copy_gbps, "cost model: one CTA's copy GB/s (default 48)");
  app->add_option("--epilogue-sum-gbps", epilogue_sum_gbps,
                  "cost model: GB/s of a GEMM CTA summing an own tile in its epilogue (gemm_rs --reducer epilogue; "
                  "default 96, derived from the measured CTA copy rate, not yet measured)");
  app->add_option("--epilogue-store-gbps", epilogue_store_gbps,
                  "cost model: GB/s of a GEMM CTA's epilogue storing a tile into a peer (gemm_rs --scatter push; "
                  "default 48, one CTA's copy rate, assumed)");
}

sim::CostModel CostOptions::model() const {
  sim::CostModel c = cost;
  if (tflops > 0) c.flops = tflops * 1e12;
  if (fp8_tflops > 0) c.fp8_flops = fp8_tflops * 1e12;
  if (nvlink_gbps > 0) c.nvlink_bandwidth = nvlink_gbps * 1e9;
  if (network_gbps > 0) c.network_bandwidth = network_gbps * 1e9;
  if (ce_gbps > 0) c.ce_bandwidth = ce_gbps * 1e9;
  if (ce_chunk_us >= 0) c.ce_chunk_overhead = ce_chunk_us * 1e-6;
  if (sm_copy_gbps > 0) c.sm_copy_bandwidth_per_cta = sm_copy_gbps * 1e9;
  if (epilogue_sum_gbps > 0) c.epilogue_sum_bandwidth_per_cta = epilogue_sum_gbps * 1e9;
  if (epilogue_store_gbps > 0) c.epilogue_store_bandwidth_per_cta = epilogue_store_gbps * 1e9;
  return c;
}

void PlanOutputs::add_to(CLI::App* app) {
  app->add_option("--trace", trace, "write the predicted timeline of rank 0 as Chrome/Perfetto JSON");
  app->add_option("--svg", svg, "write the predicted timeline of rank 0 as an SVG picture");
  app->add_option("--json", json, "write the predicted table as JSON (meta.kind = \"prediction\")");
}

void PlanOutputs::check_writable() const {
  tool::check_writable(trace);
  tool::check_writable(svg);
  tool::check_writable(json);
}

void add_plan_all_gather(CLI::App* app, AllGatherConfig& comm, uint32_t sm_blocks, const std::string& what) {
  app->add_option("--comm-rows", comm.comm_rows, what + "rows per communication tile")->capture_default_str();
  add_enum_option(app, "--resource", comm.resource, {CommResource::kCopyEngine, CommResource::kSm},
                  what + "ce (copy engine) or sm");
  app->add_option("--blocks", comm.num_blocks,
                  what + "CTAs that copy with --resource sm (default " + std::to_string(sm_blocks) + ")");
}

void resolve_plan_blocks(AllGatherConfig& comm, uint32_t sm_blocks) {
  if (comm.resource == CommResource::kSm && comm.num_blocks == 0) comm.num_blocks = sm_blocks;
}

void TraceOutputs::add_to(CLI::App* app, const char* capacity_help) {
  app->add_option("--trace", trace, "write the timeline as Chrome/Perfetto JSON");
  app->add_option("--svg", svg, "write the timeline as an SVG picture");
  app->add_option("--capacity", capacity, capacity_help)->capture_default_str()->check(CLI::PositiveNumber);
}

void TuneSearch::add_to(CLI::App* app, const char* dry_run_help) {
  cache = TuneCache::default_path();
  app->add_option("--top", top, "communication variants to time (the plan model's best)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app->add_option("--cache", cache,
                  "tune cache file to update ('' = do not store); default: $TILELINK_TUNE_CACHE or "
                  "~/.cache/tilelink/tune.json")
      ->capture_default_str();
  app->add_flag("--dry-run", dry_run, dry_run_help);
  app->add_option("--sms", sms, "dry run: SMs of the GPU planned for")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

void check_writable(const std::string& path) {
  if (path.empty()) return;
  std::ofstream probe(path);
  if (!probe) throw Error("cannot open '" + path + "' for writing");
}

void add_operand_options(CLI::App* app, DType& dtype, Fp8Scaling& scaling, const std::string& fp8_what) {
  add_enum_option(app, "--dtype", dtype, {DType::kBf16, DType::kE4m3}, "operands: bf16, or e4m3 (" + fp8_what + ")");
  add_enum_option(app, "--scaling", scaling, {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock},
                  "e4m3 scales: tensor, row (per token / channel) or block (1x128 A, 128x128 B)");
}

}  // namespace tilelink::tool
