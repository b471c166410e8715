// GEMM+RS's automatic choices (ops/gemm_rs/gemm_rs_policy.hpp), by the machine the ranks run on.
#include <gtest/gtest.h>

#include <algorithm>

#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink::test {
namespace {

using gemm_rs_policy::reduce_blocks;
using gemm_rs_policy::ReduceLoad;
using gemm_rs_policy::choose_method;
using gemm_rs_policy::estimate_methods;
using gemm_rs_policy::MethodEstimates;
using gemm_rs_policy::MethodShape;

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

// The method estimate by hand (issue 21): 8 H200s, 8192 x 8192 x 28672 (k 3584 per rank), 128 x
// 256 tiles (39.2 us each on one SM), 2048 tiles over the owner blocks; each owner reads 7 peers'
// 16 MiB parts over NVLink (301 us) and, fused, 12 reduction CTAs beside a GEMM on 120 SMs.
TEST(GemmRsPolicy, MethodEstimatesByHand) {
  MethodShape s;
  s.world = 8;
  s.m = 8192;
  s.n = 8192;
  s.k = 3584;
  s.sm_budget = 132;
  s.reduce_blocks = 12;
  const double tile = 2.0 * 128 * 256 * 3584 / (790e12 / 132), block = 1024.0 * 8192 * 2;
  const double link = 7 * block / 390e9;
  auto reduction = [&](double ctas, double share) {
    return std::max(9 * block * share / (ctas * 48e9), link * share);
  };
  const MethodEstimates e = estimate_methods(s);
  EXPECT_NEAR(e.non_overlapped, 16 * tile + reduction(132, 1), 1e-9);       // 2048 / 132: 16 waves
  EXPECT_NEAR(e.fused, std::max(18 * tile, reduction(12, 1)) + reduction(12, 1.0 / 8), 1e-9);  // 2048 / 120: 18
  EXPECT_EQ(choose_method(OpMethod::kAuto, e), OpMethod::kFused);
  // Decomposed: 8 GEMMs of 256 tiles (2 waves each), 7 copies of a 16 MiB block at NVLink's rate
  // plus 5 us, each after its GEMM (48 us each against 78 us of GEMM per block), the last ending
  // within the own block's GEMM; then the reduction on every SM from local copies.
  const double copy = 5e-6 + block / 390e9;
  EXPECT_NEAR(e.decomposed, std::max(8 * 2 * tile, 7 * 2 * tile + copy) + std::max(9 * block / (132 * 48e9), 9 * block / 4.3e12),
              1e-9);
  EXPECT_EQ(choose_method(OpMethod::kAuto, e, true), e.decomposed < e.fused ? OpMethod::kDecomposed : OpMethod::kFused);
  EXPECT_EQ(choose_method(OpMethod::kDecomposed, e), OpMethod::kDecomposed) << "configured stays";
  MethodEstimates cheap = e;
  cheap.decomposed = 0;
  EXPECT_EQ(choose_method(OpMethod::kAuto, cheap, false), OpMethod::kFused) << "decomposed only where it can run";
  EXPECT_EQ(choose_method(OpMethod::kAuto, cheap, true), OpMethod::kDecomposed);
  // The epilogue reducer with the push: the GEMM on every SM, each CTA waiting for its stores into
  // the peers (7 of 8 of its 16 tiles, 64 KiB each at 48 GB/s), then the own tiles' sums at 96 GB/s
  // per CTA; the peers' 7 parts cross the link meanwhile (301 us, under the GEMM's 627 us).
  s.reducer = GemmRsReducer::kEpilogue;
  s.reduce_blocks = 0;
  s.push_notify = GemmRsPushNotify::kImmediate;
  const double stores = 16 * 7.0 / 8 * 128 * 256 * 2 / 48e9;
  EXPECT_NEAR(estimate_methods(s).fused, 16 * tile + stores + 9 * block / (132 * 96e9), 1e-9);  // GEMM-bound
  EXPECT_GT(16 * tile + stores, link) << "not link-bound here";
  // Deferred (the default): the stores drain under each CTA's next tile; no CTA waits for them.
  s.push_notify = GemmRsPushNotify::kDeferred;
  EXPECT_NEAR(estimate_methods(s).fused, 16 * tile + 9 * block / (132 * 96e9), 1e-9);
  // Few rows: one wave of GEMM, and 12 CTAs reduce slower than 132 do after it.
  s = {};
  s.world = 8;
  s.m = 256;
  s.n = 4096;
  s.k = 14336 / 8;
  s.reduce_blocks = 12;
  EXPECT_EQ(choose_method(OpMethod::kAuto, estimate_methods(s)), OpMethod::kNonOverlapped);
  EXPECT_EQ(choose_method(OpMethod::kFused, estimate_methods(s)), OpMethod::kFused) << "configured stays";
  // One rank: the GEMM alone either way (a tie: fused).
  s.world = 1;
  EXPECT_EQ(choose_method(OpMethod::kAuto, estimate_methods(s)), OpMethod::kFused);
}

// The automatic scatter and reducer (issue 25) by the machine: the epilogue push with one rank per
// GPU where everything it needs holds and the fused op beats the GEMM then the reduction; pull and
// the reduction blocks on virtual ranks and for one rank; the copy engine where peers are reached
// only through NVSHMEM; configured knobs stay.
TEST(GemmRsPolicy, PathByTheMachine) {
  using gemm_rs_policy::path;
  using gemm_rs_policy::PathContext;
  constexpr auto kAuto = GemmRsScatter::kAuto, kPull = GemmRsScatter::kPull, kPush = GemmRsScatter::kEpiloguePush,
                 kCe = GemmRsScatter::kCopyEngine;
  constexpr auto kR = GemmRsReducer::kAuto, kBlocks = GemmRsReducer::kBlocks, kEpi = GemmRsReducer::kEpilogue;
  PathContext gpus;  // 8 H200s, 8192 x 8192 x 28672
  gpus.one_rank_per_gpu = true;
  gpus.affine_heap = true;
  gpus.shape.world = 8;
  gpus.shape.m = 8192;
  gpus.shape.n = 8192;
  gpus.shape.k = 3584;
  auto is = [](gemm_rs_policy::Path p, GemmRsScatter s, GemmRsReducer r) { return p.scatter == s && p.reducer == r; };
  EXPECT_TRUE(is(path(kAuto, kR, gpus), kPush, kEpi));
  EXPECT_TRUE(is(path(kPull, kR, gpus), kPull, kBlocks)) << "pulled sums queue on the link: blocks";
  EXPECT_TRUE(is(path(kPush, kR, gpus), kPush, kEpi));
  EXPECT_TRUE(is(path(kAuto, kBlocks, gpus), kPull, kBlocks));
  EXPECT_TRUE(is(path(kAuto, kEpi, gpus), kPush, kEpi));
  // What the epilogue needs: a signal per tile, no reduction CTAs asked for, the fused method, the
  // heap's affine view (else pull, and then the blocks).
  for (int knob = 0; knob < 5; ++knob) {
    PathContext c = gpus;
    if (knob == 0) c.granularity = SignalGranularity::kTileRow;
    if (knob == 1) c.reduce_blocks = 8;
    if (knob == 2) c.method = OpMethod::kNonOverlapped;
    if (knob == 3) c.method = OpMethod::kDecomposed;
    if (knob == 4) c.affine_heap = false;
    EXPECT_TRUE(is(path(kAuto, kR, c), kPull, kBlocks)) << "knob " << knob;
  }
  PathContext fused = gpus;
  fused.method = OpMethod::kFused;
  EXPECT_TRUE(is(path(kAuto, kR, fused), kPush, kEpi));
  // Few rows (one wave): the peers' parts cross the link only after it, so the GEMM then the
  // reduction wins and auto leaves the epilogue (the method estimate then picks non-overlapped);
  // a configured fused method keeps it. Decided on a whole H200 whatever the rank's budget (MPS
  // shares may differ between processes).
  PathContext few = gpus;
  few.shape.m = 256;
  few.shape.n = 4096;
  few.shape.k = 14336 / 8;
  gemm_rs_policy::MethodShape s = few.shape;
  s.sm_budget = 132;
  s.reducer = kEpi;
  s.reduce_blocks = 0;
  ASSERT_GT(estimate_methods(s).fused, estimate_methods(s).non_overlapped);
  EXPECT_TRUE(is(path(kAuto, kR, few), kPull, kBlocks));
  few.shape.sm_budget = 40;  // another process's share: the same answer
  EXPECT_TRUE(is(path(kAuto, kR, few), kPull, kBlocks));
  few.method = OpMethod::kFused;
  EXPECT_TRUE(is(path(kAuto, kR, few), kPush, kEpi));
  few = gpus;
  few.shape.m = 2048;  // enough rows to hide the link under the GEMM: the epilogue again
  few.shape.n = 4096;
  few.shape.k = 14336 / 8;
  EXPECT_TRUE(is(path(kAuto, kR, few), kPush, kEpi));
  // Virtual ranks and one rank: pull and blocks, as measured on one GPU.
  PathContext virt = gpus;
  virt.one_rank_per_gpu = false;
  EXPECT_TRUE(is(path(kAuto, kR, virt), kPull, kBlocks));
  EXPECT_TRUE(is(path(kAuto, kEpi, virt), kPush, kEpi)) << "a configured epilogue takes the push";
  PathContext one = gpus;
  one.shape.world = 1;
  EXPECT_TRUE(is(path(kAuto, kR, one), kPull, kBlocks));
  EXPECT_TRUE(is(path(kAuto, kEpi, one), kPull, kEpi)) << "no peers: nothing to push";
  // Peers only through NVSHMEM: the copy engine, the blocks; configured knobs pass (the op refuses
  // what cannot run there).
  PathContext far = gpus;
  far.put_signal = true;
  EXPECT_TRUE(is(path(kAuto, kR, far), kCe, kBlocks));
  EXPECT_TRUE(is(path(kPull, kEpi, far), kPull, kEpi));
}

// The engine (issue 21, decode's M): the small-M engine (GEMM+AR's, reduce-scattering) where its
// estimate beats the owner-tile GEMM's at its automatic method. On 8 H200s over NVLink and on 8
// virtual ranks, LLaMA-3 70B's down projection (n 8192, k 28672 / 8): small_m up to 256 rows, where
// owner blocks of whole 128-row tiles are mostly padding; owner_tiles from 512, where the fused
// kernel hides the reduce-scatter.
TEST(GemmRsPolicy, SmallMEngineAtDecodeOwnerTilesAtPrefill) {
  for (bool gpus : {true, false}) {
    for (uint32_t m : {1u, 8u, 64u, 128u, 256u, 512u, 8192u}) {
      MethodShape s;
      s.world = 8;
      s.m = m;
      s.n = 8192;
      s.k = 28672 / 8;
      s.sm_budget = gpus ? 132 : 16;
      s.reduce_blocks = reduce_blocks(0, s.sm_budget, {8, s.k, gpus});
      s.one_rank_per_gpu = gpus;
      const MethodEstimates e = estimate_methods(s);
      const double owner = e.of(choose_method(OpMethod::kAuto, e));
      GemmArRates rates;
      if (!gpus) {  // virtual ranks share one GPU's HBM (gemm_ar_rates)
        rates.hbm_bandwidth /= 8;
        rates.link_bandwidth = rates.hbm_bandwidth;
      }
      const GemmArChoice small = gemm_rs_policy::small_m_choice(8, s.sm_budget, m, s.n, s.k, GemmArConfig{}, rates);
      EXPECT_EQ(small.method, ArMethod::kOneShot) << small.why;
      EXPECT_NE(small.why.find("reduce-scatter"), std::string::npos) << small.why;
      const GemmRsEngine want = m <= 256 ? GemmRsEngine::kSmallM : GemmRsEngine::kOwnerTiles;
      EXPECT_EQ(gemm_rs_policy::choose_engine(owner, small.estimate), want)
          << (gpus ? "8 GPUs" : "8 virtual ranks") << ", m " << m << ": small_m " << small.estimate * 1e6
          << " us, owner_tiles " << owner * 1e6 << " us";
      // Each rank sums only its block: never more than the all-reduce's one-shot sums every row.
      const GemmArShape ar{8, s.sm_budget, m, s.n, s.k};
      GemmArConfig one_shot;
      one_shot.method = AllReduceMethod::kOneShot;
      EXPECT_LE(small.estimate, gemm_ar_choice(ar, one_shot, rates).estimate * (1 + 1e-9)) << "m " << m;
    }
  }
  EXPECT_EQ(gemm_rs_policy::choose_engine(1e-5, 1e-5), GemmRsEngine::kOwnerTiles) << "ties keep owner_tiles";
}

}  // namespace
}  // namespace tilelink::test
