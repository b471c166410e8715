// The per-CTA rates the GEMM+RS cost model (gemm_rs_sim.hpp) takes as given, read back from a
// traced call of the op (`tilelink trace gemm_rs`): what one GEMM CTA's epilogue takes to store a
// tile into its owner's memory (push) or its own (pull), and what one CTA takes to sum an owner's
// tile over the senders (the epilogue reducer's kReduce spans on consumer lanes, the reduction
// blocks' on comm lanes). Medians over every rank's records: a measurement, not a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/primitives/trace.hpp"

namespace tilelink::sim {

// What the records' tile numbers mean: the op's plan (GemmRsFusedPlan) in the terms the rates need.
struct GemmRsTraceShape {
  uint32_t world = 1;
  uint32_t m_tiles = 0;  // tile rows per owner block (the kernel's M is world * m_tiles tile rows)
  uint32_t n_tiles = 0;
  uint32_t bm = 0, bn = 0;  // the GEMM tile
  uint32_t partial_bytes = 2;
  bool push = false;  // the epilogue stores the peers' tiles into their owners
  // With the push: the notify waits for the CTA's next tile (GemmRsPushNotify::kDeferred), so a
  // peer's tile's epilogue issues its store and does not wait for it to land (the store's rate is
  // then not in the span: trace with --push-notify immediate to read it).
  bool deferred = false;
};

struct MedianRate {
  uint64_t spans = 0;     // records measured
  double median_us = 0;   // their median duration
  double gbps = 0;        // bytes per span / median duration (GB/s per CTA); 0 without spans
};

struct GemmRsTraceRates {
  MedianRate own_epilogue;   // an epilogue of a tile this rank owns (a store into its own buffer)
  MedianRate peer_epilogue;  // an epilogue of a peer's tile: its own buffer (pull) or the peer's (push)
  MedianRate epilogue_sum;   // the epilogue reducer's sum of an own tile (world parts read, one written)
  MedianRate block_sum;      // a reduction block's sum of a tile (the same bytes)
};

// The rates in `records` (any ranks, any order). Tiles: kEpilogue over the whole M (m_tile *
// n_tiles + n_tile), kReduce over the owner's block (owner * m_tiles * n_tiles + tile), each tile
// taken as a full bm x bn one.
GemmRsTraceRates gemm_rs_trace_rates(const std::vector<TraceRecord>& records, const GemmRsTraceShape& shape);

// The protocol's order in the records [begin, end) of a traced GEMM+RS (or GEMM+AR) call: every
// reduction span (kReduce) against every sender's notify of its tile (the consumers' kNotify; the
// last where a tile notifies several times). A pair is out of order when the sender's notify is
// missing or, on one clock (`one_clock`: one GPU), began after the reduction could read the part --
// a reduction block's span begins after its waits, so its start; the epilogue reducer's (consumer
// lanes) holds its wait for the parts, so its end.
struct NotifyOrder {
  uint64_t pairs = 0;       // (reduction span, sender) pairs checked
  uint64_t violations = 0;  // of those, out of order
};
NotifyOrder gemm_rs_notify_order(const TraceRecord* begin, const TraceRecord* end, uint32_t world, bool one_clock);

// The rates in words, one line each, for those that had spans.
std::vector<std::string> describe(const GemmRsTraceRates& rates, const GemmRsTraceShape& shape);

}  // namespace tilelink::sim
