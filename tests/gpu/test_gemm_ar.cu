// GEMM+AR (ops/gemm_ar) on virtual ranks: worlds 1, 2, 3, 4, 8 x M in {1, 2, 7, 64, 129, 500}
// (M < world, M not a multiple of the tile) x one-shot / two-shot x with and without the decode
// boundary (residual add + RMSNorm), N with a tail tile; fresh random inputs, poisoned outputs.
// Reference: each rank's and K slice's partial by cuBLAS in fp32, summed on the host; the op's
// sum of bf16-rounded slices must be within one bf16 rounding of each slice and of the result.
// Every rank's output must be the same bits, and a repeated call on the same inputs too. The norm
// is checked against the host's RMSNorm of the op's own new residual. The copy-engine path (the
// streams put the partials and sums; the put-with-signal transport's) must meet the same checks.
#include <gtest/gtest.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cublas_ref.hpp"
#include "gemm_ar_problem.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"

namespace tilelink::test::gemm_ar {
namespace {

constexpr uint32_t kN = 264;  // two full 128-column tiles and an 8-column tail
constexpr uint32_t kK = 1024;
constexpr uint32_t kRows[] = {1, 2, 7, 64, 129, 500};
constexpr float kEps = 1e-5f;

float bf(__nv_bfloat16 x) { return __bfloat162float(x); }

// The shared problem (gemm_ar_problem.hpp) at this file's N and K, with room for one slice's
// fp32 cuBLAS reference.
struct Problem : GemmArProblem {
  DeviceBuffer ref;

  Problem(TestWorld& env, uint32_t m, bool norm, const GemmArConfig& config)
      : GemmArProblem(env.world, m, kN, kK, norm, config, kEps), ref(size_t(m) * kN * 4, env.world.device(0)) {}
};

// Checks every rank's result against cuBLAS; returns rank 0's output bits (out, then residual_out).
std::vector<uint16_t> check(const CublasHandle& cublas, const World& world, Problem& p, uint32_t splits,
                            const std::string& what) {
  const uint32_t m = p.args.m;
  const size_t elems = size_t(m) * kN;
  const uint32_t ks = kK / splits;
  std::vector<float> want(elems, 0.f), magnitude(elems, 0.f);
  for (int r = 0; r < world.size(); ++r) {
    for (uint32_t s = 0; s < splits; ++s) {
      cublas_slice(cublas.get(), p.a[r].get(), p.b[r].get(), p.ref.get<float>(), m, kN, kK, s * ks, ks);
      const std::vector<float> slice = download<float>(p.ref.get(), elems);
      for (size_t i = 0; i < elems; ++i) {
        want[i] += slice[i];
        magnitude[i] += std::fabs(slice[i]);
      }
    }
  }
  const bool norm = !p.residual.empty();
  std::vector<uint16_t> bits0;
  for (int r = 0; r < world.size(); ++r) {
    const auto got = download<__nv_bfloat16>(p.out[r].get(), elems);
    const auto h = norm ? download<__nv_bfloat16>(p.residual_out[r].get(), elems) : got;
    size_t bad = 0, first = 0;
    float got_first = 0.f, want_first = 0.f;
    for (size_t i = 0; i < elems; ++i) {
      const float wi = want[i] + (norm ? bf(p.host_residual[i]) : 0.f);
      const float tol = 0.0078125f * (magnitude[i] + std::fabs(wi)) + 1e-3f;
      if (!(std::fabs(bf(h[i]) - wi) <= tol) && bad++ == 0) {
        first = i;
        got_first = bf(h[i]);
        want_first = wi;
      }
    }
    EXPECT_EQ(bad, 0u) << what << ", rank " << r << (norm ? " residual_out" : " out") << ": first bad element row "
                       << first / kN << " col " << first % kN << " got " << got_first << " want " << want_first;
    if (norm) {  // out = RMSNorm(h) * weight, from the op's own h
      size_t bad_norm = 0, first_norm = 0;
      for (uint32_t row = 0; row < m; ++row) {
        double ss = 0;
        for (uint32_t c = 0; c < kN; ++c) ss += double(bf(h[size_t(row) * kN + c])) * bf(h[size_t(row) * kN + c]);
        const double inv = 1.0 / std::sqrt(ss / kN + kEps);
        for (uint32_t c = 0; c < kN; ++c) {
          const size_t i = size_t(row) * kN + c;
          const double wi = bf(h[i]) * inv * bf(p.host_weight[c]);
          if (!(std::fabs(bf(got[i]) - wi) <= 0.0078125 * std::fabs(wi) + 1e-4) && bad_norm++ == 0) first_norm = i;
        }
      }
      EXPECT_EQ(bad_norm, 0u) << what << ", rank " << r << " out (RMSNorm): first bad element row " << first_norm / kN
                              << " col " << first_norm % kN;
    }
    std::vector<uint16_t> bits(elems * (norm ? 2 : 1));
    std::memcpy(bits.data(), got.data(), elems * 2);
    if (norm) std::memcpy(bits.data() + elems, h.data(), elems * 2);
    if (r == 0) {
      bits0 = bits;
    } else {
      EXPECT_TRUE(bits == bits0) << what << ": rank " << r << "'s result is not rank 0's bits";
    }
  }
  return bits0;
}

class GemmArTest : public ::testing::TestWithParam<int> {};

void run_cases(int world_size, GemmArSchedule schedule, uint32_t splits, const uint32_t* rows, size_t n_rows,
               GemmArPath path = GemmArPath::kAuto, GemmArSliceSum slice_sum = GemmArSliceSum::kAuto) {
  TestWorld env(world_size, 64 << 20, 4096);
  CublasHandle cublas;
  std::mt19937_64 rng(1234 + world_size);
  for (size_t ri = 0; ri < n_rows; ++ri) {
    const uint32_t m = rows[ri];
    for (AllReduceMethod method : {AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot}) {
      for (bool norm : {false, true}) {
        GemmArConfig config;
        config.method = method;
        config.schedule = schedule;
        config.splits = splits;
        config.path = path;
        config.slice_sum = slice_sum;
        const std::string what = "world " + std::to_string(world_size) + " m " + std::to_string(m) + " " +
                                 to_string(method) + (norm ? " norm" : "") + " " + to_string(schedule) + " path " +
                                 to_string(path) + " slices summed in " + to_string(slice_sum);
        SCOPED_TRACE(what);
        Problem p(env, m, norm, config);
        ASSERT_EQ(GemmAr::can_implement(env.world, env.heap, p.args), "");
        GemmAr op(env.world, env.heap, env.signals, p.args, "gemm_ar");
        EXPECT_EQ(op.method(), method == AllReduceMethod::kOneShot ? ArMethod::kOneShot : ArMethod::kTwoShot);
        EXPECT_EQ(op.path(), path == GemmArPath::kCopyEngine ? GemmArPath::kCopyEngine : GemmArPath::kSm);
        if (op.choice().splits > 1) {
          EXPECT_EQ(op.choice().slices_in_gemm, slice_sum != GemmArSliceSum::kReduction);
          EXPECT_EQ(op.splits(), slice_sum == GemmArSliceSum::kReduction ? op.choice().splits : 1u)
              << "the partials per rank";
        }
        p.fresh(rng);
        op.run();
        env.world.synchronize();
        const std::vector<uint16_t> first = check(cublas, env.world, p, op.splits(), what + ", call 1");
        // The same inputs again over poisoned outputs: the same bits.
        for (auto& o : p.out) poison(o.get(), o.bytes());
        for (auto& o : p.residual_out) poison(o.get(), o.bytes());
        op.run();
        env.world.synchronize();
        EXPECT_TRUE(check(cublas, env.world, p, op.splits(), what + ", call 2") == first)
            << what << ": a repeated call changed the bits";
        p.fresh(rng);
        op.run();
        env.world.synchronize();
        check(cublas, env.world, p, op.splits(), what + ", call 3 (fresh inputs)");
      }
    }
  }
}

TEST_P(GemmArTest, SumsEveryRanksPartialOnEveryRankAtAnyM) {
  TL_SKIP_WITHOUT_GPU();
  run_cases(GetParam(), GemmArSchedule::kFused, 0, kRows, std::size(kRows));
}

TEST_P(GemmArTest, NonOverlappedScheduleAndExplicitSplits) {
  TL_SKIP_WITHOUT_GPU();
  constexpr uint32_t rows[] = {7, 129};
  run_cases(GetParam(), GemmArSchedule::kNonOverlapped, 1, rows, std::size(rows));
  // The slices as partials of their own, summed by the reduction (auto sums them in the GEMM).
  run_cases(GetParam(), GemmArSchedule::kFused, 4, rows, std::size(rows), GemmArPath::kAuto,
            GemmArSliceSum::kReduction);
}

// The copy-engine path: the non-overlapped schedule at any M (one slice or the estimate's), and
// the fused one with two slices (the streams' pushes wait for the GEMM's notifies per tile row).
TEST_P(GemmArTest, CopyEnginePathAtAnyM) {
  TL_SKIP_WITHOUT_GPU();
  constexpr uint32_t rows[] = {1, 7, 129, 500};
  run_cases(GetParam(), GemmArSchedule::kNonOverlapped, 0, rows, std::size(rows), GemmArPath::kCopyEngine);
  constexpr uint32_t fused_rows[] = {2, 64, 129};
  run_cases(GetParam(), GemmArSchedule::kFused, 2, fused_rows, std::size(fused_rows), GemmArPath::kCopyEngine);
}

// The K slices summed in the GEMM (each tile's last slice adds the others' fp32 accumulators in
// slice order): both tiles (64 x 128 ping-pong up to 64 rows, 128 x 128 cooperative above), both
// schedules, 2 and 4 slices, the copy-engine path; the same bits call after call (the flags the
// last slice puts back, the fixed order).
TEST_P(GemmArTest, SlicesSummedInTheGemm) {
  TL_SKIP_WITHOUT_GPU();
  constexpr uint32_t rows[] = {1, 64, 129, 500};
  run_cases(GetParam(), GemmArSchedule::kNonOverlapped, 2, rows, std::size(rows), GemmArPath::kAuto,
            GemmArSliceSum::kGemm);
  constexpr uint32_t fused_rows[] = {7, 129};
  run_cases(GetParam(), GemmArSchedule::kFused, 4, fused_rows, std::size(fused_rows), GemmArPath::kAuto,
            GemmArSliceSum::kGemm);
  constexpr uint32_t ce_rows[] = {2, 129};
  run_cases(GetParam(), GemmArSchedule::kNonOverlapped, 4, ce_rows, std::size(ce_rows), GemmArPath::kCopyEngine,
            GemmArSliceSum::kGemm);
}

INSTANTIATE_TEST_SUITE_P(World, GemmArTest, ::testing::Values(1, 2, 3, 4, 8), world_name);

// The automatic configuration (schedule, method, slices by the estimate), a residual updated in
// place (residual_out == residual), new operands between calls (set_operands), and the all-reduce
// alone after cuBLAS wrote the partial (the chain's second half).
TEST(GemmArOps, AutoInPlaceResidualNewOperandsAndTheAllReduceAlone) {
  TL_SKIP_WITHOUT_GPU();
  for (int world_size : {1, 3}) {
    SCOPED_TRACE("world " + std::to_string(world_size));
    TestWorld env(world_size, 64 << 20, 4096);
    CublasHandle cublas;
    std::mt19937_64 rng(77 + world_size);
    {
      Problem p(env, 7, true, GemmArConfig{});
      for (int r = 0; r < world_size; ++r) p.args.residual_out[r] = p.residual[r].get();
      GemmAr op(env.world, env.heap, env.signals, p.args, "gemm_ar_auto");
      EXPECT_NE(op.describe_choice().find("estimate"), std::string::npos) << op.describe_choice();
      const GemmArShape shape{world_size, env.world.sm_budget(0), 7, kN, kK, true};
      // The op runs what the estimate picks for its world (model-selected path, named in words).
      const GemmArChoice want = gemm_ar_choice(shape, GemmArConfig{}, gemm_ar_rates(env.world));
      EXPECT_EQ(op.choice().schedule, want.schedule);
      EXPECT_EQ(op.choice().method, want.method);
      EXPECT_EQ(op.choice().splits, want.splits);
      EXPECT_EQ(op.choice().reduce_blocks, want.reduce_blocks);
      EXPECT_EQ(op.choice().parts, want.parts);
      p.fresh(rng);
      op.run();
      env.world.synchronize();
      for (int r = 0; r < world_size; ++r) {  // the new residual is in `residual`: check() reads residual_out
        TL_CUDA_CHECK(cudaMemcpy(p.residual_out[r].get(), p.residual[r].get(), p.residual[r].bytes(),
                                 cudaMemcpyDeviceToDevice));
      }
      check(cublas, env.world, p, op.splits(), "auto, residual in place");
      // New operands (another problem of the same shape), then a call on them.
      Problem q(env, 7, true, GemmArConfig{});
      for (int r = 0; r < world_size; ++r) {
        op.set_operands(r, q.a[r].get(), q.b[r].get(), q.out[r].get(), q.residual[r].get(), q.residual_out[r].get(),
                        q.weight[r].get());
      }
      q.fresh(rng);
      op.run();
      env.world.synchronize();
      check(cublas, env.world, q, op.splits(), "auto, new operands");
    }
    {
      GemmArConfig config;
      config.splits = 1;
      Problem p(env, 129, false, config);
      GemmAr op(env.world, env.heap, env.signals, p.args, "gemm_ar_chain");
      p.fresh(rng);
      for (int r = 0; r < world_size; ++r) {
        TL_CUDA_CHECK(cudaSetDevice(env.world.device(r)));
        cublas_reference_bf16(cublas.get(), p.a[r].get(), p.b[r].get(), op.partial(r), 129, kN, kK);
      }
      op.run_all_reduce_only();
      env.world.synchronize();
      check(cublas, env.world, p, 1, "cuBLAS, then the all-reduce alone");
    }
  }
}

// method = auto: a tune cache entry for this GPU, world and shape selects the configuration it
// names (and a caller who turns the cache off gets the estimate's); the cached path's result is
// right.
TEST(GemmArOps, ATuneCacheEntrySelectsThePathItNames) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 64 << 20, 4096);
  CublasHandle cublas;
  std::mt19937_64 rng(99);
  Problem p(env, 7, false, GemmArConfig{});
  const ScopedTuneCache cache("gemm_ar_tune");
  GemmArConfig stored;
  stored.schedule = GemmArSchedule::kNonOverlapped;
  stored.method = AllReduceMethod::kTwoShot;
  stored.splits = 2;
  {
    TuneCache c = TuneCache::load(cache.path());
    c.put(gemm_ar_tune_key(env.world, p.args), {"gemm_ar", to_config_json(stored), 1.0, 2.0, "2026-12-04"});
    c.save();
  }
  GemmAr tuned(env.world, env.heap, env.signals, p.args, "gemm_ar_tuned");
  EXPECT_EQ(tuned.tuned_from(), cache.path());
  EXPECT_EQ(tuned.choice().schedule, GemmArSchedule::kNonOverlapped);
  EXPECT_EQ(tuned.choice().method, ArMethod::kTwoShot);
  EXPECT_EQ(tuned.choice().splits, 2u);
  EXPECT_NE(tuned.describe_choice().find("tune cache"), std::string::npos) << tuned.describe_choice();
  GemmArArguments plain_args = p.args;
  plain_args.config.use_tune_cache = false;
  GemmAr plain(env.world, env.heap, env.signals, plain_args, "gemm_ar_plain");
  EXPECT_EQ(plain.tuned_from(), "");
  const GemmArShape shape{2, env.world.sm_budget(0), 7, kN, kK, false};
  EXPECT_EQ(plain.choice().schedule, gemm_ar_choice(shape, GemmArConfig{}, gemm_ar_rates(env.world)).schedule);
  p.fresh(rng);
  tuned.run();
  env.world.synchronize();
  check(cublas, env.world, p, tuned.splits(), "the tune cache's configuration");
}

TEST(GemmArErrors, BadArgumentsAreRefusedByName) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 16 << 20, 1024);
  Problem p(env, 8, true, GemmArConfig{});
  expect_refusals<GemmAr>(env, p.args,
                          {{[](GemmArArguments& a) { a.m = 0; }, "'m' = 0"},
                           {[](GemmArArguments& a) { a.n = 12; }, "'n' = 12"},
                           {[](GemmArArguments& a) { a.b[1] = nullptr; }, "'b[1]'"},
                           {[](GemmArArguments& a) { a.norm_weight.clear(); }, "'norm_weight'"},
                           {[](GemmArArguments& a) { a.residual_out[0] = a.out[0]; }, "'residual_out'"},
                           {[](GemmArArguments& a) { a.eps = 0.f; }, "'eps'"},
                           {[](GemmArArguments& a) { a.config.splits = 3; }, "'config.splits' = 3"},
                           {[](GemmArArguments& a) { a.config.splits = 64; }, "'config.splits' = 64"},
                           {[](GemmArArguments& a) { a.config.reduce_blocks = 100000; }, "'config.reduce_blocks'"},
                           {[](GemmArArguments& a) { a.config.method = static_cast<AllReduceMethod>(7); },
                            "'config.method'"},
                           {[](GemmArArguments& a) { a.config.path = static_cast<GemmArPath>(7); }, "'config.path'"}});
}

}  // namespace
}  // namespace tilelink::test::gemm_ar
