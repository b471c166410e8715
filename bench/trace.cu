// tilelink trace ag_gemm: the device timeline of one AG+GEMM call and the cost of recording it.
#include <map>
#include <string>
#include <utility>

#include "bench/ag_gemm_setup.hpp"
#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/trace_buffer.hpp"

namespace tilelink::bench {

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

  // The overhead: untraced and traced calls interleaved (the traced ones fill the buffer; what
  // does not fit is dropped, at the cost of the same atomic).
  TraceResult result;
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      s.world, o.timing.warmup, o.timing.iters,
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

  // The call whose timeline is reported.
  op.set_trace(nullptr);
  s.world.synchronize();
  buffer.clear();
  op.set_trace(&buffer);
  op.run();
  s.world.synchronize();
  op.set_trace(nullptr);
  result.records = buffer.records();
  result.dropped = buffer.dropped();

  // Every GEMM tile: its loads begin after its wait ends (the producer's program order, checked
  // on the clock).
  std::map<std::pair<uint32_t, uint32_t>, std::pair<const TraceRecord*, const TraceRecord*>> tiles;
  for (const TraceRecord& r : result.records) {
    if (r.role != 0) continue;
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

}  // namespace tilelink::bench
