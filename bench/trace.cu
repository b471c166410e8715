// tilelink trace ag_gemm|sp_attention: the device timeline of one call of the op and the cost of
// recording it.
#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "bench/ag_gemm_setup.hpp"
#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "bench/sp_attention_setup.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/trace_buffer.hpp"

namespace tilelink::bench {

namespace {

// The overhead (untraced and traced calls interleaved; the traced ones fill the buffer, what does
// not fit is dropped at the cost of the same atomic), then the one traced call whose timeline is
// reported. Returns whether the timing was gated.
template <class Op>
bool record_traced_call(const World& world, Op& op, TraceBuffer& buffer, const TimingOptions& timing,
                        TraceResult& result) {
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, timing.warmup, timing.iters,
      {[&] {
         op.set_trace(nullptr);
         op.run();
       },
       [&] {
         op.set_trace(&buffer);
         op.run();
       }},
      &gated);
  result.untraced = t[0];
  result.traced = t[1];
  op.set_trace(nullptr);
  world.synchronize();
  buffer.clear();
  op.set_trace(&buffer);
  RankTimer gate(world);  // released together on every rank, as the timed calls are
  gate.time([&] { op.run(); });
  op.set_trace(nullptr);
  result.records = buffer.records();
  result.dropped = buffer.dropped();
  return gated;
}

}  // namespace

TraceResult trace_ag_gemm(const TraceOptions& o) {
  const char* where = "trace_ag_gemm";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size (" + std::to_string(o.world) + ")");
  TL_REQUIRE(o.n % o.world == 0, where, "n", o.n, "a multiple of the world size (" + std::to_string(o.world) + ")");
  AgGemmSetup s(o.world, o.m, o.n, o.k, o.seed, o.config.comm.comm_rows);
  const AgGemmArguments args = s.args(o.config);
  if (const std::string why = AgGemm::can_implement(s.world, s.heap, args); !why.empty()) {
    throw InvalidArgument("trace ag_gemm: " + why);
  }
  AgGemm op(s.world, s.heap, s.signals, args, "trace.ag_gemm");
  TraceBuffer buffer(s.world, o.capacity);

  TraceResult result;
  const bool gated = record_traced_call(s.world, op, buffer, o.timing, result);

  // Every GEMM tile: its loads begin after its wait ends (the producer's program order, checked
  // on the clock).
  std::map<std::pair<uint32_t, uint32_t>, std::pair<const TraceRecord*, const TraceRecord*>> tiles;
  for (const TraceRecord& r : result.records) {
    if (r.role != static_cast<uint16_t>(TraceRole::kProducer)) continue;
    auto& slot = tiles[{r.rank, r.tile}];
    if (r.kind == static_cast<uint32_t>(TraceKind::kWait)) slot.first = &r;
    if (r.kind == static_cast<uint32_t>(TraceKind::kLoad)) slot.second = &r;
  }
  for (const auto& [key, wl] : tiles) {
    if (wl.first == nullptr || wl.second == nullptr) continue;
    ++result.tiles;
    if (wl.second->start_ns < wl.first->end_ns) ++result.violations;
  }
  result.config = "kernel " + op.kernel_name() + ", " + to_string(op.config().comm.resource) + " all-gather, " +
                  std::to_string(op.gemm_ctas(0)) + " GEMM CTAs per rank" + (gated ? "" : " (timing not gated)");
  return result;
}

TraceResult trace_sp_attention(const SpAttentionTraceOptions& o) {
  TL_REQUIRE(o.op.world >= 1, "trace_sp_attention", "world", o.op.world, ">= 1");
  TL_REQUIRE(o.op.seq % o.op.world == 0, "trace_sp_attention", "seq", o.op.seq, "a multiple of the world size");
  SpAttentionSetup s(o.op);
  SpAttention op(s.world, s.heap, s.signals, s.args, "trace.sp_attention");
  TraceBuffer buffer(s.world, o.capacity);
  TraceResult result;
  const bool gated = record_traced_call(s.world, op, buffer, o.op.timing, result);

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
  result.config = std::string(to_string(o.op.config.comm.resource)) + " all-gather, K/V chunk " +
                  std::to_string(op.plan().ag.map.comm_rows) + " tokens, " + std::to_string(op.attention_ctas(0)) +
                  " attention CTAs per rank" + (gated ? "" : " (timing not gated)");
  return result;
}

}  // namespace tilelink::bench
