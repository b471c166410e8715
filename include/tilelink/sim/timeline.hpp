// Shared pieces of the timeline models (tilelink plan): the cost model, timeline intervals, and
// their Chrome/Perfetto and SVG renderings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/core/h200_rates.hpp"
#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::sim {

// An op's configuration as the plan models take it: the op's automatic one with a communication
// tile of `comm_rows` rows (the models follow the all-gather's tiles and have no automatic size).
template <class OpConfig>
OpConfig plan_op_config(uint32_t comm_rows = 1024) {
  OpConfig c;
  c.comm.comm_rows = comm_rows;
  return c;
}

// Costs of one GPU and its links. Defaults: H200 figures measured in this repository
// (docs/PERF.md, 2026-12-02) or given in DESIGN.md §7.
struct CostModel {
  double flops = h200::kBf16GemmFlops;     // dense bf16 GEMM, cuBLAS on an H200 (DESIGN.md §7)
  double fp8_flops = h200::kE4m3GemmFlops;  // dense e4m3 GEMM (h200_rates.hpp says where it comes from)
  int sms = h200::kSms;
  double nvlink_bandwidth = h200::kNvlinkBandwidth;  // bytes/s into one GPU (DESIGN.md §7: 370-415 GB/s)
  double network_bandwidth = 50e9;          // bytes/s into one GPU from other nodes (400 Gb/s NIC)
  double notify_latency = h200::kNotifyLatency;     // one-way notify -> wait (docs/PERF.md: 0.74-0.88 µs)
  double ce_chunk_overhead = h200::kCeChunkOverhead;  // per copy-engine chunk (docs/PERF.md: ~5 µs)
  double ce_bandwidth = h200::kCeBandwidth;           // copy engine, large chunks (docs/PERF.md: 2041 GB/s)
  double sm_copy_bandwidth_per_cta = h200::kCtaCopyBandwidth;  // one CTA's ld/st or bulk copy
  double epilogue_sum_bandwidth_per_cta = h200::kEpilogueSumBandwidth;  // GEMM+RS's epilogue sums (derived)
  double epilogue_store_bandwidth_per_cta = h200::kEpilogueStoreBandwidth;  // an epilogue's store into a peer
  double hbm_bandwidth = h200::kHbmBandwidth;       // bytes read + written per second (KINDS.md D2D copy)

  // One rank's share of this GPU: `sms` of its SMs and that share of its throughput (tune's
  // predictions for a rank's SM budget).
  CostModel share(int sms_of_rank) const {
    CostModel c = *this;
    c.flops = flops * sms_of_rank / sms;
    c.fp8_flops = fp8_flops * sms_of_rank / sms;
    c.sms = sms_of_rank;
    return c;
  }
  // The dense GEMM rate for operands of `dtype`.
  double gemm_flops(DType dtype) const { return dtype == DType::kE4m3 ? fp8_flops : flops; }
};

// Shared argument checks of the models: world and nodes, and a dimension split evenly over the
// world. Throw InvalidArgument naming `where` and the argument.
void check_world(const char* where, int world, int nodes);
void check_split(const char* where, const char* name, uint32_t value, int world, const char* why);
// Across nodes (nodes > 1) a process world runs the put_signal transport (WorldOptions::transport
// auto), under which the ops refuse what loads or stores peers' memory from a kernel: a plan there
// is only for a path that runs. InvalidArgument from `where` naming `arg` = `value` unless `runs`;
// `expected` says what does.
void check_across_nodes(const char* where, int nodes, bool runs, const char* arg, const std::string& value,
                        const std::string& expected);

// One interval of the predicted timeline (seconds from the op's start).
struct Interval {
  std::string lane;  // "comm" or "cta N"
  std::string name;  // what ran
  double start = 0;
  double end = 0;
};

// A measured device timeline (tilelink trace) as intervals: seconds from `t0_ns` (0: the earliest
// record); one lane per rank, CTA and role ("r0 c5 P" GEMM producer, "r0 c5 C" GEMM consumer,
// "r0 b2 comm" a communication block), each after `lane_prefix` (an op's part, e.g. "fc1 "),
// lanes ordered by rank, role, CTA; names "<kind> <tile>".
std::vector<Interval> trace_intervals(std::vector<TraceRecord> records, const std::string& lane_prefix = "",
                                      uint64_t t0_ns = 0);

// Chrome / Perfetto trace JSON ("traceEvents", complete events in microseconds).
std::string to_chrome_trace(const std::vector<Interval>& timeline, const std::string& process_name);

// The same timeline as an SVG picture: one row per lane, time to the right.
std::string to_svg(const std::vector<Interval>& timeline, const std::string& title);

// A grouped bar chart as an SVG picture (bench --sweep): one group per label, one bar per series
// (values.size() == labels.size(); NaN = no bar), each value written above its bar, a dashed
// line at `reference` (1 for a speedup). Throws InvalidArgument on mismatched sizes.
struct ChartSeries {
  std::string name;
  std::vector<double> values;
};
std::string to_bar_chart_svg(const std::string& title, const std::vector<std::string>& labels,
                             const std::vector<ChartSeries>& series, const std::string& y_label, double reference);

}  // namespace tilelink::sim
