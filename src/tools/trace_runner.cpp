// `tilelink trace ag_gemm|sp_attention|gemm_rs|mlp|moe`: the device timeline of one call of the op
// and the cost of recording it.
#include "tools/trace_runner.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "bench/ag_gemm_setup.hpp"
#include "bench/bench.hpp"
#include "bench/gemm_rs_setup.hpp"
#include "bench/harness.hpp"
#include "bench/mlp_setup.hpp"
#include "bench/moe_setup.hpp"
#include "bench/sp_attention_setup.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/trace_buffer.hpp"

namespace tilelink::tool {

using namespace tilelink::bench;

namespace {

// The overhead (untraced and traced calls interleaved; the traced ones fill the buffers, what does
// not fit is dropped at the cost of the same atomic), then the one traced call whose timeline is
// reported. `set_trace(on)` points the op at the buffers or turns it off; `parts` names each
// buffer (one unnamed buffer: the op's only part). Returns whether the timing was gated.
template <class SetTrace, class Run>
bool record_traced_call(const World& world, SetTrace&& set_trace, Run&& run,
                        const std::vector<std::pair<std::string, TraceBuffer*>>& parts, const TimingOptions& timing,
                        TraceResult& result) {
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(world, timing.warmup, timing.iters,
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
  RankTimer gate(world);  // released together on every rank, as the timed calls are
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
bool record_traced_call(const World& world, Op& op, uint32_t capacity, const TimingOptions& timing,
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
                          const TimingOptions& timing, TraceResult& result) {
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

// AG+GEMM's records: every GEMM tile's loads began after its wait ended (the producer's program
// order, checked on the clock).
void check_ag_gemm(RecordIt begin, RecordIt end, TraceResult& result) {
  std::map<std::pair<uint32_t, uint32_t>, std::pair<const TraceRecord*, const TraceRecord*>> tiles;
  for (RecordIt r = begin; r != end; ++r) {
    if (r->role != static_cast<uint16_t>(TraceRole::kProducer)) continue;
    auto& slot = tiles[{r->rank, r->tile}];
    if (r->kind == static_cast<uint32_t>(TraceKind::kWait)) slot.first = &*r;
    if (r->kind == static_cast<uint32_t>(TraceKind::kLoad)) slot.second = &*r;
  }
  for (const auto& [key, wl] : tiles) {
    if (wl.first == nullptr || wl.second == nullptr) continue;
    ++result.tiles;
    if (wl.second->start_ns < wl.first->end_ns) ++result.violations;
  }
}

// GEMM+RS's records: every tile an owner reduced, each sender's notify of it (the GEMM tile,
// numbered over the whole M) began before the reduction began. The notify's start is the safe
// bound: its end is read after the signal is already visible to the owner. Times are compared
// only when the ranks share one GPU's clock; else only that every notify was recorded.
void check_gemm_rs(RecordIt begin, RecordIt end, int world, bool one_clock, TraceResult& result) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> notified;  // (sender, tile) -> start
  for (RecordIt r = begin; r != end; ++r) {
    if (r->kind == static_cast<uint32_t>(TraceKind::kNotify) && r->role == static_cast<uint16_t>(TraceRole::kConsumer)) {
      notified[{r->rank, r->tile}] = r->start_ns;
    }
  }
  for (RecordIt r = begin; r != end; ++r) {
    if (r->kind != static_cast<uint32_t>(TraceKind::kReduce)) continue;
    for (uint32_t sender = 0; sender < static_cast<uint32_t>(world); ++sender) {
      ++result.tiles;
      const auto it = notified.find({sender, r->tile});
      if (it == notified.end() || (one_clock && it->second > r->start_ns)) ++result.violations;
    }
  }
}

const char* kAgGemmChecked = "GEMM tiles whose loads began after their wait ended";
std::string gemm_rs_checked(bool one_clock) {
  return std::string("(reduced tile, sender) pairs whose reduction began after the sender's notify") +
         (one_clock ? "" : " (one rank per GPU: only that the notify was recorded; clocks differ)");
}

// " (from the tune cache FILE)" when an op ran a cached configuration, else "".
std::string from_cache(const std::string& tuned_from) {
  return tuned_from.empty() ? "" : " (from the tune cache " + tuned_from + ")";
}

// The end of a traced op's configuration in words: where it came from, and whether the timing
// was gated.
std::string provenance(const std::string& tuned_from, bool gated) {
  return from_cache(tuned_from) + (gated ? "" : " (timing not gated)");
}

}  // namespace

TraceResult trace_ag_gemm(const TraceOptions<AgGemmBenchOptions>& options) {
  const char* where = "trace_ag_gemm";
  const AgGemmBenchOptions& o = options.op;
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size (" + std::to_string(o.world) + ")");
  TL_REQUIRE(o.n % o.world == 0, where, "n", o.n, "a multiple of the world size (" + std::to_string(o.world) + ")");
  AgGemmSetup s(o.world, o.m, o.n, o.k, o.seed, o.config.comm.comm_rows);
  const AgGemmArguments args = s.args(o.config);
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

TraceResult trace_sp_attention(const TraceOptions<SpAttentionBenchOptions>& o) {
  TL_REQUIRE(o.op.world >= 1, "trace_sp_attention", "world", o.op.world, ">= 1");
  TL_REQUIRE(o.op.seq % o.op.world == 0, "trace_sp_attention", "seq", o.op.seq, "a multiple of the world size");
  SpAttentionSetup s(o.op);
  SpAttention op(s.world, s.heap, s.signals, s.args, "trace.sp_attention");
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

TraceResult trace_gemm_rs(const TraceOptions<GemmRsBenchOptions>& o) {
  GemmRsSetup s(o.op.world, o.op.m, o.op.n, o.op.k, o.op.config, o.op.seed, "trace gemm_rs");
  GemmRs op(s.world, s.heap, s.signals, s.args, "trace.gemm_rs");
  TraceResult result;
  const bool gated = record_traced_call(s.world, op, o.capacity, o.op.timing, result);

  check_gemm_rs(result.records.begin(), result.records.end(), s.w, s.world.mode() == WorldMode::kVirtual, result);
  result.checked = gemm_rs_checked(s.world.mode() == WorldMode::kVirtual);
  result.config = std::string("scatter ") + to_string(op.config().scatter) + ", signal per " +
                  to_string(op.config().granularity) + ", " +
                  std::to_string(op.reduce_blocks()) + " reduction CTAs per rank, swizzle " +
                  std::to_string(op.swizzle()) + provenance(op.tuned_from(), gated);
  return result;
}

TraceResult trace_mlp(const TraceOptions<MlpBenchOptions>& o) {
  MlpSetup s(o.op.world, o.op.m, o.op.hidden, o.op.intermediate, o.op.config, o.op.seed, "trace mlp");
  Mlp op(s.world, s.heap, s.signals, s.args, "trace.mlp");
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
  result.config = "fc1 kernel " + op.fc1().kernel_name() + ", " + to_string(op.fc1().config().comm.resource) +
                  " all-gather; fc2 scatter " + to_string(op.fc2().config().scatter) + ", signal per " +
                  to_string(op.fc2().config().granularity) + ", " +
                  std::to_string(op.fc2().reduce_blocks()) + " reduction CTAs per rank" +
                  (op.fc1().tuned_from().empty() ? "" : "; fc1" + from_cache(op.fc1().tuned_from())) +
                  (op.fc2().tuned_from().empty() ? "" : "; fc2" + from_cache(op.fc2().tuned_from())) +
                  (gated ? "" : " (timing not gated)");
  return result;
}

TraceResult trace_moe(const TraceOptions<MoeBenchOptions>& o) {
  MoeLayerSetup s(o.op, "trace moe");
  MoeLayer op(s.world, s.heap, s.signals, s.args, "trace.moe");
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

}  // namespace tilelink::tool
