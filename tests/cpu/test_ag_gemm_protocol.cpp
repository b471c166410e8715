// AG+GEMM protocol on the CPU executor: the all-gather protocol (SM pull/push, mesh/ring, or the
// copy-engine stream) runs next to compute blocks that walk C in the arrival-ordered schedule
// and wait per tile on the channels of its A rows. C must equal a reference GEMM on the gathered
// A, bit for bit (same summation order), at world sizes 1-8 with compute and communication tile
// sizes that divide nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "protocol_runners.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "tilelink/testing/ag_gemm_naive_blocks.hpp"

namespace tilelink::test {
namespace {

class AgGemmProtocolTest : public ::testing::TestWithParam<int> {};

TEST_P(AgGemmProtocolTest, MatchesTheReferenceGemmOnTheGatheredA) {
  const int world = GetParam();
  const AgGemmCase base{world, 10, 8, 12, 4, 6, 5, AgMethod::kPull, CommOrder::kFullMesh, false};
  std::vector<AgGemmCase> cases;
  for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
    for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
      AgGemmCase c = base;
      c.method = method;
      c.order = order;
      cases.push_back(c);
    }
  }
  AgGemmCase ce = base;
  ce.copy_engine = true;
  cases.push_back(ce);
  AgGemmCase big_tiles = base;  // compute tiles spanning several shards and comm tiles
  big_tiles.bm = 23;
  big_tiles.comm_rows = 3;
  cases.push_back(big_tiles);
  for (const AgGemmCase& c : cases) {
    EXPECT_EQ(run_ag_gemm(c, 1000 + world, 2), "") << describe(c);
  }
}

INSTANTIATE_TEST_SUITE_P(World, AgGemmProtocolTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) { return "world" + std::to_string(info.param); });

TEST(AgGemmSchedule, OwnShardFirstThenInArrivalOrder) {
  for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
    for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
      AllGatherPlan ag;
      ag.map = RowShardMapping{16, 8, 4};
      ag.method = method;
      ag.order = order;
      for (uint32_t rank = 0; rank < 4; ++rank) {
        std::vector<uint32_t> order_m(8);
        make_m_order(ag, rank, 8, order_m.data());
        // Every tile row once.
        std::vector<uint32_t> sorted = order_m;
        std::sort(sorted.begin(), sorted.end());
        for (uint32_t t = 0; t < 8; ++t) EXPECT_EQ(sorted[t], t);
        // The first two tile rows are this rank's own shard (rows [16 rank, 16 rank + 16)).
        EXPECT_EQ(order_m[0], 2 * rank);
        EXPECT_EQ(order_m[1], 2 * rank + 1);
        // Steps never decrease along the schedule.
        for (uint32_t j = 1; j < 8; ++j) {
          EXPECT_LE(arrival_step(ag, rank, order_m[j - 1] * 8, 8), arrival_step(ag, rank, order_m[j] * 8, 8));
        }
        // The shard delivered at step 1 comes next: rank+1 for a mesh pull, rank-1 otherwise.
        const bool mesh_pull = order == CommOrder::kFullMesh && method == AgMethod::kPull;
        EXPECT_EQ(order_m[2] / 2, mesh_pull ? (rank + 1) % 4 : (rank + 3) % 4);
      }
    }
  }
}

}  // namespace
}  // namespace tilelink::test
