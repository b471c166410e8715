// GEMM+RS's automatic choices (ops/gemm_rs/gemm_rs_policy.hpp), by the machine the ranks run on.
#include <gtest/gtest.h>

#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink::test {
namespace {

using gemm_rs_policy::reduce_blocks;
using gemm_rs_policy::ReduceLoad;

TEST(GemmRsPolicy, ReductionOnVirtualRanksIsAThirtySecondOfTheBudgetInWholeClusters) {
  EXPECT_EQ(reduce_blocks(0, 16, {8, 3584, false}), 2u);    // world 8 on one H200: 16 SMs, one cluster
  EXPECT_EQ(reduce_blocks(0, 132, {1, 28672, false}), 4u);  // world 1
  EXPECT_EQ(reduce_blocks(3, 132, {8, 3584, true}), 4u);    // configured, rounded up to a cluster
  EXPECT_EQ(reduce_blocks(0, 132, {1, 28672, true}), 4u);   // one rank: nothing to read from peers
}

// One rank per GPU: kReduceHeadroom times the rate at which the GEMM makes the peers' share of the
// partials, at one CTA's copy rate. For the paper's shapes on 8 H200s: 193, 386 and 113 GB/s.
TEST(GemmRsPolicy, ReductionOnGpusKeepsPaceWithTheGemm) {
  EXPECT_EQ(reduce_blocks(0, 132, {8, 28672 / 8, true}), 12u);
  EXPECT_EQ(reduce_blocks(0, 132, {8, 14336 / 8, true}), 16u);  // 24 wanted: at most 1/8 of the budget
  EXPECT_EQ(reduce_blocks(0, 132, {8, 49152 / 8, true}), 8u);   // 7, rounded up to whole clusters
  // Twice the CTA rate, half the CTAs; two ranks read half as much as eight.
  ReduceLoad fast{8, 28672 / 8, true};
  fast.cta_bandwidth *= 2;
  EXPECT_EQ(reduce_blocks(0, 132, fast), 6u);
  EXPECT_EQ(reduce_blocks(0, 132, {2, 28672 / 2, true}), 2u);
}

}  // namespace
}  // namespace tilelink::test
