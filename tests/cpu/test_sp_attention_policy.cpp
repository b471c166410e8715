// SP attention's method estimate and choice (ops/attention/sp_attention_policy.hpp), by hand.
#include <gtest/gtest.h>

#include <algorithm>

#include "tilelink/ops/attention/sp_attention_policy.hpp"

namespace tilelink::test {
namespace {

using namespace sp_attention_policy;

// 8 ranks, 1 ms of attention at the model's rate on 132 CTAs, 10 MB of K/V per rank over NVLink
// (7 shards: 179 us): fused hides the all-gather under all but a shard's eighth of the attention.
TEST(SpAttentionPolicy, MethodEstimatesByHand) {
  MethodShape s;
  s.world = 8;
  s.flops = 790e12 * 1e-3;
  s.shard_bytes = 10e6;
  s.ctas = 132;
  s.budget = 132;
  const double attention = 1e-3, comm = 7 * 10e6 / 390e9;
  const MethodEstimates e = estimate_methods(s);
  EXPECT_NEAR(e.non_overlapped, comm + attention, 1e-12);
  EXPECT_NEAR(e.fused, std::max(attention, comm + attention / 8), 1e-12);
  EXPECT_NEAR(e.decomposed, 8 * std::max(attention / 8, comm / 7), 1e-12);
  EXPECT_EQ(choose_method(OpMethod::kAuto, e, true), OpMethod::kFused);
  // Half the fused CTAs: twice its attention; the others keep the whole budget.
  s.ctas = 66;
  EXPECT_NEAR(estimate_methods(s).fused, 2 * attention, 1e-12);
  EXPECT_NEAR(estimate_methods(s).non_overlapped, comm + attention, 1e-12);
  EXPECT_EQ(choose_method(OpMethod::kAuto, estimate_methods(s), false), OpMethod::kNonOverlapped);
}

// The ring only where it may run (one-process worlds); a configured method stays; ties go to fused.
TEST(SpAttentionPolicy, TheRingOnlyWhereItRunsAndTiesToFused) {
  MethodEstimates e;
  e.fused = 3;
  e.non_overlapped = 2;
  e.decomposed = 1;
  EXPECT_EQ(choose_method(OpMethod::kAuto, e, true), OpMethod::kDecomposed);
  EXPECT_EQ(choose_method(OpMethod::kAuto, e, false), OpMethod::kNonOverlapped);
  EXPECT_EQ(choose_method(OpMethod::kFused, e, true), OpMethod::kFused);
  e.non_overlapped = e.decomposed = e.fused;
  EXPECT_EQ(choose_method(OpMethod::kAuto, e, true), OpMethod::kFused);
  MethodShape one;  // one rank: no all-gather, and the fused kernel on the whole budget too
  one.world = 1;
  one.flops = 1e9;
  one.ctas = one.budget = 132;
  const MethodEstimates single = estimate_methods(one);
  EXPECT_DOUBLE_EQ(single.fused, single.non_overlapped);
  EXPECT_DOUBLE_EQ(single.fused, single.decomposed);
}

}  // namespace
}  // namespace tilelink::test
