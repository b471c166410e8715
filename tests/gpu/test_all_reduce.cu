// The standalone all-reduce (comm/all_reduce.hpp's protocol) on virtual ranks, worlds 1, 2, 3, 4, 8
// x one-shot / two-shot x ld/st / bulk, rows 1, 2, 7, 64, 129, 500 (chunks that do not divide the
// rows, fewer chunks than ranks): every rank's `out` bitwise equal to the host's fp32 sum in rank
// order 0..P-1, on fresh random partials each call, over a poisoned `out`.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/comm/collectives.hpp"

namespace tilelink::test::all_reduce {
namespace {

constexpr uint32_t kCols = 96;
constexpr uint32_t kRows[] = {1, 2, 7, 64, 129, 500};
constexpr int kWorlds[] = {1, 2, 3, 4, 8};

// The sum over ranks in rank order, as the op must compute it: acc = 0, then + partial of rank 0,
// 1, ..., P-1, each in fp32.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& partials) {
  std::vector<float> sum(partials[0].size(), 0.0f);
  for (const auto& p : partials) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
  }
  return sum;
}

class AllReduceTest : public ::testing::TestWithParam<std::tuple<int, AllReduceMethod, DataPath>> {};

TEST_P(AllReduceTest, SumsInRankOrderBitwiseOnEveryRank) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, method, path] = GetParam();
  TestWorld env(world_size, 16 << 20, 4096);
  const World& world = env.world;
  for (uint32_t rows : kRows) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const size_t elems = size_t(rows) * kCols, bytes = elems * sizeof(float);
    SymmetricBuffer partial = env.heap.allocate(bytes), out = env.heap.allocate(bytes);
    AllReduceArguments args;
    args.partial = &partial;
    args.out = &out;
    args.rows = rows;
    args.cols = kCols;
    args.config.method = method;
    args.config.path = path;
    ASSERT_EQ(AllReduce::can_implement(world, env.heap, args), "");
    AllReduce ar(world, env.heap, env.signals, args, "all_reduce_" + std::to_string(rows));
    const ArMethod expected_method = method == AllReduceMethod::kOneShot   ? ArMethod::kOneShot
                                     : method == AllReduceMethod::kTwoShot ? ArMethod::kTwoShot
                                                                           : AllReduce::auto_method(world_size, bytes);
    EXPECT_EQ(ar.plan().method, expected_method);
    for (uint32_t call = 1; call <= 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      std::vector<std::vector<float>> inputs(world_size);
      for (int r = 0; r < world_size; ++r) {
        inputs[r] = random_floats(elems, seed_of(40 + rows, r, call));
        upload(partial.data(r), inputs[r].data(), bytes);
        poison(out.data(r), bytes);
      }
      ASSERT_EQ(ar.run(), call);
      world.synchronize();
      const std::vector<float> want = rank_order_sum(inputs);
      std::vector<uint8_t> want_bytes(bytes);
      std::memcpy(want_bytes.data(), want.data(), bytes);
      for (int r = 0; r < world_size; ++r) {
        const std::vector<float> got = download<float>(out.data(r), elems);
        std::vector<uint8_t> got_bytes(bytes);
        std::memcpy(got_bytes.data(), got.data(), bytes);
        EXPECT_TRUE(bytes_equal(got_bytes, want_bytes)) << "rank " << r;
      }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<AllReduceTest::ParamType>& info) {
  const auto& [world_size, method, path] = info.param;
  return "world" + std::to_string(world_size) + "_" + to_string(method) + (path == DataPath::kLdSt ? "_ldst" : "_bulk");
}

INSTANTIATE_TEST_SUITE_P(Collectives, AllReduceTest,
                         ::testing::Combine(::testing::ValuesIn(kWorlds),
                                            ::testing::Values(AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot,
                                                              AllReduceMethod::kAuto),
                                            ::testing::Values(DataPath::kLdSt, DataPath::kBulk)),
                         case_name);

TEST(AllReduceArguments, RefusalsNameTheArgument) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 1 << 20, 256);
  SymmetricBuffer a = env.heap.allocate(64 * kCols * 4), b = env.heap.allocate(64 * kCols * 4);
  AllReduceArguments args;
  args.partial = &a;
  args.out = &b;
  args.rows = 64;
  args.cols = kCols;
  EXPECT_EQ(AllReduce::can_implement(env.world, env.heap, args), "");
  auto refusal = [&](AllReduceArguments x) { return AllReduce::can_implement(env.world, env.heap, x); };
  AllReduceArguments bad = args;
  bad.rows = 0;
  EXPECT_NE(refusal(bad).find("argument 'rows' = 0"), std::string::npos) << refusal(bad);
  bad = args;
  bad.cols = 6;
  EXPECT_NE(refusal(bad).find("argument 'cols' = 6"), std::string::npos) << refusal(bad);
  bad = args;
  bad.rows = 65;  // more than the buffers hold
  EXPECT_NE(refusal(bad).find("partial"), std::string::npos) << refusal(bad);
  bad = args;
  bad.out = &a;
  EXPECT_NE(refusal(bad).find("the same buffer"), std::string::npos) << refusal(bad);
  EXPECT_THROW(AllReduce(env.world, env.heap, env.signals, bad, "bad"), InvalidArgument);
}

}  // namespace
}  // namespace tilelink::test::all_reduce
