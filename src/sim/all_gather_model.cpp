#include "sim/all_gather_model.hpp"

#include <algorithm>
#include <string>

namespace tilelink::sim {
namespace {

// Bandwidth into rank 0 from rank `from`.
double ingress(int from, uint32_t ranks_per_node, const CostModel& cost) {
  return uint32_t(from) / ranks_per_node != 0 ? cost.network_bandwidth : cost.nvlink_bandwidth;
}

}  // namespace

double copy_engine_time(uint64_t bytes, int from, uint32_t ranks_per_node, const CostModel& cost) {
  return cost.ce_chunk_overhead + double(bytes) / std::min(cost.ce_bandwidth, ingress(from, ranks_per_node, cost));
}

AllGatherModel model_all_gather(const AllGatherPlan& ag, uint32_t copy_ctas, uint32_t ranks_per_node,
                                const CostModel& cost, std::vector<Interval>& timeline) {
  AllGatherModel out;
  out.arrival.assign(ag.map.num_channels(), 0.0);
  double cursor = 0;
  for (uint32_t i = 0; i < ag.num_items(); ++i) {
    const AllGatherPlan::Item it = ag.item(0, i);
    const uint64_t bytes = ag.tile_shape(it.channel).bytes();
    const double start = cursor;
    cursor += copy_ctas == 0 ? copy_engine_time(bytes, it.peer, ranks_per_node, cost)
                             : double(bytes) / std::min(copy_ctas * cost.sm_copy_bandwidth_per_cta,
                                                        ingress(it.peer, ranks_per_node, cost));
    out.arrival[it.channel] = cursor + cost.notify_latency;
    timeline.push_back({"comm", "tile " + std::to_string(it.channel) + " from rank " + std::to_string(it.peer), start,
                        cursor});
  }
  out.end = cursor;
  return out;
}

}  // namespace tilelink::sim
