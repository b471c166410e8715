// GEMM+AR's automatic choices (ops/gemm_ar/gemm_ar_policy.hpp), no GPU: the choice is the fastest
// estimate of its candidates, configured knobs are kept, the estimate is never slower than the
// chain (a plain GEMM on every SM, then the all-reduce on every SM) that the non-overlapped
// schedule with one slice is, and `plan gemm_ar` (sim) reports the op's own choice.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/sim/gemm_ar_sim.hpp"

namespace tilelink {
namespace {

std::vector<GemmArShape> shapes() {
  std::vector<GemmArShape> out;
  for (int world : {1, 2, 4, 8}) {
    for (uint32_t m : {1u, 7u, 64u, 129u, 512u, 4096u}) {
      for (auto [n, k] : {std::pair{8192u, 28672u}, std::pair{4096u, 4096u}, std::pair{16384u, 53248u}}) {
        for (bool norm : {false, true}) out.push_back({world, 132, m, n, k / uint32_t(world), norm});
      }
    }
  }
  return out;
}

std::string name(const GemmArShape& s) {
  return "world " + std::to_string(s.world) + " m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
         std::to_string(s.k) + (s.norm ? " norm" : "");
}

TEST(GemmArPolicy, TheChoiceIsTheFastestEstimateOfItsCandidates) {
  for (const GemmArShape& s : shapes()) {
    const GemmArChoice best = gemm_ar_choice(s, GemmArConfig{});
    EXPECT_NEAR(best.estimate, gemm_ar_policy::estimate(s, best), 1e-12) << name(s);
    for (GemmArSchedule schedule : {GemmArSchedule::kNonOverlapped}) {  // auto's schedule (see the policy)
      for (AllReduceMethod method : {AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot}) {
        for (uint32_t splits : {0u, 1u}) {
          GemmArConfig c;
          c.schedule = schedule;
          c.method = method;
          c.splits = splits;
          const GemmArChoice forced = gemm_ar_choice(s, c);
          EXPECT_EQ(forced.schedule, schedule);
          EXPECT_LE(best.estimate, forced.estimate * (1 + 1e-9))
              << name(s) << ": " << best.why << " is slower than " << forced.why;
        }
      }
    }
    EXPECT_GE(best.gemm_sms, 1) << name(s);
    EXPECT_LE(best.gemm_sms + (best.schedule == GemmArSchedule::kFused ? int(best.reduce_blocks) : 0), s.sm_budget)
        << name(s) << ": " << best.why;
    EXPECT_GE(best.parts, 1u);
    EXPECT_EQ(gemm_ar_policy::gemm_tile(s.m).n % (8 * best.parts), 0u) << name(s);
    EXPECT_EQ(s.k % (8 * best.splits), 0u) << name(s);
  }
}

TEST(GemmArPolicy, NeverSlowerThanItsOwnNonOverlappedChain) {
  // The op's own chain -- its GEMM with one slice on every SM, then its all-reduce -- is one of
  // the candidates: the choice is never slower by the estimate. (Against cuBLAS's chain the plan
  // predicts, and the bench measures.)
  for (const GemmArShape& s : shapes()) {
    const GemmArChoice best = gemm_ar_choice(s, GemmArConfig{});
    GemmArConfig chain;
    chain.schedule = GemmArSchedule::kNonOverlapped;
    chain.splits = 1;
    EXPECT_LE(best.estimate, gemm_ar_choice(s, chain).estimate * (1 + 1e-9)) << name(s) << ": " << best.why;
    sim::GemmArProblem p{s.m, s.n, s.k * uint32_t(s.world), s.world, 1};
    sim::GemmArPlanConfig pc;
    pc.norm = s.norm;
    const sim::GemmArPrediction r = sim::predict_gemm_ar(p, pc);
    EXPECT_NEAR(r.choice.estimate, best.estimate, 1e-12) << name(s);  // the plan prints the op's choice
  }
}

// Auto is the argmin of what it searches: no non-overlapped configuration that names its method
// and slices (the rule's count or one) has a smaller estimate, and the estimate it reports is the
// policy's estimate of the choice it returns.
TEST(GemmArPolicy, AutoIsTheFastestEstimateOfItsSearchSpace) {
  for (const GemmArShape& s : shapes()) {
    const GemmArChoice best = gemm_ar_choice(s, GemmArConfig{});
    EXPECT_DOUBLE_EQ(best.estimate, gemm_ar_policy::estimate(s, best)) << name(s);  // the default rates
    EXPECT_EQ(best.schedule, GemmArSchedule::kNonOverlapped) << name(s);
    for (AllReduceMethod method : {AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot}) {
      for (uint32_t splits : {1u, best.splits}) {
        GemmArConfig c;
        c.schedule = GemmArSchedule::kNonOverlapped;
        c.method = method;
        c.splits = splits;
        const GemmArChoice other = gemm_ar_choice(s, c);
        if (other.gemm_sms < 1) continue;
        EXPECT_LE(best.estimate, other.estimate * (1 + 1e-9))
            << name(s) << ": auto " << best.why << " against " << other.why;
      }
    }
  }
}

TEST(GemmArPolicy, ConfiguredKnobsAreKept) {
  const GemmArShape s{8, 132, 32, 8192, 3584, false};
  GemmArConfig c;
  c.schedule = GemmArSchedule::kFused;
  c.method = AllReduceMethod::kTwoShot;
  c.splits = 4;
  c.reduce_blocks = 12;
  c.gemm_sms = 100;
  const GemmArChoice ch = gemm_ar_choice(s, c);
  EXPECT_EQ(ch.schedule, GemmArSchedule::kFused);
  EXPECT_EQ(ch.method, ArMethod::kTwoShot);
  EXPECT_EQ(ch.splits, 4u);
  EXPECT_EQ(ch.reduce_blocks, 12u);
  EXPECT_EQ(ch.gemm_sms, 100);
  EXPECT_NE(ch.why.find("fused, two_shot, 4 K slice(s)"), std::string::npos) << ch.why;
}

TEST(GemmArConfigJson, RoundTripsAndNamesABadField) {
  GemmArConfig c;
  c.method = AllReduceMethod::kOneShot;
  c.schedule = GemmArSchedule::kNonOverlapped;
  c.splits = 4;
  c.reduce_blocks = 9;
  c.gemm_sms = 120;
  c.slice_sum = GemmArSliceSum::kGemm;
  GemmArConfig back;
  from_config_json(to_config_json(c), "test", back);
  EXPECT_EQ(describe(back), describe(c));
  EXPECT_EQ(back.slice_sum, GemmArSliceSum::kGemm);
  EXPECT_FALSE(is_automatic(back));
  EXPECT_TRUE(is_automatic(GemmArConfig{}));
  try {
    from_config_json(R"({"method": "three_shot", "schedule": "fused", "splits": 0, "reduce_blocks": 0, "gemm_sms": 0})",
                     "cache.json", back);
    FAIL() << "an unknown method was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'method'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(from_config_json("{}", "cache.json", back), InvalidArgument);
  // An entry from before the knob: the reduction summed its slices when it was measured.
  from_config_json(R"({"method": "auto", "schedule": "auto", "splits": 2, "reduce_blocks": 0, "gemm_sms": 0})",
                   "cache.json", back);
  EXPECT_EQ(back.slice_sum, GemmArSliceSum::kReduction);
}

TEST(GemmArPolicy, OneRankOneSliceNoNormRunsTheGemmAlone) {
  GemmArConfig c;
  c.splits = 1;
  const GemmArChoice ch = gemm_ar_choice({1, 132, 512, 8192, 8192, false}, c);
  EXPECT_EQ(ch.gemm_sms, 132) << ch.why;  // no reduction runs: every SM to the GEMM
  EXPECT_DOUBLE_EQ(ch.estimate, gemm_ar_policy::gemm_time({1, 132, 512, 8192, 8192, false}, 1, 132));
}

// The K slices summed in the GEMM: one partial per rank for the reduction. At world 1 with no norm
// nothing else runs (the GEMM writes out: no reduction CTAs, every SM to the GEMM); with peers the
// all-reduce reads a quarter of the four slices' bytes, so the estimate is below the same slices
// summed in the reduction; one slice has nothing to sum; the choice says where the slices go.
TEST(GemmArPolicy, SlicesSummedInTheGemmLeaveOnePartial) {
  GemmArConfig c;
  c.schedule = GemmArSchedule::kNonOverlapped;
  c.method = AllReduceMethod::kOneShot;
  c.splits = 4;
  c.slice_sum = GemmArSliceSum::kGemm;
  const GemmArShape alone{1, 132, 32, 8192, 28672, false};
  const GemmArChoice one = gemm_ar_choice(alone, c);
  EXPECT_TRUE(one.slices_in_gemm);
  EXPECT_EQ(one.partials(), 1u);
  EXPECT_EQ(one.reduce_blocks, 0u) << one.why;
  EXPECT_EQ(one.gemm_sms, 132);
  EXPECT_DOUBLE_EQ(one.estimate, gemm_ar_policy::gemm_time(alone, 4, 132, {}, true));
  EXPECT_NE(one.why.find("4 K slice(s) summed in the GEMM"), std::string::npos) << one.why;
  // The slots' traffic (fp32, written and read back) against the slices' bf16 partials: the GEMM
  // alone is no faster for summing them.
  EXPECT_GE(gemm_ar_policy::gemm_time(alone, 4, 132, {}, true), gemm_ar_policy::gemm_time(alone, 4, 132));

  const GemmArShape peers{8, 132, 32, 8192, 3584, false};
  const GemmArChoice summed = gemm_ar_choice(peers, c);
  GemmArConfig in_reduction = c;
  in_reduction.slice_sum = GemmArSliceSum::kReduction;
  const GemmArChoice partials = gemm_ar_choice(peers, in_reduction);
  EXPECT_FALSE(partials.slices_in_gemm);
  EXPECT_EQ(partials.partials(), 4u);
  EXPECT_LT(summed.estimate, partials.estimate) << summed.why << " vs " << partials.why;
  EXPECT_NEAR(gemm_ar_policy::all_reduce_time(peers, ArMethod::kOneShot, 1, 132, 1) * 4,
              gemm_ar_policy::all_reduce_time(peers, ArMethod::kOneShot, 4, 132, 1) +
                  3 * GemmArRates{}.notify_latency,
              1e-9);

  c.splits = 1;
  EXPECT_FALSE(gemm_ar_choice(peers, c).slices_in_gemm);
  // Auto sums them in the GEMM.
  c.splits = 4;
  c.slice_sum = GemmArSliceSum::kAuto;
  EXPECT_TRUE(gemm_ar_choice(peers, c).slices_in_gemm);
}

// The copy-engine path's estimate (the path under put_signal): each put of the stream costs the
// rates' fixed overhead -- one-shot at one tile row puts to each of the 7 peers of world 8 (7 d
// more for d more a put); two-shot's critical path is a peer's put of its slices to the row's
// owner, then the owner's puts of the sums to the 7 (8 d); at world 1 there is nothing to put. The
// load/store estimate is untouched by the put's cost.
TEST(GemmArPolicy, TheCopyEnginePathPaysEachPut) {
  const GemmArShape s{8, 132, 8, 8192, 3584, false};  // one tile row
  GemmArRates ce;
  ce.copy_engine = true;
  GemmArRates dearer = ce;
  const double d = 3e-6;
  dearer.ce_put_overhead += d;
  for (ArMethod method : {ArMethod::kOneShot, ArMethod::kTwoShot}) {
    SCOPED_TRACE(to_string(method));
    const double base = gemm_ar_policy::all_reduce_time(s, method, 2, 64, 1, ce);
    const double puts = method == ArMethod::kOneShot ? 7 : 8;
    EXPECT_NEAR(gemm_ar_policy::all_reduce_time(s, method, 2, 64, 1, dearer) - base, puts * d, 1e-12);
    GemmArRates sm = dearer;
    sm.copy_engine = false;
    EXPECT_DOUBLE_EQ(gemm_ar_policy::all_reduce_time(s, method, 2, 64, 1, sm),
                     gemm_ar_policy::all_reduce_time(s, method, 2, 64, 1, GemmArRates{}));
  }
  const GemmArShape one{1, 132, 8, 8192, 28672, false};
  EXPECT_DOUBLE_EQ(gemm_ar_policy::all_reduce_time(one, ArMethod::kOneShot, 2, 64, 1, dearer),
                   gemm_ar_policy::all_reduce_time(one, ArMethod::kOneShot, 2, 64, 1, GemmArRates{}));
}

// plan gemm_ar across nodes is the copy-engine path's (the world's transport is put_signal there):
// auto takes it and predicts more than the load/store path would, and --path sm is refused.
TEST(GemmArSim, AcrossNodesThePathIsTheCopyEngines) {
  sim::GemmArProblem p;
  p.world = 16;
  p.nodes = 2;
  p.m = 8;
  sim::GemmArPlanConfig c;
  const sim::GemmArPrediction across = sim::predict_gemm_ar(p, c);
  EXPECT_TRUE(sim::gemm_ar_rates(sim::CostModel{}, 16, 2).copy_engine);
  EXPECT_FALSE(sim::gemm_ar_rates(sim::CostModel{}, 16, 1).copy_engine);
  GemmArShape s{16, 132, 8, 8192, 28672 / 16, false};
  GemmArRates loads = sim::gemm_ar_rates(sim::CostModel{}, 16, 2);
  loads.copy_engine = false;
  EXPECT_GT(across.choice.estimate, gemm_ar_choice(s, GemmArConfig{}, loads).estimate);
  c.op.path = GemmArPath::kSm;
  try {
    sim::predict_gemm_ar(p, c);
    ADD_FAILURE() << "the sm path across nodes was predicted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'path' = sm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilelink
