// `tilelink trace <op>` on the GPUs present: one traced call's device timeline on every rank, the
// cost of recording it, and the ordering check of the op's protocol (trace_runner.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.hpp"
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
};

// `tilelink trace ag_gemm`: every GEMM tile's wait, loads and epilogue, and the SM all-gather's
// waits, copies and notifies; the check that every GEMM tile's loads began after its wait ended.
TraceResult trace_ag_gemm(const TraceOptions<tb::AgGemmBenchOptions>& options);
// `tilelink trace sp_attention`: one traced fused call (per work item, each K/V chunk's wait and
// loads, and the store of O), and the check that every chunk's loads began after its wait ended
// (TraceResult::tiles counts the chunk reads).
TraceResult trace_sp_attention(const TraceOptions<tb::SpAttentionBenchOptions>& options);
// `tilelink trace gemm_rs`: one traced call (every GEMM tile's epilogue and notify; the
// reduction blocks' waits and per-tile reductions), and the check that every owner's reduction
// of a tile began after each sender's notify of it had begun (TraceResult::tiles counts the
// (tile, sender) pairs; the times are compared only on one GPU, whose ranks share a clock).
TraceResult trace_gemm_rs(const TraceOptions<tb::GemmRsBenchOptions>& options);
// `tilelink trace mlp`: one traced call, fc1 (AG+GEMM) and fc2 (GEMM+RS) in two parts, with
// both ops' checks (TraceResult::tiles and violations count both).
TraceResult trace_mlp(const TraceOptions<tb::MlpBenchOptions>& options);
// `tilelink trace moe`: one traced MoeLayer call, part 1 (all-gather, gather, grouped GEMM) and
// part 2 (grouped GEMM, top-k combine + reduce-scatter) in two parts, with the check that every
// part-1 GEMM tile's loads began after its wait ended.
TraceResult trace_moe(const TraceOptions<tb::MoeBenchOptions>& options);

}  // namespace tilelink::tool
