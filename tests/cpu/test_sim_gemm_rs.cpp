// The GEMM+RS model (sim/gemm_rs_sim.hpp): its timeline on tiny GPUs worked by hand, what it
// refuses, and the automatic choices it makes for one rank per GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"

namespace tilelink::sim {
namespace {

// GEMM+RS with 3 SMs (2 compute CTAs and 1 reduction CTA at world > 1), 1 µs per tile's MMA,
// 1 µs per tile stored by a CTA or read or written by the reduction.
CostModel rs_gpu() {
  CostModel cost;
  cost.sms = 3;
  cost.flops = 3.0 * (2.0 * 128 * 256 * 64) / 1e-6;
  cost.sm_copy_bandwidth_per_cta = 128.0 * 256 * 2 / 1e-6;
  cost.epilogue_store_bandwidth_per_cta = 128.0 * 256 * 2 / 1e-6;  // a push store: 1 µs per tile
  cost.nvlink_bandwidth = 1e15;
  cost.notify_latency = 0;
  return cost;
}

TEST(GemmRsSim, WorldOneIsTheGemmAlone) {
  GemmRsProblem p{128, 256, 64, 2, 2, 1, 1};  // one tile; one rank: the reduce-scatter is the identity
  GemmRsPlanConfig c;
  c.op.reduce_blocks = 1;
  const GemmRsPrediction r = predict_gemm_rs(p, c, rs_gpu());
  EXPECT_NEAR(r.fused, 1e-6, 1e-15);
  EXPECT_DOUBLE_EQ(r.t_comm, 0.0);
}

TEST(GemmRsSim, ATileAtHalfTheRateTakesTwiceAsLong) {
  GemmRsProblem p{128, 512, 64, 2, 2, 1, 1};  // two tiles on the 3 CTAs of world 1: one wave, 1 µs
  GemmRsPlanConfig c;
  c.op.reduce_blocks = 1;
  c.tile_rate = 0.5;
  const GemmRsPrediction half = predict_gemm_rs(p, c, rs_gpu());
  EXPECT_NEAR(half.fused, 2e-6, 1e-15);
  EXPECT_NEAR(half.ideal, 1e-6, 1e-15) << "the ideal is at the dense rate";
  EXPECT_NEAR(half.non_overlapped, 1e-6, 1e-15) << "so is the non-overlapped chain (world 1: the GEMM alone)";
  c.bn = 128;  // four tiles of half the work, two waves on 3 CTAs, at 1.25 of the rate: 2 x 0.4 µs
  c.tile_rate = 1.25;
  EXPECT_NEAR(predict_gemm_rs(p, c, rs_gpu()).fused, 0.8e-6, 1e-15);
  for (double bad : {0.0, -1.0, 2.5}) {
    c.tile_rate = bad;
    EXPECT_THROW(predict_gemm_rs(p, c, rs_gpu()), InvalidArgument) << bad;
  }
}

TEST(GemmRsSim, TwoRanksOthersFirstThenOwnThenReduce) {
  // rows_per_rank 128, n 512: one tile row of two tiles per block; k 128 split in two: 1 µs per
  // MMA. Rank 0 computes owner 1's two tiles on its two CTAs (0-1 µs), then its own (1-2 µs).
  GemmRsProblem p{256, 512, 128, 2, 2, 2, 1};
  GemmRsPlanConfig c;
  c.op.reduce_blocks = 1;
  c.op.push_notify = GemmRsPushNotify::kImmediate;
  for (SignalGranularity g : {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}) {
    c.op.granularity = g;
    for (GemmRsScatter s : {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush}) {
      c.op.scatter = s;
      // Pull: owner 0's own tiles are done at 2 µs, rank 1's tiles for it at 1 µs. Push: the CTAs
      // wait for their 1 µs stores into owner 1 (1-2 µs) before the own tiles (2-3 µs). Reduction
      // of each tile: 2 read + 1 written = 3 µs: 2-5, 5-8 µs (pull), 3-6, 6-9 µs (push).
      const GemmRsPrediction r = predict_gemm_rs(p, c, rs_gpu());
      EXPECT_NEAR(r.fused, s == GemmRsScatter::kPull ? 8e-6 : 9e-6, 1e-15) << to_string(s) << " granularity " << int(g);
      // The deferred notify (the default): the CTAs go on to the own tiles at 1 µs; the pushed
      // parts land and are announced at 2 µs, with the own tiles: 2-5, 5-8 µs, as the pull.
      GemmRsPlanConfig deferred = c;
      deferred.op.push_notify = GemmRsPushNotify::kDeferred;
      EXPECT_NEAR(predict_gemm_rs(p, deferred, rs_gpu()).fused, 8e-6, 1e-15) << to_string(s) << " granularity " << int(g);
    }
  }
  // Copy engine, one copy per tile row: rank 1's row for owner 0 is done at 1 µs, copied by
  // 1 + 5 µs (fixed cost) + 128 KiB at 2 TB/s; the reduction follows it: + 3 µs, + 3 µs.
  c.op.scatter = GemmRsScatter::kCopyEngine;
  c.op.granularity = SignalGranularity::kTileRow;
  const CostModel cost = rs_gpu();
  const double copied = 1e-6 + cost.ce_chunk_overhead + 128.0 * 512 * 2 / cost.ce_bandwidth;
  EXPECT_NEAR(predict_gemm_rs(p, c, cost).fused, copied + 6e-6, 1e-12);
}

// The epilogue reducer with the pull: every own tile's sum reads the peers' parts over the one
// link the rank has, so sums that run at once on different CTAs queue on it. Two ranks, two tiles
// per block, three CTAs: owner 1's tiles on CTAs 0 and 1 (0-1 µs), own tile 0 on CTA 2 (0-1 µs),
// own tile 1 on CTA 0 (1-2 µs); a sum takes 1 µs at the epilogue's rate.
TEST(GemmRsSim, PullSumsInTheEpilogueShareTheLink) {
  GemmRsProblem p{256, 512, 128, 2, 2, 2, 1};
  GemmRsPlanConfig c;
  c.op.reducer = GemmRsReducer::kEpilogue;
  c.op.scatter = GemmRsScatter::kPull;
  CostModel cost = rs_gpu();
  const double tile = 128.0 * 512 / 2 * 2;
  cost.epilogue_sum_bandwidth_per_cta = 3 * tile / 1e-6;  // two parts read, one written: 1 µs
  // A fast link: sums at 1-2 and 2-3 µs.
  EXPECT_NEAR(predict_gemm_rs(p, c, cost).fused, 3e-6, 1e-15);
  // Half a tile per µs: tile 0's peer part crosses 1-3 µs, tile 1's 3-5 µs.
  cost.nvlink_bandwidth = tile / 2e-6;
  EXPECT_NEAR(predict_gemm_rs(p, c, cost).fused, 5e-6, 1e-15);
}

TEST(GemmRsSim, InterleavedOwnersLeaveOnlyTheLastRoundsReduction) {
  // Four tile rows per block: owners interleaved row by row (band 1) finish each owner's rows
  // round by round, so the reduction overlaps the GEMM; one band per block (band 4) completes
  // every block only in the last round.
  GemmRsProblem p{1024, 512, 128, 2, 2, 2, 1};
  GemmRsPlanConfig c;
  c.op.reduce_blocks = 1;
  c.band = 1;
  const double interleaved = predict_gemm_rs(p, c, rs_gpu()).fused;
  c.band = 4;
  const double blocked = predict_gemm_rs(p, c, rs_gpu()).fused;
  EXPECT_LT(interleaved, blocked);
}

// The what-if of deferred sums (not built): the same pull case as above, each own tile's sum a unit
// one wave (3 positions) after its tile. Both sums are left after the last tile, one slice each
// (3 CTAs / 2 sums), on CTAs 1 and 2: tile 0's at 1-2 µs, tile 1's once its own tile is done (2 µs)
// at 2-3 µs -- the op's 3 µs. With the slow link the pull's parts cross at 1-3 and 3-5 µs: 5 µs.
TEST(GemmRsSim, DeferredSumsWhatIfKeepsTheLinkAndTheOwnTile) {
  GemmRsProblem p{256, 512, 128, 2, 2, 2, 1};
  GemmRsPlanConfig c;
  c.op.reducer = GemmRsReducer::kEpilogue;
  c.op.scatter = GemmRsScatter::kPull;
  c.deferred_sum_waves = 1;
  CostModel cost = rs_gpu();
  const double tile = 128.0 * 512 / 2 * 2;
  cost.epilogue_sum_bandwidth_per_cta = 3 * tile / 1e-6;
  EXPECT_NEAR(predict_gemm_rs(p, c, cost).fused, 3e-6, 1e-15);
  cost.nvlink_bandwidth = tile / 2e-6;
  EXPECT_NEAR(predict_gemm_rs(p, c, cost).fused, 5e-6, 1e-15);
}

TEST(GemmRsSim, RefusesWhatTheOpCannotRun) {
  GemmRsPlanConfig c;
  EXPECT_THROW(predict_gemm_rs(GemmRsProblem{8192, 8190, 28672, 2, 2, 8, 1}, c), InvalidArgument);  // n % 4
  EXPECT_THROW(predict_gemm_rs(GemmRsProblem{8192, 8192, 1001, 2, 2, 8, 1}, c), InvalidArgument);   // k % world
  EXPECT_THROW(predict_gemm_rs(GemmRsProblem{0, 8192, 28672, 2, 2, 8, 1}, c), InvalidArgument);  // no rows
  // Any M (the op's partial tile rows, short last blocks): predicted, never faster than whole tiles.
  const double whole = predict_gemm_rs(GemmRsProblem{8192, 8192, 28672, 2, 2, 8, 1}, c).fused;
  EXPECT_GE(predict_gemm_rs(GemmRsProblem{8192 + 64 * 8 + 3, 8192, 28672, 2, 2, 8, 1}, c).fused, whole);
  GemmRsPlanConfig ce = c;
  ce.op.scatter = GemmRsScatter::kCopyEngine;  // per tile: refused, as by the op
  EXPECT_THROW(predict_gemm_rs(GemmRsProblem{}, ce), InvalidArgument);
  c.op.reduce_blocks = 132;  // every SM of the default cost model
  EXPECT_THROW(predict_gemm_rs(GemmRsProblem{}, c), InvalidArgument);
  c.op.reduce_blocks = 0;  // automatic: one cluster of 2 on a 2-SM GPU leaves the GEMM nothing
  c.op.reducer = GemmRsReducer::kBlocks;
  CostModel tiny;
  tiny.sms = 2;
  EXPECT_THROW(predict_gemm_rs(GemmRsProblem{}, c, tiny), InvalidArgument);
  c.op.reducer = GemmRsReducer::kAuto;  // the epilogue push with one rank per GPU: no SM set aside
  EXPECT_GT(predict_gemm_rs(GemmRsProblem{}, c, tiny).fused, 0.0);
}

// The automatic reduction on 8 GPUs (the op's one-rank-per-GPU rule at the model's H200 rates):
// for the paper's shapes, within 2 % of the count the model itself ranks best among 4 to 32 CTAs,
// where the virtual-rank rule's 4 CTAs trail by up to 2x.
TEST(GemmRsSim, AutomaticReductionOnGpusIsTheModelsBestCount) {
  for (const GemmRsProblem& p : {GemmRsProblem{8192, 8192, 28672, 2, 2, 8, 1},
                                 GemmRsProblem{8192, 4096, 14336, 2, 2, 8, 1},
                                 GemmRsProblem{8192, 12288, 49152, 2, 2, 8, 1}}) {
    GemmRsPlanConfig c;
    c.op.scatter = GemmRsScatter::kPull;
    c.op.reducer = GemmRsReducer::kBlocks;
    const GemmRsPrediction automatic = predict_gemm_rs(p, c);
    double best = automatic.fused;
    for (uint32_t blocks = 4; blocks <= 32; blocks += 2) {
      c.op.reduce_blocks = blocks;
      best = std::min(best, predict_gemm_rs(p, c).fused);
    }
    EXPECT_LE(automatic.fused, best * 1.02) << "k " << p.k << ": " << automatic.reduce_ctas << " CTAs";
    EXPECT_GT(automatic.reduce_ctas, 4u) << "k " << p.k;
  }
}

// The automatic path on 8 GPUs (gemm_rs_policy::path, as the op takes it with one rank per GPU):
// the epilogue push, ahead of pull with the reduction blocks and of the GEMM then the reduction on
// the paper's shapes.
TEST(GemmRsSim, AutomaticPathOnGpusIsTheEpiloguePush) {
  for (const GemmRsProblem& p : {GemmRsProblem{8192, 8192, 28672, 2, 2, 8, 1},
                                 GemmRsProblem{8192, 4096, 14336, 2, 2, 8, 1},
                                 GemmRsProblem{8192, 12288, 49152, 2, 2, 8, 1}}) {
    GemmRsPlanConfig c;
    const GemmRsPrediction automatic = predict_gemm_rs(p, c);
    EXPECT_EQ(automatic.scatter, GemmRsScatter::kEpiloguePush);
    EXPECT_EQ(automatic.reducer, GemmRsReducer::kEpilogue);
    EXPECT_EQ(automatic.reduce_ctas, 0u);
    c.op.scatter = GemmRsScatter::kPull;
    c.op.reducer = GemmRsReducer::kBlocks;
    EXPECT_LT(automatic.fused, predict_gemm_rs(p, c).fused) << "k " << p.k;
    EXPECT_LT(automatic.fused, automatic.non_overlapped) << "k " << p.k;
  }
  // Across nodes: the copy engine's puts, the reduction blocks.
  const GemmRsPrediction far = predict_gemm_rs(GemmRsProblem{8192, 8192, 28672, 2, 2, 16, 2}, [] {
    GemmRsPlanConfig c;
    c.op.granularity = SignalGranularity::kTileRow;
    return c;
  }());
  EXPECT_EQ(far.scatter, GemmRsScatter::kCopyEngine);
  EXPECT_EQ(far.reducer, GemmRsReducer::kBlocks);
}


}  // namespace
}  // namespace tilelink::sim
