#include "tilelink/sim/gemm_rs_sim.hpp"

#include <algorithm>
#include <string>

#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink::sim {
namespace {

constexpr const char* kWhere = "predict_gemm_rs";

void validate(const GemmRsProblem& p, const GemmRsPlanConfig& c, const CostModel& cost) {
  check_world(kWhere, p.world, p.nodes);
  TL_REQUIRE(p.m > 0, kWhere, "m", p.m, "at least one row (rank r owns rows [r * ceil(m / world), ...))");
  check_split(kWhere, "k", p.k, p.world, "K is split evenly");
  TL_REQUIRE(p.n > 0 && p.n % 4 == 0, kWhere, "n", p.n, "a positive multiple of 4");
  TL_REQUIRE(c.bm > 0 && c.bn > 0 && c.bn % 4 == 0, kWhere, "bn", c.bn, "bm > 0 and bn a positive multiple of 4");
  TL_REQUIRE(c.tile_rate > 0 && c.tile_rate <= 2, kWhere, "tile_rate", c.tile_rate, "a ratio in (0, 2]");
  TL_REQUIRE(c.op.reduce_blocks < uint32_t(cost.sms), kWhere, "reduce_blocks", c.op.reduce_blocks,
             "0 (automatic) to " + std::to_string(cost.sms - 1));
  TL_REQUIRE(c.op.scatter != GemmRsScatter::kCopyEngine || c.op.granularity != SignalGranularity::kTile, kWhere,
             "granularity", std::string("tile"), "tile_row or rank with the copy-engine scatter (it moves whole groups of rows)");
  // GEMM+RS reaches peers across nodes only with the copy-engine scatter's puts.
  check_across_nodes(kWhere, p.nodes, c.op.scatter == GemmRsScatter::kCopyEngine, "scatter", to_string(c.op.scatter),
                     "ce (the copy-engine scatter's puts)");
}

// The op's automatic band (its kernel clusters two tile rows): up to 8 cluster bands (16 tile
// rows), at least 4 per block; with the epilogue reducer the widest the scheduler runs without
// padding tiles (gemm_rs_policy::auto_swizzle).
uint32_t auto_band(const GemmRsFusedPlan& plan) {
  constexpr uint32_t kClusterM = 2;
  if (plan.reducer == GemmRsReducer::kEpilogue) {
    return kClusterM * gemm_rs_policy::auto_swizzle(0, kClusterM * plan.bm, plan.rows_per_rank, plan.reducer,
                                                    plan.world * plan.m_tiles(), plan.n_tiles(), kClusterM);
  }
  uint32_t band = 2;
  while (band < 16 && 4 * 2 * band <= plan.m_tiles()) band *= 2;
  return band;
}

// Rank 0's NVLink port, which every byte it reads from or stores into a node peer shares (by the
// schedule's symmetry what it reads equals what enters it): transfers through it in the order the
// model issues them, each no sooner than it is ready, at the link's rate. Without it a model of
// CTAs that each move tiles at their own rate would let 132 of them pull 12 TB/s over a 390 GB/s
// link.
struct LinkQueue {
  double rate = 0;  // bytes per second
  double free_at = 0;
  // When `bytes`, ready at `ready`, are through.
  double through(double ready, double bytes) {
    free_at = std::max(free_at, ready) + bytes / rate;
    return free_at;
  }
};

// The configuration with the scatter and reducer the op would run on these ranks: one per GPU, on
// NVSHMEM's heap (affine from each rank, gemm_rs_policy::path), put_signal across nodes.
GemmRsPlanConfig with_path(const GemmRsProblem& p, const GemmRsPlanConfig& c) {
  gemm_rs_policy::PathContext x = gemm_rs_policy::path_context(
      c.op, static_cast<uint32_t>(p.world), p.m, p.n, p.k / static_cast<uint32_t>(std::max(p.world, 1)), true);
  x.put_signal = p.nodes > 1;
  x.affine_heap = true;
  const gemm_rs_policy::Path path = gemm_rs_policy::path(c.op.scatter, c.op.reducer, x);
  GemmRsPlanConfig out = c;
  out.op.scatter = path.scatter;
  out.op.reducer = path.reducer;
  return out;
}

}  // namespace

GemmRsPrediction predict_gemm_rs(const GemmRsProblem& p, const GemmRsPlanConfig& asked, const CostModel& cost) {
  TL_REQUIRE(static_cast<uint32_t>(asked.op.scatter) <= 3, kWhere, "scatter", static_cast<uint32_t>(asked.op.scatter),
             "pull, push, ce or auto");
  const GemmRsPlanConfig c = with_path(p, asked);
  validate(p, c, cost);
  const uint32_t w = static_cast<uint32_t>(p.world);
  const uint32_t ranks_per_node = w / static_cast<uint32_t>(p.nodes);
  GemmRsFusedPlan plan;
  plan.set_rows(p.m, w);
  plan.n = p.n;
  plan.bm = c.bm;
  plan.bn = c.bn;
  plan.granularity = c.op.granularity;
  plan.scatter = c.op.scatter;
  plan.reducer = c.op.reducer;
  plan.band = c.band != 0 ? c.band : auto_band(plan);
  const uint32_t k_local = p.k / w;
  const bool in_epilogue = plan.reducer == GemmRsReducer::kEpilogue && w > 1;

  GemmRsPrediction out;
  out.reducer = plan.reducer;
  out.scatter = plan.scatter;
  // As configured, else the op's rule for one rank per GPU at this cost model's rates; none when
  // the GEMM's epilogue sums.
  const uint32_t reduce_ctas =
      in_epilogue ? 0u
      : c.op.reduce_blocks != 0
          ? c.op.reduce_blocks
          : gemm_rs_policy::reduce_blocks(0, cost.sms,
                                          {p.world, k_local, true, cost.gemm_flops(p.dtype) / cost.sms,
                                           cost.sm_copy_bandwidth_per_cta});
  TL_REQUIRE(w == 1 || reduce_ctas < uint32_t(cost.sms), kWhere, "reduce_blocks", c.op.reduce_blocks,
             std::string("a count that leaves the GEMM an SM: ") + std::to_string(reduce_ctas) +
                 " reduction CTAs" + (c.op.reduce_blocks == 0 ? " (automatic)" : "") + " of " +
                 std::to_string(cost.sms) + " SMs");
  out.reduce_ctas = reduce_ctas;
  out.flop = 2.0 * p.m * double(p.n) * k_local;
  const double tile_mma = 2.0 * c.bm * c.bn * k_local / (c.tile_rate * cost.gemm_flops(p.dtype) / cost.sms);
  auto link = [&](uint32_t owner) {  // from rank 0 to `owner`
    return owner / ranks_per_node != 0 ? cost.network_bandwidth : cost.nvlink_bandwidth;
  };
  auto tile_bytes = [&](uint32_t t) {  // tile t of a block: its rows in owner 0's (a full block's)
    const uint32_t col0 = (t % plan.n_tiles()) * plan.bn;
    return double(plan.tile_rows(0, t / plan.n_tiles())) * std::min(plan.bn, plan.n - col0) * p.partial_bytes;
  };

  // Rank 0's compute in the kernel's order; finish[owner][tile of the block].
  const uint32_t tpb = plan.tiles_per_block();
  const bool one_rank = w == 1;
  const uint32_t ctas = one_rank ? uint32_t(cost.sms) : uint32_t(cost.sms) - reduce_ctas;
  std::vector<uint32_t> m_order(size_t(w) * plan.m_tiles());
  make_gemm_rs_m_order(plan, 0, m_order.data());
  std::vector<double> free_at(ctas, 0.0);
  std::vector<double> finish(size_t(w) * tpb, 0.0);
  // Sender q's part of owner 0's tile t lands (and is announced) as rank 0's part of owner
  // (P - q) mod P's tile t does, by symmetry: after its MMA, its store into the owner (push), the
  // notify.
  // `landed`: when rank 0's part of a tile is where its owner reads it -- at once (pull, ce: its own
  // buffer), or once its store into the owner (push) is through the CTA and the link; the
  // epilogue's storing warps wait for it before the notify, so the CTA does too.
  std::vector<double> landed(size_t(w) * tpb, 0.0);
  LinkQueue port{cost.nvlink_bandwidth};  // one node: the pull and push paths do not cross nodes
  LinkQueue hbm{cost.hbm_bandwidth};       // the rank's memory, which the epilogue sums share
  const bool push = plan.scatter == GemmRsScatter::kEpiloguePush;
  const auto part_arrival = [&](uint32_t q, uint32_t t) {
    return landed[size_t((w - q) % w) * tpb + t] + cost.notify_latency;
  };
  // The what-if of deferred sums (GemmRsPlanConfig::deferred_sum_waves): units in one linear order
  // over the CTAs, each own tile's sum `lag` positions after the tile.
  const bool deferred = in_epilogue && c.deferred_sum_waves > 0;
  const uint32_t lag = c.deferred_sum_waves * ctas;
  struct PendingSum {
    uint32_t t;
    double own_ready;
    uint32_t due;  // the position it takes in the order
  };
  std::vector<PendingSum> pending;
  size_t next_pending = 0;
  uint32_t position = 0;  // of the next unit in the linear order (CTA = position % ctas)
  auto sum_unit = [&](uint32_t t, double own_ready, uint32_t slices, uint32_t lane_cta, double& cta) {
    double ready = std::max(cta, own_ready);
    for (uint32_t q = 1; q < w; ++q) ready = std::max(ready, part_arrival(q, t));
    const double bytes = tile_bytes(t) * (w + 1) / slices;
    double end = ready + bytes / cost.epilogue_sum_bandwidth_per_cta;
    if (!push) end = std::max(end, port.through(ready, tile_bytes(t) * (w - 1) / slices));
    end = std::max(end, hbm.through(ready, push ? bytes : tile_bytes(t) * 2 / slices));
    out.timeline.push_back({"cta " + std::to_string(lane_cta),
                            "sum tile " + std::to_string(t) + (slices > 1 ? " (a slice)" : ""), ready, end});
    cta = end;
  };
  for (uint32_t i = 0; i < w * tpb; ++i) {
    while (deferred && next_pending < pending.size() && pending[next_pending].due <= position) {
      const uint32_t lane = position % ctas;
      sum_unit(pending[next_pending].t, pending[next_pending].own_ready, 1, lane, free_at[lane]);
      ++next_pending;
      ++position;
    }
    const uint32_t m_tile = m_order[i / plan.n_tiles()];
    const uint32_t owner = plan.tile_owner(m_tile);
    const uint32_t t = (m_tile - owner * plan.m_tiles()) * plan.n_tiles() + i % plan.n_tiles();
    const uint32_t slot = deferred ? position++ % ctas : i % ctas;
    double& cta = free_at[slot];
    const double start = cta;
    cta = start + tile_mma;
    finish[size_t(owner) * tpb + t] = cta;
    const std::string lane = "cta " + std::to_string(slot);
    out.timeline.push_back({lane, "tile " + std::to_string(t) + " for rank " + std::to_string(owner), start, cta});
    double& part = landed[size_t(owner) * tpb + t];
    part = cta;
    if (push && owner != 0) {
      part = std::max(cta + tile_bytes(t) / std::min(cost.epilogue_store_bandwidth_per_cta, link(owner)),
                      port.through(cta, tile_bytes(t)));
      out.timeline.push_back({lane, "push tile " + std::to_string(t) + " to rank " + std::to_string(owner), cta, part});
      if (c.op.push_notify == GemmRsPushNotify::kDeferred) {
        part = std::max(part, cta + tile_mma);  // announced at the CTA's next epilogue (~ one tile on)
      } else {
        cta = part;
      }
    }
    if (deferred && owner == 0) {
      pending.push_back({t, cta, position - 1 + lag});
    } else if (in_epilogue && owner == 0) {
      // The own tile's sum right after its epilogue, once every sender's part is in (each computed
      // in this round before the owner's own tiles, so already in `landed`): world tiles read,
      // one written, at the epilogue's sum rate; with the pull the peers' tiles also cross the
      // port, which every CTA summing at once shares. The local reads and the write share the
      // rank's memory with every other CTA's sums (132 CTAs at the per-CTA rate would ask for
      // several times what HBM gives).
      double ready = cta;
      for (uint32_t q = 1; q < w; ++q) ready = std::max(ready, part_arrival(q, t));
      double end = ready + tile_bytes(t) * (w + 1) / cost.epilogue_sum_bandwidth_per_cta;
      if (!push) end = std::max(end, port.through(ready, tile_bytes(t) * (w - 1)));
      end = std::max(end, hbm.through(ready, tile_bytes(t) * (push ? w + 1 : 2)));
      out.timeline.push_back({lane, "sum tile " + std::to_string(t), ready, end});
      cta = end;
    }
  }
  if (deferred && next_pending < pending.size()) {
    // The sums left after the last tile, cut into slices so that every CTA takes a share.
    const uint32_t left = static_cast<uint32_t>(pending.size() - next_pending);
    const uint32_t slices = std::max(1u, ctas / left);
    for (; next_pending < pending.size(); ++next_pending) {
      for (uint32_t s = 0; s < slices; ++s) {
        const uint32_t lane = position++ % ctas;
        sum_unit(pending[next_pending].t, pending[next_pending].own_ready, slices, lane, free_at[lane]);
      }
    }
  }
  const double compute_end = *std::max_element(free_at.begin(), free_at.end());
  if (one_rank) {
    out.fused = compute_end;
  } else if (in_epilogue) {
    out.fused = compute_end + 2 * cost.notify_latency;  // then the exit barrier's round trip
  } else {
    // When rank 0's part of `owner`'s tile t has landed (push: its store into the owner), then
    // when its signal group is complete and notified: the owner's reduction waits per group.
    std::vector<double> group_done(size_t(w) * plan.groups(), 0.0);
    for (uint32_t o = 0; o < w; ++o) {
      for (uint32_t t = 0; t < tpb; ++t) {
        double& g = group_done[size_t(o) * plan.groups() + plan.group_of(t)];
        g = std::max(g, landed[size_t(o) * tpb + t]);
      }
    }
    std::vector<double> arrival(size_t(w) * tpb, 0.0);
    for (uint32_t o = 0; o < w; ++o) {
      for (uint32_t t = 0; t < tpb; ++t) {
        arrival[size_t(o) * tpb + t] = group_done[size_t(o) * plan.groups() + plan.group_of(t)] + cost.notify_latency;
      }
    }
    if (plan.scatter == GemmRsScatter::kCopyEngine) {  // one stream, groups in completion order
      const uint32_t rows_per_group = plan.group_tile_rows();
      double stream = 0.0;
      std::vector<double> copied(size_t(w) * plan.groups(), 0.0);
      for (uint32_t m_tile : m_order) {
        const uint32_t o = plan.tile_owner(m_tile), row = m_tile - o * plan.m_tiles();
        if (o == 0 || (row + 1) % rows_per_group != 0) continue;
        const uint32_t g = row / rows_per_group;
        const double group_bytes = double(plan.group_rows(o, g)) * p.n * p.partial_bytes;
        const double start = std::max(stream, group_done[size_t(o) * plan.groups() + g]);
        stream = start + cost.ce_chunk_overhead + group_bytes / std::min(cost.ce_bandwidth, link(o));
        copied[size_t(o) * plan.groups() + g] = stream;
        out.timeline.push_back({"copy engine", "group " + std::to_string(g) + " to rank " + std::to_string(o),
                                start, stream});
      }
      for (uint32_t o = 1; o < w; ++o) {
        for (uint32_t t = 0; t < tpb; ++t) {
          arrival[size_t(o) * tpb + t] = copied[size_t(o) * plan.groups() + plan.group_of(t)] + cost.notify_latency;
        }
      }
    }
    // Owner 0's reduction: sender q's part of tile t is rank 0's part of owner (P - q) mod P's.
    std::vector<double> reducer(reduce_ctas, 0.0);
    for (uint32_t i = 0; i < tpb; ++i) {
      const uint32_t t = plan.reduce_tile(i);
      double ready = 0.0;
      for (uint32_t q = 0; q < w; ++q) ready = std::max(ready, arrival[size_t((w - q) % w) * tpb + t]);
      double& r = reducer[i % reduce_ctas];
      const double start = std::max(r, ready);
      r = start + tile_bytes(t) * (w + 1) / cost.sm_copy_bandwidth_per_cta;  // world tiles read, one written
      if (plan.scatter == GemmRsScatter::kPull) r = std::max(r, port.through(start, tile_bytes(t) * (w - 1)));
      out.timeline.push_back({"reduce " + std::to_string(i % reduce_ctas), "tile " + std::to_string(t), start, r});
    }
    out.fused = std::max(compute_end, *std::max_element(reducer.begin(), reducer.end()));
  }

  // Isolated parts. Rank 0 sends a block to each peer: the node's over NVLink, the others' over the
  // network, two links that carry at the same time.
  const double block_bytes = double(plan.rows_per_rank) * p.n * p.partial_bytes;
  const double node_peers = double(ranks_per_node - 1), far_peers = double(w - ranks_per_node);
  // The baselines and the ideal at the dense rate (cuBLAS's; tile_rate is the fused kernel's).
  const double dense_mma = tile_mma * c.tile_rate;
  out.t_comp = double((uint64_t(w) * tpb + cost.sms - 1) / cost.sms) * dense_mma;
  out.t_comm = std::max(node_peers * block_bytes / cost.nvlink_bandwidth, far_peers * block_bytes / cost.network_bandwidth);
  const double t_reduce = one_rank ? 0.0
                                   : block_bytes * (w + 1) / std::min(cost.hbm_bandwidth, cost.sms * cost.sm_copy_bandwidth_per_cta);
  out.non_overlapped = out.t_comp + out.t_comm + t_reduce;
  out.ideal = std::max(out.t_comp, out.t_comm);
  // Decomposed: the GEMM of each owner's block on every SM, its send overlapping the next block's
  // GEMM, then the reduction.
  const double block_gemm = double((uint64_t(tpb) + cost.sms - 1) / cost.sms) * dense_mma;
  out.decomposed = block_gemm + t_reduce;
  for (uint32_t o = 1; o < w; ++o) out.decomposed += std::max(block_gemm, block_bytes / link(o));
  return out;
}

}  // namespace tilelink::sim
