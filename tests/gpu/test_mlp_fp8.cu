// The FP8 tensor-parallel MLP (issue 22) on virtual ranks: fc1 an e4m3 AG+GEMM whose all-gather
// moves packed token rows (quantised on send for row and block scaling; written by the caller for
// tensor scaling), the activation in bf16, fc2 an e4m3 GEMM+RS that quantises the activation itself.
// Each stage is checked against a host reference on its own input, so that the references do not
// drift through the FP8 roundings:
//  - fc1's output against the dequantised tokens times the dequantised W1_r (cuBLAS SGEMM);
//  - the activation against the host's, on the op's fc1 output;
//  - the output against the op's activation quantised on the host (fp8_reference.hpp), times the
//    dequantised W2_r, rounded to bf16 per rank and summed in rank order.
// Inputs of realistic magnitudes (outlier rows), outputs poisoned, the peers' token rows NaN, two
// calls of fresh tokens; worlds 1, 2, 4, 8, every scaling mode, 128 and 61 (a partial tile) tokens
// per rank.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "fp8_test_util.hpp"
#include "gpu_test_util.hpp"
#include "host_ref.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/mlp/mlp.hpp"
#include "tilelink/testing/fp8_reference.hpp"

namespace tilelink::test::mlp_fp8 {

namespace tt = tilelink::testing;

// `got` (bf16) against `want` (fp32) with the FP8 GEMM's tolerance: bf16 rounding plus the
// reduced-precision partial sums relative to the sum of |terms| (`magnitude`).
size_t count_off(const std::vector<__nv_bfloat16>& got, const std::vector<float>& want,
                 const std::vector<float>& magnitude, size_t* first) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float tol = 8e-3f * std::fabs(want[i]) + kFp8AccumulationTolerance * magnitude[i] + 1e-3f;
    if (!(std::fabs(__bfloat162float(got[i]) - want[i]) <= tol) && bad++ == 0) *first = i;
  }
  return bad;
}

class MlpFp8Test : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling, MlpActivation, uint32_t>> {};

TEST_P(MlpFp8Test, EachStageMatchesItsDequantisedReference) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scaling, act, rows_per_rank] = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const uint32_t w = static_cast<uint32_t>(world_size);
  // K of both GEMMs (hidden for fc1, I/P for fc2): multiples of 16, of 128 with block scaling.
  const bool block = scaling == Fp8Scaling::kBlock;
  const uint32_t hidden = block ? 256 : 208, inter_local = block ? 128 : 144;
  const uint32_t m = rows_per_rank * w, inter = inter_local * w;
  const uint32_t fc1_cols = act == MlpActivation::kSwiGlu ? 2 * inter_local : inter_local;
  const uint64_t pitch = fp8_row_pitch(hidden, scaling);
  const size_t x_bytes = size_t(m) * pitch, shard_bytes = size_t(rows_per_rank) * pitch;
  const size_t out_elems = size_t(rows_per_rank) * hidden, partial_bytes = size_t(m) * hidden * 2;

  TestWorld env(world_size, x_bytes + 2 * partial_bytes + (4 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer x = env.heap.allocate(x_bytes);
  SymmetricBuffer partial = env.heap.allocate(partial_bytes), recv = env.heap.allocate(partial_bytes);
  MlpArguments args;
  args.x = &x;
  args.partial = &partial;
  args.recv = &recv;
  args.m = m;
  args.hidden = hidden;
  args.intermediate = inter;
  args.config.activation = act;
  args.dtype = DType::kE4m3;
  args.scaling = scaling;
  std::vector<DeviceBuffer> w1, w2, w1_scale, w2_scale, out, source, x_scale;
  std::vector<std::vector<float>> w1_deq(w), w2_deq(w);
  auto quantized_weight = [&](uint32_t n, uint32_t k, int r, std::vector<DeviceBuffer>& values,
                              std::vector<DeviceBuffer>& scales, std::vector<float>& deq) {
    values.emplace_back(size_t(n) * k, world.device(r));
    scales.emplace_back(fp8_b_scales(n, k, scaling) * 4 + 16, world.device(r));
    deq = device_quantized_weight(realistic_bf16(n, k, rng), n, k, scaling, values.back(), scales.back(), world.device(r));
  };
  for (uint32_t r = 0; r < w; ++r) {
    const int dev = world.device(int(r));
    quantized_weight(fc1_cols, hidden, int(r), w1, w1_scale, w1_deq[r]);
    quantized_weight(hidden, inter_local, int(r), w2, w2_scale, w2_deq[r]);
    out.emplace_back(out_elems * 2, dev);
    source.emplace_back(size_t(rows_per_rank) * hidden * 2, dev);
    x_scale.emplace_back(16, dev);
    args.w1.push_back(w1[r].get());
    args.w2.push_back(w2[r].get());
    args.w1_scale.push_back(w1_scale[r].get<float>());
    args.w2_scale.push_back(w2_scale[r].get<float>());
    args.out.push_back(out[r].get());
    if (scaling == Fp8Scaling::kTensor) {
      args.x_scale.push_back(x_scale[r].get<float>());
    } else {
      args.x_source.push_back(source[r].get());
    }
  }
  ASSERT_EQ(Mlp::can_implement(world, env.heap, args), "");
  Mlp op(world, env.heap, env.signals, args, "mlp_fp8_test");
  CublasHandle cublas;

  for (int call = 1; call <= 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    settle();
    const std::vector<__nv_bfloat16> x_host = realistic_bf16(m, hidden, rng);
    const float x_tensor_scale =
        scaling == Fp8Scaling::kTensor ? e4m3_scale(tt::amax_of(x_host.data(), x_host.size())) : 1.0f;
    const std::vector<uint8_t> packed = tt::quantize_rows(x_host, m, hidden, scaling, x_tensor_scale);
    for (uint32_t r = 0; r < w; ++r) {
      char* g = x.as<char>(int(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, x_bytes));  // e4m3 NaN, NaN scales until gathered
      if (scaling == Fp8Scaling::kTensor) {
        upload(g + r * shard_bytes, packed.data() + r * shard_bytes, shard_bytes);
        upload(x_scale[r].get(), &x_tensor_scale, 4);
      } else {
        upload(source[r].get(), x_host.data() + size_t(r) * rows_per_rank * hidden, size_t(rows_per_rank) * hidden * 2);
      }
      TL_CUDA_CHECK(cudaMemset(out[r].get(), 0xFF, out[r].bytes()));
    }
    settle();
    op.run();
    world.synchronize();

    const std::vector<float> x_deq = tt::dequantize_rows(packed.data(), m, hidden, scaling, x_tensor_scale);
    std::vector<std::vector<float>> partials(w), magnitudes(w);
    for (uint32_t r = 0; r < w; ++r) {
      const std::string who = "rank " + std::to_string(r);
      if (scaling != Fp8Scaling::kTensor) {  // the rows every rank gathered: the host-quantised ones
        ASSERT_TRUE(bytes_equal(download<uint8_t>(x.data(int(r)), x_bytes), packed)) << who << ": gathered rows";
      }
      // fc1 against the dequantised reference.
      std::vector<float> y_want, y_mag;
      dequantised_product(cublas.get(), x_deq, w1_deq[r], m, fc1_cols, hidden, world.device(0), y_want, y_mag);
      const auto y_op = download<__nv_bfloat16>(op.fc1_out(int(r)), size_t(m) * fc1_cols);
      size_t first = 0;
      const size_t y_bad = count_off(y_op, y_want, y_mag, &first);
      EXPECT_EQ(y_bad, 0u) << who << ": fc1, first off at row " << first / fc1_cols << " col " << first % fc1_cols;
      // The activation, on the op's fc1 output.
      const auto h_op = download<__nv_bfloat16>(op.activation_out(int(r)), size_t(m) * inter_local);
      size_t act_bad = 0;
      for (size_t row = 0; row < m; ++row) {
        for (size_t c = 0; c < inter_local; ++c) {
          const float g = __bfloat162float(y_op[row * fc1_cols + c]);
          const float u = act == MlpActivation::kSwiGlu ? __bfloat162float(y_op[row * fc1_cols + inter_local + c]) : 0.f;
          const float want = host_activation(act, g, u);
          if (!(std::fabs(__bfloat162float(h_op[row * inter_local + c]) - want) <= 1e-2f * std::fabs(want) + 1e-3f)) {
            ++act_bad;
          }
        }
      }
      EXPECT_EQ(act_bad, 0u) << who << ": activation differs from the host's";
      // fc2's partial from the op's activation, quantised as fc2 quantises it.
      const float h_scale =
          scaling == Fp8Scaling::kTensor ? e4m3_scale(tt::amax_of(h_op.data(), h_op.size())) : 1.0f;
      const std::vector<uint8_t> h_packed = tt::quantize_rows(h_op, m, inter_local, scaling, h_scale);
      const std::vector<float> h_deq = tt::dequantize_rows(h_packed.data(), m, inter_local, scaling, h_scale);
      dequantised_product(cublas.get(), h_deq, w2_deq[r], m, hidden, inter_local, world.device(0), partials[r],
                          magnitudes[r]);
      for (float& v : partials[r]) v = __bfloat162float(__float2bfloat16(v));  // stored as bf16
    }
    for (uint32_t q = 0; q < w; ++q) {
      const auto got = download<__nv_bfloat16>(out[q].get(), out_elems);
      std::vector<float> want(out_elems, 0.0f), magnitude(out_elems, 0.0f);
      for (size_t i = 0; i < out_elems; ++i) {
        const size_t at = size_t(q) * out_elems + i;
        for (uint32_t s = 0; s < w; ++s) {
          want[i] += partials[s][at];
          // The terms' magnitude, and each partial's bf16 rounding (8e-3 of it once scaled).
          magnitude[i] += magnitudes[s][at] + std::fabs(partials[s][at]) * (8e-3f / kFp8AccumulationTolerance);
        }
      }
      size_t first = 0;
      const size_t bad = count_off(got, want, magnitude, &first);
      EXPECT_EQ(bad, 0u) << "owner " << q << ": first off at row " << first / hidden << " col " << first % hidden
                         << ": got " << __bfloat162float(got[first]) << ", reference " << want[first];
    }
    if (::testing::Test::HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Mlp, MlpFp8Test,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(MlpActivation::kSwiGlu), ::testing::Values(128u, 61u)),
    [](const auto& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             to_string(std::get<2>(info.param)) + "_rows" + std::to_string(std::get<3>(info.param));
    });
INSTANTIATE_TEST_SUITE_P(
    MlpGelu, MlpFp8Test,
    ::testing::Combine(::testing::Values(4), ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(MlpActivation::kGelu), ::testing::Values(61u)),
    [](const auto& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             to_string(std::get<2>(info.param)) + "_rows" + std::to_string(std::get<3>(info.param));
    });

// Bad FP8 input is refused by name, each GEMM's refusal prefixed with its stage.
TEST(MlpFp8ArgumentsTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 16 << 20, 1024);
  const uint32_t hidden = 256;
  SymmetricBuffer x = env.heap.allocate(256 * fp8_row_pitch(hidden, Fp8Scaling::kBlock));
  SymmetricBuffer partial = env.heap.allocate(256 * hidden * 2);
  DeviceBuffer buf(256 * 512 * 2, env.world.device(0)), scales(8192, env.world.device(0));
  MlpArguments good;
  good.x = &x;
  good.partial = &partial;
  good.m = 256;
  good.hidden = hidden;
  good.intermediate = 256;
  good.w1 = {buf.get(), buf.get()};
  good.w2 = {buf.get(), buf.get()};
  good.out = {buf.get(), buf.get()};
  good.dtype = DType::kE4m3;
  good.scaling = Fp8Scaling::kRow;
  good.w1_scale = {scales.get<float>(), scales.get<float>()};
  good.w2_scale = {scales.get<float>(), scales.get<float>()};
  good.x_source = {buf.get(), buf.get()};
  ASSERT_EQ(Mlp::can_implement(env.world, env.heap, good), "");
  using A = MlpArguments;
  float* sc = scales.get<float>();
  expect_refusals<Mlp>(env, good, {
      {[](A& a) { a.w1_scale.clear(); }, "fc1"},
      {[](A& a) { a.w2_scale.clear(); }, "fc2"},
      {[](A& a) { a.intermediate = 2 * 200; }, "fc2"},  // fc2's K = 200: not a multiple of 16
      {[](A& a) { a.scaling = Fp8Scaling::kBlock; a.intermediate = 2 * 192; }, "multiple of 128"},
      {[sc](A& a) {  // tensor scaling's one scale covers every shard: no quantise on send
         a.scaling = Fp8Scaling::kTensor;
         a.x_scale = {sc, sc};
       },
       "a_source"},
  });
  A bf16 = good;
  bf16.dtype = DType::kBf16;
  expect_refused<Mlp>(env, bf16, "expected empty with dtype bf16");
  settle();
}

}  // namespace tilelink::test::mlp_fp8
