#include "tilelink/sim/ag_gemm_sim.hpp"

#include <algorithm>
#include <cstdio>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "sim/all_gather_model.hpp"

namespace tilelink::sim {
namespace {

constexpr const char* kWhere = "predict_ag_gemm";

void validate(const AgGemmProblem& p, const AgGemmPlanConfig& config, const CostModel& cost) {
  const AllGatherConfig& c = config.op.comm;
  check_world(kWhere, p.world, p.nodes);
  check_split(kWhere, "m", p.m, p.world, "rows are sharded evenly");
  check_split(kWhere, "n", p.n, p.world, "columns are split evenly");
  TL_REQUIRE(p.k > 0, kWhere, "k", p.k, "a positive size");
  TL_REQUIRE(p.element_bytes > 0, kWhere, "element_bytes", p.element_bytes, "a positive size");
  TL_REQUIRE(config.bm > 0 && config.bn > 0, kWhere, "bm", config.bm, "positive tile sizes (bm, bn)");
  TL_REQUIRE(c.comm_rows > 0, kWhere, "comm_rows", c.comm_rows, "at least one row per communication tile");
  TL_REQUIRE(cost.sms >= 2 && cost.flops > 0, kWhere, "cost.sms", cost.sms, "at least 2 SMs and flops > 0");
  check_across_nodes(kWhere, p.nodes, c.resource == CommResource::kCopyEngine, "resource", to_string(c.resource),
                     "ce (the copy-engine all-gather's puts)");
  if (c.resource == CommResource::kSm) {
    TL_REQUIRE(c.num_blocks >= 1 && c.num_blocks < uint32_t(cost.sms), kWhere, "num_blocks", c.num_blocks,
               "1 to " + std::to_string(cost.sms - 1) + " CTAs with the SM resource");
  } else {
    TL_REQUIRE(c.order == CommOrder::kFullMesh, kWhere, "order", std::string(to_string(c.order)),
               "'mesh' with the copy engine");
  }
}

// Makespan of `tiles` equal tiles of `tile_time` on `ctas` CTAs, all ready at once.
double makespan(uint64_t tiles, uint32_t ctas, double tile_time) {
  return double((tiles + ctas - 1) / ctas) * tile_time;
}

}  // namespace

AgGemmPrediction predict_ag_gemm(const AgGemmProblem& p, const AgGemmPlanConfig& config, const CostModel& cost) {
  validate(p, config, cost);
  const AllGatherConfig& comm_config = config.op.comm;
  const uint32_t bm = config.bm, bn = config.bn;
  const uint32_t copy_ctas = comm_config.resource == CommResource::kSm ? comm_config.num_blocks : 0;
  const uint32_t w = static_cast<uint32_t>(p.world);
  const uint32_t n_local = p.n / w;
  const uint32_t ranks_per_node = w / static_cast<uint32_t>(p.nodes);

  AllGatherPlan ag;
  ag.map = RowShardMapping{p.m / w, comm_config.comm_rows, w};
  ag.row_bytes = p.dtype == DType::kE4m3 ? fp8_row_pitch(p.k, p.scaling) : uint64_t(p.k) * p.element_bytes;
  ag.pitch = ag.row_bytes;
  ag.method = AgMethod::kPull;
  ag.order = comm_config.order;

  AgGemmPrediction out;
  const double tile_time = 2.0 * bm * bn * p.k / (cost.gemm_flops(p.dtype) / cost.sms);
  out.flop = 2.0 * p.m * double(n_local) * p.k;

  const AllGatherModel comm = model_all_gather(ag, copy_ctas, ranks_per_node, cost, out.timeline);
  const std::vector<double>& arrival = comm.arrival;
  out.t_comm = comm.end;

  // Compute of rank 0: persistent CTAs take tiles round-robin in schedule order.
  std::vector<uint32_t> m_order((p.m + bm - 1) / bm);
  make_m_order(ag, 0, bm, m_order.data());
  const AgGemmSchedule schedule{p.m, n_local, bm, bn, m_order.data()};
  const uint32_t ctas = uint32_t(cost.sms) - copy_ctas;
  std::vector<double> free_at(ctas, 0.0);
  for (uint32_t i = 0; i < schedule.num_tiles(); ++i) {
    const TileCoord t = schedule.tile(i);
    const RowRange rows = schedule.rows(t.m);
    const ChannelRange need = ag.map.channels_for_rows(rows.row0, rows.rows);
    double ready = 0;
    for (uint32_t ch = need.first; ch < need.first + need.count; ++ch) ready = std::max(ready, arrival[ch]);
    double& cta = free_at[i % ctas];
    const double start = std::max(cta, ready);
    cta = start + tile_time;
    out.timeline.push_back({"cta " + std::to_string(i % ctas),
                            "C tile (" + std::to_string(t.m) + ", " + std::to_string(t.n) + ")", start, cta});
  }
  out.fused = std::max(out.t_comm, *std::max_element(free_at.begin(), free_at.end()));

  out.t_comp = makespan(uint64_t(schedule.num_tiles()), uint32_t(cost.sms), tile_time);
  out.non_overlapped = out.t_comm + out.t_comp;
  out.ideal = std::max(out.t_comp, out.t_comm);

  // Decomposed (PyTorch async-TP): the GEMM of shard s overlaps the copy of shard s + 1.
  const uint64_t shard_tiles = uint64_t((ag.map.rows_per_rank + bm - 1) / bm) * schedule.n_tiles();
  const double shard_gemm = makespan(shard_tiles, uint32_t(cost.sms), tile_time);
  const uint64_t shard_bytes = uint64_t(ag.map.rows_per_rank) * ag.row_bytes;
  double decomposed = 0;
  for (uint32_t step = 0; step < w; ++step) {
    const double next_copy =
        step + 1 < w ? copy_engine_time(shard_bytes, static_cast<int>(swizzled_peer(0, step + 1, w)),
                                        ranks_per_node, cost)
                     : 0.0;
    decomposed += std::max(shard_gemm, next_copy);
  }
  out.decomposed = decomposed;
  return out;
}

}  // namespace tilelink::sim
