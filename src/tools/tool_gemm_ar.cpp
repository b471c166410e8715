// `tilelink bench|plan|trace gemm_ar`: GEMM+AR (tilelink::GemmAr), decode's row-parallel linear
// layer with its all-reduce started per tile by the GEMM.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/gemm_ar.hpp"
#include "bench/gemm_ar_setup.hpp"
#include "tilelink/sim/gemm_ar_sim.hpp"
#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/options.hpp"
#include "tools/op_commands.hpp"
#include "tools/output.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {
namespace {

// --m (a list), --n, --k, --model and --proj: the shapes of both commands.
struct Shapes {
  std::vector<uint32_t> m = {1, 8, 32, 128, 512};
  uint32_t n = 8192, k = 28672;
  std::string model, proj = "down";

  void add_to(CLI::App* app) {
    app->add_option("--m", m, "tokens, a comma-separated list (one table each)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    add_nk(app);
  }
  // --n, --k, --model and --proj (every command's; trace and tune take one --m of their own).
  void add_nk(CLI::App* app) {
    CLI::Option* on = app->add_option("--n", n, "columns of the output (the hidden size)")->capture_default_str();
    CLI::Option* ok = app->add_option("--k", k, "inner dimension over all ranks (each rank holds k / world)")
                          ->capture_default_str();
    add_dense_model(app, model)->excludes(on)->excludes(ok);
    app->add_option("--proj", proj,
                    "with --model: the row-parallel projection, o (attention output: k = hidden) or down (MLP "
                    "down: k = intermediate)")
        ->capture_default_str()
        ->check(CLI::IsMember({"o", "down"}));
  }
  // n and k, from the model when one is named.
  void resolve(uint32_t& n_out, uint32_t& k_out) const {
    n_out = n;
    k_out = k;
    if (model.empty()) return;
    uint32_t hidden = 0, intermediate = 0;
    apply_dense_model(model, hidden, intermediate);
    n_out = hidden;
    k_out = proj == "o" ? hidden : intermediate;
  }
};

struct BenchArgs {
  tb::GemmArBenchOptions o;
  Shapes shapes;
  std::string json;
};

struct PlanArgs {
  sim::GemmArProblem problem;
  sim::GemmArPlanConfig config;
  Shapes shapes;
  CostOptions cost;
  std::string json;
};

// The knobs of one op (trace, plan): any of them given is used as is, the rest automatic. The
// plan's model has no copy-engine path (`with_path` false).
void add_knobs(CLI::App* app, GemmArConfig& c, bool with_path = true) {
  add_enum_option(app, "--method", c.method,
                  {AllReduceMethod::kAuto, AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot},
                  "the all-reduce: auto (the estimate's faster), one_shot or two_shot; default auto", false);
  add_enum_option(app, "--schedule", c.schedule,
                  {GemmArSchedule::kAuto, GemmArSchedule::kFused, GemmArSchedule::kNonOverlapped},
                  "auto (the estimate's faster), fused or non_overlapped; default auto", false);
  app->add_option("--splits", c.splits, "K slices per rank; 0 = automatic")->capture_default_str();
  app->add_option("--reduce-blocks", c.reduce_blocks, "reduction CTAs per rank; 0 = automatic")->capture_default_str();
  add_enum_option(app, "--slice-sum", c.slice_sum,
                  {GemmArSliceSum::kAuto, GemmArSliceSum::kReduction, GemmArSliceSum::kGemm},
                  "where the K slices are summed: reduction (a partial each), gemm (each tile's last slice adds the "
                  "others' fp32 accumulators: one partial per rank) or auto (the GEMM); default auto",
                  false);
  if (!with_path) return;
  add_enum_option(app, "--path", c.path, {GemmArPath::kAuto, GemmArPath::kSm, GemmArPath::kCopyEngine},
                  "sm (reduction CTAs read the peers), copy_engine (the streams put into the peers) or auto (copy_engine "
                  "under the put_signal transport, else sm); default auto",
                  false);
}

// `trace` and `tune gemm_ar`'s run arguments: one shape (--m, --n, --k or --model/--proj) and,
// for trace, the knobs.
struct RunArgs : RunArgsBase<tb::GemmArBenchOptions> {
  Shapes shape;
  void add_to(Command& c, Timed timed) {
    add_world(c.app, o.world, 1);
    c.app->add_option("--m", o.m, "tokens")->capture_default_str()->check(CLI::Range(1u, 1u << 20));
    shape.add_nk(c.app);
    if (with_knobs) add_knobs(c.app, o.config);
    add_timing(c.app, o.timing, timed);
    c.seed = add_seed(c.app, o.seed);
  }
  tb::GemmArBenchOptions resolved() const {
    tb::GemmArBenchOptions r = o;
    shape.resolve(r.n, r.k);
    return r;
  }
};

TraceResult trace_gemm_ar(const TraceOptions<tb::GemmArBenchOptions>& o) {
  tb::GemmArSetup s(o.op.world, o.op.m, o.op.n, o.op.k, o.op.config, o.op.seed, 1, "trace gemm_ar");
  GemmAr op(s.world, s.heap, s.signals, s.args, "trace.gemm_ar");
  TraceResult result;
  const bool gated = record_traced_call(s.world, op, o.capacity, o.op.timing, result);
  const bool one_clock = s.world.mode() == WorldMode::kVirtual;
  check_gemm_rs(result.records.begin(), result.records.end(), s.w, one_clock, result);
  result.checked = gemm_rs_checked(one_clock);
  result.config = op.describe_choice() + provenance("", gated);
  return result;
}

// tune gemm_ar's candidates: both schedules x both methods x K slices (the rule's, 1, 2, 4, 8),
// the sliced ones summed in the reduction and in the GEMM; the reduction CTAs and parts by the op's
// rule.
std::vector<GemmArConfig> tune_candidates() {
  std::vector<GemmArConfig> out;
  for (GemmArSchedule schedule : {GemmArSchedule::kFused, GemmArSchedule::kNonOverlapped}) {
    for (AllReduceMethod method : {AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot}) {
      for (uint32_t splits : {0u, 1u, 2u, 4u, 8u}) {
        for (GemmArSliceSum sum : {GemmArSliceSum::kReduction, GemmArSliceSum::kGemm}) {
          if (splits == 1 && sum == GemmArSliceSum::kGemm) continue;  // nothing to sum
          GemmArConfig c;
          c.schedule = schedule;
          c.method = method;
          c.splits = splits;
          c.slice_sum = sum;
          c.use_tune_cache = false;
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

tb::Table tune_gemm_ar(const TuneOptions<tb::GemmArBenchOptions>& options, std::ostream& progress) {
  const tb::GemmArBenchOptions& o = options.op;
  tb::GemmArSetup setup(o.world, o.m, o.n, o.k, GemmArConfig{}, o.seed, 2, "tune gemm_ar", 8);
  World& world = setup.world;
  world.synchronize();
  auto args_of = [&](const GemmArConfig& config) {
    GemmArArguments a = setup.args;
    a.config = config;
    a.config.use_tune_cache = false;
    return a;
  };
  const std::vector<GemmArConfig> candidates = tune_candidates();
  size_t step = 0;
  const GemmArConfig best = staged_search<GemmArConfig>(
      {{"configuration", [&](const GemmArConfig&) { return candidates; }, candidates.size()}},
      whole_op_timer<GemmAr>(setup, args_of, o.timing), progress, &step);
  GemmArConfig automatic;
  automatic.use_tune_cache = false;
  bool gated = true;
  const std::vector<tb::Stats> t =
      retime_and_check<GemmAr>(world, setup.heap, setup.signals, args_of(best), args_of(automatic), o.timing,
                               setup.out, size_t(setup.m) * setup.n, "tune gemm_ar", &gated);
  tb::Table table = tune_table("gemm_ar",
                               "tune GEMM+AR, " + tb::ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                                   " n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) + " (" +
                                   std::to_string(setup.k_local) + " per rank), bf16",
                               automatic, best, t, step, "schedule x method x K slices", o.timing, gated,
                               kSameAsAutomatic);
  store_tuned(options.cache, gemm_ar_tune_key(world, args_of(best)), best, automatic, t, table);
  return table;
}

// tune --dry-run: the candidates with the estimate of each (no GPU; an H200's rates, one rank per GPU).
int dry_run_gemm_ar(const tb::GemmArBenchOptions& o, const TuneSearch& search) {
  const GemmArShape shape{o.world, search.sms, o.m, o.n, o.k / uint32_t(std::max(1, o.world)), false};
  std::cout << "== tune gemm_ar (dry run), world " << o.world << ", m=" << o.m << " n=" << o.n << " k=" << o.k
            << ", " << shape.sm_budget << " SMs per rank: the candidates and their estimates (predicted) ==\n";
  for (const GemmArConfig& c : tune_candidates()) {
    const GemmArChoice ch = gemm_ar_choice(shape, c);
    std::printf("%-70s %8.1f us  (%s)\n", describe(c).c_str(), ch.estimate * 1e6, ch.why.c_str());
  }
  const GemmArChoice automatic = gemm_ar_choice(shape, GemmArConfig{});
  std::cout << "automatic: " << automatic.why << "\n";
  return 0;
}

void add_plan(Tool& tool) {
  auto a = std::make_shared<PlanArgs>();
  Command& c = tool.add("plan", "gemm_ar",
                        "GEMM+AR: every rank gets sum_q A_q * B_q (decode); predicted per M, no GPU");
  add_plan_world(c.app, a->problem.world, a->problem.nodes);
  a->shapes.add_to(c.app);
  add_knobs(c.app, a->config.op, true);  // --path: auto is the copy-engine path across nodes (put_signal)
  c.app->add_flag("--norm", a->config.norm, "with the residual + RMSNorm epilogue");
  a->cost.add_to(c.app);
  add_json(c.app, a->json);
  c.needs_gpu = [] { return false; };
  c.run = [a](const std::string& line) {
    check_writable(a->json);
    const sim::CostModel cost = a->cost.model();
    sim::GemmArProblem p = a->problem;
    a->shapes.resolve(p.n, p.k);
    tb::Table table;
    table.name = "plan_gemm_ar";
    table.title = "GEMM+AR, predicted per call (not measured): " + std::to_string(p.world) + " ranks on " +
                  std::to_string(p.nodes) + " node(s), n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                  " (" + std::to_string(p.k / uint32_t(std::max(1, p.world))) + " per rank)";
    table.columns = {{"m", "m", 0},
                     {"gemm_us", "T_gemm µs", 1},
                     {"ar_us", "T_ar µs", 1},
                     {"ideal_us", "ideal µs", 1},
                     {"chain_us", "chain µs", 1},
                     {"one_shot_us", "fused one-shot µs", 1},
                     {"two_shot_us", "fused two-shot µs", 1},
                     {"non_overlapped_us", "non-overlapped µs", 1},
                     {"op_us", "the op's choice µs", 1},
                     {"choice", "the op's choice", 0},
                     {"vs_chain", "chain / op", 3},
                     {"weight_gbs", "weight GB/s (op)", 0}};
    for (uint32_t m : a->shapes.m) {
      p.m = m;
      const sim::GemmArPrediction r = sim::predict_gemm_ar(p, a->config, cost);
      const GemmArChoice& ch = r.choice;
      table.add_row({int64_t(m), r.t_gemm * 1e6, r.t_ar * 1e6, r.ideal * 1e6, r.chain * 1e6, r.fused_one_shot * 1e6,
                     r.fused_two_shot * 1e6, r.non_overlapped * 1e6, ch.estimate * 1e6,
                     std::string(to_string(ch.schedule)) + " " + to_string(ch.method) + " x" +
                         std::to_string(ch.splits) + " " + std::to_string(ch.reduce_blocks) + "r",
                     r.chain / ch.estimate, r.weight_bytes / ch.estimate / 1e9});
    }
    table.notes.push_back("predictions of the cost model (sim/gemm_ar_sim.hpp), not measurements: " +
                          std::to_string(cost.flops / 1e12) + " TFLOP/s, HBM " +
                          std::to_string(cost.hbm_bandwidth / 1e12) + " TB/s, NVLink " +
                          std::to_string(cost.nvlink_bandwidth / 1e9) + " GB/s per rank, one CTA " +
                          std::to_string(cost.sm_copy_bandwidth_per_cta / 1e9) + " GB/s");
    table.notes.push_back("chain = the GEMM on every SM (one slice), then the faster all-reduce on every SM (what a "
                          "decode engine runs today); the op's choice: schedule, method, x K slices, reduction CTAs");
    const bool ce = a->config.op.path == GemmArPath::kCopyEngine || (a->config.op.path == GemmArPath::kAuto && p.nodes > 1);
    if (ce) {
      table.notes.push_back(std::string("the op's copy-engine path") +
                            (p.nodes > 1 ? " (across nodes the world's transport is put_signal: auto takes it)" : "") +
                            ": each tile row's partials put by the stream, " +
                            std::to_string(cost.ce_chunk_overhead * 1e6).substr(0, 4) +
                            " us a put; the chain's all-reduce loads and stores (NCCL's across nodes)");
    }
    std::cout << "tilelink plan gemm_ar: predicted, not measured\n\n";
    tb::print_table(std::cout, table);
    finish({table}, {{"kind", std::string("prediction")}, {"model", std::string("tilelink plan cost model")},
                     {"command", line}}, a->json);
    return 0;
  };
}

void add_bench(Tool& tool) {
  auto a = std::make_shared<BenchArgs>();
  Command& c = tool.add("bench", "gemm_ar",
                        "time tilelink::GemmAr (one-shot, two-shot, auto, non-overlapped, the copy-engine path) against "
                        "cuBLAS followed by the all-reduce, at decode's token counts");
  CLI::App* app = c.app;
  add_world(app, a->o.world, 1);
  a->shapes.add_to(app);
  app->add_option("--splits", a->o.config.splits, "K slices per rank; 0 = automatic")->capture_default_str();
  app->add_option("--reduce-blocks", a->o.config.reduce_blocks, "reduction CTAs per rank; 0 = automatic")
      ->capture_default_str();
  add_timing(app, a->o.timing);
  add_json(app, a->json);
  c.seed = add_seed(app, a->o.seed);
  c.run = [a](const std::string& line) {
    tb::GemmArBenchOptions o = a->o;
    a->shapes.resolve(o.n, o.k);
    std::vector<Mnk> shapes;
    for (uint32_t m : a->shapes.m) shapes.push_back({m, o.n, o.k});
    check_writable(a->json);
    run_shapes(o.world, "bench gemm_ar", shapes, line, o.seed, a->json, [&](const Mnk& s) {
      tb::GemmArBenchOptions x = o;
      x.m = s.m;
      return tb::bench_gemm_ar(x);
    });
    return 0;
  };
}

}  // namespace

void register_gemm_ar(Tool& tool) {
  add_bench(tool);
  add_trace_command(tool, RunArgs{}, "gemm_ar",
                    "GEMM+AR: each GEMM tile's (and K slice's) epilogue and notify; the reduction blocks' waits and "
                    "per-part reductions",
                    "records per rank", trace_gemm_ar, [](const tb::GemmArBenchOptions& o) {
                      return "(m, n, k) = (" + std::to_string(o.m) + ", " + std::to_string(o.n) + ", " +
                             std::to_string(o.k) + ")";
                    });
  add_tune_command(tool, RunArgs{}, "gemm_ar",
                   "GEMM+AR: both schedules x both all-reduce methods x K slices, each the whole op over all ranks",
                   "print the candidates with the estimate of each; no GPU needed", dry_run_gemm_ar, tune_gemm_ar);
  add_plan(tool);
}

}  // namespace tilelink::tool
