// GEMM+RS protocol (the fused kernel's, every scatter variant) on the CPU executor: compute
// blocks store each finished C tile where the variant puts it and notify per tile, reduction
// blocks sum every sender's tiles as their signal groups complete. The result must equal a
// reference (per-rank partial GEMMs, then a sum in rank order) bit for bit, for every signal
// granularity, world sizes 1-8, tiles that divide nothing, any M (partial tile rows, short and
// empty owner blocks), over consecutive calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_test_util.hpp"
#include "protocol_runners.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/testing/gemm_rs_naive_blocks.hpp"

namespace tilelink::test {
namespace {

class GemmRsFusedProtocolTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsFusedProtocolTest, MatchesPartialGemmsSummedInRankOrder) {
  const auto [world, scatter] = GetParam();
  for (SignalGranularity g : {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}) {
    if (scatter == GemmRsScatter::kCopyEngine && g == SignalGranularity::kTile) continue;  // refused by the op
    GemmRsFusedPlan plan;
    plan.set_rows(8 * static_cast<uint32_t>(world), static_cast<uint32_t>(world));  // 2 tile rows of 4 each
    plan.n = 20;             // 3 tile columns of 8, the last short
    plan.bm = 4;
    plan.bn = 8;
    plan.granularity = g;
    plan.scatter = scatter;
    plan.band = 1 + uint32_t(world) % 3;  // 1, 2 or 3 (past the block's 2 tile rows)
    for (GemmRsReducer reducer : {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue}) {
      if (reducer == GemmRsReducer::kEpilogue && g != SignalGranularity::kTile) continue;  // refused by the op
      plan.reducer = reducer;
      for (bool deferred : {false, true}) {  // the push's notify right after its store, or one tile late
        if (deferred && scatter != GemmRsScatter::kEpiloguePush) continue;
        plan.defer_push_notify = deferred;
        EXPECT_EQ(run_gemm_rs_fused(plan, 6, 3000 + world, 2), "") << to_string(reducer) << (deferred ? ", deferred" : "");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(World, GemmRsFusedProtocolTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush,
                                                              GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsFusedProtocolTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// The decomposed method (async-TP's chain): a GEMM per owner block, own last, each peer block
// copied with its signal behind it, then the reduction on the same stream; any M (short and empty
// blocks), world 1-8, the same bits as the fused protocol's reference.
TEST(GemmRsDecomposedProtocol, MatchesPartialGemmsSummedInRankOrder) {
  for (int world = 1; world <= 8; ++world) {
    const uint32_t w = static_cast<uint32_t>(world);
    for (uint32_t m : {1u, 8u * w, 7u * w + (w > 1 ? 1u : 0u)}) {
      GemmRsFusedPlan plan;
      plan.set_rows(m, w);
      plan.n = 20;
      plan.bm = 4;
      plan.bn = 8;
      plan.granularity = SignalGranularity::kRank;
      plan.scatter = GemmRsScatter::kCopyEngine;
      plan.own_part_in_order = true;
      plan.exit_on_stream = m % 2 == 1;  // the put-with-signal transport's exit barrier, on the stream
      EXPECT_EQ(run_gemm_rs_fused(plan, 6, 6000 + world * 17 + m, 2), "") << "world " << world << ", m " << m;
    }
  }
}

// The put-with-signal transport runs the copy-engine scatter with the exit barrier on the stream
// after the reduction (no peer stores from the kernel): tile-row and owner-block groups, worlds 1-8;
// the results, and a barrier whose notifies and waits match (a mismatch times out). (Each call
// here completes before the next starts, so what the barrier protects across calls is the GPU
// tests'.)
TEST(GemmRsCopyEngineProtocol, ExitBarrierOnTheStream) {
  for (int world = 1; world <= 8; ++world) {
    for (SignalGranularity g : {SignalGranularity::kTileRow, SignalGranularity::kRank}) {
      GemmRsFusedPlan plan;
      plan.set_rows(8 * static_cast<uint32_t>(world) + 1, static_cast<uint32_t>(world));
      plan.n = 20;
      plan.bm = 4;
      plan.bn = 8;
      plan.granularity = g;
      plan.scatter = GemmRsScatter::kCopyEngine;
      plan.band = 2;
      plan.exit_on_stream = true;
      EXPECT_EQ(run_gemm_rs_fused(plan, 6, 6500 + world, 3), "") << "world " << world;
    }
  }
}

// Any M: owner blocks of R = ceil(M / P) rows whose last tile row is partial (R = 5, 7), short
// last blocks (P does not divide M), and owners with no rows at all (M < P).
TEST_P(GemmRsFusedProtocolTest, MatchesAtAnyRowCount) {
  const auto [world, scatter] = GetParam();
  const uint32_t w = static_cast<uint32_t>(world);
  for (uint32_t m : {1u, 3u, 5u * w, 7u * w + (w > 1 ? 1u : 0u), 2u * w + w / 2}) {
    for (SignalGranularity g : {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}) {
      if (scatter == GemmRsScatter::kCopyEngine && g == SignalGranularity::kTile) continue;
      GemmRsFusedPlan plan;
      plan.set_rows(m, w);
      plan.n = 12;
      plan.bm = 4;
      plan.bn = 8;
      plan.granularity = g;
      plan.scatter = scatter;
      plan.band = 2;
      plan.reducer = g == SignalGranularity::kTile && m % 2 == 1 ? GemmRsReducer::kEpilogue : GemmRsReducer::kBlocks;
      plan.defer_push_notify = (m / 2) % 2 == 0;
      EXPECT_EQ(run_gemm_rs_fused(plan, 5, 5000 + world * 31 + m, 2), "") << "m " << m;
    }
  }
}

// The compute order's positions (make_gemm_rs_m_order) both ways, and the deferred notify's rule
// with the epilogue reducer: a pushed tile whose cluster (consecutive aligned positions) holds an
// own tile row is announced at once -- its cluster-mate's sum would hold its next mainloop.
TEST(GemmRsFusedPlan, OrderPositionsAndTheClusterRuleOfTheDeferredNotify) {
  for (uint32_t world = 1; world <= 8; ++world) {
    for (uint32_t rows : {1u, 2u, 5u, 9u}) {  // tile rows per owner
      for (uint32_t band : {1u, 2u, 4u, 16u}) {
        GemmRsFusedPlan plan;
        plan.bm = 4;
        plan.n = 8;
        plan.bn = 8;
        plan.set_rows(4 * rows * world, world);
        plan.band = band;
        plan.scatter = GemmRsScatter::kEpiloguePush;
        plan.defer_push_notify = true;
        const uint32_t total = world * plan.m_tiles();
        for (uint32_t rank = 0; rank < world; ++rank) {
          std::vector<uint32_t> order(total);
          make_gemm_rs_m_order(plan, rank, order.data());
          for (uint32_t pos = 0; pos < total; ++pos) {
            ASSERT_EQ(plan.order_tile(rank, pos), order[pos]) << "world " << world << " rows " << rows << " band " << band;
            ASSERT_EQ(plan.order_position(rank, order[pos]), pos);
          }
          for (uint32_t pos = 0; pos < total; ++pos) {
            const uint32_t m = order[pos];
            const bool own = plan.tile_owner(m) == rank;
            plan.reducer = GemmRsReducer::kBlocks;  // nothing waits in the GEMM: every peer tile defers
            EXPECT_EQ(plan.may_defer_notify(rank, m, 2), !own);
            plan.reducer = GemmRsReducer::kEpilogue;
            const uint32_t mate = pos ^ 1u;
            const bool mate_own = mate < total && plan.tile_owner(order[mate]) == rank;
            EXPECT_EQ(plan.may_defer_notify(rank, m, 2), !own && !mate_own) << "world " << world << " pos " << pos;
            EXPECT_EQ(plan.may_defer_notify(rank, m, 1), !own) << "no cluster-mates";
          }
        }
      }
    }
  }
  // The case the review found: one tile row per owner at world 2 -- each rank's cluster computes
  // [the peer's row, its own row] together, so the peer's row is announced at once.
  GemmRsFusedPlan plan;
  plan.bm = 4;
  plan.n = 8;
  plan.bn = 8;
  plan.set_rows(8, 2);
  plan.scatter = GemmRsScatter::kEpiloguePush;
  plan.reducer = GemmRsReducer::kEpilogue;
  plan.defer_push_notify = true;
  EXPECT_FALSE(plan.may_defer_notify(0, 1, 2));
  EXPECT_FALSE(plan.may_defer_notify(1, 0, 2));
  plan.defer_push_notify = false;
  plan.set_rows(16, 2);
  EXPECT_FALSE(plan.may_defer_notify(0, 2, 2)) << "immediate: nothing defers";
}

TEST(GemmRsFusedPlan, OwnerBlocksOfAnyRowCount) {
  GemmRsFusedPlan plan;
  plan.world = 4;
  plan.bm = 4;
  plan.set_rows(10, plan.world);  // R = 3: blocks of 3, 3, 3 and 1 rows, one partial tile row each
  EXPECT_EQ(plan.rows_per_rank, 3u);
  EXPECT_EQ(plan.m_tiles(), 1u);
  EXPECT_EQ((std::vector<uint32_t>{plan.block_rows(0), plan.block_rows(1), plan.block_rows(2), plan.block_rows(3)}),
            (std::vector<uint32_t>{3, 3, 3, 1}));
  EXPECT_EQ(plan.tile_row0(3), 9u);
  EXPECT_EQ(plan.rows_of_tile(3), 1u);
  plan.set_rows(2, plan.world);  // M < P: R = 1, owners 2 and 3 get nothing
  EXPECT_EQ((std::vector<uint32_t>{plan.block_rows(0), plan.block_rows(1), plan.block_rows(2), plan.block_rows(3)}),
            (std::vector<uint32_t>{1, 1, 0, 0}));
  EXPECT_EQ(plan.tile_rows(3, 0), 0u);
  plan.set_rows(4 * 9, plan.world);  // R = 9: tile rows of 4, 4 and 1
  EXPECT_EQ(plan.m_tiles(), 3u);
  EXPECT_EQ(plan.tile_rows(2, 2), 1u);
  EXPECT_EQ(plan.tile_row0(2 * 3 + 2), 2u * 9 + 8);
}

TEST(GemmRsFusedPlan, ReductionWalksBandsColumnByColumnAndCoversTheBlockOnce) {
  GemmRsFusedPlan plan;
  plan.set_rows(20, 1);  // 5 tile rows of 4
  plan.n = 24;              // 3 tile columns of 8
  plan.bm = 4;
  plan.bn = 8;
  for (uint32_t band : {0u, 1u, 2u, 4u, 5u, 9u}) {
    plan.band = band;
    std::vector<uint32_t> order(plan.tiles_per_block());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = plan.reduce_tile(i);
    if (band == 2) {  // rows {0,1} column by column, then {2,3}, then the short band {4}
      EXPECT_EQ(order, (std::vector<uint32_t>{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11, 12, 13, 14}));
    }
    if (band <= 1) {
      for (uint32_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
    }
    std::sort(order.begin(), order.end());
    for (uint32_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i) << "band " << band;
  }
}

TEST(GemmRsFusedPlan, RoundsOverOwnersOwnRowsLastEveryTileRowOnce) {
  GemmRsFusedPlan plan;
  plan.set_rows(4 * 12, 4);  // 3 tile rows of 4 per owner
  plan.bm = 4;
  for (uint32_t band : {1u, 2u, 3u}) {
    plan.band = band;
    for (uint32_t rank = 0; rank < 4; ++rank) {
      std::vector<uint32_t> order(12);
      make_gemm_rs_m_order(plan, rank, order.data());
      EXPECT_EQ(order.front() / plan.m_tiles(), (rank + 1) % 4);
      EXPECT_EQ(order.back() / plan.m_tiles(), rank);
      if (band == 1) {  // round j / 4 visits tile row j / 4 of owners rank+1, rank+2, rank+3, rank
        for (uint32_t j = 0; j < 12; ++j) {
          EXPECT_EQ(order[j], ((rank + 1 + j % 4) % 4) * plan.m_tiles() + j / 4) << "rank " << rank << " j " << j;
        }
      }
      if (band == 2) {  // rows {0, 1} of every owner, then row {2}
        EXPECT_EQ(order[0], ((rank + 1) % 4) * 3);
        EXPECT_EQ(order[1], ((rank + 1) % 4) * 3 + 1);
        EXPECT_EQ(order[8], ((rank + 1) % 4) * 3 + 2);
      }
      std::vector<uint32_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (uint32_t i = 0; i < 12; ++i) EXPECT_EQ(sorted[i], i);
    }
  }
}

}  // namespace
}  // namespace tilelink::test
