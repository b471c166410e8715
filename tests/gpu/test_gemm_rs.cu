// GEMM+RS on virtual ranks (world 1, 2, 4, 8) against cuBLAS per rank (bf16 partials) and an
// fp32 reduction in rank order on the host, for every scatter variant (pull, epilogue push, copy
// engine) and signal granularity; N and K not multiples of the 128x256x64 tile. Each case makes two fresh-input calls (outputs poisoned first),
// then 100 calls on the second call's inputs, each checked bit-identical to it.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "gemm_rs_problem.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/core/cublas_check.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/tune/tune_cache.hpp"

namespace tilelink::test::gemm_rs {

class GemmRsTest : public ::testing::TestWithParam<std::tuple<int, SignalGranularity, GemmRsScatter>> {};

TEST_P(GemmRsTest, MatchesCublasPartialsSummedInRankOrder) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, granularity, scatter] = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr uint32_t kRowsPerRank = 256, kN = 264, kK = 200;
  const uint32_t m = kRowsPerRank * world_size;
  const size_t partial_bytes = size_t(m) * kN * 2, out_elems = size_t(kRowsPerRank) * kN;

  TestWorld env(world_size, 2 * partial_bytes + (2 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer partial = env.heap.allocate(partial_bytes);
  SymmetricBuffer recv = env.heap.allocate(partial_bytes);
  std::vector<DeviceBuffer> a, b, out, ref;
  GemmRsArguments args;
  args.partial = &partial;
  args.m = m;
  args.n = kN;
  args.k = kK;
  args.recv = &recv;
  args.config.granularity = granularity;
  args.config.scatter = scatter;
  for (int r = 0; r < world_size; ++r) {
    a.emplace_back(size_t(m) * kK * 2, world.device(r));
    b.emplace_back(size_t(kN) * kK * 2, world.device(r));
    out.emplace_back(out_elems * 2, world.device(r));
    ref.emplace_back(partial_bytes, world.device(r));
    args.a.push_back(a[r].get());
    args.b.push_back(b[r].get());
    args.out.push_back(out[r].get());
  }
  ASSERT_EQ(GemmRs::can_implement(world, env.heap, args), "");
  GemmRs op(world, env.heap, env.signals, args, "gemm_rs_test");
  cublasHandle_t cublas = nullptr;
  TL_CUBLAS_CHECK(cublasCreate(&cublas));

  constexpr int kRepeats = 100;
  std::vector<std::vector<uint16_t>> previous(world_size);
  for (int call = 1; call <= 2 + kRepeats; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const bool repeat = call > 2;  // same inputs as call 2: bit-identical output
    settle();
    if (!repeat) {
      for (int r = 0; r < world_size; ++r) {
        upload(a[r].get(), random_bf16(size_t(m) * kK, rng).data(), a[r].bytes());
        upload(b[r].get(), random_bf16(size_t(kN) * kK, rng).data(), b[r].bytes());
      }
    }
    for (int r = 0; r < world_size; ++r) {
      TL_CUDA_CHECK(cudaMemset(out[r].get(), 0xFF, out[r].bytes()));
      TL_CUDA_CHECK(cudaMemset(partial.data(r), 0xFF, partial_bytes));
      TL_CUDA_CHECK(cudaMemset(recv.data(r), 0xFF, partial_bytes));
    }
    settle();
    op.run();
    world.synchronize();

    if (repeat) {
      for (int q = 0; q < world_size; ++q) {
        const auto got = download<__nv_bfloat16>(out[q].get(), out_elems);
        std::vector<uint16_t> bits(out_elems);
        std::memcpy(bits.data(), got.data(), out_elems * 2);
        ASSERT_EQ(bits, previous[q]) << "owner " << q << ": same inputs, different bits";
      }
      continue;
    }
    // Reference: every rank's bf16 partial by cuBLAS, summed over ranks in order in fp32.
    previous = expect_rank_order_sum(cublas, world, a, b, out, ref, m, kN, kK);
  }
  TL_CUBLAS_CHECK(cublasDestroy(cublas));
}

std::string case_name(const ::testing::TestParamInfo<GemmRsTest::ParamType>& info) {
  const SignalGranularity g = std::get<1>(info.param);
  return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
         (g == SignalGranularity::kTile ? "_tile" : g == SignalGranularity::kTileRow ? "_row" : "_rank");
}

INSTANTIATE_TEST_SUITE_P(
    GemmRs, GemmRsTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank),
                       ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush)),
    case_name);
// The copy engine moves whole groups of contiguous rows: tile rows or owner blocks.
INSTANTIATE_TEST_SUITE_P(
    GemmRsCopyEngine, GemmRsTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(SignalGranularity::kTileRow, SignalGranularity::kRank),
                       ::testing::Values(GemmRsScatter::kCopyEngine)),
    case_name);

TEST(GemmRsArgumentsTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 8 << 20, 1024);
  std::mt19937_64 rng(1);
  GemmRsProblem problem(env, 512, 256, 256, rng);
  const SymmetricBuffer& recv = problem.recv;
  GemmRsArguments good = problem.args;
  good.recv = nullptr;  // only the copy engine needs it (the cases below)
  ASSERT_EQ(GemmRs::can_implement(env.world, env.heap, good), "");
  using A = GemmRsArguments;
  const auto copy_engine = [](A& a, SignalGranularity granularity) {
    a.config.scatter = GemmRsScatter::kCopyEngine;
    a.config.granularity = granularity;
  };
  expect_refusals<GemmRs>(env, good, {
      {[](A& a) { a.m = 511; }, "'m' = 511"},
      {[](A& a) { a.m = 384; }, "'m_per_rank' = 192"},  // 192 rows per rank: not whole 128-row tiles
      {[](A& a) { a.n = 260; }, "'n' = 260"},
      {[](A& a) { a.k = 100; }, "'k' = 100"},
      {[](A& a) { a.out[1] = nullptr; }, "'out[1]' = nullptr"},
      {[](A& a) { a.m = 1024; }, "'partial' holds"},  // partial holds 512 x 256
      // The copy engine's receive buffer is missing.
      {[&](A& a) { copy_engine(a, SignalGranularity::kTileRow); }, "'recv'"},
      // With it, the copy engine moves whole tile rows, not tiles.
      {[&](A& a) {
         copy_engine(a, SignalGranularity::kTile);
         a.recv = &recv;
       },
       "'config.granularity' = tile"},
      {[](A& a) { a.config.granularity = static_cast<SignalGranularity>(3); }, "'config.granularity' = 3"},
      // The reduction in whole clusters, up to the budget, leaves the GEMM nothing: its knob is named.
      {[&](A& a) { a.config.reduce_blocks = static_cast<uint32_t>(env.world.sm_budget(0)); },
       "'config.reduce_blocks' = " + std::to_string(env.world.sm_budget(0)) + ": the reduction takes"},
  });
  // ... and accepted with it, in tile rows.
  GemmRsArguments with_recv = good;
  copy_engine(with_recv, SignalGranularity::kTileRow);
  with_recv.recv = &recv;
  EXPECT_EQ(GemmRs::can_implement(env.world, env.heap, with_recv), "");
  settle();
}

// With every knob on automatic, GemmRs takes the tune cache's configuration for its GPU, world
// and shape (a copy-engine one here, which needs the receive slots the caller passed), and
// computes the same bytes as the automatic configuration; a cached configuration the op refuses
// (here: the copy engine without receive slots) is ignored; so is the cache with
// use_tune_cache = false.
TEST(GemmRsTuneCacheTest, AutomaticConfigTakesTheCachedOneAndComputesTheSame) {
  TL_SKIP_WITHOUT_GPU();
  constexpr int kWorld = 2;
  constexpr uint32_t kM = 512, kN = 256, kK = 192;
  std::mt19937_64 rng(std::random_device{}());
  TestWorld env(kWorld, 3 * size_t(kM) * kN * 2 + (2 << 20), 1024);
  GemmRsProblem problem(env, kM, kN, kK, rng);
  const GemmRsArguments& args = problem.args;
  std::vector<DeviceBuffer>& out = problem.out;
  const ScopedTuneCache cache("gemm_rs_tune");
  const std::string& path = cache.path();
  TuneEntry entry;
  entry.op = "gemm_rs";
  entry.gemm_rs.scatter = GemmRsScatter::kCopyEngine;
  entry.gemm_rs.granularity = SignalGranularity::kTileRow;
  entry.gemm_rs.swizzle = 2;
  cache.put(gemm_rs_tune_key(env.world, args), entry);

  GemmRsArguments plain_args = args;
  plain_args.config.use_tune_cache = false;
  GemmRs plain(env.world, env.heap, env.signals, plain_args, "tune_cache_test.plain");
  EXPECT_EQ(plain.tuned_from(), "");
  GemmRs tuned(env.world, env.heap, env.signals, args, "tune_cache_test.tuned");
  EXPECT_EQ(tuned.tuned_from(), path);
  EXPECT_EQ(describe(tuned.config()), describe(entry.gemm_rs));
  EXPECT_EQ(tuned.swizzle(), 2u);
  GemmRsArguments no_slots = args;
  no_slots.recv = nullptr;
  GemmRs fallback(env.world, env.heap, env.signals, no_slots, "tune_cache_test.fallback");
  EXPECT_EQ(fallback.tuned_from(), "") << "a cached configuration the op refuses was taken";
  EXPECT_TRUE(is_automatic(fallback.config()));

  std::vector<std::vector<uint8_t>> want;
  plain.run();
  env.world.synchronize();
  for (int r = 0; r < kWorld; ++r) want.push_back(download<uint8_t>(out[r].get(), out[r].bytes()));
  for (int r = 0; r < kWorld; ++r) poison(out[r].get(), out[r].bytes());
  tuned.run();
  env.world.synchronize();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(bytes_equal(download<uint8_t>(out[r].get(), out[r].bytes()), want[r])) << "rank " << r;
  }
  settle();
}

}  // namespace tilelink::test::gemm_rs
