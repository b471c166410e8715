// Discrete-event model of sequence-parallel attention as its protocol runs it
// (ops/attention/sp_attention_protocol.hpp): the all-gather of the K/V rows (as in
// ag_gemm_sim.hpp) and the attention work items -- one q head x one block of bq query rows --
// that fold the K/V chunks in the rank's arrival order (own shard first), skipping under a causal
// mask the chunks wholly in the block's future.
//
// Every rank is modelled (its own positions, chunk order and rotated arrivals); the slowest sets
// the op's time and its timeline is drawn (with a causal mask, contiguous shards load the last
// rank most; zig-zag balances them). The items go round-robin over the CTAs the all-gather leaves; an item's
// chunk starts when its CTA has finished the previous chunk and the chunk has arrived, and takes
// 4 x (query, key) pairs it sees x head_dim FLOPs at attention_flops / SMs (with a causal mask
// only the visible pairs count). With the local pass first, a CTA folds every item's own shard,
// then every item's remote chunks, paying a store and a load of the item's state between them.
// The baselines: non-overlapped = the all-gather, then the same items in one pass on every SM
// with all chunks present; ideal = max(T_comp, T_comm). attention_flops is a
// planning figure: tilelink's kernel measures 460-580 TFLOP/s on an H200 at world 1 (docs/PERF.md).
#pragma once

#include <cstdint>
#include <vector>

#include "tilelink/ops/attention/sp_attention_config.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct SpAttentionProblem {
  uint32_t seq = 32768;  // tokens over all ranks
  uint32_t q_heads = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  bool causal = true;
  uint32_t element_bytes = 2;
  int world = 8;
  int nodes = 1;
};

// What the model runs besides the problem: the work item's query rows, the op's configuration --
// of which it follows the K/V all-gather (comm.comm_rows tokens per chunk, no automatic;
// comm.resource; with CommResource::kSm comm.num_blocks copying CTAs), the sequence's layout, and
// local_first: every CTA folds its items' own shard before any remote chunk, parking each item's
// state (o in fp32, m, l) in memory in between at the CTA's share of the HBM bandwidth -- and the
// rates the model assumes.
struct SpAttentionPlanConfig {
  uint32_t bq = 128;  // query rows per work item
  SpAttentionConfig op = plan_op_config<SpAttentionConfig>();
  double attention_flops = 550e12;  // the whole GPU's flash-attention forward rate
  // How much slower the all-gather runs under the attention than alone (1: not at all). On
  // virtual ranks both share one GPU's memory: `tilelink trace sp_attention` measured 2.4 at
  // world 8 (docs/PERF.md). Applies to the fused schedule's chunk arrivals only; T_comm and the
  // non-overlapped chain keep the isolated rate.
  double comm_slowdown = 1.0;
};

struct SpAttentionPrediction {
  double fused = 0;
  double non_overlapped = 0;
  double ideal = 0;
  double t_comp = 0;  // the slowest rank's items on every SM, all chunks present
  double t_comm = 0;  // the all-gather alone
  double flop = 0;    // the slowest rank's, the visible pairs'
  uint32_t items = 0;
  uint32_t ctas = 0;
  uint32_t rank = 0;  // the slowest rank, whose times and timeline these are
  std::vector<Interval> timeline;
};

// Throws InvalidArgument for shapes or configurations the protocol could not run.
SpAttentionPrediction predict_sp_attention(const SpAttentionProblem& problem, const SpAttentionPlanConfig& config,
                                           const CostModel& cost = {});

}  // namespace tilelink::sim
