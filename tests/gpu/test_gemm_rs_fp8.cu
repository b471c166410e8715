// FP8 GEMM+RS (issue 22) on virtual ranks: e4m3 A and B with tensor, row and block scales, the
// bf16 partials reduced in rank order in fp32. The reference dequantises the same e4m3 inputs on
// the host, multiplies each rank's in fp32 (cuBLAS SGEMM), rounds each partial to bf16 as the op
// stores it, and sums the partials in rank order.
//
// Every case: an M that is not a multiple of the tile and owner blocks of uneven tile rows, N and
// K off the 128 grid (K a multiple of 128 for block scaling), inputs of realistic magnitudes with
// outlier rows (fp8_test_util.hpp), outputs, partials and receive slots poisoned before each call,
// fresh inputs on calls 1 and 2 and, on call 3, call 2's again: the same bits. Quantise-first
// (a_source) is checked against quantising on the host, the tensor scale included.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "fp8_test_util.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/testing/fp8_reference.hpp"

namespace tilelink::test::gemm_rs_fp8 {

namespace tt = tilelink::testing;

struct Case {
  int world;
  Fp8Scaling scaling;
  GemmRsScatter scatter = GemmRsScatter::kPull;
  bool source = false;  // the op quantises a bf16 A itself
  OpMethod method = OpMethod::kAuto;
  GemmRsReducer reducer = GemmRsReducer::kAuto;
};

std::string name_of(const Case& c) {
  return "world" + std::to_string(c.world) + "_" + to_string(c.scaling) + "_" + to_string(c.scatter) +
         (c.source ? "_source" : "") + (c.method != OpMethod::kAuto ? std::string("_") + to_string(c.method) : "") +
         (c.reducer == GemmRsReducer::kEpilogue ? "_epilogue" : "");
}

// Rounds to bf16 and back, as the op stores a partial.
float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

void check(const Case& c) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int P = c.world;
  const uint32_t m = 200 * uint32_t(P) + 9, n = 264, k = c.scaling == Fp8Scaling::kBlock ? 384u : 400u;
  const uint64_t pitch = fp8_row_pitch(k, c.scaling);
  const size_t buffer_bytes = GemmRs::buffer_rows(m, P) * n * 2;
  TestWorld env(P, 2 * buffer_bytes + (2 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer partial = env.heap.allocate(buffer_bytes), recv = env.heap.allocate(buffer_bytes);
  CublasHandle cublas;

  GemmRsArguments args;
  args.partial = &partial;
  args.recv = &recv;
  args.m = m;
  args.n = n;
  args.k = k;
  args.dtype = DType::kE4m3;
  args.scaling = c.scaling;
  args.config.scatter = c.scatter;
  args.config.granularity = c.scatter == GemmRsScatter::kCopyEngine ? SignalGranularity::kTileRow : SignalGranularity::kTile;
  args.config.method = c.method;
  args.config.reducer = c.reducer;
  std::vector<DeviceBuffer> a8, source, a_scale, b8, b_scale, out;
  for (int r = 0; r < P; ++r) {
    const int dev = world.device(r);
    a8.emplace_back(size_t(m) * pitch, dev);
    source.emplace_back(size_t(m) * k * 2, dev);
    a_scale.emplace_back(16, dev);
    b8.emplace_back(size_t(n) * k, dev);
    b_scale.emplace_back(fp8_b_scales(n, k, c.scaling) * 4 + 16, dev);
    out.emplace_back(GemmRs::buffer_rows(m, P) / uint32_t(P) * n * 2, dev);
    if (c.source) {
      args.a_source.push_back(source[r].get());
    } else {
      args.a.push_back(a8[r].get());
      if (c.scaling == Fp8Scaling::kTensor) args.a_scale.push_back(a_scale[r].get<float>());
    }
    args.b.push_back(b8[r].get());
    args.b_scale.push_back(b_scale[r].get<float>());
    args.out.push_back(out[r].get());
  }
  ASSERT_EQ(GemmRs::can_implement(world, env.heap, args), "");
  GemmRs op(world, env.heap, env.signals, args, "gemm_rs_fp8_test");
  if (c.method != OpMethod::kAuto) EXPECT_EQ(op.method(), c.method);
  EXPECT_EQ(op.kernel_name().rfind(std::string("e4m3_") + to_string(c.scaling), 0), 0u) << op.kernel_name();

  const uint32_t R = uint32_t(GemmRs::buffer_rows(m, P) / uint32_t(P));  // owner q's rows from q * R
  std::vector<std::vector<float>> partials(P), magnitude(P);  // per rank: bf16-rounded partial, |A| |B|^T
  std::vector<std::vector<uint16_t>> previous(P);
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const bool repeat = call == 3;  // call 2's inputs again: the same bits
    for (int r = 0; r < P && !repeat; ++r) {
      const std::vector<__nv_bfloat16> a_host = realistic_bf16(m, k, rng);
      const float tensor_scale =
          c.scaling == Fp8Scaling::kTensor ? e4m3_scale(tt::amax_of(a_host.data(), a_host.size())) : 1.0f;
      const std::vector<uint8_t> packed = tt::quantize_rows(a_host, m, k, c.scaling, tensor_scale);
      if (c.source) {
        upload(source[r].get(), a_host.data(), a_host.size() * 2);
      } else {
        upload(a8[r].get(), packed.data(), packed.size());
        upload(a_scale[r].get(), &tensor_scale, 4);
      }
      // The reference partial of rank r (rounded to bf16, as stored) and the magnitude of its terms.
      const std::vector<float> b_deq =
          device_quantized_weight(realistic_bf16(n, k, rng), n, k, c.scaling, b8[r], b_scale[r], world.device(r));
      dequantised_product(cublas.get(), tt::dequantize_rows(packed.data(), m, k, c.scaling, tensor_scale), b_deq, m, n,
                          k, world.device(0), partials[r], magnitude[r]);
      for (float& x : partials[r]) x = bf16_round(x);
    }
    for (int r = 0; r < P; ++r) {
      TL_CUDA_CHECK(cudaMemset(out[r].get(), 0xFF, out[r].bytes()));
      TL_CUDA_CHECK(cudaMemset(partial.data(r), 0xFF, buffer_bytes));
      TL_CUDA_CHECK(cudaMemset(recv.data(r), 0xFF, buffer_bytes));
    }
    settle();
    op.run();
    world.synchronize();

    for (int q = 0; q < P; ++q) {
      const std::string who = "owner " + std::to_string(q);
      const uint32_t rows = GemmRs::rows_of(m, P, q);
      const auto whole = download<__nv_bfloat16>(out[q].get(), out[q].bytes() / 2);
      std::vector<uint16_t> bits(size_t(rows) * n);
      std::memcpy(bits.data(), whole.data(), bits.size() * 2);
      size_t untouched = 0;
      for (size_t i = bits.size(); i < whole.size(); ++i) {
        uint16_t v;
        std::memcpy(&v, &whole[i], 2);
        untouched += v == 0xFFFF;
      }
      EXPECT_EQ(untouched, whole.size() - bits.size()) << who << ": written past its " << rows << " rows";
      if (repeat) {
        EXPECT_EQ(bits, previous[q]) << who << ": same inputs, different bits";
        continue;
      }
      size_t bad = 0, first = 0;
      float got_first = 0.0f, want_first = 0.0f;
      for (size_t i = 0; i < bits.size(); ++i) {
        const size_t at = size_t(q) * R * n + i;
        float want = 0.0f, tol = 1e-3f;
        for (int s = 0; s < P; ++s) {
          want += partials[s][at];
          tol += 8e-3f * std::fabs(partials[s][at]) + kFp8AccumulationTolerance * magnitude[s][at];
        }
        tol += 8e-3f * std::fabs(want);
        const float got = __bfloat162float(whole[i]);
        if (!(std::fabs(got - want) <= tol) && bad++ == 0) {
          first = i;
          got_first = got;
          want_first = want;
        }
      }
      EXPECT_EQ(bad, 0u) << who << ": " << bad << " of " << bits.size() << " elements off; first at row " << first / n
                         << " col " << first % n << ": got " << got_first << ", reference " << want_first;
      previous[q] = std::move(bits);
    }
    if (::testing::Test::HasFailure()) break;
  }
}

class GemmRsFp8Test : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling, GemmRsScatter>> {};

TEST_P(GemmRsFp8Test, MatchesDequantisedPartialsSummedInRankOrder) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world, scaling, scatter] = GetParam();
  check({world, scaling, scatter});
}

INSTANTIATE_TEST_SUITE_P(
    GemmRs, GemmRsFp8Test,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                       ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine)),
    [](const auto& info) {
      return name_of({std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param)});
    });

class GemmRsFp8QuantizeFirstTest : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling, OpMethod>> {};

// The op quantises each rank's bf16 A itself (tensor scaling: its own scale per rank) on every
// method: the result of the host-quantised rows.
TEST_P(GemmRsFp8QuantizeFirstTest, MatchesTheHostQuantisedRows) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world, scaling, method] = GetParam();
  check({world, scaling, GemmRsScatter::kPull, true, method});
}

INSTANTIATE_TEST_SUITE_P(
    GemmRs, GemmRsFp8QuantizeFirstTest,
    ::testing::Combine(::testing::Values(1, 3, 4),
                       ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(OpMethod::kFused, OpMethod::kDecomposed, OpMethod::kNonOverlapped)),
    [](const auto& info) {
      return name_of({std::get<0>(info.param), std::get<1>(info.param), GemmRsScatter::kPull, true,
                      std::get<2>(info.param)});
    });

class GemmRsFp8EpilogueReducerTest : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling, GemmRsScatter>> {};

// The GEMM's own CTAs sum the owner's tiles after the FP8 epilogue.
TEST_P(GemmRsFp8EpilogueReducerTest, MatchesWhenTheGemmSums) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world, scaling, scatter] = GetParam();
  check({world, scaling, scatter, false, OpMethod::kAuto, GemmRsReducer::kEpilogue});
}

INSTANTIATE_TEST_SUITE_P(
    GemmRs, GemmRsFp8EpilogueReducerTest,
    ::testing::Combine(::testing::Values(2, 4), ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush)),
    [](const auto& info) {
      return name_of({std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param), false,
                      OpMethod::kAuto, GemmRsReducer::kEpilogue});
    });

// Bad FP8 input is refused by name before anything launches.
TEST(GemmRsFp8ArgumentsTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 8 << 20, 1024);
  const World& world = env.world;
  const uint32_t m = 256, n = 256, k = 256;
  SymmetricBuffer partial = env.heap.allocate(GemmRs::buffer_rows(m, 2) * n * 2);
  DeviceBuffer a(size_t(m) * fp8_row_pitch(k, Fp8Scaling::kBlock), world.device(0)), b(size_t(n) * k, world.device(0));
  DeviceBuffer out(size_t(m) * n * 2, world.device(0)), scales(4096, world.device(0));
  GemmRsArguments good;
  good.partial = &partial;
  good.m = m;
  good.n = n;
  good.k = k;
  good.dtype = DType::kE4m3;
  good.scaling = Fp8Scaling::kRow;
  good.a = {a.get(), a.get()};
  good.b = {b.get(), b.get()};
  good.out = {out.get(), out.get()};
  good.b_scale = {scales.get<float>(), scales.get<float>()};
  ASSERT_EQ(GemmRs::can_implement(world, env.heap, good), "");
  GemmRsArguments tensor_source = good;
  tensor_source.scaling = Fp8Scaling::kTensor;
  tensor_source.a.clear();
  tensor_source.a_source = {out.get(), out.get()};
  EXPECT_EQ(GemmRs::can_implement(world, env.heap, tensor_source), "") << "tensor scaling with a_source";

  using A = GemmRsArguments;
  float* sc = scales.get<float>();
  void* op = out.get();
  expect_refusals<GemmRs>(
      env, good,
      {{[](A& a) { a.k = 200; }, "'k' = 200"},
       {[](A& a) { a.scaling = Fp8Scaling::kBlock; a.k = 192; }, "multiple of 128"},
       {[](A& a) { a.scaling = static_cast<Fp8Scaling>(4); }, "'scaling' = 4"},
       {[](A& a) { a.b_scale.clear(); }, "b_scale"},
       {[](A& a) { a.scaling = Fp8Scaling::kTensor; }, "a_scale"},
       {[sc](A& a) { a.a_scale = {sc, sc}; }, "'a_scale'"},
       {[op](A& a) { a.a_source = {op, op}; }, "argument 'a': expected empty with a_source"},
       {[op, sc](A& a) {
          a.scaling = Fp8Scaling::kTensor;
          a.a.clear();
          a.a_source = {op, op};
          a.a_scale = {sc, sc};
        },
        "the op computes each rank's scale"},
       {[](A& a) { a.dtype = static_cast<DType>(7); }, "'dtype' = 7"}});
  A bf16 = good;
  bf16.dtype = DType::kBf16;
  expect_refused<GemmRs>(env, bf16, "expected empty with dtype bf16");

  // set_operands of the other data type is refused by name.
  GemmRs fp8_op(world, env.heap, env.signals, good, "gemm_rs_fp8_args");
  EXPECT_THROW(fp8_op.set_operands(0, a.get(), b.get(), out.get()), InvalidArgument);
  EXPECT_THROW(fp8_op.set_operands(0, a.get(), sc, b.get(), sc, out.get()), InvalidArgument);  // row: no a_scale
  settle();
}

}  // namespace tilelink::test::gemm_rs_fp8
