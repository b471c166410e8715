// `tilelink bench|tune|trace|plan mlp`: the tensor-parallel MLP (tilelink::Mlp), AG+GEMM (fc1)
// -> activation -> GEMM+RS (fc2).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/mlp.hpp"
#include "bench/mlp_setup.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"
#include "tilelink/ops/mlp/mlp.hpp"
#include "tilelink/sim/mlp_sim.hpp"
#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/op_commands.hpp"
#include "tools/output.hpp"
#include "tools/tool_gemms.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {
namespace {

// The MLP's problem as every verb takes it: --m, --model (sets hidden and intermediate: apply it
// with apply_dense_model), --hidden, --intermediate, --activation.
void add_shape(CLI::App* app, uint32_t& m, std::string& model, uint32_t& hidden, uint32_t& intermediate,
               MlpActivation& activation) {
  app->add_option("--m", m, "tokens over all ranks (each rank holds m / world)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI::Option* by_model = add_dense_model(app, model);
  app->add_option("--hidden", hidden, "hidden size H")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->excludes(by_model);
  app->add_option("--intermediate", intermediate, "intermediate size over all ranks")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->excludes(by_model);
  add_enum_option(app, "--activation", activation, {MlpActivation::kSwiGlu, MlpActivation::kGelu},
                  "swiglu (fc1 gives gate and up halves) or gelu");
}

void add_shape(CLI::App* app, tb::MlpBenchOptions& o, std::string& model) {
  add_shape(app, o.m, model, o.hidden, o.intermediate, o.config.activation);
}

// bench, trace and tune mlp: the problem, fc2's knobs (not tune), timing and seed.
struct RunArgs : RunArgsBase<tb::MlpBenchOptions> {
  std::string model;
  bool fp8 = false;  // --dtype and --scaling (bench only)

  void add_to(Command& c, Timed timed) {
    add_world(c.app, o.world);
    add_shape(c.app, o, model);
    if (fp8) {
      add_operand_options(c.app, o.dtype, o.scaling,
                          "FP8 weights; fc1 quantises the tokens on send, fc2 the activation; against the same block "
                          "in bf16");
    }
    if (with_knobs) {
      CLI::Option_group* g = knob_group(c.app, knobs);
      add_enum_option(g, "--scatter", o.config.fc2.scatter,
                      {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine, GemmRsScatter::kAuto},
                      "fc2's scatter: pull, push, ce (needs --granularity row or rank) or auto (the op's rule)");
      add_enum_option(g, "--granularity", o.config.fc2.granularity,
                      {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank},
                      "fc2's signal per tile, row (of tiles) or rank");
      add_enum_option(g, "--reducer", o.config.fc2.reducer,
                      {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue, GemmRsReducer::kAuto},
                      "fc2's sums: blocks (reduction CTAs), epilogue (the GEMM's CTAs; needs --granularity tile) or "
                      "auto (the op's rule)");
      add_push_notify(g, o.config.fc2.push_notify, "fc2's notify ");
    }
    add_timing(c.app, o.timing, timed);
    c.seed = add_seed(c.app, o.seed);
  }
  // The options as run: the model's shape, the tune cache off when a knob was given.
  tb::MlpBenchOptions resolved() const {
    tb::MlpBenchOptions r = o;
    apply_dense_model(model, r.hidden, r.intermediate);
    r.config.fc2.use_tune_cache = !any_knob(knobs);
    return r;
  }
};

// tune mlp --dry-run: tune ag_gemm's on fc1's shape and tune gemm_rs's on fc2's.
int dry_run(const tb::MlpBenchOptions& m, const TuneSearch& search) {
  const uint32_t fc1_n = (m.config.activation == MlpActivation::kSwiGlu ? 2 : 1) * m.intermediate;
  const int rc1 = dry_run_ag_gemm(search, m.world, {{m.m, fc1_n, m.hidden}});
  const int rc2 = dry_run_gemm_rs(search, m.world, {{m.m, m.hidden, m.intermediate}});
  return std::max(rc1, rc2);
}

std::string describe_problem(const tb::MlpBenchOptions& o) {
  return "m " + std::to_string(o.m) + ", hidden " + std::to_string(o.hidden) + ", intermediate " +
         std::to_string(o.intermediate) + ", " + to_string(o.config.activation);
}

// ---- plan ----------------------------------------------------------------------------------------

struct PlanMlp : PlanArgs<sim::MlpProblem, sim::MlpPlanConfig> {
  std::string model;
};

constexpr uint32_t kPlanSmBlocks = 16;  // fc1's SM all-gather in the plan, unless --blocks says

int plan(PlanMlp a, const sim::CostModel& cost, const CLI::App& app) {
  apply_dense_model(a.model, a.problem.hidden, a.problem.intermediate);
  const std::string across = gemm_rs_across_nodes(a.config.fc2.op, a.problem.nodes, app);
  if (a.problem.dtype == DType::kE4m3) {  // the FP8 kernels' tiles, as each op runs them
    detail::kernel_tile(AgGemm::kernel_names(DType::kE4m3, a.problem.scaling).front(), "plan mlp", &a.config.fc1.bm,
                        &a.config.fc1.bn);
    detail::kernel_tile(GemmRs::kernel_name(DType::kE4m3, a.problem.scaling), "plan mlp", &a.config.fc2.bm,
                        &a.config.fc2.bn);
  }
  AllGatherConfig& comm = a.config.fc1.op.comm;
  resolve_plan_blocks(comm, kPlanSmBlocks);
  const sim::MlpPrediction r = sim::predict_mlp(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan mlp: predicted, not measured (cost model: " << cost.gemm_flops(a.problem.dtype) / 1e12
            << " TFLOP/s " << to_string(a.problem.dtype) << ", "
            << cost.sms << " SMs, NVLink " << cost.nvlink_bandwidth / 1e9 << " GB/s per rank)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  tokens=" << p.m << "  hidden=" << p.hidden
            << "  intermediate=" << p.intermediate << "  activation=" << to_string(p.activation)
            << (p.dtype == DType::kE4m3 ? std::string("  e4m3 ") + to_string(p.scaling) + " scaling" : std::string())
            << "  fc1 all-gather " << to_string(comm.resource) << ", " << comm.comm_rows << "-row tiles  fc2 scatter "
            << to_string(r.fc2_scatter) << (a.config.fc2.op.scatter == GemmRsScatter::kAuto ? " (automatic)" : "")
            << ", " << r.fc2_reduce_ctas << " reduction CTAs"
            << (a.config.fc2.op.reduce_blocks == 0 ? " (automatic)" : "") << ", reducer " << to_string(r.fc2_reducer)
            << (a.config.fc2.op.reducer == GemmRsReducer::kAuto ? " (automatic)" : "") << ", signal per "
            << to_string(a.config.fc2.op.granularity) << "\n"
            << across << "\n";
  // With fc2's reducer on automatic, the other placements of its sums too (as plan gemm_rs).
  const auto alternatives = other_gemm_rs_placements(
      a.config.fc2.op, r.fc2_scatter, r.fc2_reducer, p.world, "fused, fc2 ", [&](const GemmRsConfig& other) {
        sim::MlpPlanConfig c = a.config;
        c.fc2.op = other;
        return sim::predict_mlp(p, c, cost).fused;
      });
  print_plan("plan_mlp", "MLP, predicted per rank", r, a.out, "tilelink plan mlp, rank 0 (predicted)", alternatives);
  std::printf("activation %.1f us (its bytes at the HBM bandwidth)\n", r.t_act * 1e6);
  print_gemm_rs_auto(p.world, p.nodes, p.m, p.hidden, p.intermediate / static_cast<uint32_t>(p.world), r.fc2_reducer,
                     r.fc2_reduce_ctas, a.config.fc2.op.push_notify, p.dtype, cost, "fc2");
  return 0;
}

void add_plan_options(CLI::App* app, PlanMlp& a) {
  add_shape(app, a.problem.m, a.model, a.problem.hidden, a.problem.intermediate, a.problem.activation);
  add_plan_all_gather(app, a.config.fc1.op.comm, kPlanSmBlocks, "fc1: ");
  app->add_option("--reduce-blocks", a.config.fc2.op.reduce_blocks,
                  "fc2: reduction CTAs; 0 = the op's rule for one rank per GPU")
      ->capture_default_str();
  add_enum_option(app, "--scatter", a.config.fc2.op.scatter,
                  {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine, GemmRsScatter::kAuto},
                  "fc2: pull, push, ce (needs --granularity row or rank; across nodes: ce) or auto (the op's rule for one "
                  "rank per GPU)");
  add_enum_option(app, "--granularity", a.config.fc2.op.granularity,
                  {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank},
                  "fc2: signal per tile, row (of tiles) or rank");
  add_enum_option(app, "--reducer", a.config.fc2.op.reducer,
                  {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue, GemmRsReducer::kAuto},
                  "fc2: blocks (reduction CTAs), epilogue (the GEMM's CTAs) or auto (the op's rule)");
  add_push_notify(app, a.config.fc2.op.push_notify, "fc2: ");
  add_enum_option(app, "--dtype", a.problem.dtype, {DType::kBf16, DType::kE4m3},
                  "operands: bf16, or e4m3 (both GEMMs at the FP8 rate, --fp8-tflops; fc1 all-gathers packed e4m3 "
                  "rows; fc2 quantises the activation)");
  add_enum_option(app, "--scaling", a.problem.scaling, {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock},
                  "e4m3 scales: tensor, row or block");
}

// ---- tune and trace ----------------------------------------------------------------------------
tb::Table tune_mlp(const TuneOptions<tb::MlpBenchOptions>& options, std::ostream& progress) {
  using namespace tilelink::bench;
  const tb::MlpBenchOptions& o = options.op;
  TL_REQUIRE(o.world >= 1, "tune_mlp", "world", o.world, ">= 1");
  const MlpActivation activation = o.config.activation;
  auto gemm = [&](auto& t, uint32_t n, uint32_t k) {  // one of the MLP's GEMMs, searched as the MLP asks
    t.op.world = o.world;
    t.op.m = o.m;
    t.op.n = n;
    t.op.k = k;
    t.op.timing = o.timing;
    t.op.seed = o.seed;
    t.top = options.top;
    t.cache = options.cache;
  };
  TuneOptions<tb::AgGemmBenchOptions> fc1;
  gemm(fc1, (activation == MlpActivation::kSwiGlu ? 2 : 1) * o.intermediate, o.hidden);
  TuneOptions<tb::GemmRsBenchOptions> fc2;
  gemm(fc2, o.hidden, o.intermediate);
  progress << "fc1 (AG+GEMM):\n";
  const Table t1 = tune_ag_gemm(fc1, progress);
  progress << "fc2 (GEMM+RS):\n";
  const Table t2 = tune_gemm_rs(fc2, progress);
  Table table = t1;
  table.name = "tune_mlp";
  table.title = "tune MLP (" + std::string(to_string(activation)) + "), " + ranks_phrase(o.world) + ": m=" +
                std::to_string(o.m) + " hidden=" + std::to_string(o.hidden) + " intermediate=" +
                std::to_string(o.intermediate) + ", bf16";
  table.rows.clear();
  table.notes.clear();
  for (const auto& [part, t] : {std::pair<const char*, const Table*>{"fc1 ", &t1}, {"fc2 ", &t2}}) {
    for (std::vector<Value> row : t->rows) {
      row[0] = part + std::get<std::string>(row[0]);
      table.add_row(row);
    }
    for (const std::string& note : t->notes) table.notes.push_back(part + note);
  }
  return table;
}

TraceResult trace_mlp(const TraceOptions<tb::MlpBenchOptions>& o) {
  using namespace tilelink::bench;
  MlpSetup s(o.op.world, o.op.m, o.op.hidden, o.op.intermediate, o.op.config, o.op.seed, "trace mlp");
  MlpArguments args = s.args;  // fc2's fused timeline (its other methods notify no tiles)
  args.config.fc2.method = OpMethod::kFused;
  Mlp op(s.world, s.heap, s.signals, args, "trace.mlp");
  TraceResult result;
  const auto [gated, split] = record_two_parts(
      s.world, op, [](Mlp& m) -> AgGemm& { return m.fc1(); }, [](Mlp& m) -> GemmRs& { return m.fc2(); },
      {"fc1", "fc2"}, o.capacity, o.op.timing, result);
  const bool one_clock = s.world.mode() == WorldMode::kVirtual;
  check_ag_gemm(result.records.cbegin(), split, result);
  const uint64_t fc1_tiles = result.tiles, fc1_violations = result.violations;
  check_gemm_rs(split, result.records.cend(), s.w, one_clock, result);
  result.checked = std::string("fc1 ") + kAgGemmChecked + ": " + std::to_string(fc1_tiles - fc1_violations) + " of " +
                   std::to_string(fc1_tiles) + "; fc2 " + gemm_rs_checked(one_clock) + " (both)";
  // fc2's knobs are the owner-tile engine's; at decode's M it may run the small-M engine instead.
  const std::string fc2 = op.fc2().engine() == GemmRsEngine::kSmallM
                              ? "fc2 small-M engine (" + op.fc2().engine_why() + ")"
                              : "fc2 scatter " + std::string(to_string(op.fc2().config().scatter)) + ", signal per " +
                                    to_string(op.fc2().config().granularity) + ", " +
                                    std::to_string(op.fc2().reduce_blocks()) + " reduction CTAs per rank";
  result.config = "fc1 kernel " + op.fc1().kernel_name() + ", " + to_string(op.fc1().config().comm.resource) +
                  " all-gather; " + fc2 +
                  (op.fc1().tuned_from().empty() ? "" : "; fc1" + from_cache(op.fc1().tuned_from())) +
                  (op.fc2().tuned_from().empty() ? "" : "; fc2" + from_cache(op.fc2().tuned_from())) +
                  (gated ? "" : " (timing not gated)");
  return result;
}

}  // namespace

void register_mlp(Tool& tool) {
  RunArgs bench_args;
  bench_args.fp8 = true;
  add_bench_command(tool, bench_args, "mlp",
                    "time tilelink::Mlp (AG+GEMM -> activation -> GEMM+RS) against the non-overlapped chain",
                    tb::bench_mlp);
  add_tune_command(tool, RunArgs{}, "mlp",
                   "the MLP: tune ag_gemm on fc1's shape and tune gemm_rs on fc2's, both into the cache",
                   "print both ops' candidates and the model's predictions; no GPU needed", dry_run, tune_mlp);
  add_trace_command(tool, RunArgs{}, "mlp",
                    "the MLP: fc1 (AG+GEMM) and fc2 (GEMM+RS) recorded as two parts of one timeline",
                    "records per rank and part", trace_mlp, describe_problem);
  add_plan_command<PlanMlp>(tool, "mlp", "the tensor-parallel MLP: AG+GEMM (fc1) -> activation -> GEMM+RS (fc2)",
                            add_plan_options, plan);
}

}  // namespace tilelink::tool
