#include "tilelink/sim/sp_attention_sim.hpp"

#include <algorithm>
#include <string>

#include "sim/all_gather_model.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::sim {
namespace {

constexpr const char* kWhere = "predict_sp_attention";

SpAttentionPlan make_plan(const SpAttentionProblem& p, const SpAttentionPlanConfig& c) {
  check_world(kWhere, p.world, p.nodes);
  check_split(kWhere, "seq", p.seq, p.world, "the sequence is sharded evenly");
  TL_REQUIRE(c.bq > 0 && c.op.comm.comm_rows > 0, kWhere, "bq", c.bq, "positive query and K/V chunk sizes");
  TL_REQUIRE(c.attention_flops > 0, kWhere, "attention_flops", c.attention_flops, "> 0");
  check_across_nodes(kWhere, p.nodes, c.op.comm.resource == CommResource::kCopyEngine, "resource",
                     to_string(c.op.comm.resource), "ce (the copy-engine all-gather's puts)");
  SpAttentionPlan plan;
  plan.ag.map =
      RowShardMapping{p.seq / static_cast<uint32_t>(p.world), c.op.comm.comm_rows, static_cast<uint32_t>(p.world)};
  plan.ag.row_bytes = 2 * p.kv_heads * p.head_dim * p.element_bytes;
  plan.ag.pitch = plan.ag.row_bytes;
  plan.q_heads = p.q_heads;
  plan.kv_heads = p.kv_heads;
  plan.head_dim = p.head_dim;
  plan.bq = c.bq;
  plan.causal = p.causal;
  plan.layout = c.op.layout;
  if (std::string e = check_sp_attention_plan(plan, p.element_bytes); !e.empty()) {
    throw InvalidArgument(std::string(kWhere) + ": " + e);
  }
  return plan;
}

// A chunk's key positions as runs of consecutive positions (one shard's rows: at most two runs,
// zig-zag's two pieces).
struct Run {
  uint32_t first, count;
};
std::vector<Run> position_runs(const SpAttentionPlan& plan, uint32_t ch) {
  const RowRange keys = plan.ag.map.rows_of_channel(ch);
  std::vector<Run> runs;
  for (uint32_t g = keys.row0; g < keys.row0 + keys.rows; ++g) {
    const uint32_t pos = plan.kv_position(g);
    if (!runs.empty() && runs.back().first + runs.back().count == pos) {
      ++runs.back().count;
    } else {
      runs.push_back({pos, 1});
    }
  }
  return runs;
}

// The (query, key) pairs a query block (local rows q of `rank`) sees among keys `runs`.
uint64_t visible_pairs(const SpAttentionPlan& plan, uint32_t rank, RowRange q, const std::vector<Run>& runs) {
  uint64_t pairs = 0;
  for (uint32_t r = q.row0; r < q.row0 + q.rows; ++r) {
    const uint32_t qp = plan.position(rank, r);
    for (const Run& run : runs) {
      if (!plan.causal) {
        pairs += run.count;
      } else if (qp >= run.first) {
        pairs += std::min<uint64_t>(qp - run.first + 1, run.count);
      }
    }
  }
  return pairs;
}

}  // namespace

SpAttentionPrediction predict_sp_attention(const SpAttentionProblem& p, const SpAttentionPlanConfig& c,
                                           const CostModel& cost) {
  const SpAttentionPlan plan = make_plan(p, c);
  SpAttentionPrediction out;
  const uint32_t comm_ctas = c.op.comm.resource == CommResource::kSm ? c.op.comm.num_blocks : 0;
  TL_REQUIRE(c.comm_slowdown >= 1.0, kWhere, "comm_slowdown", c.comm_slowdown, ">= 1 (a rate under load)");
  // The all-gather under the attention (the fused schedule's arrivals) and, when that is slowed,
  // alone (T_comm).
  const uint32_t ranks_per_node = static_cast<uint32_t>(p.world / p.nodes);
  CostModel loaded = cost;
  loaded.ce_bandwidth /= c.comm_slowdown;
  loaded.nvlink_bandwidth /= c.comm_slowdown;
  loaded.network_bandwidth /= c.comm_slowdown;
  loaded.sm_copy_bandwidth_per_cta /= c.comm_slowdown;
  const AllGatherModel comm = model_all_gather(plan.ag, comm_ctas, ranks_per_node, loaded, out.timeline);
  std::vector<Interval> isolated_timeline;
  out.t_comm = c.comm_slowdown == 1.0
                   ? comm.end
                   : model_all_gather(plan.ag, comm_ctas, ranks_per_node, cost, isolated_timeline).end;
  TL_REQUIRE(cost.sms > static_cast<int>(comm_ctas), kWhere, "num_blocks", comm_ctas,
             "fewer than the " + std::to_string(cost.sms) + " SMs");
  out.ctas = static_cast<uint32_t>(cost.sms) - comm_ctas;
  out.items = plan.num_items();
  const double pair_time = 4.0 * p.head_dim / (c.attention_flops / cost.sms);  // one SM

  std::vector<std::vector<Run>> runs(plan.num_kv_chunks());
  for (uint32_t ch = 0; ch < plan.num_kv_chunks(); ++ch) runs[ch] = position_runs(plan, ch);
  // Rank r sees owner o's shard when rank 0 sees owner (o - r) mod P's (the all-gather is the
  // same on every rank, rotated).
  const RowShardMapping& map = plan.ag.map;
  auto arrival = [&](uint32_t rank, uint32_t ch) {
    const uint32_t owner = map.rank_of_channel(ch), w = map.world;
    return comm.arrival[map.channel((owner + w - rank) % w, ch - owner * map.chunks_per_rank())];
  };

  // Per rank and query block (the same for every head): its chunks in order and their times.
  struct Step {
    double ready;  // the chunk's arrival on the rank
    double time;
    bool own;      // of the rank's own shard
  };
  auto rank_steps = [&](uint32_t rank, double& pairs_total) {
    std::vector<std::vector<Step>> steps(plan.q_blocks());
    for (uint32_t b = 0; b < plan.q_blocks(); ++b) {
      const RowRange q = plan.q_rows(b);
      for (uint32_t j = 0; j < plan.num_kv_chunks(); ++j) {
        const uint32_t ch = plan.kv_chunk(rank, j);
        if (!plan.chunk_needed(rank, q, ch)) continue;
        const uint64_t pairs = visible_pairs(plan, rank, q, runs[ch]);
        steps[b].push_back({arrival(rank, ch), double(pairs) * pair_time, j < map.chunks_per_rank()});
        pairs_total += double(pairs) * p.q_heads;
      }
    }
    return steps;
  };
  // An item's state between the passes: o in fp32 and (m, l), stored once and loaded once.
  const double state_time = (double(c.bq) * p.head_dim * 4 + 2.0 * c.bq * 4) / (cost.hbm_bandwidth / cost.sms);
  auto run = [&](const std::vector<std::vector<Step>>& steps, uint32_t ctas, bool wait, bool two_pass,
                 std::vector<Interval>* timeline) {
    std::vector<double> free_at(ctas, 0.0);
    for (int pass = two_pass ? 0 : 1; pass < 2; ++pass) {
      for (uint32_t i = 0; i < plan.num_items(); ++i) {
        const SpAttentionItem item = plan.item(i);
        double& cta = free_at[i % ctas];
        const double start = cta;
        if (two_pass && pass == 1) cta += state_time;  // load the parked state
        for (const Step& s : steps[item.q_block]) {
          if (two_pass && s.own != (pass == 0)) continue;
          if (wait) cta = std::max(cta, s.ready + cost.notify_latency);
          cta += s.time;
        }
        if (two_pass && pass == 0) cta += state_time;  // park it
        if (timeline != nullptr) {
          timeline->push_back({"cta " + std::to_string(i % ctas),
                               std::string(two_pass ? (pass == 0 ? "local " : "remote ") : "") + "head " +
                                   std::to_string(item.head) + " block " + std::to_string(item.q_block),
                               start, cta});
        }
      }
    }
    return *std::max_element(free_at.begin(), free_at.end());
  };
  // The slowest rank sets the op's time (a causal mask over contiguous shards loads the last
  // rank most); its timeline is the one drawn.
  double slowest = -1, pairs_of_slowest = 0;
  std::vector<std::vector<Step>> worst;
  for (uint32_t rank = 0; rank < map.world; ++rank) {
    double pairs = 0;
    std::vector<std::vector<Step>> steps = rank_steps(rank, pairs);
    const double t = run(steps, out.ctas, true, c.op.local_first, nullptr);
    if (t > slowest) {
      slowest = t;
      pairs_of_slowest = pairs;
      worst = std::move(steps);
      out.rank = rank;
    }
  }
  const double total_pairs = pairs_of_slowest;
  out.fused = std::max(comm.end, run(worst, out.ctas, true, c.op.local_first, &out.timeline));
  out.t_comp = run(worst, static_cast<uint32_t>(cost.sms), false, false, nullptr);
  out.non_overlapped = out.t_comm + out.t_comp;
  out.ideal = std::max(out.t_comp, out.t_comm);
  out.flop = 4.0 * total_pairs * p.head_dim;
  return out;
}

}  // namespace tilelink::sim
