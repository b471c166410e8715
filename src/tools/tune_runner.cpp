// `tilelink tune ag_gemm|gemm_rs|mlp|moe|sp_attention`: the staged searches of tune/*_tune.hpp,
// timed on the GPUs present (virtual ranks on one GPU, or one rank per GPU with
// TILELINK_RANKS=gpus). Each candidate is the whole op over all ranks, timed as bench times the
// fused op (slowest rank per call, median). The winner and the automatic configuration are then
// re-timed interleaved, the winner's output is checked (AG+GEMM: against cuBLAS; the others:
// against the automatic configuration's), and the winner goes into the tune cache.
#include "tools/tune_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/ag_gemm_setup.hpp"
#include "bench/bench.hpp"
#include "bench/gemm_rs_setup.hpp"
#include "bench/harness.hpp"
#include "bench/moe_setup.hpp"
#include "bench/sp_attention_setup.hpp"
#include "bench/world_choice.hpp"
#include "tools/output.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tilelink/tune/gemm_rs_tune.hpp"
#include "tilelink/tune/moe_tune.hpp"
#include "tilelink/tune/sp_attention_tune.hpp"

namespace tilelink::tool {

using namespace tilelink::bench;
namespace {

// The timer of a search on `setup`'s world (staged_search's time_config): one whole op over all
// ranks with `args_of(config)`, timed as bench times the fused op (median per call); infinity,
// with `why`, when the op refuses them.
template <class Op, class Setup, class ArgsOf>
auto whole_op_timer(Setup& setup, ArgsOf args_of, const TimingOptions& timing) {
  return [&setup, args_of, &timing](const auto& config, std::string* why) {
    const auto args = args_of(config);
    *why = Op::can_implement(setup.world, setup.heap, args);
    if (!why->empty()) return std::numeric_limits<double>::infinity();
    Op op(setup.world, setup.heap, setup.signals, args, "tune.candidate");
    bool gated = true;
    return repeat_interleaved(setup.world, timing.warmup, timing.iters, {[&] { op.run(); }}, &gated)[0].median;
  };
}

// One stage of a search: `candidates(best so far)` gives the configurations to time; `expected`
// is their count for the progress line before the stage runs (0: unknown until then).
template <class Config>
struct SearchStage {
  const char* name;
  std::function<std::vector<Config>(const Config&)> candidates;
  size_t expected;
};

// The stages of a search in turn, each around the fastest configuration so far (the first
// stage's first candidate is the start). `time_config(config, &why)` times one whole op
// (infinity, with `why`, when it refuses the configuration); one progress line each. The very
// first candidate is timed twice and the first time dropped: an idle GPU's clocks ramp up during
// it (measured: the MoE layer's automatic configuration 7935 µs first, 6806 µs re-timed).
// Returns the fastest configuration; `steps` counts the configurations tried.
template <class Config, class TimeConfig>
Config staged_search(const std::vector<SearchStage<Config>>& stages, TimeConfig&& time_config,
                     std::ostream& progress, size_t* steps) {
  size_t total = 0;
  for (const auto& stage : stages) total += stage.expected;
  Config best{};
  bool have_best = false;
  double best_us = std::numeric_limits<double>::infinity();
  for (const auto& stage : stages) {
    const std::vector<Config> candidates = stage.candidates(best);
    total = total - stage.expected + candidates.size();
    for (const Config& c : candidates) {
      std::string why;
      if (!have_best) time_config(c, &why);  // the GPU's warm-up
      const double us = time_config(c, &why);
      progress << "[" << ++*steps << "/" << total << "] " << stage.name << ": " << describe(c) << ": "
               << (why.empty() ? std::to_string(us) + " us" : "refused (" + why + ")") << "\n";
      progress.flush();
      if (!have_best || us < best_us) best_us = us, best = c, have_best = true;
    }
  }
  return best;
}

// The configurations of a ranked candidate list (the plan model's order).
template <class Ranked>
auto configs_of(const std::vector<Ranked>& ranked) {
  std::vector<decltype(Ranked{}.config)> out;
  for (const Ranked& r : ranked) out.push_back(r.config);
  return out;
}

// The two stages of the GEMM searches: every compute candidate, then `comm_candidates(best so
// far)` (the plan model's ranked communication variants around it; `top` + 1 of them at most).
template <class Config, class CommCandidates, class TimeConfig>
Config two_stage_search(const std::vector<Config>& compute, size_t top, int world, CommCandidates&& comm_candidates,
                        TimeConfig&& time_config, std::ostream& progress, size_t* steps) {
  return staged_search<Config>(
      {{"compute", [&](const Config&) { return compute; }, compute.size()},
       {"communication", [&](const Config& best) { return configs_of(comm_candidates(best)); },
        world > 1 ? top + 1 : 1}},
      time_config, progress, steps);
}

// The check of the searches that compare the winner's output with the automatic configuration's.
constexpr const char* kSameAsAutomatic =
    "the tuned configuration's output of every rank equals the automatic one's within bf16 tolerance";

// The result table of a search: the automatic configuration against the tuned one, re-timed
// interleaved (t[0], t[1]), and the check the tuned one passed.
template <class Config>
Table tune_table(const std::string& op, const std::string& title, const Config& automatic, const Config& tuned,
                 const std::vector<Stats>& t, size_t searched, const std::string& stages, const TimingOptions& timing,
                 bool gated, const std::string& check) {
  Table table;
  table.name = "tune_" + op;
  table.title = title;
  table.columns = {{"config", "config", 0},
                   {"time_us", "time µs", 1},
                   {"min_us", "min µs", 1},
                   {"max_us", "max µs", 1},
                   {"speedup", "speedup vs automatic", 3}};
  table.add_row({"automatic: " + describe(automatic), t[0].median, t[0].min, t[0].max, 1.0});
  table.add_row({"tuned: " + describe(tuned), t[1].median, t[1].min, t[1].max, t[0].median / t[1].median});
  table.notes.push_back("searched " + std::to_string(searched) + " configurations (" + stages + "), " +
                        std::to_string(timing.iters) + " timed calls each; final rows: " +
                        std::to_string(2 * timing.iters) + " interleaved calls");
  if (!gated) table.notes.push_back("timing included host enqueue time (a step blocked the host; see bench notes)");
  table.notes.push_back("check: " + check);
  return table;
}

// Stores the winner under `key`, never something slower than the automatic configuration.
template <class Config>
void store_tuned(const std::string& path, const TuneKey& key, const Config& best,
                 const Config& automatic, const std::vector<Stats>& t, Table& table) {
  if (path.empty()) return;
  TuneCache cache = TuneCache::load(path);
  TuneCache::Entry entry;
  entry.op = key.op;
  entry.config = to_config_json(t[1].median <= t[0].median ? best : automatic);
  entry.time_us = std::min(t[0].median, t[1].median);
  entry.default_us = t[0].median;
  entry.date = utc_now();
  cache.put(key, entry);
  cache.save();
  table.notes.push_back(std::string("stored ") +
                        (t[1].median <= t[0].median ? "the tuned configuration"
                                                    : "the automatic configuration (the tuned one was slower re-timed)") +
                        " in " + path + " under '" + key.str() + "'");
}

// The winner (`best`) against the automatic configuration (`automatic`), re-timed interleaved
// (t[0]: automatic, t[1]: tuned); then the winner's output -- every rank's `out`, `elems` bf16 --
// against the automatic one's (the same math in another order or split: bf16 tolerance). Throws
// Error naming `what` when they differ.
template <class Op, class Args>
std::vector<Stats> retime_and_check(World& world, SymmetricHeap& heap, SignalSet& signals, const Args& best,
                                    const Args& automatic, const TimingOptions& timing,
                                    const std::vector<DeviceBuffer>& out, size_t elems, const std::string& what,
                                    bool* gated) {
  Op tuned(world, heap, signals, best, "tune.best");
  Op plain(world, heap, signals, automatic, "tune.default");
  *gated = true;
  const std::vector<Stats> t =
      repeat_interleaved(world, timing.warmup, 2 * timing.iters, {[&] { plain.run(); }, [&] { tuned.run(); }}, gated);
  std::vector<DeviceBuffer> ref;
  for (int r = 0; r < world.size(); ++r) ref.emplace_back(elems * 2, world.device(r));
  plain.run();
  world.synchronize();
  for (int r = 0; r < world.size(); ++r) {
    // On the rank's stream: a device-to-device cudaMemcpy may return before it is done, and the
    // poison must land after the copy.
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemcpyAsync(ref[r].get(), out[r].get(), elems * 2, cudaMemcpyDeviceToDevice,
                                  world.compute_stream(r)));
    TL_CUDA_CHECK(cudaMemsetAsync(out[r].get(), 0xFF, elems * 2, world.compute_stream(r)));  // poison
  }
  tuned.run();
  world.synchronize();
  uint64_t far = 0;
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    far += count_far(out[r].get(), ref[r].get(), elems, world.compute_stream(r));
  }
  if (far != 0) {
    throw Error(what + ": the best configuration's output differs from the automatic one's in " + std::to_string(far) +
                " elements");
  }
  return t;
}

}  // namespace

Table tune_ag_gemm(const TuneOptions<AgGemmBenchOptions>& options, std::ostream& progress) {
  const char* where = "tune_ag_gemm";
  const AgGemmBenchOptions& o = options.op;
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size " + std::to_string(o.world));
  TL_REQUIRE(o.n % o.world == 0 && (o.n / o.world) % 8 == 0, where, "n", o.n,
             "a multiple of 8 * world (" + std::to_string(8 * o.world) + "): N is split over the ranks");
  AgGemmSetup setup(o.world, o.m, o.n, o.k, o.seed, 128);
  World& world = setup.world;
  world.synchronize();

  const std::vector<AgGemmConfig> compute = ag_gemm_compute_candidates(AgGemm::kernel_names());
  const AgGemmTuneShape shape{o.world, world.sm_budget(0), setup.m_per_rank, setup.n_local, setup.k};
  size_t step = 0;
  const AgGemmConfig best = two_stage_search(
      compute, options.top, o.world,
      [&](const AgGemmConfig& base) { return ag_gemm_comm_candidates(base, shape, options.top); },
      whole_op_timer<AgGemm>(setup, [&](const AgGemmConfig& c) { return setup.args(c); }, o.timing), progress,
      &step);

  // The winner against the automatic configuration, interleaved; then its result against cuBLAS.
  AgGemmConfig automatic;
  automatic.use_tune_cache = false;
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

Table tune_gemm_rs(const TuneOptions<GemmRsBenchOptions>& options, std::ostream& progress) {
  const GemmRsBenchOptions& o = options.op;
  GemmRsSetup setup(o.world, o.m, o.n, o.k, GemmRsConfig{}, o.seed, "tune gemm_rs");
  World& world = setup.world;
  world.synchronize();
  auto args_of = [&](const GemmRsConfig& config) {
    GemmRsArguments a = setup.args;
    a.config = config;
    return a;
  };
  const std::vector<GemmRsConfig> compute = gemm_rs_compute_candidates();
  const GemmRsTuneShape shape{o.world, world.sm_budget(0), setup.m, setup.n, setup.k_local};
  size_t step = 0;
  const GemmRsConfig best = two_stage_search(
      compute, options.top, o.world,
      [&](const GemmRsConfig& base) { return gemm_rs_comm_candidates(base, shape, options.top); },
      whole_op_timer<GemmRs>(setup, args_of, o.timing), progress, &step);

  GemmRsConfig automatic;
  automatic.use_tune_cache = false;
  bool gated = true;
  const std::vector<Stats> t = retime_and_check<GemmRs>(world, setup.heap, setup.signals, args_of(best),
                                                        args_of(automatic), o.timing, setup.out, setup.block_elems,
                                                        "tune gemm_rs", &gated);

  Table table = tune_table("gemm_rs",
                           "tune GEMM+RS, " + ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                               " n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) + " (" +
                               std::to_string(setup.k_local) + " per rank), bf16",
                           automatic, best, t, step,
                           std::to_string(compute.size()) +
                               " compute, then the communication variants the plan model ranked best",
                           o.timing, gated, kSameAsAutomatic);
  store_tuned(options.cache, gemm_rs_tune_key(world, args_of(best)), best, automatic, t, table);
  return table;
}

Table tune_mlp(const TuneOptions<MlpBenchOptions>& options, std::ostream& progress) {
  const MlpBenchOptions& o = options.op;
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
  TuneOptions<AgGemmBenchOptions> fc1;
  gemm(fc1, (activation == MlpActivation::kSwiGlu ? 2 : 1) * o.intermediate, o.hidden);
  TuneOptions<GemmRsBenchOptions> fc2;
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

MoeTuneShape moe_tune_shape(const MoeBenchOptions& o, int sm_budget) {
  // The ids: the routing MoeLayerSetup runs.
  sim::MoeProblem problem{.m = o.m, .hidden = o.hidden, .intermediate = o.intermediate, .experts = o.experts,
                          .topk = o.topk, .ids = bench_routing(o), .world = o.world};
  return {std::move(problem), sm_budget, o.activation, MoeAgGroupGemm::kernel_names()};
}

SpAttentionTuneShape sp_attention_tune_shape(const SpAttentionBenchOptions& o, int sm_budget) {
  const sim::SpAttentionProblem problem{.seq = o.seq, .q_heads = o.q_heads, .kv_heads = o.kv_heads,
                                        .head_dim = o.head_dim, .causal = o.causal, .world = o.world};
  return {problem, sm_budget, o.config.layout};
}

Table tune_moe(const TuneOptions<MoeBenchOptions>& o, std::ostream& progress) {
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

Table tune_sp_attention(const TuneOptions<SpAttentionBenchOptions>& o, std::ostream& progress) {
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

}  // namespace tilelink::tool
