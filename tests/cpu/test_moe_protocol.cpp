// MoE on the CPU executor. Part 1 (all-gather + gather + grouped GEMM): the dynamic mapping built
// from random routings (uniform, skewed to one expert, experts left without tokens), top-k 1, 2,
// 4, 6 and 8, token counts that are not multiples of the tile, world 1-8; the all-gather runs
// next to gather blocks that wait per tile on the token rows the mapping names and copy them
// into expert-sorted rows, and compute blocks that wait per tile on the gather. Every (token, k)
// pair's output row must equal x_token * W_expert, bit for bit, and padding rows must be zero.
// Part 2 (grouped GEMM + top-k weighted reduce + reduce-scatter): every owner's tokens must equal
// the rank-order sum of the per-rank top-k weighted sums, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_test_util.hpp"
#include "protocol_runners.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/sim/synthetic_routing.hpp"
#include "tilelink/testing/moe_naive_blocks.hpp"

namespace tilelink::test {
namespace {

using Routing = SyntheticRouting;
using tilelink::to_string;

class MoeProtocolTest : public ::testing::TestWithParam<std::tuple<int, Routing>> {};

TEST_P(MoeProtocolTest, EveryPairRowIsItsTokenTimesItsExpert) {
  const auto [world, routing] = GetParam();
  for (uint32_t topk : {1u, 2u, 4u, 6u, 8u}) {
    // 7 tokens per rank, tiles of 4 rows, communication tiles of 3 rows: nothing divides.
    const MoeCase c{world, 7, 8, 5, 8, topk, 4, 3, routing};  // rows of 8 floats: 16-byte vectors
    EXPECT_EQ(run_moe(c, 5000 + 10 * world + topk, 2), "") << describe(c);
  }
}

INSTANTIATE_TEST_SUITE_P(World, MoeProtocolTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed, Routing::kFewExperts)),
                         [](const ::testing::TestParamInfo<MoeProtocolTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
                         });

// The gather blocks claim tiles: with every gather block but the first held back until the grouped
// GEMM is done (as a CTA that never gets an SM beside the GEMM's spinning CTAs), the first gathers
// every tile and the GEMM completes. (A fixed stride of tiles per block deadlocks here.)
TEST(MoeProtocol, OneResidentGatherBlockGathersEveryTile) {
  for (int world : {1, 3, 4}) {
    MoeCase c{world, 7, 8, 5, 8, 2, 4, 3, Routing::kSkewed};
    c.gather_blocks = 4;
    c.late_gather_blocks = true;
    EXPECT_EQ(run_moe(c, 5900 + world, 2), "") << describe(c);
  }
}

// Both combines: combine blocks beside the GEMM blocks, or the GEMM's epilogue -- the block whose
// tile is the last one an item counts on combines it, and reduction blocks run beside the GEMM
// blocks (on the GPU they follow them), so they must wait for every sender's part. Same bits.
class MoeRsProtocolTest : public ::testing::TestWithParam<std::tuple<int, Routing, MoeCombine>> {};

TEST_P(MoeRsProtocolTest, OwnersGetTheRankOrderSumOfTopkWeightedRows) {
  const auto [world, routing, combine] = GetParam();
  const bool in_epilogue = combine == MoeCombine::kEpilogue;
  for (uint32_t topk : {1u, 2u, 4u, 6u, 8u}) {
    // 7 tokens per rank in signal blocks of 3, tiles of 4 rows, 6 intermediate columns per rank,
    // hidden 8 (16-byte rows for the push).
    MoeCase c{world, 7, 6, 8, 8, topk, 4, 3, routing};
    c.combine = combine;
    if (in_epilogue) c.combine_blocks = 2;
    EXPECT_EQ(run_moe_rs(c, (in_epilogue ? 7500 : 7000) + 10 * world + topk, in_epilogue ? 3 : 2), "")
        << describe(c);
  }
}

INSTANTIATE_TEST_SUITE_P(World, MoeRsProtocolTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed, Routing::kFewExperts),
                                            ::testing::Values(MoeCombine::kBlocks, MoeCombine::kEpilogue)),
                         [](const ::testing::TestParamInfo<MoeRsProtocolTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param));
                         });

// The put-with-signal transport's staged combine: a combine for a peer lands in the rank's own
// staging and the rank's stream puts it into the owner's slot (the exit barrier on the stream
// after both); worlds 1-8, every routing, top-k 1-8, the same sums.
TEST(MoeRsStaged, TheStreamsPutsGiveTheSameSums) {
  for (int world = 1; world <= 8; ++world) {
    for (Routing routing : {Routing::kUniform, Routing::kSkewed, Routing::kFewExperts}) {
      for (uint32_t topk : {1u, 2u, 8u}) {
        MoeCase c{world, 7, 6, 8, 8, topk, 4, 3, routing};
        c.staged = true;
        EXPECT_EQ(run_moe_rs(c, 8100 + 10 * world + topk + 1000 * uint32_t(routing), 2), "") << describe(c) << " staged";
      }
    }
  }
}

// Timeout reports name what a channel carries: every channel of a staged plan gets words, and
// each kind its own.
TEST(MoeRsPlan, EveryChannelIsDescribed) {
  MoeRsPlan plan;
  plan.tokens = RowShardMapping{7, 3, 3};
  plan.n = 8;
  plan.bn = 3;
  plan.max_tiles = 5;
  plan.staged = true;
  const auto text = [&](uint32_t ch) { return describe_moe_rs_channel(plan, ch); };
  for (uint32_t ch = 0; ch < plan.num_channels(); ++ch) EXPECT_FALSE(text(ch).empty()) << ch;
  EXPECT_NE(text(1).find("rank 1's arrival"), std::string::npos) << text(1);
  EXPECT_NE(text(plan.tile_channel(4, 2)).find("tile row 4, column tile 2"), std::string::npos);
  EXPECT_NE(text(plan.recv_channel(2, 1)).find("rank 2's combined rows of this rank's token block 1"),
            std::string::npos) << text(plan.recv_channel(2, 1));
  const std::string staged = text(plan.combined_channel(plan.tokens.channel(2, 0)));
  EXPECT_NE(staged.find("owner rank 2"), std::string::npos) << staged;
  EXPECT_NE(staged.find("tokens [14, 17)"), std::string::npos) << staged;
}

// Every item's count is the number of tiles that will arrive on it, and a tile arrives on the
// blocks of its span: a tile of padding only reaches none, a span across owners reaches both.
TEST(MoeRsEpilogue, ItemCountsAreTheTilesReachingEachBlock) {
  // 2 ranks x 6 tokens in blocks of 4 (rank 0: blocks 0 = tokens 0-3, 1 = 4-5; rank 1: 2 = 6-9,
  // 3 = 10-11), top-1 over 2 experts, tiles of 2 rows.
  const std::vector<int32_t> ids = {0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1};
  const MoeMapping m = build_moe_mapping({12, 1, 2, ids.data(), nullptr}, 2);
  MoeRsPlan plan;
  plan.tokens = RowShardMapping{6, 4, 2};
  plan.n = 8;
  plan.bn = 8;
  plan.max_tiles = m.num_tiles();
  const MoeMappingView v = m.view();
  // Expert 0: tokens 0, 2, 5, 6, 9 -> tiles {0, 2} (block 0), {5, 6} (blocks 1 and 2, across the
  // owners), {9, padding} (2). Expert 1: tokens 1, 3, 4, 7, 8, 10, 11 -> {1, 3} (0), {4, 7} (1, 2),
  // {8, 10} (2, 3), {11, padding} (3).
  ASSERT_EQ(m.num_tiles(), 7u);
  const std::vector<uint32_t> want = {2, 2, 4, 2};
  for (uint32_t g = 0; g < 4; ++g) EXPECT_EQ(moe_block_tiles(plan, v, m.num_tiles(), g), want[g]) << "block " << g;
  const ChannelRange across = moe_tile_blocks(plan, v, 1);
  EXPECT_EQ(across.first, 1u);
  EXPECT_EQ(across.count, 2u);
}

// Part 2's automatic combine (moe_policy::combine): the GEMM's epilogue wherever peers are reached
// by load and store, the combine blocks for one rank and where the stream must put the rows
// (put_signal, staged); a configured combine stays.
TEST(MoePolicy, CombineInTheEpilogueWithPeersBlocksAloneOrStaged) {
  EXPECT_EQ(moe_policy::combine(MoeCombine::kAuto, 8), MoeCombine::kEpilogue);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kAuto, 3), MoeCombine::kEpilogue);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kAuto, 1), MoeCombine::kBlocks);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kAuto, 8, true), MoeCombine::kBlocks);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kAuto, 8, false, OpMethod::kNonOverlapped), MoeCombine::kBlocks)
      << "the epilogue combine lives in the fused GEMM";
  EXPECT_EQ(moe_policy::combine(MoeCombine::kAuto, 8, false, OpMethod::kFused), MoeCombine::kEpilogue);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kBlocks, 8), MoeCombine::kBlocks);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kEpilogue, 1), MoeCombine::kEpilogue);
  EXPECT_EQ(moe_policy::combine(MoeCombine::kEpilogue, 8, true), MoeCombine::kEpilogue) << "the op refuses it by name";
}

// The automatic method (moe_policy::method): fused with peers, non-overlapped alone -- unless
// only the fused path runs the configuration (the epilogue combine); a configured method stays.
TEST(MoePolicy, NonOverlappedAloneFusedWithPeers) {
  EXPECT_EQ(moe_policy::method(OpMethod::kAuto, 1), OpMethod::kNonOverlapped);
  EXPECT_EQ(moe_policy::method(OpMethod::kAuto, 1, true), OpMethod::kFused);
  EXPECT_EQ(moe_policy::method(OpMethod::kAuto, 2), OpMethod::kFused);
  EXPECT_EQ(moe_policy::method(OpMethod::kAuto, 8), OpMethod::kFused);
  EXPECT_EQ(moe_policy::method(OpMethod::kFused, 1), OpMethod::kFused);
  EXPECT_EQ(moe_policy::method(OpMethod::kNonOverlapped, 8), OpMethod::kNonOverlapped);
}

// The grouped GEMM's automatic band (moe_policy::swizzle): 8 tile rows where a wave of the CTAs
// covers fewer than 8 rows (wide N), else row by row; a configured band stays.
TEST(MoePolicy, BandWhereAWaveCoversFewerThanEightRows) {
  EXPECT_EQ(moe_policy::swizzle(0, 28672, 256, 2, 130), 8u) << "Mixtral-8x7B part 1, world 1: 1.2 rows a wave";
  EXPECT_EQ(moe_policy::swizzle(0, 14336, 256, 2, 128), 8u) << "2.3 rows a wave";
  EXPECT_EQ(moe_policy::swizzle(0, 4096, 256, 2, 128), 1u) << "part 2 at world 1: 8 rows a wave";
  EXPECT_EQ(moe_policy::swizzle(0, 3584, 256, 2, 120), 1u) << "part 1 at world 8: 8.6 rows a wave";
  EXPECT_EQ(moe_policy::swizzle(0, 1408, 256, 2, 100), 1u) << "Qwen1.5-MoE: 16 rows a wave";
  EXPECT_EQ(moe_policy::swizzle(0, 3584, 256, 2, 16), 8u) << "a virtual rank's 16 SMs: 1.1 rows a wave";
  EXPECT_EQ(moe_policy::swizzle(2, 28672, 256, 2, 130), 2u);
  EXPECT_EQ(moe_policy::check_band(16), "");
  EXPECT_NE(moe_policy::check_band(3).find("'config.swizzle' = 3"), std::string::npos);
}

// Part 2's band: row by row where the epilogue combines (it sums a token once its tile rows are
// done) and the band is automatic; otherwise as configured, 0 left to moe_policy::swizzle.
TEST(MoePolicy, Part2RowByRowWhereTheEpilogueCombines) {
  EXPECT_EQ(moe_policy::part2_swizzle(0, MoeCombine::kEpilogue), 1u);
  EXPECT_EQ(moe_policy::part2_swizzle(0, MoeCombine::kBlocks), 0u);
  EXPECT_EQ(moe_policy::part2_swizzle(8, MoeCombine::kEpilogue), 8u) << "a configured band stays";
  EXPECT_EQ(moe_policy::part2_swizzle(4, MoeCombine::kBlocks), 4u);
  // What part 2's kernel then walks at a virtual rank's 16 SMs (Mixtral-8x7B, n = hidden 4096).
  EXPECT_EQ(moe_policy::swizzle(moe_policy::part2_swizzle(0, MoeCombine::kEpilogue), 4096, 256, 2, 16), 1u);
  EXPECT_EQ(moe_policy::swizzle(moe_policy::part2_swizzle(0, MoeCombine::kBlocks), 4096, 256, 2, 16), 8u);
}

TEST(MoeMapping, TilesRunInArrivalOrderOwnShardFirst) {
  // 4 ranks x 8 tokens, bm 4; expert e takes the tokens of rank e only (top-1): expert e's tiles
  // need only rank e's shard, so rank r runs expert r's tiles first, then r+1's, ...
  const uint32_t w = 4, per_rank = 8;
  std::vector<int32_t> ids(w * per_rank);
  for (uint32_t t = 0; t < ids.size(); ++t) ids[t] = int32_t(t / per_rank);
  const MoeMapping m = build_moe_mapping({w * per_rank, 1, w, ids.data(), nullptr}, 4);
  ASSERT_EQ(m.num_tiles(), 8u);
  AllGatherPlan ag;
  ag.map = RowShardMapping{per_rank, per_rank, w};
  ag.row_bytes = ag.pitch = 4;
  for (uint32_t r = 0; r < w; ++r) {
    std::vector<uint32_t> order(m.num_tiles());
    make_moe_tile_order(ag, r, m.view(), order.data());
    for (uint32_t i = 0; i < order.size(); ++i) EXPECT_EQ(m.tile_expert[order[i]], (r + i / 2) % w) << "rank " << r;
  }
}

TEST(MoeMapping, ExpertsWithoutTokensGetNoTilesAndBadRoutingIsNamed) {
  const std::vector<int32_t> ids = {2, 2, 2};  // three tokens, top-1, all to expert 2 of 4
  const MoeMapping m = build_moe_mapping({3, 1, 4, ids.data(), nullptr}, 2);
  EXPECT_EQ(m.row_offset, (std::vector<uint32_t>{0, 0, 0, 4, 4}));
  EXPECT_EQ(m.row_pair, (std::vector<uint32_t>{0, 1, 2, kPadRow}));
  EXPECT_EQ(m.tile_expert, (std::vector<uint32_t>{2, 2}));
  EXPECT_EQ(m.tile_token0, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(m.tile_span, (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(m.pair_row, (std::vector<uint32_t>{0, 1, 2}));

  const std::vector<int32_t> bad = {0, 1, 1, 1};  // token 1 picks expert 1 twice
  EXPECT_NE(check_moe_routing({2, 2, 3, bad.data(), nullptr}).find("ids[1]: expert 1 chosen twice"), std::string::npos);
  const std::vector<int32_t> out_of_range = {0, 3};
  EXPECT_NE(check_moe_routing({2, 1, 3, out_of_range.data(), nullptr}).find("ids[1][0] = 3"), std::string::npos);
  EXPECT_NE(check_moe_routing({2, 4, 3, out_of_range.data(), nullptr}).find("'topk' = 4"), std::string::npos);
}

}  // namespace
}  // namespace tilelink::test
