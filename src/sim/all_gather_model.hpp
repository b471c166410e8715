// The all-gather half shared by the models of ops that consume gathered rows (AG+GEMM, MoE
// part 1): rank 0 pulls the foreign shards in communication tiles, one after another on its
// resource (sim/ag_gemm_sim.hpp says how each is costed). Internal to the models.
#pragma once

#include <vector>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct AllGatherModel {
  std::vector<double> arrival;  // per mapping channel: when a consumer sees it (own: 0)
  double end = 0;               // the last copy's end (T_comm)
};

// `copy_ctas` = 0: the copy engine; else that many SM CTAs. Ranks are numbered node-major,
// `ranks_per_node` to a node. Appends the copies to `timeline` (lane "comm").
AllGatherModel model_all_gather(const AllGatherPlan& ag, uint32_t copy_ctas, uint32_t ranks_per_node,
                                const CostModel& cost, std::vector<Interval>& timeline);

// One copy-engine copy of `bytes` into rank 0 from rank `from`.
double copy_engine_time(uint64_t bytes, int from, uint32_t ranks_per_node, const CostModel& cost);

}  // namespace tilelink::sim
