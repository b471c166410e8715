// AG+GEMM's automatic choices (ag_gemm_policy.hpp, all_gather_policy.hpp) on hand-checked cases, including the ones the
// H200 runs in docs/PERF.md used.
#include <gtest/gtest.h>

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
  EXPECT_EQ(auto_swizzle(0, 256, 8192, 8192, l2), 8u);       // world 1: 2048-row bands, 32 MiB of A
  EXPECT_EQ(auto_swizzle(0, 256, 8192, 12288, l2), 8u);      // 48 MiB of A still fits
  EXPECT_EQ(auto_swizzle(0, 256, 1024, 8192, l2 / 8), 1u);   // world 8: 512 rows of 16 KiB > 6.25 MiB
  EXPECT_EQ(auto_swizzle(0, 256, 1024, 4096, l2 / 8), 2u);   // 512 rows of 8 KiB fit, 1024 do not
  EXPECT_EQ(auto_swizzle(0, 256, 256, 64, l2), 1u);          // a shard of one band
  EXPECT_EQ(auto_swizzle(0, 128, 1024, 64, l2), 8u);         // 128-row bands: 8 fill the shard
  EXPECT_EQ(auto_swizzle(4, 256, 256, 8192, 0), 4u);         // configured wins
}

}  // namespace
}  // namespace tilelink::test
