// `tilelink trace <op>`: the ordering checks the ops' traces share (trace_runner.hpp).
#include "tools/trace_runner.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "tilelink/sim/gemm_rs_rates.hpp"

namespace tilelink::tool {

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

void check_gemm_rs(RecordIt begin, RecordIt end, int world, bool one_clock, TraceResult& result) {
  const sim::NotifyOrder order =
      sim::gemm_rs_notify_order(std::to_address(begin), std::to_address(end), static_cast<uint32_t>(world), one_clock);
  result.tiles += order.pairs;
  result.violations += order.violations;
}

std::string gemm_rs_checked(bool one_clock) {
  return std::string("(reduced tile, sender) pairs whose reduction began (the epilogue's sums: ended) after the "
                     "sender's notify") +
         (one_clock ? "" : " (one rank per GPU: only that the notify was recorded; clocks differ)");
}

std::string from_cache(const std::string& tuned_from) {
  return tuned_from.empty() ? "" : " (from the tune cache " + tuned_from + ")";
}

std::string provenance(const std::string& tuned_from, bool gated) {
  return from_cache(tuned_from) + (gated ? "" : " (timing not gated)");
}

}  // namespace tilelink::tool
