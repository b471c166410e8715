// The AG+GEMM timeline model on schedules small enough to check by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tilelink/core/error.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"
#include "tilelink/sim/mlp_sim.hpp"
#include "tilelink/sim/moe_sim.hpp"
#include "tilelink/sim/sp_attention_sim.hpp"

namespace tilelink::sim {
namespace {

// 2 SMs; one 128 x 256 tile with k = 64 takes exactly 1 µs on one SM.
CostModel tiny_gpu() {
  CostModel cost;
  cost.sms = 2;
  cost.flops = 2.0 * (2.0 * 128 * 256 * 64) / 1e-6;
  cost.notify_latency = 0;
  return cost;
}

TEST(AgGemmSim, WorldOneIsTheGemmAlone) {
  AgGemmProblem p{256, 512, 64, 2, 1, 1};  // 2 x 2 tiles on 2 SMs: two rounds of 1 µs
  AgGemmPlanConfig c;
  const AgGemmPrediction r = predict_ag_gemm(p, c, tiny_gpu());
  EXPECT_DOUBLE_EQ(r.t_comm, 0.0);
  EXPECT_NEAR(r.t_comp, 2e-6, 1e-15);
  EXPECT_NEAR(r.fused, 2e-6, 1e-15);
  EXPECT_NEAR(r.non_overlapped, 2e-6, 1e-15);
  EXPECT_NEAR(r.ideal, 2e-6, 1e-15);
  EXPECT_DOUBLE_EQ(r.flop, 2.0 * 256 * 512 * 64);
}

TEST(AgGemmSim, CopyEngineChunksAddOverheadAndBytesOverBandwidth) {
  // World 2: rank 0 pulls rank 1's 128 rows in two tiles of 64 rows x 128 bytes = 8192 bytes.
  AgGemmProblem p{256, 512, 64, 2, 2, 1};
  AgGemmPlanConfig c;
  c.op.comm.comm_rows = 64;
  CostModel cost = tiny_gpu();
  cost.ce_chunk_overhead = 1e-6;
  cost.ce_bandwidth = 8192 / 1e-6;  // 1 µs per tile
  cost.nvlink_bandwidth = 1e15;
  const AgGemmPrediction r = predict_ag_gemm(p, c, cost);
  EXPECT_NEAR(r.t_comm, 4e-6, 1e-15);
  // Rank 0 computes its own tile row first (tiles 0, 1 on CTAs 0, 1: 0-1 µs), then rank 1's row
  // (needs both comm tiles: ready at 4 µs): 4-5 µs.
  EXPECT_NEAR(r.fused, 5e-6, 1e-15);
  // n_local = 256: one tile column, 2 tile rows: one round on 2 SMs.
  EXPECT_NEAR(r.t_comp, 1e-6, 1e-15);
  EXPECT_NEAR(r.non_overlapped, 5e-6, 1e-15);
  EXPECT_NEAR(r.ideal, 4e-6, 1e-15);
  // Async-TP: the GEMM of the own shard (one tile, 1 µs) against the copy of the next shard as
  // one chunk (1 µs overhead + 16384 bytes at 8192 bytes/µs = 3 µs), then the last shard's GEMM.
  EXPECT_NEAR(r.decomposed, 3e-6 + 1e-6, 1e-15);
  // Every compute interval starts after the data it needs arrived.
  for (const Interval& e : r.timeline) {
    if (e.name == "C tile (1, 0)") EXPECT_GE(e.start, 4e-6 - 1e-15);
  }
}

TEST(AgGemmSim, OverlapSitsBetweenIdealAndNonOverlapped) {
  const AgGemmProblem p{8192, 28672, 8192, 2, 8, 1};
  for (CommResource res : {CommResource::kCopyEngine, CommResource::kSm}) {
    AgGemmPlanConfig c;
    c.op.comm.resource = res;
    c.op.comm.num_blocks = res == CommResource::kSm ? 16 : 0;
    const AgGemmPrediction r = predict_ag_gemm(p, c);
    EXPECT_GE(r.fused, r.ideal * (1 - 1e-12));
    EXPECT_LE(r.fused, r.non_overlapped);
    EXPECT_GT(r.t_comm, 0.0);
    EXPECT_GT(r.t_comp, 0.0);
  }
}

TEST(AgGemmSim, AnotherNodeIsSlowerThanNvlink) {
  AgGemmProblem one_node{8192, 28672, 8192, 2, 16, 1};
  AgGemmProblem two_nodes = one_node;
  two_nodes.nodes = 2;
  const AgGemmPlanConfig c;
  EXPECT_GT(predict_ag_gemm(two_nodes, c).t_comm, predict_ag_gemm(one_node, c).t_comm);
}

TEST(AgGemmSim, RefusesWhatTheOpCannotRun) {
  const AgGemmPlanConfig c;
  AgGemmProblem p{1000, 512, 64, 2, 3, 1};  // 1000 rows do not split over 3 ranks
  try {
    predict_ag_gemm(p, c);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'m' = 1000"), std::string::npos) << e.what();
  }
  AgGemmPlanConfig ring = c;
  ring.op.comm.order = CommOrder::kRing;
  EXPECT_THROW(predict_ag_gemm(AgGemmProblem{}, ring), InvalidArgument);  // copy engine: mesh only
  AgGemmPlanConfig sm = c;
  sm.op.comm.resource = CommResource::kSm;  // num_blocks 0
  EXPECT_THROW(predict_ag_gemm(AgGemmProblem{}, sm), InvalidArgument);
}

// The prediction both timeline drawings below draw: 2 ranks of 128 rows, gathered 64 rows at a time.
AgGemmPrediction small_ag_gemm_prediction() {
  AgGemmProblem p{256, 512, 64, 2, 2, 1};
  AgGemmPlanConfig c;
  c.op.comm.comm_rows = 64;
  return predict_ag_gemm(p, c, tiny_gpu());
}

TEST(AgGemmSim, ChromeTraceHasOneCompleteEventPerInterval) {
  const AgGemmPrediction r = small_ag_gemm_prediction();
  const std::string json = to_chrome_trace(r.timeline, "ag_gemm \"rank 0\"");
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 0), 0u);
  EXPECT_EQ(json.back(), '}');
  size_t complete = 0;
  for (size_t pos = 0; (pos = json.find("\"ph\":\"X\"", pos)) != std::string::npos; ++pos) ++complete;
  EXPECT_EQ(complete, r.timeline.size());
  EXPECT_NE(json.find("ag_gemm \\\"rank 0\\\""), std::string::npos);  // quotes escaped
  EXPECT_NE(json.find("\"thread_name\""), std::string::npos);
}

TEST(AgGemmSim, SvgHasOneRectanglePerInterval) {
  const AgGemmPrediction r = small_ag_gemm_prediction();
  const std::string svg = to_svg(r.timeline, "a <b> & c");
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; c"), std::string::npos);
  size_t rects = 0;
  for (size_t pos = 0; (pos = svg.find("<rect ", pos)) != std::string::npos; ++pos) ++rects;
  EXPECT_EQ(rects, r.timeline.size());
}

}  // namespace
}  // namespace tilelink::sim

namespace tilelink::test {
namespace {

TEST(BarChartSvg, DrawsOneBarPerFiniteValueWithItsLabel) {
  const std::string svg = sim::to_bar_chart_svg("speedups <w8>", {"llama3-8b", "llama3-70b"},
                                                {{"fused vs non-overlapped", {1.25, std::nan("")}},
                                                 {"ideal / fused", {0.9, 0.95}}},
                                                "speedup", 1.0);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("speedups &lt;w8&gt;"), std::string::npos) << "the title is escaped";
  size_t bars = 0;
  for (size_t at = svg.find("<rect x"); at != std::string::npos; at = svg.find("<rect x", at + 1)) ++bars;
  EXPECT_EQ(bars, 3u + 2u) << "three finite values and two legend swatches";
  EXPECT_NE(svg.find("fused vs non-overlapped llama3-8b: 1.250"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos) << "the reference line";
  EXPECT_THROW(sim::to_bar_chart_svg("t", {"a"}, {{"s", {1.0, 2.0}}}, "y", 1.0), InvalidArgument);
}

}  // namespace
}  // namespace tilelink::test

namespace tilelink::test {
namespace {

// Two tile rows of one expert (256 tokens, top-1), one N tile each, one gather CTA at 2 µs a
// tile, 1 µs GEMM tiles, 0.5 µs of mapping first. World 1: the gather runs 0.5-2.5 and 2.5-4.5,
// the GEMM tiles 2.5-3.5 and 4.5-5.5.
sim::CostModel hand_cost() {
  sim::CostModel c;
  c.sms = 4;
  c.flops = 4 * 2.0 * 128 * 256 * 1024 / 1e-6;  // 1 µs per 128x256x1024 tile on one SM
  c.sm_copy_bandwidth_per_cta = 128.0 * 2048 / 2e-6;  // 2 µs per 128 rows of 2048 bytes
  c.notify_latency = 0;
  c.ce_chunk_overhead = 10e-6;  // world 2: the peer's shard arrives at 10 µs
  c.ce_bandwidth = c.nvlink_bandwidth = 1e30;
  return c;
}

sim::MoeProblem hand_problem(int world) {
  sim::MoeProblem p;
  p.m = 256;
  p.hidden = 1024;
  p.intermediate = 256u * static_cast<uint32_t>(world);
  p.experts = 1;
  p.topk = 1;
  p.world = world;
  return p;
}

sim::MoeAgPlanConfig hand_config() {
  sim::MoeAgPlanConfig c;
  c.op.comm.comm_rows = 128;
  c.op.gather_blocks = 1;
  c.cluster = 1;
  c.mapping_time = 0.5e-6;
  return c;
}

TEST(MoeSim, GatherThenGemmPerTileAfterTheMapping) {
  const sim::MoePrediction r = sim::predict_moe_ag(hand_problem(1), hand_config(), hand_cost());
  EXPECT_EQ(r.tiles, 2u);
  EXPECT_EQ(r.gemm_ctas, 3u);  // 4 SMs, 1 gather CTA, no slack at world 1
  EXPECT_NEAR(r.fused, 5.5e-6, 1e-12);
  EXPECT_NEAR(r.t_gather, 4e-6, 1e-12);
  EXPECT_NEAR(r.t_comp, 1e-6, 1e-12);  // two tiles at once on 4 SMs
  EXPECT_NEAR(r.t_comm, 0.0, 1e-12);
  double gemm_start = 1;
  for (const sim::Interval& e : r.timeline) {
    if (e.lane.rfind("cta", 0) == 0) gemm_start = std::min(gemm_start, e.start);
  }
  EXPECT_NEAR(gemm_start, 2.5e-6, 1e-12) << "the first GEMM tile waits for its gather";
}

// The design of the gather in the GEMM's producer (not built): no gather CTA, so all 4 SMs run
// the GEMM; each tile starts right after the mapping (its rows are local at world 1) and takes the
// TMA tile's 1 µs over the assumed efficiency.
TEST(MoeSim, ProducerGatherDesignHasNoGatherStage) {
  sim::MoeAgPlanConfig c = hand_config();
  c.producer_gather_efficiency = 0.5;
  const sim::MoePrediction r = sim::predict_moe_ag(hand_problem(1), c, hand_cost());
  EXPECT_EQ(r.gather_ctas, 0u);
  EXPECT_EQ(r.gemm_ctas, 4u);
  EXPECT_NEAR(r.fused, 0.5e-6 + 2e-6, 1e-12);
  EXPECT_NEAR(r.t_comp, 1e-6, 1e-12) << "the ideal keeps the TMA mainloop's rate";
  EXPECT_NEAR(r.t_gather, 0.0, 1e-12);
  for (const sim::Interval& e : r.timeline) EXPECT_NE(e.lane.rfind("gather", 0), 0u) << e.lane;
  c.producer_gather_efficiency = 1.5;
  EXPECT_THROW(sim::predict_moe_ag(hand_problem(1), c, hand_cost()), InvalidArgument);
}

TEST(MoeSim, TilesOfAPeersTokensWaitForTheAllGather) {
  // World 2: tile 0 holds rank 0's tokens (present), tile 1 rank 1's (arrive at 10 µs); 2 SMs of
  // slack leave 1 GEMM CTA: tile 0 at 2.5-3.5, tile 1's gather at 10-12, its GEMM at 12-13.
  const sim::MoePrediction r = sim::predict_moe_ag(hand_problem(2), hand_config(), hand_cost());
  EXPECT_EQ(r.gemm_ctas, 1u);
  EXPECT_NEAR(r.t_comm, 10e-6, 1e-12);
  EXPECT_NEAR(r.fused, 13e-6, 1e-12);
  sim::MoeAgPlanConfig too_many = hand_config();
  too_many.op.gather_blocks = 2;  // 4 - 2 - 2 slack leaves no GEMM CTA
  EXPECT_THROW(sim::predict_moe_ag(hand_problem(2), too_many, hand_cost()), InvalidArgument);
  sim::MoeProblem bad = hand_problem(1);
  bad.ids = {0, 1};
  EXPECT_THROW(sim::predict_moe_ag(bad, hand_config(), hand_cost()), InvalidArgument);
}

// MoE part 2 by hand: 256 tokens, one expert, top-1, 128x256 tiles of K = 1024 (1 µs each on one
// SM of hand_cost), output rows of 256 bf16 (512 bytes); a combine of 128 tokens moves 128 x 2 x
// 512 bytes (1 µs on one CTA).
sim::MoeProblem hand_rs_problem(int world) {
  sim::MoeProblem p = hand_problem(world);
  p.hidden = 256;
  p.intermediate = 1024u * static_cast<uint32_t>(world);
  return p;
}

sim::MoeRsPlanConfig hand_rs_config() {
  sim::MoeRsPlanConfig c;
  c.op.comm_rows = 128;
  c.op.combine_blocks = 2;
  c.op.combine = MoeCombine::kBlocks;  // the hand cases of the combine blocks (auto: the epilogue with peers)
  c.cluster = 1;
  return c;
}

TEST(MoeSim, Part2CombinesEachBlockOnceItsTileRowsAreDone) {
  // World 1: both tiles 0-1 µs on the 2 GEMM CTAs; each block's combine 1-2 µs on its CTA.
  const sim::MoePrediction r = sim::predict_moe_gemm_rs(hand_rs_problem(1), hand_rs_config(), hand_cost());
  EXPECT_EQ(r.tiles, 2u);
  EXPECT_EQ(r.gemm_ctas, 2u);
  EXPECT_NEAR(r.fused, 2e-6, 1e-12);
  EXPECT_NEAR(r.t_comp, 1e-6, 1e-12);
  EXPECT_NEAR(r.t_comm, 0.0, 1e-12);
}

TEST(MoeSim, Part2ReducesARoundAfterItsCombines) {
  // World 2, one token block per rank: combines of owner 1 (CTA 0) and owner 0 (CTA 1) 1-2 µs,
  // then the reduction of the rank's block on CTA 0: 3 x 128 rows x 512 bytes, 1.5 µs.
  const sim::MoePrediction r = sim::predict_moe_gemm_rs(hand_rs_problem(2), hand_rs_config(), hand_cost());
  EXPECT_NEAR(r.fused, 3.5e-6, 1e-12);
  size_t reductions = 0;
  for (const sim::Interval& e : r.timeline) {
    if (e.name.rfind("reduce", 0) == 0) {
      ++reductions;
      EXPECT_NEAR(e.start, 2e-6, 1e-12);
    }
  }
  EXPECT_EQ(reductions, 1u);
  sim::MoeRsPlanConfig too_many = hand_rs_config();
  too_many.op.combine_blocks = 4;  // no SM left for the GEMM
  EXPECT_THROW(sim::predict_moe_gemm_rs(hand_rs_problem(2), too_many, hand_cost()), InvalidArgument);
}

TEST(MoeSim, Part2EpilogueCombineRunsOnTheGemmsCtasThenTheOwnersSum) {
  // World 2, the combine in the epilogue: no SM set aside, so the 4 CTAs take tile 1 (owner 1's
  // tokens, first in rank 0's order) and tile 0 at 0-1 µs; each is its block's only tile, so its
  // CTA combines it at 1-2 µs (128 tokens x 2 rows x 512 bytes at 131 GB/s); after the GEMM the
  // rank's block is summed over 2 senders on a reduction CTA at 2-3.5 µs.
  sim::CostModel cost = hand_cost();
  cost.epilogue_sum_bandwidth_per_cta = 128.0 * 2 * 512 / 1e-6;
  sim::MoeRsPlanConfig c = hand_rs_config();
  c.op.combine = MoeCombine::kEpilogue;
  const sim::MoePrediction r = sim::predict_moe_gemm_rs(hand_rs_problem(2), c, cost);
  EXPECT_EQ(r.gemm_ctas, 4u);
  EXPECT_EQ(r.combine_ctas, 2u);  // the reduction's
  EXPECT_NEAR(r.fused, 3.5e-6, 1e-12);
  size_t combines = 0, reductions = 0;
  for (const sim::Interval& e : r.timeline) {
    if (e.name.rfind("combine", 0) == 0) {
      ++combines;
      EXPECT_NEAR(e.start, 1e-6, 1e-12) << e.name;
      EXPECT_EQ(e.lane.rfind("cta", 0), 0u) << "a GEMM CTA combines: " << e.lane;
    }
    if (e.name.rfind("reduce", 0) == 0) {
      ++reductions;
      EXPECT_NEAR(e.start, 2e-6, 1e-12);
    }
  }
  EXPECT_EQ(combines, 2u);  // every (block, column tile) item once
  EXPECT_EQ(reductions, 1u);
  // World 1: no reduction; the combines end the call.
  const sim::MoePrediction one = sim::predict_moe_gemm_rs(hand_rs_problem(1), c, cost);
  EXPECT_NEAR(one.fused, 2e-6, 1e-12);
  // A port that needs 5 µs for the rank's reduce-scatter (one block of 128 x 512 bytes to the
  // peer): the sum waits for the pushes to cross it, 5-6.5 µs.
  cost.ce_bandwidth = cost.nvlink_bandwidth = 128.0 * 512 / 5e-6;
  const sim::MoePrediction slow = sim::predict_moe_gemm_rs(hand_rs_problem(2), c, cost);
  EXPECT_NEAR(slow.t_comm, 5e-6, 1e-12);
  EXPECT_NEAR(slow.fused, 6.5e-6, 1e-12);
}

// The layer over two token micro-batches (a design): one compute stream, part 1 of batch 1 after
// part 2's GEMM of batch 0 and before batch 0's owners' sums; the all-gathers back to back on
// the copy engine; the baselines the whole layer's.
TEST(MoeSim, MicroBatchedLayerPipelinesTheBatchesOnOneComputeStream) {
  const sim::MoeProblem p = hand_rs_problem(2);
  sim::CostModel cost = hand_cost();
  cost.epilogue_sum_bandwidth_per_cta = 128.0 * 2 * 512 / 1e-6;
  sim::MoeRsPlanConfig part2 = hand_rs_config();
  part2.op.combine = MoeCombine::kEpilogue;
  const sim::MoePrediction whole = sim::predict_moe_layer(p, MlpActivation::kGelu, hand_config(), part2, cost);
  const sim::MoePrediction two = sim::predict_moe_layer(p, MlpActivation::kGelu, hand_config(), part2, cost, 2);
  EXPECT_DOUBLE_EQ(two.non_overlapped, whole.non_overlapped);
  EXPECT_DOUBLE_EQ(two.ideal, whole.ideal);
  EXPECT_DOUBLE_EQ(two.t_comm, whole.t_comm);
  // [first start, last end] of the intervals of a lane prefix and a name prefix.
  auto span = [&](const std::string& lane, const std::string& name) {
    std::pair<double, double> s{1e9, -1e9};
    for (const sim::Interval& e : two.timeline) {
      if (e.lane.rfind(lane, 0) == 0 && e.name.rfind(name, 0) == 0) s = {std::min(s.first, e.start), std::max(s.second, e.end)};
    }
    EXPECT_LT(s.first, s.second) << "no interval of lane '" << lane << "', name '" << name << "'";
    return s;
  };
  const auto copies0 = span("comm", "batch 0: "), copies1 = span("comm", "batch 1: ");
  const auto gemm0 = span("cta", "batch 0: tile"), gemm1 = span("cta", "batch 1: tile");
  const auto part2_0 = span("part 2 cta", "batch 0: "), part2_1 = span("part 2 cta", "batch 1: ");
  const auto sums0 = span("part 2 reduce", "batch 0: "), sums1 = span("part 2 reduce", "batch 1: ");
  EXPECT_NEAR(copies1.first, copies0.second, 1e-12) << "back to back on the copy engine";
  EXPECT_GE(gemm0.first, copies0.second) << "the peer's rows first (its only tile needs them)";
  EXPECT_GE(part2_0.first, gemm0.second);
  EXPECT_GE(gemm1.first, part2_0.second) << "one compute stream";
  EXPECT_GE(sums0.first, gemm1.second) << "batch 0's sums after batch 1's part 1";
  EXPECT_GE(part2_1.first, sums0.second);
  EXPECT_GE(sums1.first, part2_1.second);
  EXPECT_DOUBLE_EQ(two.fused, sums1.second);
  // Each batch pays the copy engine's fixed cost: the pipeline is slower here, not faster.
  EXPECT_GT(two.fused, whole.fused);

  EXPECT_THROW(sim::predict_moe_layer(p, MlpActivation::kGelu, hand_config(), part2, cost, 129), InvalidArgument);
  EXPECT_THROW(sim::predict_moe_layer(hand_rs_problem(1), MlpActivation::kGelu, hand_config(), part2, cost, 2),
               InvalidArgument);
  EXPECT_THROW(sim::predict_moe_layer(p, MlpActivation::kGelu, hand_config(), hand_rs_config(), cost, 2),
               InvalidArgument)
      << "the combine blocks";
}

TEST(MoeSim, LayerIsPart1ThenTheActivationThenPart2) {
  const sim::MoeProblem p = hand_rs_problem(1);
  const sim::MoePrediction layer = sim::predict_moe_layer(p, MlpActivation::kGelu, hand_config(), hand_rs_config(), hand_cost());
  const sim::MoePrediction a = sim::predict_moe_ag(p, hand_config(), hand_cost());
  const sim::MoePrediction b = sim::predict_moe_gemm_rs(p, hand_rs_config(), hand_cost());
  const double act = 256.0 * (1024 + 1024) * 2 / hand_cost().hbm_bandwidth;  // 2 tiles of 128 rows
  EXPECT_NEAR(layer.fused, a.fused + act + b.fused, 1e-12);
  EXPECT_NEAR(layer.non_overlapped, a.non_overlapped + act + b.non_overlapped, 1e-12);
}

}  // namespace
}  // namespace tilelink::test

namespace tilelink::test {
namespace {

// The MLP runs its two ops and the activation one after another: its prediction is their sum,
// the activation at the HBM bandwidth, and fc2's timeline starts where the activation ends.
TEST(MlpSim, IsFc1ThenActivationThenFc2) {
  sim::MlpProblem p;
  p.m = 4096;
  p.hidden = 2048;
  p.intermediate = 8192;
  p.world = 4;
  sim::MlpPlanConfig c;
  const sim::MlpPrediction r = sim::predict_mlp(p, c);
  const sim::AgGemmPrediction fc1 = sim::predict_ag_gemm({4096, 16384, 2048, 2, 4, 1}, c.fc1);
  const sim::GemmRsPrediction fc2 = sim::predict_gemm_rs({4096, 2048, 8192, 2, 2, 4, 1}, c.fc2);
  const double act = 4096.0 * (2 * 2048 + 2048) * 2 / sim::CostModel{}.hbm_bandwidth;
  EXPECT_NEAR(r.t_act, act, 1e-12);
  EXPECT_NEAR(r.fused, fc1.fused + act + fc2.fused, 1e-12);
  EXPECT_NEAR(r.non_overlapped, fc1.non_overlapped + act + fc2.non_overlapped, 1e-12);
  EXPECT_NEAR(r.ideal, fc1.ideal + act + fc2.ideal, 1e-12);
  EXPECT_DOUBLE_EQ(r.flop, fc1.flop + fc2.flop);
  double fc2_start = 1;
  for (const sim::Interval& e : r.timeline) {
    if (e.lane.rfind("fc2 ", 0) == 0) fc2_start = std::min(fc2_start, e.start);
  }
  EXPECT_GE(fc2_start, fc1.fused + act - 1e-12);
  p.intermediate = 8190;  // not split evenly over 4 ranks
  EXPECT_THROW(sim::predict_mlp(p, c), InvalidArgument);
}

}  // namespace
}  // namespace tilelink::test

namespace tilelink::test {
namespace {

// SP attention by hand: 2 ranks x 128 tokens, one q head over one kv head of 64, one query block
// and one K/V chunk per rank; a chunk of 128 x 128 pairs takes 1 µs on one of the 2 SMs; the
// peer's chunk arrives at 10 µs (hand_cost's copy-engine chunk overhead).
sim::SpAttentionProblem hand_attention(bool causal) {
  sim::SpAttentionProblem p;
  p.seq = 256;
  p.q_heads = 1;
  p.kv_heads = 1;
  p.head_dim = 64;
  p.causal = causal;
  p.world = 2;
  return p;
}

sim::SpAttentionPlanConfig hand_attention_config(SeqLayout layout = SeqLayout::kContiguous) {
  sim::SpAttentionPlanConfig c;
  c.bq = 128;
  c.op.comm.comm_rows = 128;
  c.op.layout = layout;
  c.attention_flops = 2 * 4.0 * 128 * 128 * 64 / 1e-6;
  return c;
}

sim::CostModel hand_attention_cost() {
  sim::CostModel c;
  c.sms = 2;
  c.notify_latency = 0;
  c.ce_chunk_overhead = 10e-6;
  c.ce_bandwidth = c.nvlink_bandwidth = 1e30;
  return c;
}

TEST(SpAttentionSim, TheLocalChunkFirstThenThePeersOnArrival) {
  const sim::SpAttentionPrediction r = sim::predict_sp_attention(
      hand_attention(false), hand_attention_config(SeqLayout::kContiguous), hand_attention_cost());
  EXPECT_EQ(r.items, 1u);
  EXPECT_NEAR(r.t_comm, 10e-6, 1e-12);
  EXPECT_NEAR(r.fused, 11e-6, 1e-12);  // own chunk 0-1 µs, the peer's 10-11 µs
  EXPECT_NEAR(r.t_comp, 2e-6, 1e-12);
  EXPECT_NEAR(r.non_overlapped, 12e-6, 1e-12);
}

TEST(SpAttentionSim, TheLocalPassFirstFillsTheWaitForThePeer) {
  // 4 heads on 2 SMs: each CTA has two items, each 1 µs on its own chunk and 1 µs on the peer's,
  // which lands at 10 µs. An item's state (128 x 64 fp32 + m, l: 33792 bytes) moves in 0.1 µs at
  // a CTA's share of the HBM bandwidth.
  sim::SpAttentionProblem p = hand_attention(false);
  p.q_heads = p.kv_heads = 4;
  sim::SpAttentionPlanConfig c = hand_attention_config();
  sim::CostModel cost = hand_attention_cost();
  cost.hbm_bandwidth = 2 * 33792 / 0.1e-6;
  // One pass: own 0-1, peer 10-11, the second item 11-13.
  const sim::SpAttentionPrediction one = sim::predict_sp_attention(p, c, cost);
  EXPECT_NEAR(one.fused, 13e-6, 1e-12);
  // Local pass first: own chunks 0-1 and 1.1-2.1 (each parked for 0.1 µs), then the peer's: load
  // 2.2-2.3, wait to 10, 10-11; load 11-11.1, 11.1-12.1.
  c.op.local_first = true;
  const sim::SpAttentionPrediction two = sim::predict_sp_attention(p, c, cost);
  EXPECT_NEAR(two.fused, 12.1e-6, 1e-12);
  EXPECT_NEAR(two.t_comp, one.t_comp, 1e-12);  // the non-overlapped baseline stays one pass
}

TEST(SpAttentionSim, CommunicationSlowedUnderComputeDelaysOnlyTheFusedArrivals) {
  // The peer's chunk: 10 µs of fixed copy-engine cost with infinite bandwidth is not slowed; give
  // it 1 µs of transfer instead (128 tokens x 256 bytes = 32 KiB at 32.768 GB/s), 2 µs at half the
  // rate. Fused: own chunk 0-1 µs, the peer's lands at 11 (alone) or 12 (slowed) µs, then 1 µs.
  sim::CostModel cost = hand_attention_cost();
  cost.ce_bandwidth = cost.nvlink_bandwidth = 128.0 * 256 / 1e-6;
  sim::SpAttentionPlanConfig c = hand_attention_config();
  const sim::SpAttentionPrediction alone =
      sim::predict_sp_attention(hand_attention(false), c, cost);
  c.comm_slowdown = 2.0;
  const sim::SpAttentionPrediction slowed =
      sim::predict_sp_attention(hand_attention(false), c, cost);
  EXPECT_NEAR(alone.fused, 12e-6, 1e-12);
  EXPECT_NEAR(slowed.fused, 13e-6, 1e-12);
  EXPECT_NEAR(slowed.t_comm, alone.t_comm, 1e-12);                  // T_comm: the isolated rate
  EXPECT_NEAR(slowed.non_overlapped, alone.non_overlapped, 1e-12);  // so is the chain's
  c.comm_slowdown = 0.5;
  EXPECT_THROW(sim::predict_sp_attention(hand_attention(false), c, cost), InvalidArgument);
}

TEST(SpAttentionSim, CausalSkipsTheFutureAndCountsOnlyVisiblePairs) {
  // Contiguous: rank 0 holds tokens 0-127 and skips rank 1's chunk (wholly in its future, no
  // wait); rank 1 (128-255) is the slowest: its own chunk is a triangle (128 * 129 / 2 of the 128 *
  // 128 pairs) at 0-0.504 µs, then all of rank 0's chunk at 10-11 µs.
  const sim::SpAttentionPrediction r = sim::predict_sp_attention(
      hand_attention(true), hand_attention_config(SeqLayout::kContiguous), hand_attention_cost());
  EXPECT_EQ(r.rank, 1u);
  EXPECT_NEAR(r.fused, 11e-6, 1e-12);
  EXPECT_NEAR(r.t_comp, (8256.0 + 16384) / 16384 * 1e-6, 1e-12);
  // Zig-zag: rank 0 holds 0-63 and 192-255, rank 1 64-191; rank 0's query 255 sees all of the
  // peer's chunk, so the block waits for it: 0-t_own, then 10 µs-(10 µs + 1 µs).
  const sim::SpAttentionPrediction z = sim::predict_sp_attention(
      hand_attention(true), hand_attention_config(SeqLayout::kZigZag), hand_attention_cost());
  EXPECT_NEAR(z.fused, 10e-6 + (64.0 * 128) / 16384 * 1e-6, 1e-12);  // queries 192-255 see the peer's 128 keys
  sim::SpAttentionProblem odd = hand_attention(true);
  odd.seq = 254;  // 127 tokens per rank: zig-zag needs an even count
  EXPECT_THROW(sim::predict_sp_attention(odd, hand_attention_config(SeqLayout::kZigZag), hand_attention_cost()),
               InvalidArgument);
}

}  // namespace
}  // namespace tilelink::test
