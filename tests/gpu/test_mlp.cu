// The fused tensor-parallel MLP (AG+GEMM -> SwiGLU / GELU -> GEMM+RS) on virtual ranks (world 1,
// 2, 4, 8; 128 or 61 tokens per rank) against an independent chain: cuBLAS fc1 on the gathered tokens, the activation on the
// host in fp32, cuBLAS fc2 partials, summed over ranks in rank order in fp32. Each case makes two
// calls with fresh random tokens (outputs poisoned, the peers' rows of the gathered tokens NaN);
// the activation is also checked element by element against the host on the op's own fc1 output.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "host_ref.hpp"
#include "tilelink/core/cublas_check.hpp"
#include "tilelink/ops/mlp/mlp.hpp"

namespace tilelink::test::mlp {

// (world, activation, fc2 scatter, rows per rank: 128 whole tile rows, 61 a partial one; the tokens
// handed over in place in `x`, or by x_source from a buffer of their own, alternating call by call).
class MlpTest : public ::testing::TestWithParam<std::tuple<int, MlpActivation, GemmRsScatter, uint32_t, bool>> {};

TEST_P(MlpTest, MatchesCublasChainWithHostActivation) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, act, scatter, kRowsPerRank, from_source] = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const uint32_t w = static_cast<uint32_t>(world_size);
  constexpr uint32_t kHidden = 200, kInterPerRank = 136;
  const uint32_t m = kRowsPerRank * w, inter = kInterPerRank * w;
  const uint32_t fc1_cols = act == MlpActivation::kSwiGlu ? 2 * kInterPerRank : kInterPerRank;
  const size_t x_bytes = size_t(m) * kHidden * 2, shard_bytes = size_t(kRowsPerRank) * kHidden * 2;
  const size_t out_elems = size_t(kRowsPerRank) * kHidden;

  TestWorld env(world_size, 3 * x_bytes + (4 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer x = env.heap.allocate(x_bytes);
  SymmetricBuffer partial = env.heap.allocate(x_bytes);  // M x hidden, like x
  SymmetricBuffer recv = env.heap.allocate(x_bytes);
  std::vector<DeviceBuffer> w1, w2, out;
  std::vector<DeviceBuffer> sources[2];  // from_source: per rank, its tokens' two alternating homes
  MlpArguments args;
  args.x = &x;
  args.partial = &partial;
  args.recv = &recv;
  args.m = m;
  args.hidden = kHidden;
  args.intermediate = inter;
  args.config.activation = act;
  args.config.fc2.scatter = scatter;
  if (scatter == GemmRsScatter::kCopyEngine) args.config.fc2.granularity = SignalGranularity::kTileRow;
  std::vector<std::vector<__nv_bfloat16>> w1_host(w), w2_host(w);
  for (uint32_t r = 0; r < w; ++r) {
    w1.emplace_back(size_t(fc1_cols) * kHidden * 2, world.device(int(r)));
    w2.emplace_back(size_t(kHidden) * kInterPerRank * 2, world.device(int(r)));
    out.emplace_back(out_elems * 2, world.device(int(r)));
    w1_host[r] = random_bf16(size_t(fc1_cols) * kHidden, rng);
    w2_host[r] = random_bf16(size_t(kHidden) * kInterPerRank, rng);
    upload(w1[r].get(), w1_host[r].data(), w1[r].bytes());
    upload(w2[r].get(), w2_host[r].data(), w2[r].bytes());
    args.w1.push_back(w1[r].get());
    args.w2.push_back(w2[r].get());
    args.out.push_back(out[r].get());
    if (from_source) {
      for (auto& home : sources) home.emplace_back(shard_bytes, world.device(int(r)));
      args.x_source.push_back(sources[0][r].get());
    }
  }
  ASSERT_EQ(Mlp::can_implement(world, env.heap, args), "");
  Mlp op(world, env.heap, env.signals, args, "mlp_test");
  cublasHandle_t cublas = nullptr;
  TL_CUBLAS_CHECK(cublasCreate(&cublas));
  DeviceBuffer x_full(x_bytes, world.device(0)), y_ref(size_t(m) * fc1_cols * 2, world.device(0));
  DeviceBuffer h_ref(size_t(m) * kInterPerRank * 2, world.device(0)), p_ref(x_bytes, world.device(0));

  for (int call = 1; call <= 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    settle();
    const std::vector<__nv_bfloat16> x_host = random_bf16(size_t(m) * kHidden, rng);
    upload(x_full.get(), x_host.data(), x_bytes);
    for (uint32_t r = 0; r < w; ++r) {
      char* g = x.as<char>(int(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, x_bytes));  // peers' rows NaN until gathered
      const char* shard = reinterpret_cast<const char*>(x_host.data()) + r * shard_bytes;
      if (from_source) {  // the own rows NaN too: fc1's all-gather copies them in
        TL_CUDA_CHECK(cudaMemset(sources[(call + 1) % 2][r].get(), 0xFF, shard_bytes));
        upload(sources[call % 2][r].get(), shard, shard_bytes);
        op.set_operands(int(r), w1[r].get(), w2[r].get(), out[r].get(), sources[call % 2][r].get());
      } else {
        upload(g + r * shard_bytes, shard, shard_bytes);
      }
      TL_CUDA_CHECK(cudaMemset(out[r].get(), 0xFF, out[r].bytes()));
    }
    settle();
    op.run();
    world.synchronize();

    std::vector<std::vector<float>> partials(w);
    for (uint32_t r = 0; r < w; ++r) {
      // The activation kernel, on the op's own fc1 output.
      const auto y_op = download<__nv_bfloat16>(op.fc1_out(int(r)), size_t(m) * fc1_cols);
      const auto h_op = download<__nv_bfloat16>(op.activation_out(int(r)), size_t(m) * kInterPerRank);
      size_t act_bad = 0;
      for (size_t row = 0; row < m; ++row) {
        for (size_t c = 0; c < kInterPerRank; ++c) {
          const float g = __bfloat162float(y_op[row * fc1_cols + c]);
          const float u = act == MlpActivation::kSwiGlu ? __bfloat162float(y_op[row * fc1_cols + kInterPerRank + c]) : 0.f;
          const float want = host_activation(act, g, u);
          const float got = __bfloat162float(h_op[row * kInterPerRank + c]);
          if (!(std::fabs(got - want) <= 1e-2f * std::fabs(want) + 1e-3f)) ++act_bad;
        }
      }
      EXPECT_EQ(act_bad, 0u) << "rank " << r << ": activation differs from the host's";

      // The independent chain: cuBLAS fc1 on all tokens, host activation, cuBLAS fc2.
      cublas_reference_bf16(cublas, x_full.get(), w1[r].get(), y_ref.get(), m, fc1_cols, kHidden);
      const auto y = download<__nv_bfloat16>(y_ref.get(), size_t(m) * fc1_cols);
      std::vector<__nv_bfloat16> h(size_t(m) * kInterPerRank);
      for (size_t row = 0; row < m; ++row) {
        for (size_t c = 0; c < kInterPerRank; ++c) {
          const float g = __bfloat162float(y[row * fc1_cols + c]);
          const float u = act == MlpActivation::kSwiGlu ? __bfloat162float(y[row * fc1_cols + kInterPerRank + c]) : 0.f;
          h[row * kInterPerRank + c] = __float2bfloat16(host_activation(act, g, u));
        }
      }
      upload(h_ref.get(), h.data(), h_ref.bytes());
      cublas_reference_bf16(cublas, h_ref.get(), w2[r].get(), p_ref.get(), m, kHidden, kInterPerRank);
      const auto p = download<__nv_bfloat16>(p_ref.get(), size_t(m) * kHidden);
      partials[r].resize(p.size());
      for (size_t i = 0; i < p.size(); ++i) partials[r][i] = __bfloat162float(p[i]);
    }
    for (uint32_t q = 0; q < w; ++q) {
      const auto got = download<__nv_bfloat16>(out[q].get(), out_elems);
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < out_elems; ++i) {
        const size_t at = size_t(q) * out_elems + i;
        float want = 0.f, magnitude = 0.f;
        for (uint32_t s = 0; s < w; ++s) {
          want += partials[s][at];
          magnitude += std::fabs(partials[s][at]);
        }
        // bf16 roundings of fc1's output (propagated through the activation and fc2), of each
        // partial and of the sum.
        if (!(std::fabs(__bfloat162float(got[i]) - want) <= 2e-2f * magnitude + 2e-2f)) {
          if (bad++ == 0) first = i;
        }
      }
      EXPECT_EQ(bad, 0u) << "owner " << q << ": first bad element row " << first / kHidden << " col "
                         << first % kHidden;
    }
  }
  TL_CUBLAS_CHECK(cublasDestroy(cublas));
}

INSTANTIATE_TEST_SUITE_P(
    Mlp, MlpTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8), ::testing::Values(MlpActivation::kSwiGlu, MlpActivation::kGelu),
                       ::testing::Values(GemmRsScatter::kPull), ::testing::Values(128u, 61u), ::testing::Bool()),
    [](const ::testing::TestParamInfo<MlpTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             to_string(std::get<2>(info.param)) + "_rows" + std::to_string(std::get<3>(info.param)) +
             (std::get<4>(info.param) ? "_source" : "");
    });
// The other fc2 scatter variants, once each at world 4.
INSTANTIATE_TEST_SUITE_P(
    MlpScatter, MlpTest,
    ::testing::Combine(::testing::Values(4), ::testing::Values(MlpActivation::kSwiGlu),
                       ::testing::Values(GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine),
                       ::testing::Values(128u, 61u), ::testing::Values(false)),
    [](const ::testing::TestParamInfo<MlpTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             to_string(std::get<2>(info.param)) + "_rows" + std::to_string(std::get<3>(info.param)) +
             (std::get<4>(info.param) ? "_source" : "");
    });

TEST(MlpArgumentsTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 16 << 20, 1024);
  SymmetricBuffer x = env.heap.allocate(256 * 256 * 2);
  SymmetricBuffer partial = env.heap.allocate(256 * 256 * 2);
  DeviceBuffer buf(256 * 512 * 2, env.world.device(0));
  MlpArguments good;
  good.x = &x;
  good.partial = &partial;
  good.m = 256;
  good.hidden = 256;
  good.intermediate = 256;
  good.w1 = {buf.get(), buf.get()};
  good.w2 = {buf.get(), buf.get()};
  good.out = {buf.get(), buf.get()};
  ASSERT_EQ(Mlp::can_implement(env.world, env.heap, good), "");
  using A = MlpArguments;
  expect_refusals<Mlp>(env, good, {
      {[](A& a) { a.m = 255; }, "'m' = 255"},
      {[](A& a) { a.intermediate = 260; }, "'intermediate' = 260"},  // 130 per rank: not a multiple of 8
      {[](A& a) { a.w2[1] = nullptr; }, "'w2[1]' = nullptr"},
      {[](A& a) { a.hidden = 100; }, "fc1"},  // fc1's K and fc2's N
      {[](A& a) { a.partial = nullptr; }, "fc2"},
      {[](A& a) { a.config.activation = static_cast<MlpActivation>(7); }, "'config.activation' = 7"},
  });
  settle();
}

}  // namespace tilelink::test::mlp
