// The plan models across nodes: a process world spanning nodes runs the put_signal transport
// (WorldOptions::transport auto), so a plan with nodes > 1 is for the paths that run there -- the
// copy-engine all-gathers and scatter, the MoE combine blocks -- and refuses the others by name;
// the rank's NVLink and network links carry at the same time.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cpu_test_util.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"
#include "tilelink/sim/moe_sim.hpp"
#include "tilelink/sim/sp_attention_sim.hpp"

namespace tilelink::sim {
namespace {

using test::refusal;

TEST(SimAcrossNodes, GemmRsTakesOnlyTheCopyEngineScatter) {
  const GemmRsProblem one_node{8192, 8192, 28672, 2, 2, 16, 1};
  GemmRsProblem two_nodes = one_node;
  two_nodes.nodes = 2;
  GemmRsPlanConfig c;  // the pull scatter
  EXPECT_GT(predict_gemm_rs(one_node, c).fused, 0.0);
  for (GemmRsScatter s : {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush}) {
    c.op.scatter = s;
    const std::string why = refusal([&] { predict_gemm_rs(two_nodes, c); });
    EXPECT_NE(why.find(std::string("'scatter' = ") + to_string(s)), std::string::npos) << why;
    EXPECT_NE(why.find("put_signal"), std::string::npos) << why;
  }
  c.op.scatter = GemmRsScatter::kCopyEngine;
  c.op.granularity = SignalGranularity::kTileRow;
  const CostModel cost;
  const GemmRsPrediction r = predict_gemm_rs(two_nodes, c, cost);
  // Rank 0 sends a 512-row block to each peer: 7 over NVLink, 8 over the network, at once.
  const double block = 512.0 * 8192 * 2;
  EXPECT_NEAR(r.t_comm, std::max(7 * block / cost.nvlink_bandwidth, 8 * block / cost.network_bandwidth), 1e-12);
  EXPECT_GE(r.fused, r.ideal) << "the one stream's puts carry every block";
  EXPECT_GT(r.fused, predict_gemm_rs(one_node, c, cost).fused) << "the network is slower than NVLink";
  // One node: every block over NVLink, as before.
  EXPECT_NEAR(predict_gemm_rs(one_node, c, cost).t_comm, 15 * block / cost.nvlink_bandwidth, 1e-12);
}

TEST(SimAcrossNodes, AllGathersTakeOnlyTheCopyEngine) {
  AgGemmProblem p{8192, 28672, 8192, 2, 16, 2};
  AgGemmPlanConfig ag;
  EXPECT_GT(predict_ag_gemm(p, ag).fused, 0.0);  // the copy engine
  ag.op.comm.resource = CommResource::kSm;
  ag.op.comm.num_blocks = 16;
  const std::string why = refusal([&] { predict_ag_gemm(p, ag); });
  EXPECT_NE(why.find("'resource' = sm"), std::string::npos) << why;
  p.nodes = 1;
  EXPECT_GT(predict_ag_gemm(p, ag).fused, 0.0);

  SpAttentionProblem sp;
  sp.world = 16;
  sp.nodes = 2;
  SpAttentionPlanConfig spc;
  spc.op.comm.resource = CommResource::kCopyEngine;
  EXPECT_GT(predict_sp_attention(sp, spc).fused, 0.0);
  spc.op.comm.resource = CommResource::kSm;
  EXPECT_NE(refusal([&] { predict_sp_attention(sp, spc); }).find("'resource' = sm"), std::string::npos);
}

TEST(SimAcrossNodes, MoeCombinesInBlocksOnly) {
  MoeProblem p;
  p.m = 1024;
  p.hidden = 512;
  p.intermediate = 1024;
  p.experts = 8;
  p.topk = 2;
  p.world = 4;
  p.nodes = 2;
  MoeRsPlanConfig c;
  c.op.combine = MoeCombine::kBlocks;
  EXPECT_GT(predict_moe_gemm_rs(p, c).fused, 0.0);
  c.op.combine = MoeCombine::kAuto;  // blocks: across nodes the rows are staged
  EXPECT_GT(predict_moe_gemm_rs(p, c).fused, 0.0);
  c.op.combine = MoeCombine::kEpilogue;
  EXPECT_NE(refusal([&] { predict_moe_gemm_rs(p, c); }).find("'combine' = epilogue"), std::string::npos);
  p.nodes = 1;
  EXPECT_GT(predict_moe_gemm_rs(p, c).fused, 0.0);
  MoeAgPlanConfig part1;
  part1.op.comm.resource = CommResource::kSm;
  part1.op.comm.num_blocks = 8;
  p.nodes = 2;
  EXPECT_NE(refusal([&] { predict_moe_ag(p, part1); }).find("'resource' = sm"), std::string::npos);
}

}  // namespace
}  // namespace tilelink::sim
