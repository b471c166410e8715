#include "tilelink/sim/gemm_rs_rates.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace tilelink::sim {
namespace {

MedianRate median_rate(std::vector<uint64_t> ns, double bytes) {
  MedianRate r;
  r.spans = ns.size();
  if (ns.empty()) return r;
  const size_t mid = ns.size() / 2;
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(mid), ns.end());
  r.median_us = double(ns[mid]) / 1e3;
  r.gbps = ns[mid] > 0 ? bytes / double(ns[mid]) : 0.0;  // bytes per ns = GB/s
  return r;
}

std::string line(const char* what, const MedianRate& r, const char* bytes) {
  char text[200];
  std::snprintf(text, sizeof(text), "%s: median %.2f µs over %llu spans, %.1f GB/s per CTA (%s)", what, r.median_us,
                static_cast<unsigned long long>(r.spans), r.gbps, bytes);
  return text;
}

}  // namespace

GemmRsTraceRates gemm_rs_trace_rates(const std::vector<TraceRecord>& records, const GemmRsTraceShape& s) {
  std::vector<uint64_t> own, peer, epilogue_sum, block_sum;
  const uint32_t tiles_per_block = s.m_tiles * s.n_tiles;
  for (const TraceRecord& r : records) {
    if (r.end_ns < r.start_ns) continue;
    const uint64_t ns = r.end_ns - r.start_ns;
    if (r.kind == static_cast<uint32_t>(TraceKind::kEpilogue) && s.n_tiles > 0 && s.m_tiles > 0) {
      const uint32_t owner = std::min(r.tile / s.n_tiles / s.m_tiles, s.world - 1);
      (owner == r.rank ? own : peer).push_back(ns);
    } else if (r.kind == static_cast<uint32_t>(TraceKind::kReduce) && tiles_per_block > 0) {
      (r.role == static_cast<uint16_t>(TraceRole::kConsumer) ? epilogue_sum : block_sum).push_back(ns);
    }
  }
  const double tile = double(s.bm) * s.bn * s.partial_bytes;
  GemmRsTraceRates out;
  out.own_epilogue = median_rate(std::move(own), tile);
  out.peer_epilogue = median_rate(std::move(peer), tile);
  out.epilogue_sum = median_rate(std::move(epilogue_sum), tile * (s.world + 1));
  out.block_sum = median_rate(std::move(block_sum), tile * (s.world + 1));
  return out;
}

NotifyOrder gemm_rs_notify_order(const TraceRecord* begin, const TraceRecord* end, uint32_t world, bool one_clock) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> notified;  // (sender, tile) -> the last notify's start
  for (const TraceRecord* r = begin; r != end; ++r) {
    if (r->kind == static_cast<uint32_t>(TraceKind::kNotify) && r->role == static_cast<uint16_t>(TraceRole::kConsumer)) {
      auto [it, fresh] = notified.try_emplace({r->rank, r->tile}, r->start_ns);
      if (!fresh) it->second = std::max(it->second, r->start_ns);
    }
  }
  NotifyOrder out;
  for (const TraceRecord* r = begin; r != end; ++r) {
    if (r->kind != static_cast<uint32_t>(TraceKind::kReduce)) continue;
    const uint64_t readable = r->role == static_cast<uint16_t>(TraceRole::kConsumer) ? r->end_ns : r->start_ns;
    for (uint32_t sender = 0; sender < world; ++sender) {
      ++out.pairs;
      const auto it = notified.find({sender, r->tile});
      if (it == notified.end() || (one_clock && it->second > readable)) ++out.violations;
    }
  }
  return out;
}

std::vector<std::string> describe(const GemmRsTraceRates& r, const GemmRsTraceShape& s) {
  std::vector<std::string> out;
  if (r.own_epilogue.spans > 0) out.push_back(line("epilogue of an own tile (store, notify)", r.own_epilogue, "one tile stored"));
  if (r.peer_epilogue.spans > 0) {
    out.push_back(line(!s.push     ? "epilogue of a peer's tile (store into this rank's buffer, notify)"
                       : s.deferred ? "epilogue of a peer's tile (the previous pushed tile's notify, this tile's store "
                                      "into the owner issued, not waited for: --push-notify immediate times the store)"
                                    : "epilogue of a peer's tile (store into the owner, notify)",
                       r.peer_epilogue, "one tile stored"));
  }
  if (r.epilogue_sum.spans > 0) {
    out.push_back(line("epilogue sum of an own tile (waits for the parts, then sums)", r.epilogue_sum,
                       "world tiles read, one written"));
  }
  if (r.block_sum.spans > 0) {
    out.push_back(line("reduction block's sum of a tile (after its waits)", r.block_sum, "world tiles read, one written"));
  }
  return out;
}

}  // namespace tilelink::sim
