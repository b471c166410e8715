// `tilelink tune <op>` on the GPUs present: what every op's search shares (each op's tool file,
// tool_<op>.cpp, runs its own staged search of tune/<op>_tune.hpp with these). Every candidate is
// the whole op over all ranks, timed as bench times the fused op (slowest rank per call, median).
// The winner and the automatic configuration are then re-timed interleaved, the winner's output
// is checked (AG+GEMM: against cuBLAS; the others: against the automatic configuration's), and
// the winner goes into the tune cache.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tools/output.hpp"

namespace tilelink::tool {

namespace tb = tilelink::bench;

// A search on the GPUs present: the op's bench options (its problem, timing and seed; the search
// sets the configuration), the communication variants to time (the plan model's best) and the
// cache file to update ("" = none).
template <class BenchOptions>
struct TuneOptions {
  BenchOptions op;
  size_t top = 6;
  std::string cache;
};

// The timer of a search on `setup`'s world (staged_search's time_config): one whole op over all
// ranks with `args_of(config)`, timed as bench times the fused op (median per call); infinity,
// with `why`, when the op refuses them.
template <class Op, class Setup, class ArgsOf>
auto whole_op_timer(Setup& setup, ArgsOf args_of, const tb::TimingOptions& timing) {
  return [&setup, args_of, &timing](const auto& config, std::string* why) {
    const auto args = args_of(config);
    *why = Op::can_implement(setup.world, setup.heap, args);
    if (!why->empty()) return std::numeric_limits<double>::infinity();
    Op op(setup.world, setup.heap, setup.signals, args, "tune.candidate");
    bool gated = true;
    return tb::repeat_interleaved(setup.world, timing.warmup, timing.iters, {[&] { op.run(); }}, &gated)[0].median;
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
inline constexpr const char* kSameAsAutomatic =
    "the tuned configuration's output of every rank equals the automatic one's within bf16 tolerance";

// The result table of a search: the automatic configuration against the tuned one, re-timed
// interleaved (t[0], t[1]), and the check the tuned one passed.
template <class Config>
tb::Table tune_table(const std::string& op, const std::string& title, const Config& automatic, const Config& tuned,
                 const std::vector<tb::Stats>& t, size_t searched, const std::string& stages, const tb::TimingOptions& timing,
                 bool gated, const std::string& check) {
  tb::Table table;
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
                 const Config& automatic, const std::vector<tb::Stats>& t, tb::Table& table) {
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
// against the automatic one's (the same math in another order or split: bf16 tolerance; with
// `partials(op)` > 0 for either op, the bf16-rounded partials it sums -- ranks x K slices -- count
// in the tolerance, tb::count_far_partials). Throws Error naming `what` when they differ.
template <class Op, class Args, class Partials = double (*)(const Op&)>
std::vector<tb::Stats> retime_and_check(World& world, SymmetricHeap& heap, SignalSet& signals, const Args& best,
                                    const Args& automatic, const tb::TimingOptions& timing,
                                    const std::vector<DeviceBuffer>& out, size_t elems, const std::string& what,
                                    bool* gated, Partials partials = [](const Op&) { return 0.0; }) {
  Op tuned(world, heap, signals, best, "tune.best");
  Op plain(world, heap, signals, automatic, "tune.default");
  *gated = true;
  const std::vector<tb::Stats> t =
      tb::repeat_interleaved(world, timing.warmup, 2 * timing.iters, {[&] { plain.run(); }, [&] { tuned.run(); }}, gated);
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
  const double rounded = std::max(partials(tuned), partials(plain));
  uint64_t far = 0;
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    far += rounded > 0 ? tb::count_far_partials(out[r].get(), ref[r].get(), elems, rounded)
                       : tb::count_far(out[r].get(), ref[r].get(), elems, world.compute_stream(r));
  }
  if (far != 0) {
    throw Error(what + ": the best configuration's output differs from the automatic one's in " + std::to_string(far) +
                " elements");
  }
  return t;
}

}  // namespace tilelink::tool
