// `tilelink trace <op>` on the GPUs present: what every op's trace shares -- one traced call's
// device timeline on every rank, the cost of recording it, and the ordering checks of the
// protocols (trace_runner.cpp). Each op's tool file (tool_<op>.cpp) runs its own trace with these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "bench/options.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/world.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::tool {

namespace tb = tilelink::bench;

// A traced call of an op on the GPUs present: the op's bench options (its problem, configuration,
// timing and seed) and the records each rank's buffer holds (per part, for an op of several).
template <class BenchOptions>
struct TraceOptions {
  BenchOptions op;
  uint32_t capacity = 1u << 20;
};

// One traced call's device timeline (every rank's records), the untraced and traced times of the
// op (the recording overhead), and the op's ordering check.
struct TraceResult {
  std::vector<TraceRecord> records;  // every part's, in part order
  // An op of several parts (trace mlp: fc1, fc2): each part's name and how many of `records` are
  // its, in order; empty for an op of one part.
  std::vector<std::pair<std::string, size_t>> parts;
  uint64_t dropped = 0;
  tb::Stats untraced, traced;
  uint64_t tiles = 0;       // what the op's check paired (ag_gemm: GEMM tiles with a wait and a load)
  uint64_t violations = 0;  // of those, the ones out of order (ag_gemm: loads that began before the wait ended)
  std::string checked;      // the check in words, completed by "<tiles - violations> of <tiles>"
  std::string config;       // the op's configuration, in words
  std::vector<std::string> rates;  // what the records measure of the cost model's rates, a line each
};

// The overhead (untraced and traced calls interleaved; the traced ones fill the buffers, what does
// not fit is dropped at the cost of the same atomic), then the one traced call whose timeline is
// reported. `set_trace(on)` points the op at the buffers or turns it off; `parts` names each
// buffer (one unnamed buffer: the op's only part). Returns whether the timing was gated.
template <class SetTrace, class Run>
bool record_traced_call(const World& world, SetTrace&& set_trace, Run&& run,
                        const std::vector<std::pair<std::string, TraceBuffer*>>& parts, const tb::TimingOptions& timing,
                        TraceResult& result) {
  bool gated = true;
  const std::vector<tb::Stats> t = tb::repeat_interleaved(world, timing.warmup, timing.iters,
                                                  {[&] {
                                                     set_trace(false);
                                                     run();
                                                   },
                                                   [&] {
                                                     set_trace(true);
                                                     run();
                                                   }},
                                                  &gated);
  result.untraced = t[0];
  result.traced = t[1];
  set_trace(false);
  world.synchronize();
  for (const auto& part : parts) part.second->clear();
  set_trace(true);
  tb::RankTimer gate(world);  // released together on every rank, as the timed calls are
  gate.time(run);
  set_trace(false);
  for (const auto& [name, buffer] : parts) {
    const std::vector<TraceRecord> records = buffer->records();
    result.records.insert(result.records.end(), records.begin(), records.end());
    if (parts.size() > 1) result.parts.emplace_back(name, records.size());
    result.dropped += buffer->dropped();
  }
  return gated;
}

// The common case: an op with set_trace(const TraceBuffer*) and run(), one buffer of `capacity`
// records per rank.
template <class Op>
bool record_traced_call(const World& world, Op& op, uint32_t capacity, const tb::TimingOptions& timing,
                        TraceResult& result) {
  TraceBuffer buffer(world, capacity);
  return record_traced_call(
      world, [&](bool on) { op.set_trace(on ? &buffer : nullptr); }, [&] { op.run(); }, {{"", &buffer}}, timing,
      result);
}

using RecordIt = std::vector<TraceRecord>::const_iterator;

// An op of two parts that one call runs in turn (Mlp: fc1, fc2; MoeLayer: part 1, part 2), each
// recording into a buffer of its own (`capacity` records per rank): `first(op)` and `second(op)`
// are the parts, `names` their lanes' prefixes. Returns whether the timing was gated and where
// the second part's records begin.
struct TwoParts {
  bool gated;
  RecordIt second;
};
template <class Op, class First, class Second>
TwoParts record_two_parts(const World& world, Op& op, First&& first, Second&& second,
                          const std::pair<std::string, std::string>& names, uint32_t capacity,
                          const tb::TimingOptions& timing, TraceResult& result) {
  TraceBuffer a(world, capacity), b(world, capacity);
  const bool gated = record_traced_call(
      world,
      [&](bool on) {
        first(op).set_trace(on ? &a : nullptr);
        second(op).set_trace(on ? &b : nullptr);
      },
      [&] { op.run(); }, {{names.first, &a}, {names.second, &b}}, timing, result);
  return {gated, result.records.cbegin() + static_cast<std::ptrdiff_t>(result.parts[0].second)};
}


// AG+GEMM's records in [begin, end): every GEMM tile's loads began after its wait ended (the
// producer's program order, checked on the clock). Adds to result.tiles and result.violations.
void check_ag_gemm(RecordIt begin, RecordIt end, TraceResult& result);
inline constexpr const char* kAgGemmChecked = "GEMM tiles whose loads began after their wait ended";

// GEMM+RS's (and GEMM+AR's) records: every tile an owner reduced, each sender's notify of it (the
// GEMM tile, numbered over the whole M; the last one when a tile has several, GEMM+AR's K slices)
// began before the reduction began. The notify's start is the safe
// bound: its end is read after the signal is already visible to the owner. Times are compared
// only when the ranks share one GPU's clock (`one_clock`); else only that every notify was
// recorded.
void check_gemm_rs(RecordIt begin, RecordIt end, int world, bool one_clock, TraceResult& result);
// That check in words.
std::string gemm_rs_checked(bool one_clock);

// " (from the tune cache FILE)" when an op ran a cached configuration, else "".
std::string from_cache(const std::string& tuned_from);
// The end of a traced op's configuration in words: where it came from, and whether the timing
// was gated.
std::string provenance(const std::string& tuned_from, bool gated);

}  // namespace tilelink::tool
