// `tilelink tune ag_gemm|gemm_rs`: the two-stage searches of tune/ag_gemm_tune.hpp and
// tune/gemm_rs_tune.hpp, timed on the GPUs present (virtual ranks on one GPU, or one rank per GPU
// with TILELINK_RANKS=gpus). Each candidate is the whole op over all ranks, timed as bench times
// the fused op (slowest rank per call, median). The winner and the automatic configuration are
// then re-timed interleaved, the winner's output is checked (AG+GEMM: against cuBLAS; GEMM+RS:
// against the automatic configuration's), and the winner goes into the tune cache.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "bench/ag_gemm_setup.hpp"
#include "bench/bench.hpp"
#include "bench/gemm_rs_setup.hpp"
#include "bench/harness.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tilelink/tune/gemm_rs_tune.hpp"
#include "tilelink/tune/tune_cache.hpp"

namespace tilelink::bench {
namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// One whole op over all ranks with `args`, timed as bench times the fused op (median per call);
// infinity, with `why`, when the op refuses them.
template <class Op, class Args>
double time_whole_op(const World& world, SymmetricHeap& heap, SignalSet& signals, const Args& args,
                     const TimingOptions& timing, std::string* why) {
  *why = Op::can_implement(world, heap, args);
  if (!why->empty()) return std::numeric_limits<double>::infinity();
  Op op(world, heap, signals, args, "tune.candidate");
  bool gated = true;
  return repeat_interleaved(world, timing.warmup, timing.iters, {[&] { op.run(); }}, &gated)[0].median;
}

// The two stages of a search: every compute candidate, then `comm_candidates(best so far)` (the
// plan model's ranked communication variants around it). `time_config(config, &why)` times one
// whole op (infinity, with `why`, when it refuses the configuration); one progress line each.
// Returns the fastest configuration; `steps` counts the configurations tried.
template <class Config, class CommCandidates, class TimeConfig>
Config two_stage_search(const std::vector<Config>& compute, size_t top, int world, CommCandidates&& comm_candidates,
                        TimeConfig&& time_config, std::ostream& progress, size_t* steps) {
  // Stage 2's size is known once stage 1 has a winner; count it as `top` + 1 for the progress.
  const size_t total = compute.size() + (world > 1 ? top + 1 : 1);
  auto measure = [&](const Config& config, const char* stage) {
    std::string why;
    const double us = time_config(config, &why);
    progress << "[" << ++*steps << "/" << total << "] " << stage << ": " << describe(config) << ": "
             << (why.empty() ? std::to_string(us) + " us" : "refused (" + why + ")") << "\n";
    progress.flush();
    return us;
  };
  Config best = compute.front();
  double best_us = std::numeric_limits<double>::infinity();
  for (const Config& c : compute) {
    const double us = measure(c, "compute");
    if (us < best_us) best_us = us, best = c;
  }
  for (const auto& c : comm_candidates(best)) {
    const double us = measure(c.config, "communication");
    if (us < best_us) best_us = us, best = c.config;
  }
  return best;
}

// The result table of a search: the automatic configuration against the tuned one, re-timed
// interleaved (t[0], t[1]).
Table tune_table(const std::string& op, const std::string& title, const std::string& automatic,
                 const std::string& tuned, const std::vector<Stats>& t, size_t searched, const std::string& stages,
                 const TimingOptions& timing, bool gated) {
  Table table;
  table.name = "tune_" + op;
  table.title = title;
  table.columns = {{"config", "config", 0},
                   {"time_us", "time µs", 1},
                   {"min_us", "min µs", 1},
                   {"max_us", "max µs", 1},
                   {"speedup", "speedup vs automatic", 3}};
  table.add_row({"automatic: " + automatic, t[0].median, t[0].min, t[0].max, 1.0});
  table.add_row({"tuned: " + tuned, t[1].median, t[1].min, t[1].max, t[0].median / t[1].median});
  table.notes.push_back("searched " + std::to_string(searched) + " configurations (" + stages + "), " +
                        std::to_string(timing.iters) + " timed calls each; final rows: " +
                        std::to_string(2 * timing.iters) + " interleaved calls");
  if (!gated) table.notes.push_back("timing included host enqueue time (a step blocked the host; see bench notes)");
  return table;
}

// Stores the winner under `key`, never something slower than the automatic configuration.
template <class Config>
void store_tuned(const std::string& path, const TuneKey& key, const std::string& op, const Config& best,
                 const Config& automatic, const std::vector<Stats>& t, Config TuneEntry::*field, Table& table) {
  if (path.empty()) return;
  TuneCache cache = TuneCache::load(path);
  TuneEntry entry;
  entry.op = op;
  entry.*field = t[1].median <= t[0].median ? best : automatic;
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

}  // namespace

Table tune_ag_gemm(const TuneOptions& o, std::ostream& progress) {
  const char* where = "tune_ag_gemm";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size " + std::to_string(o.world));
  TL_REQUIRE(o.n % o.world == 0 && (o.n / o.world) % 8 == 0, where, "n", o.n,
             "a multiple of 8 * world (" + std::to_string(8 * o.world) + "): N is split over the ranks");
  AgGemmSetup setup(o.world, o.m, o.n, o.k, o.seed, 128);
  World& world = setup.world;
  world.synchronize();

  auto time_config = [&](const AgGemmConfig& config, std::string* why) {
    return time_whole_op<AgGemm>(world, setup.heap, setup.signals, setup.args(config), o.timing, why);
  };
  const std::vector<AgGemmConfig> compute = ag_gemm_compute_candidates(AgGemm::kernel_names());
  const AgGemmTuneShape shape{o.world, world.sm_budget(0), setup.m_per_rank, setup.n_local, setup.k};
  size_t step = 0;
  const AgGemmConfig best = two_stage_search(
      compute, o.top, o.world, [&](const AgGemmConfig& base) { return ag_gemm_comm_candidates(base, shape, o.top); },
      time_config, progress, &step);

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
  if (far != 0) throw Error("tune ag_gemm: the best configuration's C differs from cuBLAS in " + std::to_string(far) + " elements");

  Table table = tune_table("ag_gemm",
                           "tune AG+GEMM, " + ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                               " n=" + std::to_string(o.n) + " (" + std::to_string(setup.n_local) +
                               " per rank) k=" + std::to_string(o.k) + ", bf16",
                           describe(automatic), describe(best), t, step,
                           std::to_string(compute.size()) +
                               " compute, then the communication variants the plan model ranked best",
                           o.timing, gated);
  table.notes.push_back("check: the tuned configuration's C of every rank equals cuBLAS within bf16 tolerance");
  store_tuned(o.cache, make_tune_key(world, "ag_gemm", setup.m, setup.n_local, setup.k), "ag_gemm", best, automatic,
              t, &TuneEntry::config, table);
  return table;
}

Table tune_gemm_rs(const GemmRsTuneOptions& o, std::ostream& progress) {
  GemmRsSetup setup(o.world, o.m, o.n, o.k, GemmRsConfig{}, o.seed, "tune gemm_rs");
  World& world = setup.world;
  world.synchronize();
  auto args_of = [&](const GemmRsConfig& config) {
    GemmRsArguments a = setup.args;
    a.config = config;
    return a;
  };
  auto time_config = [&](const GemmRsConfig& config, std::string* why) {
    return time_whole_op<GemmRs>(world, setup.heap, setup.signals, args_of(config), o.timing, why);
  };
  const std::vector<GemmRsConfig> compute = gemm_rs_compute_candidates();
  const GemmRsTuneShape shape{o.world, world.sm_budget(0), setup.m, setup.n, setup.k_local};
  size_t step = 0;
  const GemmRsConfig best = two_stage_search(
      compute, o.top, o.world, [&](const GemmRsConfig& base) { return gemm_rs_comm_candidates(base, shape, o.top); },
      time_config, progress, &step);

  // The winner against the automatic configuration, interleaved; then its output against the
  // automatic one's (the same GEMM kernel and rank-order fp32 sums: bf16 tolerance).
  GemmRsConfig automatic;
  automatic.use_tune_cache = false;
  GemmRs tuned(world, setup.heap, setup.signals, args_of(best), "tune.best");
  GemmRs plain(world, setup.heap, setup.signals, args_of(automatic), "tune.default");
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(world, o.timing.warmup, 2 * o.timing.iters,
                                                  {[&] { plain.run(); }, [&] { tuned.run(); }}, &gated);
  std::vector<DeviceBuffer> ref;
  for (int r = 0; r < setup.w; ++r) ref.emplace_back(setup.block_bytes, world.device(r));
  plain.run();
  world.synchronize();
  for (int r = 0; r < setup.w; ++r) {
    TL_CUDA_CHECK(cudaMemcpy(ref[r].get(), setup.out[r].get(), setup.block_bytes, cudaMemcpyDeviceToDevice));
  }
  tuned.run();
  world.synchronize();
  uint64_t far = 0;
  for (int r = 0; r < setup.w; ++r) {
    far += count_far(setup.out[r].get(), ref[r].get(), setup.block_elems, world.compute_stream(r));
  }
  if (far != 0) {
    throw Error("tune gemm_rs: the best configuration's output differs from the automatic one's in " +
                std::to_string(far) + " elements");
  }

  Table table = tune_table("gemm_rs",
                           "tune GEMM+RS, " + ranks_phrase(o.world) + ": m=" + std::to_string(o.m) +
                               " n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) + " (" +
                               std::to_string(setup.k_local) + " per rank), bf16",
                           describe(automatic), describe(best), t, step,
                           std::to_string(compute.size()) +
                               " compute, then the communication variants the plan model ranked best",
                           o.timing, gated);
  table.notes.push_back("check: the tuned configuration's output of every rank equals the automatic one's within "
                        "bf16 tolerance");
  store_tuned(o.cache, make_tune_key(world, "gemm_rs", setup.m, setup.n, setup.k_local), "gemm_rs", best, automatic,
              t, &TuneEntry::gemm_rs, table);
  return table;
}

Table tune_mlp(const MlpTuneOptions& o, std::ostream& progress) {
  TL_REQUIRE(o.world >= 1, "tune_mlp", "world", o.world, ">= 1");
  TuneOptions fc1;
  fc1.world = o.world;
  fc1.m = o.m;
  fc1.n = (o.activation == MlpActivation::kSwiGlu ? 2 : 1) * o.intermediate;
  fc1.k = o.hidden;
  fc1.top = o.top;
  fc1.timing = o.timing;
  fc1.seed = o.seed;
  fc1.cache = o.cache;
  GemmRsTuneOptions fc2;
  fc2.world = o.world;
  fc2.m = o.m;
  fc2.n = o.hidden;
  fc2.k = o.intermediate;
  fc2.top = o.top;
  fc2.timing = o.timing;
  fc2.seed = o.seed;
  fc2.cache = o.cache;
  progress << "fc1 (AG+GEMM):\n";
  const Table t1 = tune_ag_gemm(fc1, progress);
  progress << "fc2 (GEMM+RS):\n";
  const Table t2 = tune_gemm_rs(fc2, progress);
  Table table = t1;
  table.name = "tune_mlp";
  table.title = "tune MLP (" + std::string(to_string(o.activation)) + "), " + ranks_phrase(o.world) + ": m=" +
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

}  // namespace tilelink::bench
