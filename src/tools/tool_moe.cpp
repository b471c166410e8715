// `tilelink bench|tune|trace|plan moe` and `bench|plan moe_ag`: the MoE layer (tilelink::MoeLayer:
// part 1 -> activation -> part 2) and its part 1 (tilelink::MoeAgGroupGemm: all-gather + gather +
// grouped GEMM), on a synthetic routing.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "bench/moe.hpp"
#include "bench/moe_setup.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"
#include "tilelink/sim/moe_sim.hpp"
#include "tilelink/tune/moe_tune.hpp"
#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/op_commands.hpp"
#include "tools/output.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {
namespace {

// The searches' view of a bench problem on ranks of `sm_budget` SMs (pure: the dry runs need no
// GPU); with the routing MoeLayerSetup draws from the options' seed.
MoeTuneShape moe_tune_shape(const tb::MoeBenchOptions& o, int sm_budget) {
  using namespace tilelink::bench;
  // The ids: the routing MoeLayerSetup runs.
  sim::MoeProblem problem{.m = o.m, .hidden = o.hidden, .intermediate = o.intermediate, .experts = o.experts,
                          .topk = o.topk, .ids = bench_routing(o), .world = o.world};
  return {std::move(problem), sm_budget, o.activation, MoeAgGroupGemm::kernel_names()};
}

// The MoE problem as every verb takes it: --m, --model (sets hidden, intermediate, experts and
// top-k: apply it with apply_moe_model), --hidden, --intermediate, --experts, --topk, --routing.
struct Shape {
  uint32_t& m;
  uint32_t& hidden;
  uint32_t& intermediate;
  uint32_t& experts;
  uint32_t& topk;
  SyntheticRouting& routing;
};

void add_shape(CLI::App* app, const Shape& s, std::string& model) {
  app->add_option("--m", s.m, "tokens over all ranks (each rank holds m / world)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI::Option* by_model = add_moe_model(app, model);
  app->add_option("--hidden", s.hidden, "hidden size H")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->excludes(by_model);
  app->add_option("--intermediate", s.intermediate,
                  "each expert's intermediate size over all ranks (intermediate / world per rank)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->excludes(by_model);
  app->add_option("--experts", s.experts, "experts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024))
      ->excludes(by_model);
  app->add_option("--topk", s.topk, "experts per token")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024))
      ->excludes(by_model);
  add_enum_option(app, "--routing", s.routing,
                  {SyntheticRouting::kUniform, SyntheticRouting::kSkewed, SyntheticRouting::kFewExperts},
                  "synthetic routing: uniform, skewed (expert 0 hot) or few_experts");
}

void add_activation(CLI::App* app, MlpActivation& activation) {
  add_enum_option(app, "--activation", activation, {MlpActivation::kSwiGlu, MlpActivation::kGelu},
                  "swiglu (part 1 gives gate and up halves) or gelu");
}

// bench moe_ag, bench moe, trace moe and tune moe: the problem, the knobs of both parts (not tune),
// timing and seed.
struct RunArgs : RunArgsBase<tb::MoeBenchOptions> {
  std::string model;
  bool layer = true;  // the layer's activation (and with knobs part 2's knobs) too; false: part 1 only

  explicit RunArgs(bool layer_ = true) : layer(layer_) {}
  Shape shape() { return {o.m, o.hidden, o.intermediate, o.experts, o.topk, o.routing}; }
  void add_to(Command& c, Timed timed) {
    add_world(c.app, o.world);
    add_shape(c.app, shape(), model);
    if (with_knobs) {
      CLI::Option_group* g = knob_group(c.app, knobs);
      g->add_option("--gather-blocks", o.config.gather_blocks, "gather CTAs per rank (0 = automatic)")
          ->capture_default_str();
      g->add_option("--gemm-sms", o.config.gemm_sms, "grouped GEMM CTAs per rank (0 = automatic)")
          ->capture_default_str();
      g->add_option("--swizzle", o.config.swizzle,
                    "grouped GEMM tile rows per band (walked column by column): 1, 2, 4, 8 or 16 (0 = automatic: 8)")
          ->capture_default_str()
          ->check(CLI::IsMember({0, 1, 2, 4, 8, 16}));
      g->add_option("--kernel", o.config.kernel,
                    "grouped GEMM configuration: 128x256x64_c1x2 (default) or 128x128x64_c1x2");
    }
    add_timing(c.app, o.timing, timed);
    c.seed = add_seed(c.app, o.seed, "random seed of the inputs and routing; default: a fresh one");
    if (!layer) return;
    add_activation(c.app, o.activation);
    if (!with_knobs) return;
    CLI::Option_group* g = knob_group(c.app, knobs);
    g->add_option("--combine-rows", o.part2.comm_rows, "tokens per combine / reduction block (0 = automatic)")
        ->capture_default_str();
    g->add_option("--weight-sweeps", o.part2.weight_sweeps,
                  "part 2's GEMM order: weight sweeps over the combine's rounds (0 = automatic; at least the rounds "
                  "= token order)")
        ->capture_default_str();
    g->add_option("--combine-blocks", o.part2.combine_blocks,
                  "part 2's combine + reduction CTAs per rank (0 = automatic)")
        ->capture_default_str();
  }
  // The options as run: the model's shape; --gemm-sms, --swizzle and --kernel for both parts; the
  // tune cache off when a knob was given.
  tb::MoeBenchOptions resolved() const {
    tb::MoeBenchOptions r = o;
    apply_moe_model(model, r.hidden, r.intermediate, r.experts, r.topk);
    r.part2.gemm_sms = r.config.gemm_sms;
    r.part2.swizzle = r.config.swizzle;
    r.part2.kernel = r.config.kernel;
    r.use_tune_cache = !any_knob(knobs);
    return r;
  }
};

std::string describe_problem(const tb::MoeBenchOptions& o) {
  return "tokens " + std::to_string(o.m) + ", hidden " + std::to_string(o.hidden) + ", intermediate " +
         std::to_string(o.intermediate) + ", " + std::to_string(o.experts) + " experts, top-" + std::to_string(o.topk);
}

// ---- tune: the layer's three-stage search (tune/moe_tune.hpp) -----------------------------------

int dry_run(const tb::MoeBenchOptions& o, const TuneSearch& search) {
  const MoeTuneShape shape = moe_tune_shape(o, search.sms / o.world);
  const std::vector<MoeLayerConfig> kernels = moe_kernel_candidates(shape.kernels);
  print_tune_candidates<MoeLayerConfig>(
      "== tune moe (dry run), world " + std::to_string(o.world) + ", " + std::to_string(o.m) +
          " tokens, hidden=" + std::to_string(o.hidden) + " intermediate=" + std::to_string(o.intermediate) + ", " +
          std::to_string(o.experts) + " experts, top-" + std::to_string(o.topk) + ", " +
          std::to_string(shape.sm_budget) + " SMs per rank ==\n",
      {{"kernels", kernels}, {"order", moe_order_candidates(kernels.front())}},
      [&](const MoeLayerConfig& base) { return moe_comm_candidates(base, shape, search.top); });
  return 0;
}

// ---- plan moe_ag and plan moe -------------------------------------------------------------------

constexpr uint32_t kPlanSmBlocks = 2;  // part 1's SM all-gather in the plan, unless --blocks says

struct PlanMoe : PlanArgs<sim::MoeProblem, sim::MoeAgPlanConfig> {
  sim::MoeRsPlanConfig part2;                         // plan moe
  MlpActivation activation = MlpActivation::kSwiGlu;  // plan moe
  std::string model;
  double mapping_us = 0;
  uint32_t micro_batches = 1;  // plan moe

  // Part 1's options (plan moe_ag and plan moe); `layer`: the activation and part 2's too.
  void add_to(CLI::App* app, bool layer) {
    add_shape(app, {problem.m, problem.hidden, problem.intermediate, problem.experts, problem.topk, problem.routing},
              model);
    app->add_option("--seed", problem.seed, "seed of the synthetic routing")->capture_default_str();
    app->add_option("--bm", config.bm, "tile rows (experts are padded to them)")->capture_default_str();
    app->add_option("--bn", config.bn, "tile columns")->capture_default_str();
    add_plan_all_gather(app, config.op.comm, kPlanSmBlocks);
    app->add_option("--gather-blocks", config.op.gather_blocks,
                    "CTAs of the gather stage (0 = the op's automatic count)")
        ->capture_default_str();
    app->add_option("--producer-gather", config.producer_gather_efficiency,
                    "a design, not built (issue 23): the row gather inside the GEMM's producer, no gather stage, "
                    "its GEMM at this fraction of the TMA mainloop's rate (assumed); 0 = the gather stage the op runs")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    app->add_option("--mapping-us", mapping_us,
                    "µs of the device mapping before gather and GEMM start (bench moe_ag measures it)")
        ->capture_default_str();
    if (!layer) return;
    add_activation(app, activation);
    app->add_option("--combine-blocks", part2.op.combine_blocks,
                    "part 2: CTAs of the combine and reduction (0 = the op's automatic count)")
        ->capture_default_str();
    app->add_option("--combine-rows", part2.op.comm_rows, "part 2: tokens per combine block")->capture_default_str();
    app->add_option("--micro-batches", micro_batches,
                    "a design, not built (issue 25): the layer pipelined over this many token micro-batches, one "
                    "batch's all-gather and reduce-scatter under another's GEMMs (the epilogue combine, world > 1)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    add_enum_option(app, "--combine", part2.op.combine, {MoeCombine::kBlocks, MoeCombine::kEpilogue, MoeCombine::kAuto},
                    "part 2: who combines: blocks (CTAs beside the GEMM), epilogue (the GEMM's CTAs; the owners' "
                    "sums after it) or auto (the epilogue with peers reached by load/store, the blocks for one rank or "
                    "across nodes)");
  }
  // The model's shape, the SM all-gather's default CTAs, the mapping's time.
  void resolve() {
    apply_moe_model(model, problem.hidden, problem.intermediate, problem.experts, problem.topk);
    resolve_plan_blocks(config.op.comm, kPlanSmBlocks);
    config.mapping_time = mapping_us * 1e-6;
  }
  // "tilelink plan <op>: predicted, not measured (cost model: ...)\nworld=...  nodes=...  tokens=...
  // hidden=...  intermediate=..." with `intermediate_suffix` after the intermediate size.
  std::string header(const char* op, const sim::CostModel& cost, const std::string& intermediate_suffix) const {
    const auto& p = problem;
    std::ostringstream s;
    s << "tilelink plan " << op << ": predicted, not measured (cost model: " << cost.flops / 1e12 << " TFLOP/s, "
      << cost.sms << " SMs, one CTA copies " << cost.sm_copy_bandwidth_per_cta / 1e9 << " GB/s)\n"
      << "world=" << p.world << "  nodes=" << p.nodes << "  tokens=" << p.m << "  hidden=" << p.hidden
      << "  intermediate=" << p.intermediate << intermediate_suffix << "  experts=" << p.experts << "  top-" << p.topk
      << " (" << to_string(p.routing) << " routing, seed " << p.seed << ")";
    return s.str();
  }
};

// Which of the plan's rows the op's automatic method runs (moe_policy::method: a rule, not an estimate).
void print_moe_method(const char* who, OpMethod method) {
  std::printf("op method auto: %s runs %s (%s)\n", who, to_string(method),
              method == OpMethod::kNonOverlapped
                  ? "one rank: nothing crosses a link, each stage gets the whole budget in turn -- the non-overlapped row"
                  : "the fused row");
}

int plan_moe_ag(PlanMoe a, const sim::CostModel& cost) {
  a.resolve();
  const sim::MoePrediction r = sim::predict_moe_ag(a.problem, a.config, cost);
  std::cout << a.header("moe_ag", cost, "") << "  bm=" << a.config.bm << "  bn=" << a.config.bn
            << "  gather CTAs=" << r.gather_ctas << "  GEMM CTAs=" << r.gemm_ctas << "  tiles=" << r.tiles
            << "  resource=" << to_string(a.config.op.comm.resource) << "\n\n";
  print_plan("plan_moe_ag", "MoE part 1, predicted per rank", r, a.out, "tilelink plan moe_ag, rank 0 (predicted)");
  std::printf("gather alone on the op's CTAs: %.1f us\n", r.t_gather * 1e6);
  print_moe_method("the op", moe_policy::method(a.config.op.method, a.problem.world));
  return 0;
}

int plan_moe(PlanMoe a, const sim::CostModel& cost) {
  a.resolve();
  a.part2.bm = a.config.bm;
  a.part2.bn = a.config.bn;
  const sim::MoePrediction r = sim::predict_moe_layer(a.problem, a.activation, a.config, a.part2, cost, a.micro_batches);
  const MoeCombine combine =
      moe_policy::combine(a.part2.op.combine, a.problem.world, a.problem.nodes > 1, a.part2.op.method);
  std::cout << a.header("moe", cost, std::string(" (") + to_string(a.activation) + ")") << "  tiles=" << r.tiles
            << "  gather CTAs=" << r.gather_ctas << "  combine=" << to_string(combine)
            << (a.part2.op.combine == MoeCombine::kAuto ? " (automatic)" : "")
            << (combine == MoeCombine::kEpilogue ? "  reduction CTAs=" : "  combine CTAs=") << r.combine_ctas
            << (a.micro_batches > 1 ? "  micro-batches=" + std::to_string(a.micro_batches) + " (a design, not built)"
                                    : std::string())
            << "\n\n";
  // With the combine on automatic, the other one too (its own automatic CTA count) -- on one node:
  // across nodes (put_signal) the epilogue combine does not run.
  std::vector<std::pair<std::string, double>> alternatives;
  if (a.problem.nodes > 1) {
    std::cout << "note: across " << a.problem.nodes << " nodes the world's transport is put_signal (auto): the combine "
              << "blocks stage the peers' rows and the stream puts them; this model's blocks store them directly\n\n";
  }
  if (a.part2.op.combine == MoeCombine::kAuto && a.problem.nodes == 1 && a.micro_batches == 1) {
    sim::MoeRsPlanConfig other = a.part2;
    other.op.combine = combine == MoeCombine::kBlocks ? MoeCombine::kEpilogue : MoeCombine::kBlocks;
    other.op.combine_blocks = 0;
    alternatives.push_back({std::string("fused, combine ") + to_string(other.op.combine),
                            sim::predict_moe_layer(a.problem, a.activation, a.config, other, cost).fused});
  }
  print_plan("plan_moe", "MoE layer, predicted per rank", r, a.out, "tilelink plan moe, rank 0 (predicted)",
             alternatives);
  print_moe_method("part 1", moe_policy::method(a.config.op.method, a.problem.world));
  print_moe_method("part 2", moe_policy::method(a.part2.op.method, a.problem.world, combine == MoeCombine::kEpilogue));
  return 0;
}

// ---- tune and trace ----------------------------------------------------------------------------
tb::Table tune_moe(const TuneOptions<tb::MoeBenchOptions>& o, std::ostream& progress) {
  using namespace tilelink::bench;
  MoeLayerSetup setup(o.op, "tune moe");
  World& world = setup.world;
  world.synchronize();
  auto args_of = [&](MoeLayerConfig config) {
    MoeLayerArguments a = setup.args;
    config.activation = o.op.activation;
    config.use_tune_cache = false;
    a.config = config;
    return a;
  };
  const MoeTuneShape shape = moe_tune_shape(o.op, world.sm_budget(0));
  const std::vector<MoeLayerConfig> kernels = moe_kernel_candidates(shape.kernels);
  size_t step = 0;
  const MoeLayerConfig best = staged_search<MoeLayerConfig>(
      {{"kernels", [&](const MoeLayerConfig&) { return kernels; }, kernels.size()},
       {"order", [&](const MoeLayerConfig& base) { return moe_order_candidates(base); },
        moe_order_candidates(MoeLayerConfig{}).size()},
       {"communication",
        [&](const MoeLayerConfig& base) { return configs_of(moe_comm_candidates(base, shape, o.top)); }, o.top + 1}},
      whole_op_timer<MoeLayer>(setup, args_of, o.op.timing), progress, &step);

  const MoeLayerConfig automatic = args_of(MoeLayerConfig{}).config;
  bool gated = true;
  const std::vector<Stats> t =
      retime_and_check<MoeLayer>(world, setup.heap, setup.signals, args_of(best), args_of(automatic), o.op.timing,
                                 setup.out, setup.block_elems, "tune moe", &gated);
  Table table = tune_table(
      "moe",
      "tune MoE layer (" + std::string(to_string(o.op.activation)) + "), " + ranks_phrase(o.op.world) + ": " +
          std::to_string(o.op.m) + " tokens, hidden=" + std::to_string(o.op.hidden) + " intermediate=" +
          std::to_string(o.op.intermediate) + ", " + std::to_string(o.op.experts) + " experts, top-" +
          std::to_string(o.op.topk) + ", " + to_string(o.op.routing) + " routing, bf16",
      automatic, best, t, step,
      std::to_string(kernels.size()) + " kernel pairs, then part 1 / part 2 orders, then the communication variants "
                                       "the plan model ranked best",
      o.op.timing, gated, kSameAsAutomatic);
  table.notes.push_back("tuned on this routing; the cache entry applies to any routing of the same shape");
  store_tuned(o.cache, moe_tune_key(world, args_of(best)), args_of(best).config, automatic, t, table);
  return table;
}

TraceResult trace_moe(const TraceOptions<tb::MoeBenchOptions>& o) {
  using namespace tilelink::bench;
  MoeLayerSetup s(o.op, "trace moe");
  MoeLayerArguments fused_args = s.args;  // the trace records the fused parts' tiles
  fused_args.config.part1.method = OpMethod::kFused;
  fused_args.config.part2.method = OpMethod::kFused;
  MoeLayer op(s.world, s.heap, s.signals, fused_args, "trace.moe");
  TraceResult result;
  const auto [gated, split] = record_two_parts(
      s.world, op, [](MoeLayer& m) -> MoeAgGroupGemm& { return m.part1(); },
      [](MoeLayer& m) -> MoeGemmRs& { return m.part2(); }, {"part1", "part2"}, o.capacity, o.op.timing, result);
  check_ag_gemm(result.records.cbegin(), split, result);
  result.checked = "part 1 grouped GEMM tiles whose loads began after their wait (on the gather) ended";
  result.config = "kernel " + op.part1().kernel_name() + ", " + std::to_string(op.part1().gather_blocks()) +
                  " gather CTAs, " + std::to_string(op.part2().combine_blocks()) + " combine CTAs per rank" +
                  provenance(op.tuned_from(), gated);
  return result;
}

}  // namespace

void register_moe(Tool& tool) {
  add_bench_command(tool, RunArgs(false), "moe_ag",
                    "time tilelink::MoeAgGroupGemm (MoE part 1: all-gather + gather + grouped GEMM) against the "
                    "per-expert cuBLAS chain",
                    tb::bench_moe_ag);
  add_bench_command(tool, RunArgs(), "moe",
                    "time tilelink::MoeLayer (part 1 -> activation -> grouped GEMM + top-k combine + reduce-scatter) "
                    "against the per-expert cuBLAS chain with its collectives",
                    tb::bench_moe_layer);
  add_tune_command(tool, RunArgs(), "moe",
                   "the MoE layer: kernel pairs, then part 1 / part 2 orders, then the all-gather x gather x combine "
                   "variants the plan model ranks best",
                   "print the candidates and the model's predictions; no GPU needed", dry_run, tune_moe);
  add_trace_command(tool, RunArgs(), "moe",
                    "the MoE layer: part 1 (all-gather, gather, grouped GEMM) and part 2 (grouped GEMM, top-k combine "
                    "+ reduce-scatter) as two parts of one timeline",
                    "records per rank and part", trace_moe, describe_problem);
  add_plan_command<PlanMoe>(
      tool, "moe_ag", "MoE part 1: all-gather + gather + grouped GEMM, for a synthetic routing",
      [](CLI::App* app, PlanMoe& a) { a.add_to(app, false); }, plan_moe_ag);
  add_plan_command<PlanMoe>(
      tool, "moe", "the MoE layer: part 1 -> activation -> grouped GEMM + top-k combine + reduce-scatter",
      [](CLI::App* app, PlanMoe& a) { a.add_to(app, true); }, plan_moe);
}

}  // namespace tilelink::tool
