// AG+GEMM's automatic choices (ag_gemm_policy.hpp, all_gather_policy.hpp) on hand-checked cases, including the ones the
// H200 runs in docs/PERF.md used.
#include <gtest/gtest.h>

#include <algorithm>

#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_policy.hpp"

namespace tilelink::test {
namespace {

using namespace ag_gemm_policy;
using namespace all_gather_policy;

TEST(AgGemmPolicy, CopyEngineTilesAreAtLeast8MiBAndSmTiles128Rows) {
  EXPECT_EQ(auto_comm_rows(CommResource::kCopyEngine, 1024, 8192), 512u);   // 16 KiB rows
  EXPECT_EQ(auto_comm_rows(CommResource::kCopyEngine, 1024, 4096), 1024u);  // 8 KiB rows
  EXPECT_EQ(auto_comm_rows(CommResource::kCopyEngine, 1024, 12288), 384u);  // 24 KiB rows: 341 -> 384
  EXPECT_EQ(auto_comm_rows(CommResource::kCopyEngine, 256, 256), 256u);     // capped by the shard
  EXPECT_EQ(auto_comm_rows(CommResource::kCopyEngine, 100, 8192), 100u);
  EXPECT_EQ(auto_comm_rows(CommResource::kSm, 1024, 8192), 128u);
  EXPECT_EQ(auto_comm_rows(CommResource::kSm, 48, 8192), 48u);
}

TEST(AgGemmPolicy, GemmKeepsTwoSmsOfSlackOnlyWhenThereArePeers) {
  EXPECT_EQ(gemm_sm_count(132, 1, 0, 0), 132);  // world 1, copy engine: every SM
  EXPECT_EQ(gemm_sm_count(16, 8, 0, 0), 14);    // world 8, copy engine
  EXPECT_EQ(gemm_sm_count(16, 8, 2, 0), 12);    // world 8, 2 all-gather CTAs
  EXPECT_EQ(gemm_sm_count(16, 8, 2, 10), 10);   // configured below what is left
  EXPECT_EQ(gemm_sm_count(16, 8, 2, 20), 14);   // configured above: what is left, no slack
  EXPECT_EQ(gemm_sm_count(16, 8, 16, 0), -2);   // nothing left: the op refuses it
}

TEST(AgGemmPolicy, SwizzleBandStaysInAShardAndInTheRanksL2Share) {
  const uint64_t l2 = 50ull << 20;
  EXPECT_EQ(auto_swizzle(0, 256, 8192, 8192 * 2ull, l2), 8u);       // world 1: 2048-row bands, 32 MiB of A
  EXPECT_EQ(auto_swizzle(0, 256, 8192, 12288 * 2ull, l2), 8u);      // 48 MiB of A still fits
  EXPECT_EQ(auto_swizzle(0, 256, 1024, 8192 * 2ull, l2 / 8), 1u);   // world 8: 512 rows of 16 KiB > 6.25 MiB
  EXPECT_EQ(auto_swizzle(0, 256, 1024, 4096 * 2ull, l2 / 8), 2u);   // 512 rows of 8 KiB fit, 1024 do not
  EXPECT_EQ(auto_swizzle(0, 256, 256, 64 * 2ull, l2), 1u);          // a shard of one band
  EXPECT_EQ(auto_swizzle(0, 128, 1024, 64 * 2ull, l2), 8u);         // 128-row bands: 8 fill the shard
  EXPECT_EQ(auto_swizzle(4, 256, 256, 8192 * 2ull, 0), 4u);         // configured wins
}


// The method estimate by hand (issue 21): 8 H200s, m = 8192, n = 28672 / 8, k = 8192, 128 x 256
// tiles on 130 SMs. A tile takes 2 * 128 * 256 * 8192 / (790e12 / 132) = 89.66 us; the whole GEMM
// is 64 x 14 = 896 tiles = 7 waves; a shard's 8 x 14 = 112 tiles one wave; the all-gather 7 shards
// of 16 MiB at 390 GB/s = 301.1 us.
TEST(AgGemmPolicy, MethodEstimatesByHand) {
  MethodShape s;
  s.world = 8;
  s.m_per_rank = 1024;
  s.n = 3584;
  s.k = 8192;
  s.gemm_sms = 130;
  s.budget = 132;  // 896 tiles: 7 waves on either
  const double tile = 2.0 * 128 * 256 * 8192 / (790e12 / 132), comm = 7.0 * 1024 * 8192 * 2 / 390e9;
  const MethodEstimates e = estimate_methods(s);
  EXPECT_NEAR(e.non_overlapped, comm + 7 * tile, 1e-9);
  EXPECT_NEAR(e.fused, 7 * tile, 1e-9);                 // the GEMM is longer than comm + a shard
  EXPECT_NEAR(e.decomposed, 8 * (tile + 2e-6), 1e-9);   // every shard has landed by its turn
  EXPECT_EQ(choose_method(OpMethod::kAuto, e), OpMethod::kFused);
  // Virtual ranks: the all-gather shares the one HBM (4.3 TB/s read + write over 8 ranks).
  s.one_rank_per_gpu = false;
  EXPECT_NEAR(estimate_methods(s).non_overlapped, 7.0 * 1024 * 8192 * 2 / (4.3e12 / 16) + 7 * tile, 1e-9);
  // One rank: no all-gather, one GEMM whichever the method (a tie: fused).
  s.world = 1;
  const MethodEstimates one = estimate_methods(s);
  EXPECT_DOUBLE_EQ(one.fused, one.non_overlapped);
  EXPECT_EQ(choose_method(OpMethod::kAuto, one), OpMethod::kFused);
}

// Where the all-gather is short and the GEMM's waves fall so that the two SMs the fused call
// leaves free cost a wave: 2 ranks, 2048 x 8448 x 256 -- 16 x 33 = 528 tiles of 2.8 us, 5 waves on
// 130 SMs, 4 on the whole 132; the all-gather is one 512 KiB shard (1.3 us).
TEST(AgGemmPolicy, NonOverlappedWinsWhenTheWholeBudgetSavesAWave) {
  MethodShape s;
  s.world = 2;
  s.m_per_rank = 1024;
  s.n = 8448;
  s.k = 256;
  s.gemm_sms = 130;
  s.budget = 132;
  const double tile = 2.0 * 128 * 256 * 256 / (790e12 / 132), comm = 1024.0 * 256 * 2 / 390e9;
  const MethodEstimates e = estimate_methods(s);
  EXPECT_NEAR(e.non_overlapped, comm + 4 * tile, 1e-12);
  EXPECT_NEAR(e.fused, std::max(5 * tile, comm + 3 * tile), 1e-12);  // a shard: 264 tiles, 3 waves
  EXPECT_EQ(choose_method(OpMethod::kAuto, e), OpMethod::kNonOverlapped);
}

TEST(AgGemmPolicy, AutoTakesTheFastestEstimateAndAConfiguredMethodStays) {
  for (int i = 0; i < 27; ++i) {
    MethodEstimates e;
    e.fused = 1 + i % 3;
    e.decomposed = 1 + (i / 3) % 3;
    e.non_overlapped = 1 + i / 9;
    const OpMethod m = choose_method(OpMethod::kAuto, e);
    EXPECT_LE(e.of(m), std::min({e.fused, e.decomposed, e.non_overlapped})) << i;
    if (e.fused <= std::min(e.decomposed, e.non_overlapped)) EXPECT_EQ(m, OpMethod::kFused) << "ties go to fused";
  }
  MethodEstimates slow_fused;
  slow_fused.fused = 3;
  slow_fused.decomposed = 2;
  slow_fused.non_overlapped = 1;
  EXPECT_EQ(choose_method(OpMethod::kAuto, slow_fused), OpMethod::kNonOverlapped);
  EXPECT_EQ(choose_method(OpMethod::kFused, slow_fused), OpMethod::kFused);
  EXPECT_EQ(choose_method(OpMethod::kDecomposed, slow_fused), OpMethod::kDecomposed);
}

}  // namespace
}  // namespace tilelink::test
