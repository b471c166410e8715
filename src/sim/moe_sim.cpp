#include "tilelink/sim/moe_sim.hpp"

#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "sim/all_gather_model.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::sim {
namespace {

// The grouped GEMM's tiles in the scheduler's time order (sm90_row_ordered_scheduler.cuh): the
// tile order's positions in bands of `band` rows, each band walked by cluster column; f(tile
// row, n tile). A cluster's padding tile past n_tiles is left out.
template <class F>
void for_each_gemm_tile(const std::vector<uint32_t>& order, uint32_t n_tiles, uint32_t cluster, uint32_t band, F&& f) {
  const uint32_t rows = static_cast<uint32_t>(order.size()), cols = (n_tiles + cluster - 1) / cluster;
  for (uint64_t c = 0; c < uint64_t(rows) * cols; ++c) {
    const GridCell cell = banded_cell(c, rows, cols, band);
    for (uint32_t k = 0; k < cluster && cell.col * cluster + k < n_tiles; ++k) f(order[cell.row], cell.col * cluster + k);
  }
}

constexpr const char* kWhere = "predict_moe_ag";

// The problem's expert ids, or its synthetic routing's (seeded: the same ids every call).
std::vector<int32_t> routing_ids(const MoeProblem& p) {
  if (!p.ids.empty()) return p.ids;
  std::mt19937_64 rng(p.seed);
  return synthetic_routing(rng, p.m, p.topk, p.experts, p.routing);
}

void validate(const MoeProblem& p, const MoeAgPlanConfig& c, uint32_t gather_ctas, const CostModel& cost) {
  check_world(kWhere, p.world, p.nodes);
  check_split(kWhere, "m", p.m, p.world, "tokens are sharded evenly");
  check_split(kWhere, "intermediate", p.intermediate, p.world, "each expert's columns are split evenly");
  TL_REQUIRE(p.hidden > 0, kWhere, "hidden", p.hidden, "a positive size");
  TL_REQUIRE(p.experts > 0, kWhere, "experts", p.experts, "at least one");
  TL_REQUIRE(p.topk > 0 && p.topk <= p.experts, kWhere, "topk", p.topk,
             "1 to the number of experts (" + std::to_string(p.experts) + ")");
  TL_REQUIRE(p.ids.empty() || p.ids.size() == size_t(p.m) * p.topk, kWhere, "ids", p.ids.size(),
             "m * topk = " + std::to_string(size_t(p.m) * p.topk) + " expert ids, or none");
  TL_REQUIRE(c.bm > 0 && c.bn > 0, kWhere, "bm", c.bm, "positive tile sizes (bm, bn)");
  TL_REQUIRE(c.op.comm.comm_rows > 0, kWhere, "comm_rows", c.op.comm.comm_rows,
             "at least one row per communication tile");
  TL_REQUIRE(gather_ctas > 0, kWhere, "gather_blocks", gather_ctas, "at least one");
  TL_REQUIRE(c.cluster > 0, kWhere, "cluster", c.cluster, "at least one");
  TL_REQUIRE(c.mapping_time >= 0, kWhere, "mapping_time", c.mapping_time, ">= 0 seconds");
  TL_REQUIRE(cost.sms >= 2 && cost.flops > 0, kWhere, "cost.sms", cost.sms, "at least 2 SMs and flops > 0");
  check_across_nodes(kWhere, p.nodes, c.op.comm.resource == CommResource::kCopyEngine, "resource",
                     to_string(c.op.comm.resource), "ce (the copy-engine all-gather's puts)");
}

// The reduce-scatter of part 2 on one port: (world - 1) blocks of the rank's tokens leave it.
double reduce_scatter_port_time(const MoeProblem& p, uint32_t tpr, double row_bytes, const CostModel& cost) {
  return p.world > 1 ? double(p.world - 1) * tpr * row_bytes / std::min(cost.ce_bandwidth, cost.nvlink_bandwidth)
                     : 0.0;
}

// Part 2's owners' sums left for later (the micro-batched layer runs another batch's part 1 before
// them): (start on the SMs, start of this part's pushes on the port, timeline) -> their end.
using DeferredReduce = std::function<double(double, double, std::vector<Interval>&)>;

// Part 2's baselines and totals, whichever combine: t_comp (the grouped GEMM on every SM),
// t_comm (the reduce-scatter), non-overlapped, ideal, flop.
void finish_moe_gemm_rs(const MoeProblem& p, uint32_t tiles, uint32_t n_tiles, double tile_time, uint32_t k,
                        uint32_t tpr, double row_bytes, const CostModel& cost, MoePrediction& out) {
  const uint32_t w = static_cast<uint32_t>(p.world);
  out.t_comp = double((uint64_t(tiles) * n_tiles + uint64_t(cost.sms) - 1) / uint64_t(cost.sms)) * tile_time;
  const double tokens_bytes = double(tpr) * row_bytes;  // one rank's block of the output
  out.t_comm = reduce_scatter_port_time(p, tpr, row_bytes, cost);
  const double combine_bytes = (double(p.m) * p.topk + p.m) * row_bytes;
  const double sum_bytes = w > 1 ? double(w + 1) * tokens_bytes : 0.0;
  out.non_overlapped = out.t_comp + combine_bytes / cost.hbm_bandwidth + out.t_comm + sum_bytes / cost.hbm_bandwidth;
  out.fused = std::max(out.fused, out.t_comm);  // the pushes cross the links at most this fast
  out.ideal = std::max(out.t_comp, out.t_comm);
  out.flop = 2.0 * double(p.m) * p.topk * k * p.hidden;
}

// Part 2 with the combine in the GEMM's epilogue (moe_rs_protocol.hpp): the GEMM on every SM from
// `sm_start`; a finished tile counts on the items (token block, its column tile) of the blocks its
// span reaches, and the CTA of an item's last tile then combines it at the epilogue's sum rate;
// after the GEMM, `reduce_ctas` CTAs take the rank's (block, column tile) items in the protocol's
// stride, each once its parts are in (by symmetry: this rank's combines of that block of every
// owner) and the port has carried that share of the reduce-scatter (the pushes cross it in item
// order from the GEMM's start), moving (world + 1) rows per token at one CTA's copy rate, at most
// an equal share of HBM. With `deferred`, the sums are left to it and out.fused is the GEMM's end.
void predict_epilogue_combine(const MoeProblem& p, const MoeRsPlan& plan, const MoeMappingView& view,
                              const std::vector<uint32_t>& order, uint32_t cluster, uint32_t band, double tile_time,
                              uint32_t ctas, uint32_t reduce_ctas, double sm_start, const CostModel& cost,
                              MoePrediction& out, DeferredReduce* deferred) {
  const uint32_t w = plan.world(), n_tiles = plan.n_tiles(), blocks = plan.tokens.num_channels();
  std::vector<uint32_t> expected(blocks), arrived(size_t(blocks) * n_tiles, 0);
  for (uint32_t g = 0; g < blocks; ++g) expected[g] = moe_block_tiles(plan, view, view.num_tiles, g);
  std::vector<double> free_at(ctas, sm_start), combined(size_t(blocks) * n_tiles, 0.0);
  uint64_t j = 0;
  for_each_gemm_tile(order, n_tiles, cluster, band, [&](uint32_t t, uint32_t nt) {
    double& cta = free_at[j % ctas];
    const std::string lane = "cta " + std::to_string(j++ % ctas);
    const double start = cta;
    cta = start + tile_time;
    out.timeline.push_back({lane, "tile (" + std::to_string(t) + ", " + std::to_string(nt) + ")", start, cta});
    const ChannelRange reach = moe_tile_blocks(plan, view, t);
    for (uint32_t g = reach.first; g < reach.first + reach.count; ++g) {
      const size_t item = size_t(g) * n_tiles + nt;
      if (++arrived[item] != expected[g]) continue;
      const double bytes = double(plan.tokens.rows_of_channel(g).rows) * (p.topk + 1) *
                           tile_cols(nt, plan.bn, plan.n).cols * p.element_bytes;
      const double begin = cta;
      cta += bytes / cost.epilogue_sum_bandwidth_per_cta;
      combined[item] = cta + cost.notify_latency;
      out.timeline.push_back({lane, "combine " + std::to_string(g) + "." + std::to_string(nt), begin, cta});
    }
  });
  const double gemm_end = *std::max_element(free_at.begin(), free_at.end());
  out.fused = gemm_end;
  const double port_time = reduce_scatter_port_time(p, plan.tokens.rows_per_rank, double(p.hidden) * p.element_bytes, cost);
  DeferredReduce reduce = [plan, combined = std::move(combined), reduce_ctas, port_time, w, n_tiles,
                           element_bytes = p.element_bytes, per_cta = std::min(cost.sm_copy_bandwidth_per_cta,
                                                                              cost.hbm_bandwidth / reduce_ctas)](
                              double start, double port_start, std::vector<Interval>& timeline) {
    if (w == 1) return start;  // the combine wrote the output
    std::vector<double> reduce_free(reduce_ctas, start);
    double end = start;
    const uint32_t items = plan.tokens.chunks_per_rank() * n_tiles;
    for (uint32_t i = 0; i < items; ++i) {
      const uint32_t b = i / n_tiles, nt = i % n_tiles;
      double ready = port_start + port_time * double(i + 1) / items;
      for (uint32_t o = 0; o < w; ++o) ready = std::max(ready, combined[size_t(plan.tokens.channel(o, b)) * n_tiles + nt]);
      double& cta = reduce_free[i % reduce_ctas];
      const double begin = std::max(cta, ready);
      const double bytes =
          double(plan.tokens.rows_of_channel(b).rows) * (w + 1) * tile_cols(nt, plan.bn, plan.n).cols * element_bytes;
      cta = begin + bytes / per_cta;
      end = std::max(end, cta);
      timeline.push_back({"reduce " + std::to_string(i % reduce_ctas),
                          "reduce " + std::to_string(b) + "." + std::to_string(nt), begin, cta});
    }
    return end;
  };
  if (deferred != nullptr) {
    *deferred = std::move(reduce);
  } else {
    out.fused = reduce(gemm_end, sm_start, out.timeline);
  }
}

// Part 1 with its all-gather's copies from `comm_start` and its CTAs from `sm_start` (0, 0: the op
// alone); times absolute. *gemm_end: the grouped GEMM's last tile.
MoePrediction moe_ag_at(const MoeProblem& p, const MoeAgPlanConfig& c, const CostModel& cost, double sm_start,
                        double comm_start, double* gemm_end) {
  const bool in_producer = c.producer_gather_efficiency > 0;
  TL_REQUIRE(c.producer_gather_efficiency >= 0 && c.producer_gather_efficiency <= 1, kWhere,
             "producer_gather_efficiency", c.producer_gather_efficiency, "0 (off) or in (0, 1]");
  const uint32_t gather_ctas = in_producer ? 0u
                               : c.op.gather_blocks != 0
                                   ? c.op.gather_blocks
                                   : moe_policy::gather_blocks(cost.sms, p.intermediate / std::max(p.world, 1));
  validate(p, c, in_producer ? 1u : gather_ctas, cost);
  const uint32_t copy_ctas = c.op.comm.resource == CommResource::kSm ? c.op.comm.num_blocks : 0;
  const uint32_t w = static_cast<uint32_t>(p.world);
  const uint32_t n = p.intermediate / w;
  const std::vector<int32_t> ids = routing_ids(p);
  const MoeRouting routing{p.m, p.topk, p.experts, ids.data(), nullptr};
  if (std::string e = check_moe_routing(routing); !e.empty()) throw InvalidArgument(std::string(kWhere) + ": " + e);

  AllGatherPlan ag;
  ag.map = RowShardMapping{p.m / w, c.op.comm.comm_rows, w};
  ag.row_bytes = p.hidden * p.element_bytes;
  ag.pitch = ag.row_bytes;
  MoePrediction out;
  AllGatherModel comm = model_all_gather(ag, copy_ctas, w / static_cast<uint32_t>(p.nodes), cost, out.timeline);
  out.t_comm = comm.end;
  for (Interval& e : out.timeline) {  // the copies are all of it so far
    e.start += comm_start;
    e.end += comm_start;
  }
  for (double& t : comm.arrival) {
    if (t > 0) t += comm_start;  // own channels stay in place
  }
  comm.end += comm_start;

  const MoeMapping mapping = build_moe_mapping(routing, c.bm);
  const MoeMappingView view = mapping.view();
  std::vector<uint32_t> order(view.num_tiles);
  make_moe_tile_order(ag, 0, view, order.data());
  out.tiles = view.num_tiles;

  // Gather: each position of the tile order to the CTA free first (they claim positions from a
  // shared counter, in order; a CTA holds its position while it waits for the rows). In the
  // producer (a design): a tile's rows are ready once their channels have arrived.
  const double gather_tile = double(c.bm) * ag.row_bytes / cost.sm_copy_bandwidth_per_cta;
  std::vector<double> gather_free(gather_ctas, sm_start + c.mapping_time), gathered(view.num_tiles, 0.0);
  for (uint32_t i = 0; i < view.num_tiles; ++i) {
    const uint32_t t = order[i];
    double ready = 0;
    if (view.tile_span[t] != 0) {
      const ChannelRange need = ag.map.channels_for_rows(view.tile_token0[t], view.tile_span[t]);
      for (uint32_t ch = need.first; ch < need.first + need.count; ++ch) ready = std::max(ready, comm.arrival[ch]);
    }
    if (in_producer) {
      gathered[t] = std::max(ready, sm_start + c.mapping_time);
      continue;
    }
    const auto free_first = std::min_element(gather_free.begin(), gather_free.end());
    const size_t which = static_cast<size_t>(free_first - gather_free.begin());
    double& cta = *free_first;
    const double start = std::max(cta, ready);
    cta = start + gather_tile;
    gathered[t] = cta + cost.notify_latency;
    out.timeline.push_back({"gather " + std::to_string(which), "rows of tile " + std::to_string(t), start, cta});
  }
  out.t_gather = in_producer ? 0.0 : double((view.num_tiles + gather_ctas - 1) / gather_ctas) * gather_tile;

  // Grouped GEMM: the SMs left, in whole clusters, round-robin over (tile row, N tile).
  const int left = cost.sms - static_cast<int>(gather_ctas) - static_cast<int>(copy_ctas) -
                   (w > 1 ? static_cast<int>(c.slack_sms) : 0);
  const uint32_t ctas = static_cast<uint32_t>(left / static_cast<int>(c.cluster)) * c.cluster;
  TL_REQUIRE(ctas >= c.cluster, kWhere, "gather_blocks", gather_ctas,
             "to leave at least one GEMM cluster of the " + std::to_string(cost.sms) + " SMs");
  out.gemm_ctas = ctas;
  out.gather_ctas = gather_ctas;
  const uint32_t n_tiles = (n + c.bn - 1) / c.bn;
  const double tma_tile_time = 2.0 * c.bm * c.bn * p.hidden / (cost.flops / cost.sms);
  const double tile_time = in_producer ? tma_tile_time / c.producer_gather_efficiency : tma_tile_time;
  std::vector<double> free_at(ctas, sm_start + c.mapping_time);
  const uint32_t band = moe_policy::swizzle(c.op.swizzle, n, c.bn, c.cluster, static_cast<int>(ctas));
  uint64_t j = 0;
  for_each_gemm_tile(order, n_tiles, c.cluster, band, [&](uint32_t t, uint32_t nt) {
    double& cta = free_at[j % ctas];
    const double start = std::max(cta, gathered[t]);
    cta = start + tile_time;
    out.timeline.push_back({"cta " + std::to_string(j++ % ctas),
                            "tile (" + std::to_string(t) + ", " + std::to_string(nt) + ")", start, cta});
  });
  const double last_tile = *std::max_element(free_at.begin(), free_at.end());
  if (gemm_end != nullptr) *gemm_end = last_tile;
  out.fused = std::max(comm.end, last_tile);

  const uint64_t tiles = uint64_t(view.num_tiles) * n_tiles;
  out.t_comp = double((tiles + uint64_t(cost.sms) - 1) / uint64_t(cost.sms)) * tma_tile_time;
  const double gather_bytes = 2.0 * double(view.num_tiles) * c.bm * ag.row_bytes;  // read + write
  out.non_overlapped = out.t_comm + gather_bytes / cost.hbm_bandwidth + out.t_comp;
  out.ideal = std::max(out.t_comp, out.t_comm);
  out.flop = 2.0 * double(p.m) * p.topk * n * p.hidden;
  return out;
}

// Part 2 with its CTAs from `sm_start` (0: the op alone); times absolute. `deferred` (the epilogue
// combine only): its owners' sums are left to it, and out.fused is the GEMM's end.
MoePrediction moe_gemm_rs_at(const MoeProblem& p, const MoeRsPlanConfig& c, const CostModel& cost, double sm_start,
                             DeferredReduce* deferred) {
  const MoeCombine combine =
      moe_policy::combine(c.op.combine, p.world, p.nodes > 1, c.op.method);  // put_signal across nodes
  const bool in_epilogue = combine == MoeCombine::kEpilogue;
  // Blocks: the combine CTAs beside the GEMM; epilogue: the reduction's CTAs after it.
  const uint32_t combine_ctas =
      c.op.combine_blocks != 0 ? c.op.combine_blocks
      : in_epilogue
          ? static_cast<uint32_t>(cost.sms)  // the op's: a CTA per SM of the budget
          : moe_policy::combine_blocks(cost.sms, p.topk, p.intermediate / std::max(p.world, 1), p.world, c.cluster);
  constexpr const char* where = "predict_moe_gemm_rs";
  {
    MoeAgPlanConfig shape;  // the shared checks of the problem
    shape.bm = c.bm;
    shape.bn = c.bn;
    shape.op.comm.resource = CommResource::kCopyEngine;  // part 1's all-gather is not part 2's to check
    validate(p, shape, 1, cost);
  }
  // Across nodes the combine blocks stage the peers' rows and the stream puts them; the epilogue
  // combine stores into peers from the GEMM.
  check_across_nodes(where, p.nodes, !in_epilogue, "combine", to_string(combine),
                     "blocks (staged, then put by the stream)");
  TL_REQUIRE(c.op.comm_rows > 0, where, "comm_rows", c.op.comm_rows, "at least one token per combine block");
  TL_REQUIRE(combine_ctas > 0 && c.cluster > 0, where, "combine_blocks", combine_ctas, "at least one (and a cluster)");
  const uint32_t w = static_cast<uint32_t>(p.world);
  const uint32_t k = p.intermediate / w, tpr = p.m / w;
  const std::vector<int32_t> ids = routing_ids(p);
  const MoeRouting routing{p.m, p.topk, p.experts, ids.data(), nullptr};
  if (std::string e = check_moe_routing(routing); !e.empty()) throw InvalidArgument(std::string(where) + ": " + e);
  const MoeMapping mapping = build_moe_mapping(routing, c.bm);
  const uint32_t tiles = mapping.num_tiles();
  MoeRsPlan plan;
  plan.tokens = RowShardMapping{tpr, c.op.comm_rows, w};
  plan.n = p.hidden;
  plan.bn = c.bn;
  plan.max_tiles = tiles;
  plan.recv_columns = in_epilogue ? plan.n_tiles() : 1;

  MoePrediction out;
  out.tiles = tiles;
  // The GEMM's tile order: by the combine's need of the tile's first token.
  std::vector<uint32_t> order(tiles);
  for (uint32_t t = 0; t < tiles; ++t) order[t] = t;
  auto key = [&](uint32_t t) {
    return mapping.tile_span[t] == 0 ? plan.combine_keys() : plan.combine_key(0, mapping.tile_token0[t]);
  };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });

  const int left = cost.sms - (in_epilogue ? 0 : static_cast<int>(combine_ctas));
  const uint32_t ctas = static_cast<uint32_t>(std::max(left, 0) / static_cast<int>(c.cluster)) * c.cluster;
  TL_REQUIRE(ctas >= c.cluster, where, "combine_blocks", combine_ctas,
             "to leave at least one GEMM cluster of the " + std::to_string(cost.sms) + " SMs");
  out.gemm_ctas = ctas;
  out.combine_ctas = combine_ctas;
  const uint32_t n_tiles = plan.n_tiles();
  const uint32_t band = moe_policy::swizzle(moe_policy::part2_swizzle(c.op.swizzle, combine), p.hidden, c.bn,
                                           c.cluster, static_cast<int>(ctas));
  const double tile_time = 2.0 * c.bm * c.bn * k / (cost.flops / cost.sms);
  const double row_bytes = double(p.hidden) * p.element_bytes;
  if (in_epilogue) {
    predict_epilogue_combine(p, plan, mapping.view(), order, c.cluster, band, tile_time, ctas, combine_ctas, sm_start,
                             cost, out, deferred);
    const double gemm_end = out.fused;
    finish_moe_gemm_rs(p, tiles, n_tiles, tile_time, k, tpr, row_bytes, cost, out);
    if (deferred != nullptr) out.fused = gemm_end;  // the port's bound is the deferred sums'
    return out;
  }
  TL_REQUIRE(deferred == nullptr, where, "combine", to_string(combine),
             "the epilogue combine (the micro-batched layer's model defers its owners' sums)");
  std::vector<double> free_at(ctas, 0.0), row_ready(tiles, 0.0);
  uint64_t j = 0;
  for_each_gemm_tile(order, n_tiles, c.cluster, band, [&](uint32_t t, uint32_t nt) {
    double& cta = free_at[j % ctas];
    const double start = cta;
    cta = start + tile_time;
    row_ready[t] = std::max(row_ready[t], cta + cost.notify_latency);
    out.timeline.push_back({"cta " + std::to_string(j++ % ctas),
                            "tile (" + std::to_string(t) + ", " + std::to_string(nt) + ")", start, cta});
  });

  // Combine and reduction items, dealt round-robin as the protocol deals them.
  std::vector<double> combine_free(combine_ctas, 0.0);
  double end = *std::max_element(free_at.begin(), free_at.end());
  std::vector<double> round_done(plan.tokens.chunks_per_rank(), 0.0);
  for (uint32_t i = 0; i < plan.items(); ++i) {
    const uint32_t b = i / plan.items_per_round(), pos = i % plan.items_per_round();
    double& cta = combine_free[i % combine_ctas];
    double ready = 0, bytes = 0;
    std::string what;
    if (pos < w) {
      const uint32_t owner = (1 + pos) % w;
      const RowRange rows = plan.tokens.rows_of_channel(plan.tokens.channel(owner, b));
      for (uint64_t q = uint64_t(rows.row0) * p.topk; q < uint64_t(rows.row0 + rows.rows) * p.topk; ++q) {
        ready = std::max(ready, row_ready[mapping.pair_row[q] / c.bm]);
      }
      bytes = double(rows.rows) * (p.topk + 1) * row_bytes;
      what = "combine " + std::to_string(owner) + "." + std::to_string(b);
    } else {
      ready = round_done[b] + cost.notify_latency;
      bytes = double(plan.tokens.rows_of_channel(plan.tokens.channel(0, b)).rows) * (w + 1) * row_bytes;
      what = "reduce " + std::to_string(b);
    }
    const double start = std::max(cta, ready);
    cta = start + bytes / cost.sm_copy_bandwidth_per_cta;
    if (pos < w) round_done[b] = std::max(round_done[b], cta);
    end = std::max(end, cta);
    out.timeline.push_back({"combine " + std::to_string(i % combine_ctas), what, start, cta});
  }
  out.fused = end;
  finish_moe_gemm_rs(p, tiles, n_tiles, tile_time, k, tpr, row_bytes, cost, out);
  return out;
}

// The activation on part 1's sorted rows at HBM bandwidth: it reads the part's columns (gate and
// up for SwiGLU) and writes intermediate / world.
double activation_time(const MoeProblem& p, uint32_t part1_intermediate, uint32_t tiles, uint32_t bm,
                       const CostModel& cost) {
  const uint32_t w = static_cast<uint32_t>(p.world);
  return double(tiles) * bm * (part1_intermediate / w + p.intermediate / w) * p.element_bytes / cost.hbm_bandwidth;
}

// Micro-batch b of `batches`: every rank's tokens split into contiguous pieces (the first T %
// batches of them one token longer), piece b of every rank in rank order, with its routing.
MoeProblem micro_batch(const MoeProblem& p, const std::vector<int32_t>& ids, uint32_t batches, uint32_t b) {
  const uint32_t w = static_cast<uint32_t>(p.world), tpr = p.m / w;
  const uint32_t piece = tpr / batches + (b < tpr % batches ? 1 : 0);
  const uint32_t first = b * (tpr / batches) + std::min(b, tpr % batches);
  MoeProblem q = p;
  q.m = piece * w;
  q.ids.clear();
  for (uint32_t r = 0; r < w; ++r) {
    const auto from = ids.begin() + std::ptrdiff_t(uint64_t(r * tpr + first) * p.topk);
    q.ids.insert(q.ids.end(), from, from + std::ptrdiff_t(uint64_t(piece) * p.topk));
  }
  return q;
}

void append(std::vector<Interval>& to, std::vector<Interval>&& from, const std::string& lane_prefix,
            const std::string& name_prefix) {
  for (Interval& e : from) {
    e.lane = lane_prefix + e.lane;
    e.name = name_prefix + e.name;
    to.push_back(std::move(e));
  }
}

}  // namespace

MoePrediction predict_moe_ag(const MoeProblem& p, const MoeAgPlanConfig& c, const CostModel& cost) {
  return moe_ag_at(p, c, cost, 0, 0, nullptr);
}

MoePrediction predict_moe_gemm_rs(const MoeProblem& p, const MoeRsPlanConfig& c, const CostModel& cost) {
  return moe_gemm_rs_at(p, c, cost, 0, nullptr);
}

MoePrediction predict_moe_layer(const MoeProblem& p, MlpActivation activation, const MoeAgPlanConfig& part1,
                                const MoeRsPlanConfig& part2, const CostModel& cost, uint32_t micro_batches) {
  MoeProblem p1 = p;
  if (activation == MlpActivation::kSwiGlu) p1.intermediate = 2 * p.intermediate;
  const MoePrediction a = predict_moe_ag(p1, part1, cost);
  const MoePrediction b = predict_moe_gemm_rs(p, part2, cost);
  const double act = activation_time(p, p1.intermediate, a.tiles, part1.bm, cost);
  MoePrediction out;
  out.tiles = a.tiles;
  out.gemm_ctas = a.gemm_ctas;
  out.gather_ctas = a.gather_ctas;
  out.combine_ctas = b.combine_ctas;
  out.fused = a.fused + act + b.fused;
  out.non_overlapped = a.non_overlapped + act + b.non_overlapped;
  out.ideal = a.ideal + act + b.ideal;
  out.t_comp = a.t_comp + act + b.t_comp;
  out.t_comm = a.t_comm + b.t_comm;
  out.t_gather = a.t_gather;
  out.flop = a.flop + b.flop;
  if (micro_batches == 1) {
    out.timeline = a.timeline;
    out.timeline.push_back({"activation", "activation", a.fused, a.fused + act});
    for (Interval e : b.timeline) {
      e.start += a.fused + act;
      e.end += a.fused + act;
      e.lane = "part 2 " + e.lane;
      out.timeline.push_back(e);
    }
    return out;
  }

  // Micro-batched (a design, not built): the baselines above are the whole layer's; the fused time
  // is the pipeline's.
  constexpr const char* where = "predict_moe_layer";
  const uint32_t w = static_cast<uint32_t>(p.world), tpr = p.m / w;
  TL_REQUIRE(micro_batches >= 1 && micro_batches <= tpr, where, "micro_batches", micro_batches,
             "1 to the tokens per rank (" + std::to_string(tpr) + ")");
  TL_REQUIRE(w > 1, where, "micro_batches", micro_batches,
             "1 at world 1 (one rank runs the non-overlapped chain: there is no communication to pipeline)");
  const std::vector<int32_t> ids = routing_ids(p);
  std::vector<MoeProblem> batch1, batch2;
  std::vector<double> ag_start(micro_batches + 1, 0.0);  // the all-gathers, back to back on the copy engine
  for (uint32_t i = 0; i < micro_batches; ++i) {
    batch2.push_back(micro_batch(p, ids, micro_batches, i));
    batch1.push_back(batch2.back());
    batch1.back().intermediate = p1.intermediate;
    ag_start[i + 1] = ag_start[i] + predict_moe_ag(batch1[i], part1, cost).t_comm;
  }
  // The compute stream: part 1 of batch i, the owners' sums of batch i - 1 (left until then, so
  // the SMs have part 1's tiles while its pushes cross the port), the activation, part 2's GEMM
  // with its epilogue's pushes. The port serves in issue order: every all-gather, then each part
  // 2's pushes from its GEMM's start.
  out.timeline.clear();
  double sm = 0, port_free = ag_start[micro_batches], pending_port = 0;
  DeferredReduce pending;
  for (uint32_t i = 0; i < micro_batches; ++i) {
    const std::string tag = "batch " + std::to_string(i) + ": ";
    double gemm_end = 0;
    MoePrediction one = moe_ag_at(batch1[i], part1, cost, sm, ag_start[i], &gemm_end);
    append(out.timeline, std::move(one.timeline), "", tag);
    sm = gemm_end;
    std::vector<Interval> sums;
    if (pending) sm = pending(sm, pending_port, sums);
    append(out.timeline, std::move(sums), "part 2 ", "batch " + std::to_string(i - 1) + ": ");
    const double batch_act = activation_time(batch2[i], p1.intermediate, one.tiles, part1.bm, cost);
    out.timeline.push_back({"activation", tag + "activation", sm, sm + batch_act});
    sm += batch_act;
    MoePrediction two = moe_gemm_rs_at(batch2[i], part2, cost, sm, &pending);
    append(out.timeline, std::move(two.timeline), "part 2 ", tag);
    pending_port = std::max(port_free, sm);
    port_free = pending_port + two.t_comm;
    sm = two.fused;
  }
  std::vector<Interval> sums;
  out.fused = pending(sm, pending_port, sums);
  append(out.timeline, std::move(sums), "part 2 ", "batch " + std::to_string(micro_batches - 1) + ": ");
  return out;
}

}  // namespace tilelink::sim
