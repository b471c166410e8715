// `tilelink bench|tune|trace|plan ag_gemm`: AG+GEMM (tilelink::AgGemm), the column-parallel
// linear layer with its all-gather hidden under the GEMM.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/ag_gemm.hpp"
#include "bench/ag_gemm_setup.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/op_commands.hpp"
#include "tools/output.hpp"
#include "tools/tool_gemms.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {
namespace {

constexpr const char* kM = "rows of A and C (all ranks)";
constexpr const char* kN = "columns of C over all ranks (each rank computes n / world)";
constexpr const char* kK = "inner dimension";

// The op's knobs (bench and trace): any of them given turns the tune cache off.
void add_knobs(CLI::App* app, AgGemmConfig& c, CLI::Option_group*& knobs) {
  CLI::Option_group* g = knob_group(app, knobs);
  add_enum_option(g, "--resource", c.comm.resource, {CommResource::kCopyEngine, CommResource::kSm},
                  "all-gather by ce (copy engine) or sm (CTAs)");
  add_enum_option(g, "--method", c.comm.method, {AgMethod::kPull, AgMethod::kPush}, "pull or push");
  add_enum_option(g, "--order", c.comm.order, {CommOrder::kFullMesh, CommOrder::kRing}, "mesh or ring");
  add_enum_option(g, "--path", c.comm.path, {DataPath::kLdSt, DataPath::kBulk}, "SM data path: ldst or bulk");
  g->add_option("--comm-rows", c.comm.comm_rows,
                "rows per communication tile; 0 = automatic (128 on SMs, >= 8 MiB tiles on the copy engine)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 30));
  g->add_option("--blocks", c.comm.num_blocks, "all-gather CTAs per rank with --resource sm; 0 = budget / 8")
      ->capture_default_str();
  g->add_option("--gemm-sms", c.gemm_sms,
                "GEMM CTAs per rank; 0 = the rest of the budget less 2 SMs of slack (world > 1)")
      ->capture_default_str();
  g->add_option("--swizzle", c.swizzle,
                "tile rasterization swizzle: 1, 2, 4 or 8; 0 = the widest band inside one shard")
      ->capture_default_str()
      ->check(CLI::IsMember({0u, 1u, 2u, 4u, 8u}));
  g->add_option("--kernel", c.kernel, "GEMM kernel configuration; default: the first compiled one");
}

// ---- bench ----------------------------------------------------------------------------------------

// The median time of a GEMM op table's row whose variant starts with `prefix` (NaN if none).
double row_time_us(const tb::Table& table, const std::string& prefix) {
  for (const auto& row : table.rows) {
    const auto* name = std::get_if<std::string>(&row.front());
    if (name != nullptr && name->rfind(prefix, 0) == 0) return std::get<double>(row[1]);
  }
  return std::nan("");
}

// `bench ag_gemm --explain` (the main job, scripts/bench.sh): after the measured tables, what
// they mean where they were measured. On virtual ranks: what the ranks share, the fused kernel
// against cuBLAS at world 1 (measured now, same shapes), and the plan model's prediction for the
// same world of real GPUs of this kind over NVLink -- labelled as a prediction. One rank per GPU:
// the prediction next to the measurement. Ends with one quotable line per shape.
void explain(const tb::AgGemmBenchOptions& o, const std::vector<Mnk>& shapes,
             const std::vector<tb::Table>& measured) {
  const bool virtual_ranks = !tb::ranks_on_gpus() && o.world > 1;
  std::vector<double> world1(shapes.size(), std::nan(""));
  if (virtual_ranks) {
    std::cout << "\n== what the table above means ==\n"
              << o.world << " virtual ranks share ONE GPU: each rank gets " << tb::query_device(0).sms / o.world
              << " SMs, and its \"links\" to the others are that GPU's own HBM, which the ranks' GEMMs also read.\n"
              << "Overlap hides the all-gather's time, but the all-gather still takes HBM bandwidth and SMs from\n"
              << "the GEMMs of the same GPU, so on virtual ranks the fused op can lose to the non-overlapped chain.\n"
              << "They test correctness; the kernel's speed is the world-1 result; the gain on real GPUs is predicted.\n"
              << "Measuring world 1 (one rank, the whole GPU, nothing to communicate) on the same shapes...\n";
    for (size_t i = 0; i < shapes.size(); ++i) {
      tb::AgGemmBenchOptions one = o;
      one.world = 1;
      one.m = shapes[i].m;
      one.n = shapes[i].n;
      one.k = shapes[i].k;
      one.timing = {std::min(o.timing.warmup, 3), std::min(o.timing.iters, 10)};
      const tb::Table t = tb::bench_ag_gemm(one);
      world1[i] = row_time_us(t, "cuBLAS GEMM") / row_time_us(t, "tilelink fused");
    }
  }
  const sim::CostModel cost;  // an H200 with NVLink: the model's defaults, from this repository's measurements
  std::cout << "\n== " << (virtual_ranks ? "predicted" : "predicted next to measured") << ": " << o.world
            << " H200s over NVLink (tilelink plan ag_gemm; a model, not a measurement) ==\n";
  std::vector<sim::AgGemmPrediction> predicted;
  for (const Mnk& s : shapes) {
    sim::AgGemmProblem p;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.world = o.world;
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
                shapes[i].k, tb::ranks_phrase(o.world).c_str(), non / fused, ideal / fused);
    if (virtual_ranks) std::printf(" | world 1: %.2fx cuBLAS", world1[i]);
    std::printf(" | predicted %d x H200: %.2fx non-overlapped, %.2fx ideal\n", o.world, r.non_overlapped / r.fused,
                r.ideal / r.fused);
  }
}

// ---- plan ----------------------------------------------------------------------------------------

using PlanAgGemm = PlanArgs<sim::AgGemmProblem, sim::AgGemmPlanConfig>;

constexpr uint32_t kPlanSmBlocks = 16;  // the plan's SM all-gather, unless --blocks says

int plan(PlanAgGemm a, const sim::CostModel& cost) {
  AllGatherConfig& comm = a.config.op.comm;
  resolve_plan_blocks(comm, kPlanSmBlocks);
  const sim::AgGemmPrediction r = sim::predict_ag_gemm(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan ag_gemm: predicted, not measured (cost model: " << cost.gemm_flops(p.dtype) / 1e12
            << " TFLOP/s " << to_string(p.dtype) << ", "
            << cost.sms << " SMs, NVLink " << cost.nvlink_bandwidth / 1e9 << " GB/s, network "
            << cost.network_bandwidth / 1e9 << " GB/s per GPU)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  m=" << p.m << "  n=" << p.n << "  k=" << p.k
            << (p.dtype == DType::kE4m3 ? std::string("  e4m3 ") + to_string(p.scaling) + " scaling" : std::string())
            << "  bm=" << a.config.bm << "  bn=" << a.config.bn << "  comm_rows=" << comm.comm_rows
            << "  resource=" << to_string(comm.resource)
            << (comm.resource == CommResource::kSm ? " (" + std::to_string(comm.num_blocks) + " CTAs)" : "")
            << "  order=" << to_string(comm.order) << "\n\n";
  print_plan("plan_ag_gemm", "AG+GEMM, predicted per rank", r, a.out,
             "ag_gemm rank 0, predicted: " + std::to_string(p.world) + " ranks, m=" + std::to_string(p.m) +
                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  // What AgGemmConfig::method = auto runs on such a world without a tune-cache entry: the op's own
  // estimate (ag_gemm_policy::estimate_methods, the H200 rates), beside the timeline above.
  ag_gemm_policy::MethodShape shape;
  shape.world = static_cast<uint32_t>(p.world);
  shape.m_per_rank = p.m / static_cast<uint32_t>(p.world);
  shape.n = p.n / static_cast<uint32_t>(p.world);
  shape.k = p.k;
  shape.tile_m = a.config.bm;
  shape.tile_n = a.config.bn;
  shape.gemm_sms = cost.sms - (p.world > 1 ? 2 : 0) - (comm.resource == CommResource::kSm ? int(comm.num_blocks) : 0);
  shape.one_rank_per_gpu = true;
  if (p.dtype == DType::kE4m3) {
    shape.fp8 = true;
    shape.row_bytes = fp8_row_pitch(p.k, p.scaling);
  }
  const ag_gemm_policy::MethodEstimates e = ag_gemm_policy::estimate_methods(shape);
  std::printf("op method auto: %s (the op's estimate, one rank per GPU on one node's NVLink: fused %.1f, decomposed %.1f, "
              "non-overlapped %.1f us; a tune-cache entry would decide instead)\n",
              to_string(ag_gemm_policy::choose_method(OpMethod::kAuto, e)), e.fused * 1e6, e.decomposed * 1e6,
              e.non_overlapped * 1e6);
  return 0;
}

void add_plan_options(CLI::App* app, PlanAgGemm& a) {
  add_plan_gemm_shape(app, a.problem, a.config, "rows of A and C", "columns of C over all ranks", kK);
  add_plan_all_gather(app, a.config.op.comm, kPlanSmBlocks);
  add_enum_option(app, "--order", a.config.op.comm.order, {CommOrder::kFullMesh, CommOrder::kRing}, "mesh or ring");
  add_enum_option(app, "--dtype", a.problem.dtype, {DType::kBf16, DType::kE4m3},
                  "operands: bf16, or e4m3 (the FP8 GEMM rate, --fp8-tflops, and packed e4m3 rows in the all-gather)");
  add_enum_option(app, "--scaling", a.problem.scaling, {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock},
                  "e4m3 scales (the row and block scales travel in the rows: a few bytes more per row)");
}

const GemmOp<tb::AgGemmBenchOptions> kOp{
    "ag_gemm", false, ag_gemm_paper_shapes, kM, kN, kK, add_knobs,
    "FP8, against cuBLASLt's e4m3 GEMM; the all-gather moves packed e4m3 rows with their scales"};

void add_bench(Tool& tool) {
  auto explained = std::make_shared<bool>(false);  // --explain: the main job's reading aid
  add_gemm_bench(
      tool, kOp, "time tilelink::AgGemm against cuBLAS, non-overlapped and decomposed baselines",
      tb::bench_ag_gemm,
      [explained](Command& c) {
        c.app->add_flag("--explain", *explained,
                        "after the tables: what they mean here (virtual ranks: the world-1 result against cuBLAS), "
                        "the plan model's prediction for --world H200s over NVLink, and one summary line per shape");
      },
      [explained](const tb::AgGemmBenchOptions& o, const std::vector<Mnk>& shapes,
                  const std::vector<tb::Table>& tables) {
        if (*explained) explain(o, shapes, tables);
      });
}

// ---- tune and trace ----------------------------------------------------------------------------
TraceResult trace_ag_gemm(const TraceOptions<tb::AgGemmBenchOptions>& options) {
  using namespace tilelink::bench;
  const char* where = "trace_ag_gemm";
  const tb::AgGemmBenchOptions& o = options.op;
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size (" + std::to_string(o.world) + ")");
  TL_REQUIRE(o.n % o.world == 0, where, "n", o.n, "a multiple of the world size (" + std::to_string(o.world) + ")");
  AgGemmSetup s(o.world, o.m, o.n, o.k, o.seed, o.config.comm.comm_rows, o.dtype, o.scaling);
  AgGemmArguments args = s.args(o.config);
  args.config.method = OpMethod::kFused;  // the trace records the fused kernel's tiles
  if (const std::string why = AgGemm::can_implement(s.world, s.heap, args); !why.empty()) {
    throw InvalidArgument("trace ag_gemm: " + why);
  }
  AgGemm op(s.world, s.heap, s.signals, args, "trace.ag_gemm");
  TraceResult result;
  const bool gated = record_traced_call(s.world, op, options.capacity, o.timing, result);

  check_ag_gemm(result.records.begin(), result.records.end(), result);
  result.checked = kAgGemmChecked;
  result.config = "kernel " + op.kernel_name() + ", " + to_string(op.config().comm.resource) + " all-gather, " +
                  std::to_string(op.gemm_ctas(0)) + " GEMM CTAs per rank" + provenance(op.tuned_from(), gated);
  return result;
}

}  // namespace

tb::Table tune_ag_gemm(const TuneOptions<tb::AgGemmBenchOptions>& options, std::ostream& progress) {
  using namespace tilelink::bench;
  const char* where = "tune_ag_gemm";
  const tb::AgGemmBenchOptions& o = options.op;
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size " + std::to_string(o.world));
  TL_REQUIRE(o.n % o.world == 0 && (o.n / o.world) % 8 == 0, where, "n", o.n,
             "a multiple of 8 * world (" + std::to_string(8 * o.world) + "): N is split over the ranks");
  AgGemmSetup setup(o.world, o.m, o.n, o.k, o.seed, 128, o.dtype, o.scaling);
  World& world = setup.world;
  world.synchronize();

  const std::vector<AgGemmConfig> compute = ag_gemm_compute_candidates(AgGemm::kernel_names(o.dtype, o.scaling));
  AgGemmTuneShape shape{o.world, world.sm_budget(0), setup.m_per_rank, setup.n_local, setup.k};
  shape.dtype = o.dtype;
  shape.scaling = o.scaling;
  size_t step = 0;
  const AgGemmConfig best = two_stage_search(
      compute, options.top, o.world,
      [&](const AgGemmConfig& base) { return ag_gemm_comm_candidates(base, shape, options.top); },
      whole_op_timer<AgGemm>(setup, [&](const AgGemmConfig& c) { return setup.args(c); }, o.timing), progress,
      &step);

  // The winner against the automatic configuration, interleaved; then its result against cuBLAS
  // (FP8: against the automatic configuration's).
  AgGemmConfig automatic;
  automatic.use_tune_cache = false;
  const bool fp8 = o.dtype == DType::kE4m3;
  const std::string operands = fp8 ? std::string("e4m3, ") + to_string(o.scaling) + " scaling" : "bf16";
  if (fp8) {
    bool gated = true;
    const std::vector<Stats> t = retime_and_check<AgGemm>(world, setup.heap, setup.signals, setup.args(best),
                                                          setup.args(automatic), o.timing, setup.c, setup.c_elems,
                                                          "tune ag_gemm", &gated);
    Table table = tune_table("ag_gemm",
                             "tune AG+GEMM, " + ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                                 " n=" + std::to_string(o.n) + " (" + std::to_string(setup.n_local) +
                                 " per rank) k=" + std::to_string(o.k) + ", " + operands,
                             automatic, best, t, step,
                             std::to_string(compute.size()) +
                                 " compute, then the communication variants the plan model ranked best",
                             o.timing, gated, kSameAsAutomatic);
    store_tuned(options.cache, ag_gemm_tune_key(world, setup.args(best)), best, automatic, t, table);
    return table;
  }
  AgGemm tuned(world, setup.heap, setup.signals, setup.args(best), "tune.best");
  AgGemm plain(world, setup.heap, setup.signals, setup.args(automatic), "tune.default");
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(world, o.timing.warmup, 2 * o.timing.iters,
                                                  {[&] { plain.run(); }, [&] { tuned.run(); }}, &gated);
  tuned.run();
  world.synchronize();
  Cublas cublas(world);
  uint64_t far = 0;
  std::vector<DeviceBuffer> ref;
  for (int r = 0; r < setup.w; ++r) {
    world.set_device(r);
    ref.emplace_back(setup.c_elems * 2, world.device(r));
    cublas_gemm(cublas.handles[r], setup.gathered.data(r), setup.b[r].get(), ref.back().get(), setup.m, setup.n_local,
                setup.k);
    far += count_far(setup.c[r].get(), ref.back().get(), setup.c_elems, world.compute_stream(r));
  }
  if (far != 0) {
    throw Error("tune ag_gemm: the best configuration's C differs from cuBLAS in " + std::to_string(far) +
                " elements");
  }

  Table table = tune_table("ag_gemm",
                           "tune AG+GEMM, " + ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                               " n=" + std::to_string(o.n) + " (" + std::to_string(setup.n_local) +
                               " per rank) k=" + std::to_string(o.k) + ", bf16",
                           automatic, best, t, step,
                           std::to_string(compute.size()) +
                               " compute, then the communication variants the plan model ranked best",
                           o.timing, gated,
                           "the tuned configuration's C of every rank equals cuBLAS within bf16 tolerance");
  store_tuned(options.cache, ag_gemm_tune_key(world, setup.args(best)), best, automatic, t, table);
  return table;
}


// ---- tune --dry-run (also tune mlp's fc1) -------------------------------------------------------

int dry_run_ag_gemm(const TuneSearch& search, int world, const std::vector<Mnk>& shapes, DType dtype,
                    Fp8Scaling scaling) {
  const uint32_t w = static_cast<uint32_t>(world);
  for (const Mnk& s : shapes) {
    const AgGemmTuneShape shape{world, search.sms / world, s.m / w, s.n / w, s.k, dtype, scaling};
    print_tune_candidates<AgGemmConfig>(
        tune_header("ag_gemm", world, search.sms, s, dtype, scaling),
        {{"compute", ag_gemm_compute_candidates(AgGemm::kernel_names(dtype, scaling))}},
        [&](const AgGemmConfig& base) { return ag_gemm_comm_candidates(base, shape, search.top); });
  }
  return 0;
}

void register_ag_gemm(Tool& tool) {
  add_bench(tool);
  add_gemm_tune(tool, kOp, "AG+GEMM: kernel x swizzle, then the communication variants the plan model ranks best",
                dry_run_ag_gemm, tune_ag_gemm);
  add_gemm_trace(tool, kOp,
                 "AG+GEMM: each GEMM tile's wait, loads and epilogue; the SM all-gather's waits, copies and notifies",
                 trace_ag_gemm);
  auto app = std::make_shared<CLI::App*>(nullptr);  // the command's, for what the user gave
  add_plan_command<PlanAgGemm>(
      tool, "ag_gemm", "AG+GEMM: C = allgather(A) * B, column-parallel",
      [app](CLI::App* a, PlanAgGemm& args) {
        *app = a;
        add_plan_options(a, args);
      },
      [app](PlanAgGemm args, const sim::CostModel& cost) {
        resolve_fp8_plan_tile(args, **app, AgGemm::kernel_names(DType::kE4m3, args.problem.scaling).front());
        return plan(args, cost);
      });
}

}  // namespace tilelink::tool
