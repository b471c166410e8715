// GEMM+RS on virtual ranks (worlds 1, 2, 3, 4, 8) against cuBLAS per rank (bf16 partials) and an
// fp32 reduction in rank order on the host, for every scatter variant (pull, epilogue push, copy
// engine) and signal granularity; N and K not multiples of the 128x256x64 tile, and M any row
// count (partial tile rows, short and empty owner blocks). Each case makes two fresh-input calls
// (outputs and buffers poisoned first; nothing may be written past an owner's rows), then calls on
// the second call's inputs, each checked bit-identical to it.
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

// Runs the op at (m, n, k) on `world_size` virtual ranks: two calls of fresh inputs over poisoned
// outputs and buffers, each against cuBLAS partials summed in rank order, then `repeats` calls on
// the second call's inputs, each bit-identical to it.
void check_gemm_rs(int world_size, uint32_t m, uint32_t n, uint32_t k, SignalGranularity granularity,
                   GemmRsScatter scatter, int repeats, GemmRsReducer reducer = GemmRsReducer::kAuto,
                   OpMethod method = OpMethod::kAuto, GemmRsPushNotify push_notify = GemmRsPushNotify::kDeferred,
                   GemmRsEngine engine = GemmRsEngine::kOwnerTiles, const std::string& kernel = "") {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", m " + std::to_string(m));
  std::mt19937_64 rng(seed);
  const size_t buffer_bytes = GemmRs::buffer_rows(m, world_size) * n * 2;
  TestWorld env(world_size, 2 * buffer_bytes + (2 << 20), 4096);
  const World& world = env.world;
  GemmRsProblem p(env, m, n, k, rng);
  p.args.config.granularity = granularity;
  p.args.config.scatter = scatter;
  p.args.config.reducer = reducer;
  p.args.config.method = method;
  p.args.config.push_notify = push_notify;
  p.args.config.engine = engine;  // the owner-tile GEMM's knobs above are what these tests vary
  p.args.config.kernel = kernel;
  std::vector<DeviceBuffer> ref;
  for (int r = 0; r < world_size; ++r) ref.emplace_back(size_t(m) * n * 2, world.device(r));
  ASSERT_EQ(GemmRs::can_implement(world, env.heap, p.args), "");
  GemmRs op(world, env.heap, env.signals, p.args, "gemm_rs_test");
  if (engine != GemmRsEngine::kAuto) EXPECT_EQ(op.engine(), engine);
  if (!kernel.empty()) {
    EXPECT_EQ(op.engine(), GemmRsEngine::kOwnerTiles) << "a named kernel is owner_tiles'";
    EXPECT_EQ(op.plan().bn, 128u) << kernel << ": the named (non-default) bf16 tiles are 128 wide";
  }
  EXPECT_EQ(op.kernel_name(), kernel.empty() ? GemmRs::kernel_name(DType::kBf16) : kernel);
  if (method != OpMethod::kAuto) {
    EXPECT_EQ(op.method(), method);
  } else {
    EXPECT_NE(op.method_why(), "") << "auto must say why it ran " << to_string(op.method());
  }
  cublasHandle_t cublas = nullptr;
  TL_CUBLAS_CHECK(cublasCreate(&cublas));

  std::vector<std::vector<uint16_t>> previous(world_size);
  for (int call = 1; call <= 2 + repeats; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const bool repeat = call > 2;  // same inputs as call 2: bit-identical output
    settle();
    if (!repeat && call > 1) {  // the problem's constructor drew call 1's inputs
      for (int r = 0; r < world_size; ++r) {
        upload(p.a[r].get(), random_bf16(size_t(m) * k, rng).data(), p.a[r].bytes());
        upload(p.b[r].get(), random_bf16(size_t(n) * k, rng).data(), p.b[r].bytes());
      }
    }
    for (int r = 0; r < world_size; ++r) {
      TL_CUDA_CHECK(cudaMemset(p.out[r].get(), 0xFF, p.out[r].bytes()));
      TL_CUDA_CHECK(cudaMemset(p.partial.data(r), 0xFF, buffer_bytes));
      TL_CUDA_CHECK(cudaMemset(p.recv.data(r), 0xFF, buffer_bytes));
    }
    settle();
    op.run();
    world.synchronize();

    if (repeat) {
      for (int q = 0; q < world_size; ++q) {
        const auto got = download<__nv_bfloat16>(p.out[q].get(), previous[q].size());
        std::vector<uint16_t> bits(previous[q].size());
        std::memcpy(bits.data(), got.data(), bits.size() * 2);
        ASSERT_EQ(bits, previous[q]) << "owner " << q << ": same inputs, different bits";
      }
      continue;
    }
    // Reference: every rank's bf16 partial by cuBLAS, summed over ranks in order in fp32.
    previous = expect_rank_order_sum(cublas, world, p.a, p.b, p.out, ref, m, n, k);
    if (::testing::Test::HasFailure()) break;
  }
  TL_CUBLAS_CHECK(cublasDestroy(cublas));
}

class GemmRsTest : public ::testing::TestWithParam<std::tuple<int, SignalGranularity, GemmRsScatter>> {};

// 256 rows per owner (whole tile rows), N and K off the tile; 100 repeated calls.
TEST_P(GemmRsTest, MatchesCublasPartialsSummedInRankOrder) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, granularity, scatter] = GetParam();
  check_gemm_rs(world_size, 256 * uint32_t(world_size), 264, 200, granularity, scatter, 100);
}

// Any M: owner blocks that end in a partial tile row (M / P = 1, 7, 136, 300), M not a multiple
// of the world (short last blocks) and M < world (owners with no rows), every scatter variant.
class GemmRsAnyMTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsAnyMTest, MatchesCublasAtAnyRowCount) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint32_t w = uint32_t(world_size);
  const SignalGranularity granularity =
      scatter == GemmRsScatter::kCopyEngine ? SignalGranularity::kTileRow : SignalGranularity::kTile;
  for (uint32_t m : {1u, 2u, 7u, 7u * w, 136u * w, 300u * w + (w > 1 ? w - 1 : 0), 129u, 500u}) {
    check_gemm_rs(world_size, m, 264, 200, granularity, scatter, 3);
    if (::testing::Test::HasFailure()) return;
  }
  // Whole-block signals at a partial tile row.
  if (scatter != GemmRsScatter::kEpiloguePush) {
    check_gemm_rs(world_size, 136u * w + 1, 264, 200, SignalGranularity::kRank, scatter, 3);
  }
}

// The epilogue reducer: the GEMM's own CTAs sum each own tile after its epilogue (no reduction
// CTAs); a signal per tile, pull or push; whole tile rows and any M; the same bits over calls.
class GemmRsEpilogueReducerTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsEpilogueReducerTest, MatchesCublasWhenTheGemmSums) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint32_t w = uint32_t(world_size);
  for (uint32_t m : {256u * w, 1u, 7u * w, 136u * w + (w > 1 ? 1u : 0u), 500u}) {
    check_gemm_rs(world_size, m, 264, 200, SignalGranularity::kTile, scatter, 5, GemmRsReducer::kEpilogue);
    if (::testing::Test::HasFailure()) return;
  }
}

// The push's notify (GemmRsPushNotify): deferred (the default everywhere above: each pushed tile
// announced at its CTA's next tile or after its last) and immediate (the CTA waits for the store
// to land), with the reduction blocks and the epilogue reducer, whole and partial tile rows, M <
// world; a missing or early notify shows as a timeout or as poison in the output.
class GemmRsPushNotifyTest : public ::testing::TestWithParam<std::tuple<int, GemmRsPushNotify>> {};

TEST_P(GemmRsPushNotifyTest, MatchesCublasWithEitherNotify) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, notify] = GetParam();
  const uint32_t w = uint32_t(world_size);
  for (GemmRsReducer reducer : {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue}) {
    for (uint32_t m : {256u * w, 1u, 136u * w + (w > 1 ? 1u : 0u)}) {
      SCOPED_TRACE(std::string("reducer ") + to_string(reducer));
      check_gemm_rs(world_size, m, 264, 200, SignalGranularity::kTile, GemmRsScatter::kEpiloguePush, 5, reducer,
                    OpMethod::kAuto, notify);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// The shape a review found deadlocking before the cluster rule (GemmRsFusedPlan::may_defer_notify):
// one tile row per owner, so a 2x1 cluster computes [a peer's row, its own row] together, and more
// column tiles than clusters, so work follows that pair. With the epilogue reducer and the
// deferred notify the peer's tile must be announced at once (a timeout names the wait otherwise).
TEST(GemmRsPushNotify, AClusterWithAnOwnTileRowAnnouncesAtOnce) {
  TL_SKIP_WITHOUT_GPU();
  for (int world_size : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world_size));
    check_gemm_rs(world_size, 128u * uint32_t(world_size), 40 * 256, 200, SignalGranularity::kTile,
                  GemmRsScatter::kEpiloguePush, 2, GemmRsReducer::kEpilogue, OpMethod::kAuto,
                  GemmRsPushNotify::kDeferred);
    if (::testing::Test::HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsPushNotifyTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(GemmRsPushNotify::kDeferred,
                                                              GemmRsPushNotify::kImmediate)),
                         [](const ::testing::TestParamInfo<GemmRsPushNotifyTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// A GEMM kernel by name (GemmRsConfig::kernel): every bf16 configuration but the default (the
// 128x128 tile: twice the default's tiles and signals), with each scatter and reducer, whole and
// partial tile rows, M < world; the same bits over calls.
class GemmRsKernelTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsKernelTest, MatchesCublasWithTheNamedTile) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint32_t w = uint32_t(world_size);
  const SignalGranularity granularity =
      scatter == GemmRsScatter::kCopyEngine ? SignalGranularity::kTileRow : SignalGranularity::kTile;
  int named = 0;
  for (const std::string& kernel : GemmRs::kernel_names()) {
    if (kernel == GemmRs::kernel_name(DType::kBf16) || kernel.rfind("e4m3_", 0) == 0) continue;
    SCOPED_TRACE("kernel " + kernel);
    ++named;
    for (uint32_t m : {256u * w, 1u, 136u * w + (w > 1 ? 1u : 0u)}) {
      check_gemm_rs(world_size, m, 264, 200, granularity, scatter, 3, GemmRsReducer::kAuto, OpMethod::kAuto,
                    GemmRsPushNotify::kDeferred, GemmRsEngine::kOwnerTiles, kernel);
      if (::testing::Test::HasFailure()) return;
      if (scatter != GemmRsScatter::kCopyEngine) {
        check_gemm_rs(world_size, m, 264, 200, granularity, scatter, 3, GemmRsReducer::kEpilogue, OpMethod::kAuto,
                      GemmRsPushNotify::kDeferred, GemmRsEngine::kOwnerTiles, kernel);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  EXPECT_GE(named, 1) << "the 128x128 configuration is compiled";
  // With engine auto at decode's M (where the small-M engine would win), the name keeps owner_tiles.
  check_gemm_rs(world_size, 1, 264, 200, granularity, scatter, 1, GemmRsReducer::kAuto, OpMethod::kAuto,
                GemmRsPushNotify::kDeferred, GemmRsEngine::kAuto, "128x128x64_c2x1");
}

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsKernelTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 8),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush,
                                                              GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsKernelTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// The non-overlapped method (issue 21): the GEMM on every SM, then the reduction with every SM on
// the compute stream; every scatter, any M, the same bits over calls.
class GemmRsNonOverlappedTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsNonOverlappedTest, MatchesCublasAfterTheWholeGemm) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint32_t w = uint32_t(world_size);
  const SignalGranularity granularity =
      scatter == GemmRsScatter::kCopyEngine ? SignalGranularity::kTileRow : SignalGranularity::kTile;
  for (uint32_t m : {256u * w, 7u * w, 136u * w + (w > 1 ? 1u : 0u)}) {
    check_gemm_rs(world_size, m, 264, 200, granularity, scatter, 3, GemmRsReducer::kAuto, OpMethod::kNonOverlapped);
    if (::testing::Test::HasFailure()) return;
  }
}

// The decomposed method (issue 21, async-TP's chain): a plain GEMM per owner block on every SM,
// own block last, each peer block copied into its owner's recv by the copy engine once done, then
// the reduction; whatever the fused knobs say (they do not apply), any M, the same bits over calls.
class GemmRsDecomposedTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsDecomposedTest, MatchesCublasBlockByBlock) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint32_t w = uint32_t(world_size);
  for (uint32_t m : {256u * w, 1u, 7u * w, 136u * w + (w > 1 ? 1u : 0u)}) {
    check_gemm_rs(world_size, m, 264, 200, SignalGranularity::kTile, scatter, 3, GemmRsReducer::kAuto,
                  OpMethod::kDecomposed);
    if (::testing::Test::HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsDecomposedTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsDecomposedTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsNonOverlappedTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush,
                                                              GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsNonOverlappedTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsEpilogueReducerTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush)),
                         [](const ::testing::TestParamInfo<GemmRsEpilogueReducerTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsAnyMTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush,
                                                              GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsAnyMTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

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
  good.config.engine = GemmRsEngine::kOwnerTiles;  // its checks (the small-M engine's: test_gemm_rs_small_m.cu)
  ASSERT_EQ(GemmRs::can_implement(env.world, env.heap, good), "");
  using A = GemmRsArguments;
  const auto copy_engine = [](A& a, SignalGranularity granularity) {
    a.config.scatter = GemmRsScatter::kCopyEngine;
    a.config.granularity = granularity;
  };
  expect_refusals<GemmRs>(env, good, {
      {[](A& a) { a.m = 0; }, "'m' = 0"},
      {[](A& a) { a.n = 260; }, "'n' = 260"},
      {[](A& a) { a.k = 100; }, "'k' = 100"},
      {[](A& a) { a.out[1] = nullptr; }, "'out[1]' = nullptr"},
      {[](A& a) { a.m = 1024; }, "'partial' holds"},  // partial holds 512 x 256
      {[](A& a) { a.m = 513; }, "'partial' holds"},   // 2 blocks of 257 rows: more than 512 x 256
      // The copy engine's receive buffer is missing.
      {[&](A& a) { copy_engine(a, SignalGranularity::kTileRow); }, "'recv'"},
      // With it, the copy engine moves whole tile rows, not tiles.
      {[&](A& a) {
         copy_engine(a, SignalGranularity::kTile);
         a.recv = &recv;
       },
       "'config.granularity' = tile"},
      {[](A& a) { a.config.granularity = static_cast<SignalGranularity>(3); }, "'config.granularity' = 3"},
      // The epilogue reducer sums per tile, with no reduction CTAs.
      {[](A& a) {
         a.config.reducer = GemmRsReducer::kEpilogue;
         a.config.granularity = SignalGranularity::kTileRow;
       },
       "'config.granularity' = row with config.reducer = epilogue"},
      {[](A& a) {
         a.config.reducer = GemmRsReducer::kEpilogue;
         a.config.reduce_blocks = 4;
       },
       "'config.reduce_blocks' = 4 with config.reducer = epilogue"},
      {[](A& a) { a.config.reducer = static_cast<GemmRsReducer>(5); }, "'config.reducer' = 5"},
      {[](A& a) { a.config.push_notify = static_cast<GemmRsPushNotify>(2); }, "'config.push_notify' = 2"},
      // The methods: decomposed copies into recv, and the non-fused ones sum after the GEMM, not in it.
      {[](A& a) { a.config.method = OpMethod::kDecomposed; }, "argument 'recv' is null: the decomposed method"},
      {[](A& a) {
         a.config.method = OpMethod::kDecomposed;
         a.config.reducer = GemmRsReducer::kEpilogue;
       },
       "'config.method' = decomposed with config.reducer = epilogue"},
      {[](A& a) {
         a.config.method = OpMethod::kNonOverlapped;
         a.config.reducer = GemmRsReducer::kEpilogue;
       },
       "'config.method' = non_overlapped with config.reducer = epilogue"},
      {[](A& a) { a.config.method = static_cast<OpMethod>(9); }, "'config.method' = 9"},
      // A kernel by name: one that is not compiled, one for other operands, one with the small-M engine.
      {[](A& a) { a.config.kernel = "64x64x64_c1x1"; }, "'config.kernel' = '64x64x64_c1x1': expected one of '128x256x64_c2x1'"},
      {[](A& a) { a.config.kernel = "e4m3_row_128x128x128_c2x1"; },
       "'config.kernel' = 'e4m3_row_128x128x128_c2x1': an e4m3 row-scaled configuration; expected one for bf16"},
      {[](A& a) {
         a.config.kernel = "128x128x64_c2x1";
         a.config.engine = GemmRsEngine::kSmallM;
       },
       "'config.kernel' = '128x128x64_c2x1': names an owner_tiles GEMM, which the small_m engine does not run"},
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
  entry.gemm_rs.engine = GemmRsEngine::kOwnerTiles;
  cache.put(gemm_rs_tune_key(env.world, args), entry);

  GemmRsArguments plain_args = args;
  plain_args.config.use_tune_cache = false;
  plain_args.config.engine = GemmRsEngine::kOwnerTiles;
  GemmRs plain(env.world, env.heap, env.signals, plain_args, "tune_cache_test.plain");
  EXPECT_EQ(plain.tuned_from(), "");
  GemmRs tuned(env.world, env.heap, env.signals, args, "tune_cache_test.tuned");
  EXPECT_EQ(tuned.tuned_from(), path);
  GemmRsConfig want_tuned = entry.gemm_rs;
  want_tuned.reducer = GemmRsReducer::kBlocks;  // the path the op resolved: the copy engine's groups take the blocks
  EXPECT_EQ(describe(tuned.config()), describe(want_tuned));
  EXPECT_EQ(tuned.swizzle(), 2u);
  GemmRsArguments no_slots = args;
  no_slots.recv = nullptr;
  GemmRs fallback(env.world, env.heap, env.signals, no_slots, "tune_cache_test.fallback");
  EXPECT_EQ(fallback.tuned_from(), "") << "a cached configuration the op refuses was taken";
  if (fallback.engine() == GemmRsEngine::kOwnerTiles) {  // the engine is the estimate's here
    GemmRsConfig automatic;  // every knob automatic, the path resolved for virtual ranks: pull, blocks
    automatic.scatter = GemmRsScatter::kPull;
    automatic.reducer = GemmRsReducer::kBlocks;
    EXPECT_EQ(describe(fallback.config()), describe(automatic));
  } else {
    EXPECT_NE(fallback.engine_why().find("the estimate's faster"), std::string::npos) << fallback.engine_why();
  }

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
