// `tilelink bench|tune|trace|plan gemm_rs`: GEMM+RS (tilelink::GemmRs), the row-parallel linear
// layer with its reduce-scatter hidden under the GEMM.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/gemm_rs.hpp"
#include "bench/gemm_rs_setup.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/sim/gemm_ar_sim.hpp"
#include "tilelink/sim/gemm_rs_rates.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"
#include "tilelink/tune/gemm_rs_tune.hpp"
#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/op_commands.hpp"
#include "tools/output.hpp"
#include "tools/tool_gemms.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {
namespace {

constexpr const char* kM = "rows of the output over all ranks, a multiple of the world (each rank gets m / world; the op itself takes any m)";
constexpr const char* kN = "columns of the output";
constexpr const char* kK = "inner dimension over all ranks (each rank holds k / world)";

constexpr const char* kScatterHelp =
    "how tiles reach their owner: pull (owners read the senders' partials), push (the GEMM epilogue stores into "
    "the owner), ce (copy engine, per signal group: needs --granularity row or rank) or auto (the op's rule, "
    "with --reducer: push with one rank per GPU where the epilogue sums, else pull)";

void add_scatter(CLI::App* app, GemmRsScatter& scatter, const std::string& help) {
  add_enum_option(app, "--scatter", scatter,
                  {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine, GemmRsScatter::kAuto},
                  help);
}

void add_reducer(CLI::App* app, GemmRsReducer& reducer, const std::string& help) {
  add_enum_option(app, "--reducer", reducer, {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue, GemmRsReducer::kAuto},
                  help);
}

constexpr const char* kReducerHelp =
    "who sums the owner's tiles: blocks (reduction CTAs beside the GEMM), epilogue (the GEMM's own CTAs after "
    "each own tile; needs --granularity tile, --reduce-blocks 0) or auto (the op's rule: the epilogue with the "
    "push with one rank per GPU, where the estimate prefers the fused op; else blocks)";

void add_granularity(CLI::App* app, SignalGranularity& granularity, const std::string& help) {
  add_enum_option(app, "--granularity", granularity,
                  {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}, help);
}

// The op's knobs (bench and trace): any of them given turns the tune cache off.
void add_knobs(CLI::App* app, GemmRsConfig& c, CLI::Option_group*& knobs) {
  CLI::Option_group* g = knob_group(app, knobs);
  add_granularity(g, c.granularity, "signal per tile, row (of tiles) or rank (owner block)");
  add_scatter(g, c.scatter, kScatterHelp);
  g->add_option("--reduce-blocks", c.reduce_blocks,
                "reduction CTAs per rank, rounded up to whole GEMM clusters; 0 = automatic: budget / 32 on "
                "virtual ranks, by the GEMM's rate with one rank per GPU")
      ->capture_default_str();
  g->add_option("--gemm-sms", c.gemm_sms, "GEMM CTAs per rank; 0 = the rest of the budget")->capture_default_str();
  add_reducer(g, c.reducer, kReducerHelp);
  add_push_notify(g, c.push_notify);
  g->add_option("--swizzle", c.swizzle,
                "tile rasterization swizzle: 1, 2, 4 or 8; 0 = automatic (a band inside one owner block)")
      ->capture_default_str()
      ->check(CLI::IsMember({0u, 1u, 2u, 4u, 8u}));
  add_enum_option(g, "--engine", c.engine, {GemmRsEngine::kAuto, GemmRsEngine::kOwnerTiles, GemmRsEngine::kSmallM},
                  "owner_tiles (the GEMM over owner blocks of whole tile rows), small_m (GEMM+AR's engine: 64- or "
                  "128-row tiles over all rows, K slices, each owner summing its rows; decode's M) or auto (the "
                  "estimates' faster)");
  std::string names;
  for (const std::string& name : GemmRs::kernel_names()) names += (names.empty() ? "" : ", ") + name;
  g->add_option("--kernel", c.kernel,
                "the owner_tiles engine's GEMM kernel configuration, one of " + names +
                    " (the e4m3 ones with --dtype e4m3); default: the first compiled for the data type");
}

// ---- plan ----------------------------------------------------------------------------------------

using PlanGemmRs = PlanArgs<sim::GemmRsProblem, sim::GemmRsPlanConfig>;

}  // namespace

void add_push_notify(CLI::App* app, GemmRsPushNotify& notify, const std::string& what) {
  add_enum_option(app, "--push-notify", notify, {GemmRsPushNotify::kDeferred, GemmRsPushNotify::kImmediate},
                  what + "with the push: deferred (a pushed tile announced at the CTA's next tile, its store "
                         "draining under that tile's mainloop) or immediate (the CTA waits for its store to land, "
                         "then notifies)");
}

std::string gemm_rs_across_nodes(GemmRsConfig& op, int nodes, const CLI::App& app) {
  if (nodes <= 1) return "";
  if (app.get_option("--scatter")->count() == 0) op.scatter = GemmRsScatter::kCopyEngine;
  if (app.get_option("--granularity")->count() == 0 && op.scatter == GemmRsScatter::kCopyEngine) {
    op.granularity = SignalGranularity::kTileRow;
  }
  return "note: across " + std::to_string(nodes) +
         " nodes the world's transport is put_signal (auto): the copy-engine scatter's puts, signal per " +
         to_string(op.granularity) + "\n";
}

void print_gemm_rs_auto(int world, int nodes, uint32_t m, uint32_t n, uint32_t k_local, GemmRsReducer reducer,
                        uint32_t reduce_ctas, GemmRsPushNotify push_notify, DType dtype, const sim::CostModel& cost,
                        const std::string& who) {
  // What GemmRsConfig::method = auto runs on such a world without a tune-cache entry: the op's own
  // estimate (gemm_rs_policy::estimate_methods, the H200 rates), beside the timeline above.
  gemm_rs_policy::MethodShape shape;
  shape.world = static_cast<uint32_t>(world);
  shape.m = m;
  shape.n = n;
  shape.k = k_local;
  shape.sm_budget = cost.sms;
  shape.reduce_blocks = reducer == GemmRsReducer::kEpilogue ? 0 : reduce_ctas;
  shape.reducer = reducer;
  shape.push_notify = push_notify;
  const gemm_rs_policy::MethodEstimates e = gemm_rs_policy::estimate_methods(shape);
  const OpMethod method =
      reducer == GemmRsReducer::kEpilogue ? OpMethod::kFused
                                          : gemm_rs_policy::choose_method(OpMethod::kAuto, e, gemm_rs_policy::kAutoMayDecompose);
  std::printf("%s method auto: %s (the op's estimate, one rank per GPU on one node's NVLink: fused %.1f, non-overlapped "
              "%.1f, decomposed %.1f us%s; a tune-cache entry would decide instead)\n",
              who.c_str(), to_string(method), e.fused * 1e6, e.non_overlapped * 1e6, e.decomposed * 1e6,
              gemm_rs_policy::kAutoMayDecompose ? " (given a recv buffer)" : " (not chosen automatically until measured)");
  // And the engine auto takes (GemmRsConfig::engine): the small-M engine's estimate, GEMM+AR's
  // reduce-scatter at this cost model's rates, against the owner-tile GEMM's at its method (the
  // timeline above is the owner-tile GEMM's).
  if (dtype != DType::kBf16) return;
  const GemmArChoice small =
      gemm_rs_policy::small_m_choice(world, cost.sms, m, n, k_local, GemmArConfig{}, sim::gemm_ar_rates(cost, world, nodes));
  std::printf("%s engine auto: %s (the estimates: small_m %.1f us -- %s; owner_tiles %.1f us, %s)\n", who.c_str(),
              to_string(gemm_rs_policy::choose_engine(e.of(method), small.estimate)), small.estimate * 1e6,
              small.why.c_str(), e.of(method) * 1e6, to_string(method));
}

namespace {

int plan(PlanGemmRs a, const sim::CostModel& cost, const CLI::App& app) {
  const std::string across = gemm_rs_across_nodes(a.config.op, a.problem.nodes, app);
  resolve_fp8_plan_tile(a, app, GemmRs::kernel_name(DType::kE4m3));
  const sim::GemmRsPrediction r = sim::predict_gemm_rs(a.problem, a.config, cost);
  const auto& p = a.problem;
  const GemmRsConfig& op = a.config.op;
  std::cout << "tilelink plan gemm_rs: predicted, not measured (cost model: " << cost.gemm_flops(p.dtype) / 1e12
            << " TFLOP/s " << to_string(p.dtype) << ", "
            << cost.sms << " SMs, NVLink " << cost.nvlink_bandwidth / 1e9 << " GB/s per rank)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  m=" << p.m << "  n=" << p.n << "  k=" << p.k
            << "  bm=" << a.config.bm << "  bn=" << a.config.bn << "  reduce_ctas=" << r.reduce_ctas << (op.reduce_blocks == 0 ? " (automatic)" : "")
            << "  granularity=" << to_string(op.granularity) << "  scatter=" << to_string(r.scatter)
            << (op.scatter == GemmRsScatter::kAuto ? " (automatic)" : "")
            << "  reducer=" << to_string(r.reducer) << (op.reducer == GemmRsReducer::kAuto ? " (automatic)" : "")
            << (r.scatter == GemmRsScatter::kEpiloguePush ? std::string("  push_notify=") + to_string(op.push_notify)
                                                            : std::string())
            << "  band=" << (a.config.band == 0 ? std::string("auto") : std::to_string(a.config.band))
            << (a.config.tile_rate != 1.0 ? "  tile_rate=" + std::to_string(a.config.tile_rate) : std::string())
            << (a.config.deferred_sum_waves > 0
                    ? "  deferred_sums=" + std::to_string(a.config.deferred_sum_waves) +
                          " waves (a what-if: no kernel runs it; the fused rows model a design, not the op)"
                    : std::string())
            << "\n"
            << across << "\n";
  // With the reducer on automatic, the other placements of the sums too (same knobs otherwise; the
  // epilogue's needs a signal per tile and no reduction CTAs), each with the scatter given or, on
  // automatic, pull and push.
  const auto alternatives =
      other_gemm_rs_placements(op, r.scatter, r.reducer, p.world, "fused, ", [&](const GemmRsConfig& other) {
        sim::GemmRsPlanConfig c = a.config;
        c.op = other;
        return sim::predict_gemm_rs(p, c, cost).fused;
      });
  print_plan("plan_gemm_rs", "GEMM+RS, predicted per rank", r, a.out,
             "gemm_rs rank 0, predicted: " + std::to_string(p.world) + " ranks, m=" + std::to_string(p.m) +
                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k),
             alternatives);
  print_gemm_rs_auto(p.world, p.nodes, p.m, p.n, p.k / static_cast<uint32_t>(p.world), r.reducer, r.reduce_ctas,
                     op.push_notify, p.dtype, cost, "op");
  return 0;
}

void add_plan_options(CLI::App* app, PlanGemmRs& a) {
  add_plan_gemm_shape(app, a.problem, a.config, "rows of C", "columns of C", "inner dimension over all ranks");
  add_enum_option(app, "--dtype", a.problem.dtype, {DType::kBf16, DType::kE4m3},
                  "operands: bf16, or e4m3 (the FP8 GEMM rate, --fp8-tflops; the partials stay bf16)");
  app->add_option("--reduce-blocks", a.config.op.reduce_blocks,
                  "CTAs of the reduction; 0 = the op's rule for one rank per GPU")
      ->capture_default_str();
  add_scatter(app, a.config.op.scatter, "pull, push, ce (needs --granularity row or rank) or auto (the op's rule for "
                                        "one rank per GPU)");
  app->add_option("--band", a.config.band, "tile rows per band of the compute order; 0 = the op's rule")
      ->capture_default_str();
  app->add_option("--tile-rate", a.config.tile_rate,
                  "the GEMM's rate with this tile (--bm, --bn) against the cost model's dense rate, as measured at "
                  "world 1 (bench gemm_rs --world 1 --kernel ...: fused over cuBLAS); 1 = the same")
      ->capture_default_str();
  add_push_notify(app, a.config.op.push_notify);
  add_granularity(app, a.config.op.granularity, "signal per tile, row (of tiles) or rank");
  add_reducer(app, a.config.op.reducer, kReducerHelp);
  app->add_option("--deferred-sums", a.config.deferred_sum_waves,
                  "what-if, not built: with the epilogue reducer, each own tile's sum as a unit of its own this many "
                  "waves after the tile, the last sums sliced over every CTA; 0 = the op as built")
      ->capture_default_str();
}

const GemmOp<tb::GemmRsBenchOptions> kOp{
    "gemm_rs", true, gemm_rs_paper_shapes, kM, kN, kK, add_knobs,
    "FP8, against cuBLASLt's e4m3 GEMM; the partials stay bf16, the reduction fp32"};

// ---- tune and trace ----------------------------------------------------------------------------
TraceResult trace_gemm_rs(const TraceOptions<tb::GemmRsBenchOptions>& o) {
  using namespace tilelink::bench;
  GemmRsSetup s(o.op.world, o.op.m, o.op.n, o.op.k, o.op.config, o.op.seed, "trace gemm_rs");
  if (o.op.dtype == DType::kE4m3) s.use_fp8(o.op.scaling, "trace gemm_rs");
  GemmRsArguments args = s.args;  // the fused path's timeline (the others notify no tiles)
  args.config.method = OpMethod::kFused;
  if (args.config.engine == GemmRsEngine::kSmallM) {
    throw InvalidArgument("trace gemm_rs: --engine small_m runs GEMM+AR's engine, whose timeline `tilelink trace "
                          "gemm_ar` renders; expected owner_tiles or auto (traced as owner_tiles)");
  }
  args.config.engine = GemmRsEngine::kOwnerTiles;  // the timeline the checks below read
  GemmRs op(s.world, s.heap, s.signals, args, "trace.gemm_rs");
  TraceResult result;
  const bool gated = record_traced_call(s.world, op, o.capacity, o.op.timing, result);

  check_gemm_rs(result.records.begin(), result.records.end(), s.w, s.world.mode() == WorldMode::kVirtual, result);
  result.checked = gemm_rs_checked(s.world.mode() == WorldMode::kVirtual);
  result.config = "kernel " + op.kernel_name() + ", scatter " + to_string(op.config().scatter) + ", signal per " +
                  to_string(op.config().granularity) + ", " +
                  (op.plan().reducer == GemmRsReducer::kEpilogue
                       ? std::string("sums in the GEMM's epilogue")
                       : std::to_string(op.reduce_blocks()) + " reduction CTAs per rank") +
                  (op.plan().scatter == GemmRsScatter::kEpiloguePush
                       ? std::string(", push notify ") + (op.plan().defer_push_notify ? "deferred" : "immediate")
                       : std::string()) + ", swizzle " + std::to_string(op.swizzle()) + provenance(op.tuned_from(), gated);
  const GemmRsFusedPlan& plan = op.plan();
  sim::GemmRsTraceShape shape;
  shape.world = plan.world;
  shape.m_tiles = plan.m_tiles();
  shape.n_tiles = plan.n_tiles();
  shape.bm = plan.bm;
  shape.bn = plan.bn;
  shape.push = plan.scatter == GemmRsScatter::kEpiloguePush;
  shape.deferred = shape.push && plan.defer_push_notify;
  result.rates = sim::describe(sim::gemm_rs_trace_rates(result.records, shape), shape);
  return result;
}

}  // namespace

tb::Table tune_gemm_rs(const TuneOptions<tb::GemmRsBenchOptions>& options, std::ostream& progress) {
  using namespace tilelink::bench;
  const tb::GemmRsBenchOptions& o = options.op;
  GemmRsSetup setup(o.world, o.m, o.n, o.k, GemmRsConfig{}, o.seed, "tune gemm_rs");
  if (o.dtype == DType::kE4m3) setup.use_fp8(o.scaling, "tune gemm_rs");
  World& world = setup.world;
  world.synchronize();
  auto args_of = [&](const GemmRsConfig& config) {
    GemmRsArguments a = setup.args;
    a.config = config;
    return a;
  };
  const std::vector<GemmRsConfig> compute = gemm_rs_compute_candidates();
  GemmRsTuneShape shape{o.world,   world.sm_budget(0), setup.m, setup.n, setup.k_local,
                        world.mode() != WorldMode::kVirtual, o.dtype, o.scaling};
  shape.affine_heap = setup.heap.affine_stride() != 0;
  size_t step = 0;
  const GemmRsConfig best = two_stage_search(
      compute, options.top, o.world,
      [&](const GemmRsConfig& base) { return gemm_rs_comm_candidates(base, shape, options.top); },
      whole_op_timer<GemmRs>(setup, args_of, o.timing), progress, &step);

  GemmRsConfig automatic;
  automatic.use_tune_cache = false;
  bool gated = true;
  // The engines round differently: each rank's partial (owner tiles) or each K slice (small M).
  const std::vector<Stats> t = retime_and_check<GemmRs>(
      world, setup.heap, setup.signals, args_of(best), args_of(automatic), o.timing, setup.out, setup.block_elems,
      "tune gemm_rs", &gated, [&](const GemmRs& op) {
        return o.world * (op.small_m() != nullptr ? double(op.small_m()->splits()) : 1.0);
      });

  Table table = tune_table("gemm_rs",
                           "tune GEMM+RS, " + ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                               " n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) + " (" +
                               std::to_string(setup.k_local) + " per rank), " +
                               (o.dtype == DType::kE4m3 ? std::string("e4m3, ") + to_string(o.scaling) + " scaling"
                                                        : std::string("bf16")),
                           automatic, best, t, step,
                           std::to_string(compute.size()) +
                               " compute, then the communication variants the plan model ranked best",
                           o.timing, gated, kSameAsAutomatic);
  store_tuned(options.cache, gemm_rs_tune_key(world, args_of(best)), best, automatic, t, table);
  return table;
}

// ---- tune --dry-run (also tune mlp's fc2) -------------------------------------------------------

int dry_run_gemm_rs(const TuneSearch& search, int world, const std::vector<Mnk>& shapes, DType dtype,
                    Fp8Scaling scaling) {
  for (const Mnk& s : shapes) {
    const GemmRsTuneShape shape{world,        search.sms / world, s.m, s.n, s.k / static_cast<uint32_t>(world),
                                /*one_rank_per_gpu=*/false, dtype, scaling};
    print_tune_candidates<GemmRsConfig>(
        tune_header("gemm_rs", world, search.sms, s, dtype, scaling), {{"compute", gemm_rs_compute_candidates()}},
        [&](const GemmRsConfig& base) { return gemm_rs_comm_candidates(base, shape, search.top); });
  }
  return 0;
}

void register_gemm_rs(Tool& tool) {
  add_gemm_bench(
      tool, kOp, "time tilelink::GemmRs against cuBLAS, non-overlapped and decomposed baselines", tb::bench_gemm_rs,
      [](Command&) {}, [](const tb::GemmRsBenchOptions&, const std::vector<Mnk>&, const std::vector<tb::Table>&) {});
  add_gemm_tune(tool, kOp,
                "GEMM+RS: swizzle, then the scatter x signal granularity x reduction CTAs variants the plan model "
                "ranks best",
                dry_run_gemm_rs, tune_gemm_rs);
  add_gemm_trace(tool, kOp,
                 "GEMM+RS: each GEMM tile's epilogue and notify; the reduction blocks' waits and per-tile reductions",
                 trace_gemm_rs);
  add_plan_command<PlanGemmRs>(tool, "gemm_rs", "GEMM+RS: rank r gets its row block of sum_q A_q * B_q",
                               add_plan_options, plan);
}

}  // namespace tilelink::tool
