// `tilelink tune ag_gemm`: the two-stage search of tune/ag_gemm_tune.hpp, timed on the GPUs
// present (virtual ranks on one GPU, or one rank per GPU with TILELINK_RANKS=gpus). Each
// candidate is a whole AgGemm over all ranks, timed as bench times the fused op (slowest rank per
// call, median). The winner and the automatic configuration are then re-timed interleaved, the
// winner's C is checked against cuBLAS, and the winner goes into the tune cache.
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
#include "bench/harness.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tilelink/tune/tune_cache.hpp"

namespace tilelink::bench {
namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
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
    const AgGemmArguments args = setup.args(config);
    *why = AgGemm::can_implement(world, setup.heap, args);
    if (!why->empty()) return std::numeric_limits<double>::infinity();
    AgGemm op(world, setup.heap, setup.signals, args, "tune.ag_gemm");
    bool gated = true;
    return repeat_interleaved(world, o.timing.warmup, o.timing.iters, {[&] { op.run(); }}, &gated)[0].median;
  };
  size_t step = 0;
  auto measure = [&](const AgGemmConfig& config, size_t total, const char* stage) {
    std::string why;
    const double us = time_config(config, &why);
    progress << "[" << ++step << "/" << total << "] " << stage << ": " << describe(config) << ": "
             << (why.empty() ? std::to_string(us) + " us" : "refused (" + why + ")") << "\n";
    progress.flush();
    return us;
  };

  const std::vector<AgGemmConfig> compute = ag_gemm_compute_candidates(AgGemm::kernel_names());
  const AgGemmTuneShape shape{o.world, world.sm_budget(0), setup.m_per_rank, setup.n_local, setup.k};
  // Stage 2's size is known once stage 1 has a winner; count it as `top` + 1 for the progress.
  const size_t total = compute.size() + (o.world > 1 ? o.top + 1 : 1);
  AgGemmConfig best = compute.front();
  double best_us = std::numeric_limits<double>::infinity();
  for (const AgGemmConfig& c : compute) {
    const double us = measure(c, total, "compute");
    if (us < best_us) best_us = us, best = c;
  }
  for (const RankedAgGemmConfig& c : ag_gemm_comm_candidates(best, shape, o.top)) {
    const double us = measure(c.config, total, "communication");
    if (us < best_us) best_us = us, best = c.config;
  }

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

  Table table;
  table.name = "tune_ag_gemm";
  table.title = "tune AG+GEMM, " + ranks_phrase(o.world) +
                ": m=" + std::to_string(o.m) + " n=" + std::to_string(o.n) + " (" + std::to_string(setup.n_local) +
                " per rank) k=" + std::to_string(o.k) + ", bf16";
  table.columns = {{"config", "config", 0},
                   {"time_us", "time µs", 1},
                   {"min_us", "min µs", 1},
                   {"max_us", "max µs", 1},
                   {"speedup", "speedup vs automatic", 3}};
  table.add_row({"automatic: " + describe(automatic), t[0].median, t[0].min, t[0].max, 1.0});
  table.add_row({"tuned: " + describe(best), t[1].median, t[1].min, t[1].max, t[0].median / t[1].median});
  table.notes.push_back("searched " + std::to_string(step) + " configurations (" + std::to_string(compute.size()) +
                        " compute, then the communication variants the plan model ranked best), " +
                        std::to_string(o.timing.iters) + " timed calls each; final rows: " +
                        std::to_string(2 * o.timing.iters) + " interleaved calls");
  table.notes.push_back("check: the tuned configuration's C of every rank equals cuBLAS within bf16 tolerance");
  if (!gated) table.notes.push_back("timing included host enqueue time (a step blocked the host; see bench notes)");
  if (!o.cache.empty()) {
    TuneCache cache = TuneCache::load(o.cache);
    const TuneKey key = make_tune_key(world, "ag_gemm", setup.m, setup.n_local, setup.k);
    // Never store something slower than the automatic configuration.
    const AgGemmConfig stored = t[1].median <= t[0].median ? best : automatic;
    cache.put(key, {stored, std::min(t[0].median, t[1].median), t[0].median, utc_now()});
    cache.save();
    table.notes.push_back("stored in " + o.cache + " under '" + key.str() + "'");
  }
  return table;
}

}  // namespace tilelink::bench
