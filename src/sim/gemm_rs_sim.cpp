#include "tilelink/sim/gemm_rs_sim.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"

namespace tilelink::sim {
namespace {

constexpr const char* kWhere = "predict_gemm_rs";

void validate(const GemmRsProblem& p, const GemmRsConfig& c, const CostModel& cost) {
  check_world(kWhere, p.world, p.nodes);
  check_split(kWhere, "m", p.m, p.world, "each rank owns m / world rows");
  check_split(kWhere, "k", p.k, p.world, "K is split evenly");
  TL_REQUIRE(p.n > 0 && p.n % 4 == 0, kWhere, "n", p.n, "a positive multiple of 4");
  TL_REQUIRE(c.bm > 0 && c.bn > 0 && c.bn % 4 == 0, kWhere, "bn", c.bn, "bm > 0 and bn a positive multiple of 4");
  TL_REQUIRE(c.reduce_ctas >= 1 && c.reduce_ctas < uint32_t(cost.sms), kWhere, "reduce_ctas", c.reduce_ctas,
             "1 to " + std::to_string(cost.sms - 1));
}

}  // namespace

GemmRsPrediction predict_gemm_rs(const GemmRsProblem& p, const GemmRsConfig& c, const CostModel& cost) {
  validate(p, c, cost);
  const uint32_t w = static_cast<uint32_t>(p.world);
  const uint32_t ranks_per_node = w / static_cast<uint32_t>(p.nodes);
  GemmRsPlan plan;
  plan.world = w;
  plan.rows_per_rank = p.m / w;
  plan.n = p.n;
  plan.k = p.k / w;
  plan.bm = c.bm;
  plan.bn = c.bn;
  plan.granularity = c.granularity;

  GemmRsPrediction out;
  out.flop = 2.0 * p.m * double(p.n) * plan.k;
  const double tile_mma = 2.0 * c.bm * c.bn * plan.k / (cost.flops / cost.sms);
  auto link = [&](uint32_t owner) {
    return owner / ranks_per_node != 0 ? cost.network_bandwidth : cost.nvlink_bandwidth;
  };
  auto tile_bytes = [&](uint32_t t) {
    return double(plan.tile_rows(t).rows) * plan.tile_cols(t).rows * p.partial_bytes;
  };

  // Rank 0's compute: finish[step][tile].
  const uint32_t tpb = plan.tiles_per_block();
  const uint32_t ctas = uint32_t(cost.sms) - c.reduce_ctas;
  std::vector<double> free_at(ctas, 0.0);
  std::vector<double> finish(size_t(w) * tpb, 0.0);
  for (uint32_t i = 0; i < plan.num_tiles(); ++i) {
    const GemmRsPlan::Item it = plan.item(0, i);
    const double push = it.owner == 0 ? 0.0
                                      : tile_bytes(it.tile) / std::min(cost.sm_copy_bandwidth_per_cta, link(it.owner));
    double& cta = free_at[i % ctas];
    const double start = cta;
    cta = start + tile_mma + push;
    finish[i] = cta;
    out.timeline.push_back({"cta " + std::to_string(i % ctas),
                            "tile " + std::to_string(it.tile) + " for rank " + std::to_string(it.owner), start, cta});
  }

  // Owner 0's reduction: tile t's group is complete when every step's copy of its tiles arrived.
  std::vector<double> group_ready(plan.groups(), 0.0);
  for (uint32_t i = 0; i < plan.num_tiles(); ++i) {
    const uint32_t g = plan.group_of(plan.item(0, i).tile);
    group_ready[g] = std::max(group_ready[g], finish[i] + cost.notify_latency);
  }
  std::vector<double> reducer(c.reduce_ctas, 0.0);
  for (uint32_t t = 0; t < tpb; ++t) {
    double& r = reducer[t % c.reduce_ctas];
    const double start = std::max(r, group_ready[plan.group_of(t)]);
    // Reads world slots, writes the output tile.
    r = start + tile_bytes(t) * (w + 1) / cost.sm_copy_bandwidth_per_cta;
    out.timeline.push_back({"reduce " + std::to_string(t % c.reduce_ctas), "tile " + std::to_string(t), start, r});
  }
  out.fused = std::max(*std::max_element(free_at.begin(), free_at.end()),
                       *std::max_element(reducer.begin(), reducer.end()));

  // Isolated parts.
  const double block_bytes = double(plan.rows_per_rank) * p.n * p.partial_bytes;
  const double min_link = std::min(cost.nvlink_bandwidth, p.nodes > 1 ? cost.network_bandwidth : cost.nvlink_bandwidth);
  out.t_comp = double((uint64_t(plan.num_tiles()) + cost.sms - 1) / cost.sms) * tile_mma;
  out.t_comm = double(w - 1) * block_bytes / min_link;
  const double t_reduce = block_bytes * (w + 1) / std::min(cost.hbm_bandwidth, cost.sms * cost.sm_copy_bandwidth_per_cta);
  out.non_overlapped = out.t_comp + out.t_comm + t_reduce;
  out.ideal = std::max(out.t_comp, out.t_comm);
  // Decomposed: the GEMM of each owner's block on every SM, its send overlapping the next block's
  // GEMM, then the reduction.
  const double block_gemm = double((uint64_t(tpb) + cost.sms - 1) / cost.sms) * tile_mma;
  const double block_send = block_bytes / min_link;
  out.decomposed = block_gemm + double(w - 1) * std::max(block_gemm, block_send) + t_reduce;
  return out;
}

}  // namespace tilelink::sim
