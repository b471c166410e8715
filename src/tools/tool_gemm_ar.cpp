// `tilelink bench|plan gemm_ar`: GEMM+AR (tilelink::GemmAr), decode's row-parallel linear layer
// with its all-reduce started per tile by the GEMM.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/gemm_ar.hpp"
#include "tilelink/sim/gemm_ar_sim.hpp"
#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/options.hpp"
#include "tools/output.hpp"

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

void add_plan(Tool& tool) {
  auto a = std::make_shared<PlanArgs>();
  Command& c = tool.add("plan", "gemm_ar",
                        "GEMM+AR: every rank gets sum_q A_q * B_q (decode); predicted per M, no GPU");
  add_plan_world(c.app, a->problem.world, a->problem.nodes);
  a->shapes.add_to(c.app);
  add_enum_option(c.app, "--method", a->config.op.method,
                  {AllReduceMethod::kAuto, AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot},
                  "the op's all-reduce: auto (the estimate's faster), one_shot or two_shot; default auto", false);
  add_enum_option(c.app, "--schedule", a->config.op.schedule,
                  {GemmArSchedule::kAuto, GemmArSchedule::kFused, GemmArSchedule::kNonOverlapped},
                  "the op's schedule: auto (the estimate's faster), fused or non_overlapped; default auto", false);
  c.app->add_option("--splits", a->config.op.splits, "K slices per rank; 0 = the op's automatic count")
      ->capture_default_str();
  c.app->add_option("--reduce-blocks", a->config.op.reduce_blocks, "reduction CTAs per rank; 0 = automatic")
      ->capture_default_str();
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
                        "time tilelink::GemmAr (one-shot, two-shot, auto, non-overlapped) against cuBLAS followed by "
                        "the all-reduce, at decode's token counts");
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
  add_plan(tool);
}

}  // namespace tilelink::tool
