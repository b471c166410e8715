// GEMM+RS protocol (the fused kernel's, every scatter variant) on the CPU executor: compute
// blocks store each finished C tile where the variant puts it and notify per tile, reduction
// blocks sum every sender's tiles as their signal groups complete. The result must equal a
// reference (per-rank partial GEMMs, then a sum in rank order) bit for bit, for every signal
// granularity, world sizes 1-8, tiles that divide nothing, over consecutive calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/testing/gemm_rs_naive_blocks.hpp"

namespace tilelink::test {
namespace {

// The fused kernel's protocol, every scatter variant: compute blocks store each tile in the
// kernel's owner order where the variant puts it and notify per tile; for the copy engine a
// stream role moves finished groups to the owners; reduction blocks sum every sender's tiles as
// they arrive. Bit-identical to per-rank partials summed in rank order.
std::string run_gemm_rs_fused(GemmRsFusedPlan plan, uint32_t k, uint64_t seed, int calls) {
  const int w = static_cast<int>(plan.world);
  const uint32_t m = plan.world * plan.rows_per_rank;
  constexpr uint32_t kComputeBlocks = 3, kReduceBlocks = 2;
  cpu::Executor ex(w, 16 << 20, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("gemm_rs_fused");
  const size_t a_off = ex.allocate(size_t(m) * k * 4);
  const size_t b_off = ex.allocate(size_t(plan.n) * k * 4);
  const size_t partial_off = ex.allocate(size_t(m) * plan.n * 4);
  const size_t recv_off = ex.allocate(size_t(m) * plan.n * 4);
  const size_t out_off = ex.allocate(size_t(plan.rows_per_rank) * plan.n * 4);
  std::vector<std::vector<uint32_t>> m_order(w, std::vector<uint32_t>(plan.world * plan.m_tiles()));
  for (int r = 0; r < w; ++r) make_gemm_rs_m_order(plan, uint32_t(r), m_order[r].data());

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    std::vector<std::vector<float>> a(w), b(w);
    for (int r = 0; r < w; ++r) {
      a[r] = random_floats(rng, size_t(m) * k);
      b[r] = random_floats(rng, size_t(plan.n) * k);
      std::memcpy(ex.at<float>(r, a_off), a[r].data(), a[r].size() * 4);
      std::memcpy(ex.at<float>(r, b_off), b[r].data(), b[r].size() * 4);
      std::memset(ex.at<float>(r, out_off), kPoison, size_t(plan.rows_per_rank) * plan.n * 4);
      std::memset(ex.at<float>(r, partial_off), kPoison, size_t(m) * plan.n * 4);
      std::memset(ex.at<float>(r, recv_off), kPoison, size_t(m) * plan.n * 4);
    }
    const uint64_t epoch = uint64_t(call);
    std::vector<cpu::Role> roles = {
        {"compute", kComputeBlocks,
         [&](cpu::BlockCtx& ctx) {
           const int r = ctx.rank();
           gemm_rs_fused_compute_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op), ex.heap(r),
                                       m_order[r].data(), ex.at<float>(r, a_off), ex.at<float>(r, b_off), k,
                                       ex.at<float>(r, partial_off));
         }},
        {"reduce", kReduceBlocks, [&](cpu::BlockCtx& ctx) {
           const int r = ctx.rank();
           const SymmetricView heap = ex.heap(r);
           const float* buf = ex.at<float>(r, partial_off);
           const float* recv = ex.at<float>(r, recv_off);
           float* out = ex.at<float>(r, out_off);
           gemm_rs_fused_reduce_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op),
                                      [&](uint32_t, uint32_t row0, uint32_t col0, uint32_t cols) {
                                        for (uint32_t e = 0; e < plan.bm * cols; ++e) {
                                          const uint64_t at = uint64_t(row0 + e / cols) * plan.n + col0 + e % cols;
                                          float acc = 0.f;
                                          for (int s = 0; s < w; ++s) {
                                            acc += gemm_rs_sender_rows(plan, heap, uint32_t(r), uint32_t(s), buf, recv)[at];
                                          }
                                          out[at] = acc;
                                        }
                                      });
         }}};
    if (plan.scatter == GemmRsScatter::kCopyEngine) {
      roles.push_back({"scatter", 1, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         gemm_rs_copy_engine_scatter(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op),
                                                     ex.heap(r), m_order[r].data(), ex.at<float>(r, partial_off),
                                                     ex.at<float>(r, recv_off), 4);
                       }});
    }
    ex.run(roles);

    for (int o = 0; o < w; ++o) {
      const float* got = ex.at<float>(o, out_off);
      for (uint32_t row = 0; row < plan.rows_per_rank; ++row) {
        for (uint32_t col = 0; col < plan.n; ++col) {
          const uint32_t global_row = uint32_t(o) * plan.rows_per_rank + row;
          float want = 0.f;
          for (int q = 0; q < w; ++q) {
            float partial = 0.f;
            for (uint32_t kk = 0; kk < k; ++kk) {
              partial += a[q][size_t(global_row) * k + kk] * b[q][size_t(col) * k + kk];
            }
            want += partial;
          }
          const float g = got[size_t(row) * plan.n + col];
          if (std::memcmp(&g, &want, 4) != 0) {
            return "world " + std::to_string(w) + " scatter " + to_string(plan.scatter) + " granularity " +
                   std::to_string(int(plan.granularity)) +
                   ": call " + std::to_string(call) + ", owner " + std::to_string(o) + " out[" + std::to_string(row) +
                   "][" + std::to_string(col) + "] = " + std::to_string(g) + ", expected " + std::to_string(want);
          }
        }
      }
    }
  }
  return "";
}

class GemmRsFusedProtocolTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsFusedProtocolTest, MatchesPartialGemmsSummedInRankOrder) {
  const auto [world, scatter] = GetParam();
  for (SignalGranularity g : {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}) {
    if (scatter == GemmRsScatter::kCopyEngine && g == SignalGranularity::kTile) continue;  // refused by the op
    GemmRsFusedPlan plan;
    plan.world = static_cast<uint32_t>(world);
    plan.rows_per_rank = 8;  // 2 tile rows of 4
    plan.n = 20;             // 3 tile columns of 8, the last short
    plan.bm = 4;
    plan.bn = 8;
    plan.granularity = g;
    plan.scatter = scatter;
    plan.band = 1 + uint32_t(world) % 3;  // 1, 2 or 3 (past the block's 2 tile rows)
    EXPECT_EQ(run_gemm_rs_fused(plan, 6, 3000 + world, 2), "");
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

TEST(GemmRsFusedPlan, ReductionWalksBandsColumnByColumnAndCoversTheBlockOnce) {
  GemmRsFusedPlan plan;
  plan.rows_per_rank = 20;  // 5 tile rows of 4
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
  plan.world = 4;
  plan.rows_per_rank = 12;  // 3 tile rows of 4
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
