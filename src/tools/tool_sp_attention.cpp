// `tilelink bench|tune|trace|plan sp_attention`: sequence-parallel attention
// (tilelink::SpAttention), the K/V all-gather overlapped with flash attention.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/sp_attention.hpp"
#include "bench/sp_attention_setup.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/ops/attention/sp_attention_policy.hpp"
#include "tilelink/sim/sp_attention_sim.hpp"
#include "tilelink/tune/sp_attention_tune.hpp"
#include "tools/command.hpp"
#include "tools/op_commands.hpp"
#include "tools/output.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {
namespace {

// The searches' view of a bench problem on ranks of `sm_budget` SMs (pure: the dry runs need no
// GPU).
SpAttentionTuneShape sp_attention_tune_shape(const tb::SpAttentionBenchOptions& o, int sm_budget) {
  using namespace tilelink::bench;
  const sim::SpAttentionProblem problem{.seq = o.seq, .q_heads = o.q_heads, .kv_heads = o.kv_heads,
                                        .head_dim = o.head_dim, .causal = o.causal, .world = o.world};
  return {problem, sm_budget, o.config.layout};
}

// The problem as every verb takes it: --seq, --q-heads, --kv-heads, --head-dim (`head_dims`: the
// values allowed), --non-causal and --layout.
struct Shape {
  uint32_t& seq;
  uint32_t& q_heads;
  uint32_t& kv_heads;
  uint32_t& head_dim;
  bool& causal;
  SeqLayout& layout;
};

void add_shape(CLI::App* app, const Shape& s, const CLI::Validator& head_dims, const char* head_dim_help) {
  app->add_option("--seq", s.seq, "tokens over all ranks (a multiple of the world size)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--q-heads", s.q_heads, "query heads")->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--kv-heads", s.kv_heads, "K/V heads (GQA: q-heads a multiple of it)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--head-dim", s.head_dim, head_dim_help)->capture_default_str()->check(head_dims);
  bool& causal = s.causal;
  app->add_flag_callback("--non-causal", [&causal] { causal = false; }, "no causal mask");
  add_enum_option(app, "--layout", s.layout, {SeqLayout::kContiguous, SeqLayout::kZigZag},
                  "sequence sharding: contiguous or zigzag");
}

// bench, trace and tune sp_attention: the problem, the knobs (not tune), timing and seed.
struct RunArgs : RunArgsBase<tb::SpAttentionBenchOptions> {
  void add_to(Command& c, Timed timed) {
    add_world(c.app, o.world);
    add_shape(c.app, {o.seq, o.q_heads, o.kv_heads, o.head_dim, o.causal, o.config.layout}, CLI::IsMember({64, 128}),
              "head dimension: 64 or 128");
    if (with_knobs) {
      CLI::Option_group* g = knob_group(c.app, knobs);
      SpAttentionConfig& k = o.config;
      add_enum_option(g, "--resource", k.comm.resource, {CommResource::kCopyEngine, CommResource::kSm},
                      "K/V all-gather on ce (copy engine) or sm (SM pull)");
      g->add_option("--comm-rows", k.comm.comm_rows, "tokens per K/V chunk, a multiple of 128 (0: automatic)")
          ->capture_default_str();
      g->add_option("--blocks", k.comm.num_blocks, "CTAs of the SM all-gather (0: automatic)")->capture_default_str();
      g->add_option("--attention-sms", k.attention_sms, "CTAs of the attention kernel per rank (0: automatic)")
          ->capture_default_str();
      g->add_flag("--local-first", k.local_first,
                  "the fused kernel folds every item's own shard before any remote chunk");
      g->add_option("--section-heads", k.section_kv_heads,
                    "kv heads whose items run together, a divisor of --kv-heads (0: automatic, as many as fit in L2)")
          ->capture_default_str();
    }
    add_timing(c.app, o.timing, timed);
    c.seed = add_seed(c.app, o.seed);
  }
  tb::SpAttentionBenchOptions resolved() const {
    tb::SpAttentionBenchOptions r = o;
    r.config.use_tune_cache = !any_knob(knobs);
    return r;
  }
};

std::string mask_of(bool causal) { return causal ? "causal" : "non-causal"; }

std::string describe_problem(const tb::SpAttentionBenchOptions& o) {
  return "seq " + std::to_string(o.seq) + ", " + std::to_string(o.q_heads) + "/" + std::to_string(o.kv_heads) +
         " heads, head dim " + std::to_string(o.head_dim) + ", " + mask_of(o.causal) + ", " +
         to_string(o.config.layout);
}

// ---- tune: the two-stage search of tune/sp_attention_tune.hpp ----------------------------------

int dry_run(const tb::SpAttentionBenchOptions& o, const TuneSearch& search) {
  const SpAttentionTuneShape shape = sp_attention_tune_shape(o, search.sms / o.world);
  print_tune_candidates<SpAttentionConfig>(
      "== tune sp_attention (dry run), world " + std::to_string(o.world) + ", seq=" + std::to_string(o.seq) +
          ", heads " + std::to_string(o.q_heads) + "/" + std::to_string(o.kv_heads) + ", head dim " +
          std::to_string(o.head_dim) + ", " + mask_of(o.causal) + ", " + to_string(o.config.layout) + ", " +
          std::to_string(shape.sm_budget) + " SMs per rank ==\n",
      {{"compute", sp_attention_compute_candidates(o.kv_heads, shape.layout)}},
      [&](const SpAttentionConfig& base) { return sp_attention_comm_candidates(base, shape, search.top); });
  return 0;
}

// ---- plan ----------------------------------------------------------------------------------------

struct PlanSpAttention : PlanArgs<sim::SpAttentionProblem, sim::SpAttentionPlanConfig> {
  double attention_tflops = 0;
};

constexpr uint32_t kPlanSmBlocks = 8;  // the plan's SM all-gather, unless --blocks says

int plan(PlanSpAttention a, const sim::CostModel& cost) {
  AllGatherConfig& comm = a.config.op.comm;
  resolve_plan_blocks(comm, kPlanSmBlocks);
  if (a.attention_tflops > 0) a.config.attention_flops = a.attention_tflops * 1e12;
  const sim::SpAttentionPrediction r = sim::predict_sp_attention(a.problem, a.config, cost);
  const auto& p = a.problem;
  std::cout << "tilelink plan sp_attention: predicted, not measured (attention at " << a.config.attention_flops / 1e12
            << " TFLOP/s per GPU, a planning figure)\n"
            << "world=" << p.world << "  nodes=" << p.nodes << "  seq=" << p.seq << "  heads=" << p.q_heads << "/"
            << p.kv_heads << "  head_dim=" << p.head_dim << "  " << mask_of(p.causal)
            << "  layout=" << to_string(a.config.op.layout) << "  bq=" << a.config.bq
            << "  K/V chunk=" << comm.comm_rows << " tokens  items=" << r.items << "  CTAs=" << r.ctas << "  resource=" << to_string(comm.resource)
            << "\n\n";
  print_plan("plan_sp_attention", "sequence-parallel attention, predicted per rank", r, a.out,
             "tilelink plan sp_attention, rank 0 (predicted)");
  // What SpAttentionConfig::method = auto runs on such a world without a tune-cache entry: the
  // op's own estimate (sp_attention_policy::estimate_methods, the H200 rates), beside the above.
  sp_attention_policy::MethodShape shape;
  shape.world = static_cast<uint32_t>(p.world);
  shape.flops = r.flop;
  shape.shard_bytes = double(p.seq / static_cast<uint32_t>(p.world)) * p.kv_heads * p.head_dim * 2 * p.element_bytes;
  shape.ctas = static_cast<int>(r.ctas);
  shape.budget = cost.sms;
  const sp_attention_policy::MethodEstimates e = sp_attention_policy::estimate_methods(shape);
  std::printf("op method auto: %s (the op's estimate at the dense GEMM rate, one rank per GPU on one node's NVLink: "
              "fused %.1f, ring %.1f, non-overlapped %.1f us; a tune-cache entry would decide instead)\n",
              to_string(sp_attention_policy::choose_method(OpMethod::kAuto, e, true)), e.fused * 1e6,
              e.decomposed * 1e6, e.non_overlapped * 1e6);
  return 0;
}

void add_plan_options(CLI::App* app, PlanSpAttention& a) {
  sim::SpAttentionProblem& p = a.problem;
  add_shape(app, {p.seq, p.q_heads, p.kv_heads, p.head_dim, p.causal, a.config.op.layout}, CLI::PositiveNumber,
            "head dimension");
  app->add_option("--bq", a.config.bq, "query rows per work item")->capture_default_str();
  add_plan_all_gather(app, a.config.op.comm, kPlanSmBlocks, "K/V all-gather: ");
  app->add_option("--comm-slowdown", a.config.comm_slowdown,
                  "the all-gather's slowdown under the attention (virtual ranks: measured 2.4 at world 8 by trace "
                  "sp_attention)")
      ->capture_default_str();
  app->add_flag("--local-first", a.config.op.local_first,
                "every CTA folds its items' own shard before any remote chunk (SpAttentionConfig::local_first)");
  app->add_option("--attention-tflops", a.attention_tflops, "flash-attention forward TFLOP/s of one GPU (default 550)");
}

// ---- tune and trace ----------------------------------------------------------------------------
tb::Table tune_sp_attention(const TuneOptions<tb::SpAttentionBenchOptions>& o, std::ostream& progress) {
  using namespace tilelink::bench;
  SpAttentionSetup setup(o.op);
  World& world = setup.world;
  world.synchronize();
  const SeqLayout layout = o.op.config.layout;
  auto args_of = [&](SpAttentionConfig config) {
    SpAttentionArguments a = setup.args;
    config.layout = layout;
    config.use_tune_cache = false;
    a.config = config;
    return a;
  };
  const SpAttentionTuneShape shape = sp_attention_tune_shape(o.op, world.sm_budget(0));
  const std::vector<SpAttentionConfig> compute = sp_attention_compute_candidates(o.op.kv_heads, layout);
  size_t step = 0;
  const SpAttentionConfig best = two_stage_search(
      compute, o.top, o.op.world,
      [&](const SpAttentionConfig& base) { return sp_attention_comm_candidates(base, shape, o.top); },
      whole_op_timer<SpAttention>(setup, args_of, o.op.timing), progress, &step);

  const SpAttentionConfig automatic = args_of(SpAttentionConfig{}).config;
  bool gated = true;
  const std::vector<Stats> t =
      retime_and_check<SpAttention>(world, setup.heap, setup.signals, args_of(best), args_of(automatic),
                                    o.op.timing, setup.out, setup.q_elems, "tune sp_attention", &gated);
  Table table = tune_table(
      "sp_attention",
      "tune SP attention, " + ranks_phrase(o.op.world) + ": seq=" + std::to_string(o.op.seq) + ", q_heads=" +
          std::to_string(o.op.q_heads) + " kv_heads=" + std::to_string(o.op.kv_heads) + " head_dim=" +
          std::to_string(o.op.head_dim) + ", " + (o.op.causal ? "causal" : "non-causal") + ", " + to_string(layout) +
          ", bf16",
      automatic, best, t, step,
      std::to_string(compute.size()) + " L2 sections, then the all-gather x local-pass-first variants the plan "
                                       "model ranked best",
      o.op.timing, gated,
      "the tuned configuration's O of every rank equals the automatic one's within bf16 tolerance");
  store_tuned(o.cache, sp_attention_tune_key(world, args_of(best)), args_of(best).config, automatic, t,
              table);
  return table;
}

TraceResult trace_sp_attention(const TraceOptions<tb::SpAttentionBenchOptions>& o) {
  using namespace tilelink::bench;
  TL_REQUIRE(o.op.world >= 1, "trace_sp_attention", "world", o.op.world, ">= 1");
  TL_REQUIRE(o.op.seq % o.op.world == 0, "trace_sp_attention", "seq", o.op.seq, "a multiple of the world size");
  SpAttentionSetup s(o.op);
  SpAttentionArguments fused_args = s.args;
  fused_args.config.method = OpMethod::kFused;  // the trace records the fused kernel's work items
  SpAttention op(s.world, s.heap, s.signals, fused_args, "trace.sp_attention");
  TraceResult result;
  const bool gated = record_traced_call(s.world, op, o.capacity, o.op.timing, result);

  // Every chunk an item reads: its loads begin after its wait ends. A producer (one thread per
  // CTA) records wait, loads, wait, loads ... in program order; pair them on the clock.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<const TraceRecord*>> producers;
  for (const TraceRecord& r : result.records) {
    if (r.role == static_cast<uint16_t>(TraceRole::kProducer)) producers[{r.rank, r.block}].push_back(&r);
  }
  for (auto& [key, recs] : producers) {
    std::sort(recs.begin(), recs.end(), [](const TraceRecord* a, const TraceRecord* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->kind < b->kind;
    });
    const TraceRecord* wait = nullptr;
    for (const TraceRecord* r : recs) {
      if (r->kind == static_cast<uint32_t>(TraceKind::kWait)) wait = r;
      if (r->kind != static_cast<uint32_t>(TraceKind::kLoad) || wait == nullptr || wait->tile != r->tile) continue;
      ++result.tiles;
      if (r->start_ns < wait->end_ns) ++result.violations;
      wait = nullptr;
    }
  }
  result.checked = "K/V chunk reads whose loads began after their wait ended";
  result.config = std::string(to_string(op.config().comm.resource)) + " all-gather, K/V chunk " +
                  std::to_string(op.plan().ag.map.comm_rows) + " tokens, " + std::to_string(op.attention_ctas(0)) +
                  " attention CTAs per rank" + (op.config().local_first ? ", local pass first" : "") +
                  provenance(op.tuned_from(), gated);
  return result;
}

}  // namespace

void register_sp_attention(Tool& tool) {
  add_bench_command(
      tool, RunArgs{}, "sp_attention",
      "time tilelink::SpAttention (K/V all-gather + flash attention) against the non-overlapped and ring schedules",
      tb::bench_sp_attention, [](Command& c, RunArgs& a) {
        c.app->add_option("--dump", a.o.dump,
                          "write inputs and fused outputs to an existing directory for bench/sdpa_check.py");
      });
  add_tune_command(tool, RunArgs{}, "sp_attention",
                   "SP attention: the kernel's L2 sections, then the K/V all-gather x local-pass-first variants the "
                   "plan model ranks best",
                   "print the candidates and the model's predictions; no GPU needed", dry_run, tune_sp_attention);
  add_trace_command(tool, RunArgs{}, "sp_attention",
                    "SP attention: per work item each K/V chunk's wait and loads, and the store of O; the SM "
                    "all-gather's waits, copies and notifies",
                    "records per rank", trace_sp_attention, describe_problem);
  add_plan_command<PlanSpAttention>(
      tool, "sp_attention", "sequence-parallel attention: K/V all-gather under the flash-attention work items",
      add_plan_options, plan);
}

}  // namespace tilelink::tool
