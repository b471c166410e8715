// FP8 AG+GEMM (issue 22) on virtual ranks, every scaling mode, against a reference that
// dequantises the same e4m3 inputs on the host and multiplies them in fp32 (cuBLAS SGEMM).
//
// Inputs have realistic magnitudes: normal values, a few rows 50x larger and single outliers 200x
// (per-tensor scaling then loses the small values' precision -- the reference sees the same
// e4m3 values). The device quantisers are checked byte for byte against the CPU reference
// (tilelink/testing/fp8_reference.hpp); each call poisons every rank's C and its gathered buffer
// (0xFF: e4m3 NaN, and NaN scales) and makes fresh A shards; quantise on send is checked against
// quantising on the host, including the peers' rows each rank received.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ag_gemm_comms.hpp"
#include "cublas_ref.hpp"
#include "fp8_test_util.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/testing/fp8_reference.hpp"

namespace tilelink::test::ag_gemm_fp8 {

namespace tt = tilelink::testing;

struct Shape {
  const char* name;
  uint32_t m_per_rank, n, k, comm_rows;
};
// "tiles": multiples of the 128x128x128 tile; "odd": M, N and K are not (K a multiple of 16, of
// 128 for block scaling), 48-row communication tiles straddle GEMM tiles.
Shape shape_for(bool odd, Fp8Scaling s) {
  if (!odd) return {"tiles", 256, 512, 256, 0};
  return {"odd", 136, 264, s == Fp8Scaling::kBlock ? 384u : 400u, 48};
}

// c (bf16) against the fp32 reference: bf16 rounding of the output, plus the FP8 main loop's
// reduced-precision partial sums, relative to the sum of |terms| (abs_ref = |A| * |B|^T).
void expect_close(const void* c, const std::vector<float>& want, const std::vector<float>& abs_ref, uint32_t n,
                  const std::string& who) {
  const std::vector<__nv_bfloat16> got = download<__nv_bfloat16>(c, want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = 8e-3f * std::fabs(want[i]) + kFp8AccumulationTolerance * abs_ref[i] + 1e-3f;
    if (!(std::fabs(__bfloat162float(got[i]) - want[i]) <= tol) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << who << ": " << bad << " of " << got.size() << " elements off; first at row " << first / n
                     << " col " << first % n << ": got " << __bfloat162float(got[first]) << ", reference "
                     << want[first];
}

void check(int world_size, const AgComm& comm, Fp8Scaling scaling, bool odd, bool quantize_on_send,
           OpMethod method = OpMethod::kAuto, const std::string& kernel = "") {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Shape shape = shape_for(odd, scaling);
  const uint32_t m = shape.m_per_rank * world_size, n = shape.n, k = shape.k;
  const uint64_t pitch = fp8_row_pitch(k, scaling);
  const size_t a_bytes = size_t(m) * pitch, shard_bytes = size_t(shape.m_per_rank) * pitch;

  TestWorld env(world_size, a_bytes + (2 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer gathered = env.heap.allocate(a_bytes);
  CublasHandle cublas;

  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = shape.m_per_rank;
  args.n = n;
  args.k = k;
  args.dtype = DType::kE4m3;
  args.scaling = scaling;
  args.config.comm = {comm.resource, comm.method, comm.path, comm.order, shape.comm_rows, 0, 512};
  args.config.method = method;
  args.config.kernel = kernel;

  // B per rank: quantised on the device, checked against the CPU quantiser, dequantised for the
  // reference.
  std::vector<DeviceBuffer> b_bf16, b8, b_scale, c, b_ref, source;
  std::vector<std::vector<float>> b_deq;
  DeviceBuffer a_scale(16, world.device(0));
  for (int r = 0; r < world_size; ++r) {
    const std::vector<__nv_bfloat16> w = realistic_bf16(n, k, rng);
    b_bf16.emplace_back(w.size() * 2, world.device(r));
    upload(b_bf16[r].get(), w.data(), w.size() * 2);
    b8.emplace_back(size_t(n) * k, world.device(r));
    b_scale.emplace_back(fp8_b_scales(n, k, scaling) * 4 + 16, world.device(r));
    quantize_weight_e4m3(b_bf16[r].get(), n, k, scaling, b8[r].get(), b_scale[r].get<float>(), nullptr);
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    const tt::QuantizedWeight want = tt::quantize_weight(w, n, k, scaling);
    tt::QuantizedWeight got{download<uint8_t>(b8[r].get(), size_t(n) * k),
                            download<float>(b_scale[r].get(), fp8_b_scales(n, k, scaling))};
    ASSERT_EQ(got.scales, want.scales) << "rank " << r << ": quantize_weight_e4m3's scales";
    ASSERT_TRUE(bytes_equal(got.values, want.values)) << "rank " << r << ": quantize_weight_e4m3's values";
    b_deq.push_back(tt::dequantize_weight(got, n, k, scaling));
    b_ref.emplace_back(b_deq[r].size() * 4, world.device(r));
    upload(b_ref[r].get(), b_deq[r].data(), b_deq[r].size() * 4);
    c.emplace_back(size_t(m) * n * 2, world.device(r));
    source.emplace_back(size_t(shape.m_per_rank) * k * 2, world.device(r));
    args.b.push_back(b8[r].get());
    args.b_scale.push_back(b_scale[r].get<float>());
    args.c.push_back(c[r].get());
    if (scaling == Fp8Scaling::kTensor) args.a_scale.push_back(a_scale.get<float>());
    if (quantize_on_send) args.a_source.push_back(source[r].get());
  }
  ASSERT_EQ(AgGemm::can_implement(world, env.heap, args), "");
  AgGemm op(world, env.heap, env.signals, args, "ag_gemm_fp8_test");
  EXPECT_EQ(op.row_bytes(), pitch);

  DeviceBuffer a_bf16(size_t(m) * k * 2, world.device(0)), a_packed(a_bytes, world.device(0));
  DeviceBuffer a_f32(size_t(m) * k * 4, world.device(0)), ref(size_t(m) * n * 4, world.device(0));
  DeviceBuffer abs_a(size_t(m) * k * 4, world.device(0)), abs_b(size_t(n) * k * 4, world.device(0));
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const std::vector<__nv_bfloat16> a_host = realistic_bf16(m, k, rng);
    upload(a_bf16.get(), a_host.data(), a_host.size() * 2);
    float tensor_scale = 1.0f;
    if (scaling == Fp8Scaling::kTensor) {
      tensor_scale_e4m3(a_bf16.get(), k, m, k, a_scale.get<float>(), nullptr);
      TL_CUDA_CHECK(cudaDeviceSynchronize());
      tensor_scale = download<float>(a_scale.get(), 1)[0];
      ASSERT_EQ(tensor_scale, e4m3_scale(tt::amax_of(a_host.data(), a_host.size()))) << "tensor_scale_e4m3";
    }
    // The packed rows, by the device quantiser and by the CPU reference: the same bytes.
    quantize_rows_e4m3(a_bf16.get(), k, m, k, scaling, a_scale.get<float>(), a_packed.get(), nullptr);
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> packed = tt::quantize_rows(a_host, m, k, scaling, tensor_scale);
    ASSERT_TRUE(bytes_equal(download<uint8_t>(a_packed.get(), a_bytes), packed))
        << "quantize_rows_e4m3 against the CPU reference";

    for (int r = 0; r < world_size; ++r) {
      char* g = static_cast<char*>(gathered.data(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, a_bytes));  // e4m3 NaN, NaN scales
      if (quantize_on_send) {
        upload(source[r].get(), a_host.data() + size_t(r) * shape.m_per_rank * k, size_t(shape.m_per_rank) * k * 2);
      } else {
        upload(g + r * shard_bytes, packed.data() + r * shard_bytes, shard_bytes);
      }
      TL_CUDA_CHECK(cudaMemset(c[r].get(), 0xFF, c[r].bytes()));
    }
    settle();
    op.run();
    world.synchronize();

    const std::vector<float> a_deq = tt::dequantize_rows(packed.data(), m, k, scaling, tensor_scale);
    upload(a_f32.get(), a_deq.data(), a_deq.size() * 4);
    const std::vector<float> a_abs = absolute(a_deq);
    upload(abs_a.get(), a_abs.data(), a_abs.size() * 4);
    for (int r = 0; r < world_size; ++r) {
      const std::string who = "rank " + std::to_string(r);
      if (quantize_on_send) {  // every rank's gathered rows: its own quantised, the peers' received
        ASSERT_TRUE(bytes_equal(download<uint8_t>(gathered.data(r), a_bytes), packed)) << who << ": gathered rows";
      }
      sgemm_reference(cublas.get(), a_f32.get<float>(), b_ref[r].get<float>(), ref.get<float>(), m, n, k);
      const std::vector<float> want = download<float>(ref.get(), size_t(m) * n);
      const std::vector<float> b_abs = absolute(b_deq[r]);
      upload(abs_b.get(), b_abs.data(), b_abs.size() * 4);
      sgemm_reference(cublas.get(), abs_a.get<float>(), abs_b.get<float>(), ref.get<float>(), m, n, k);
      expect_close(c[r].get(), want, download<float>(ref.get(), size_t(m) * n), n, who);
    }
  }
}

class AgGemmFp8Test : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling, AgComm, bool>> {};

TEST_P(AgGemmFp8Test, MatchesDequantisedReference) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scaling, comm, odd] = GetParam();
  check(world_size, comm, scaling, odd, false);
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmFp8Test,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                       ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(kAgComms[0], kAgComms[2], kAgComms[4]), ::testing::Bool()),
    [](const ::testing::TestParamInfo<AgGemmFp8Test::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             std::get<2>(info.param).name + (std::get<3>(info.param) ? "_odd" : "_tiles");
    });

class AgGemmFp8QuantizeOnSendTest : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling, AgComm, OpMethod>> {};

// The op quantises each rank's bf16 shard itself: the gathered rows on every rank equal the CPU
// quantiser's, and C the reference, on every method.
TEST_P(AgGemmFp8QuantizeOnSendTest, SendsTheHostQuantisedRows) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scaling, comm, method] = GetParam();
  check(world_size, comm, scaling, true, true, method);
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmFp8QuantizeOnSendTest,
    ::testing::Combine(::testing::Values(1, 3, 4), ::testing::Values(Fp8Scaling::kRow, Fp8Scaling::kBlock),
                       ::testing::Values(kAgComms[0], kAgComms[5]),
                       ::testing::Values(OpMethod::kFused, OpMethod::kDecomposed, OpMethod::kNonOverlapped)),
    [](const ::testing::TestParamInfo<AgGemmFp8QuantizeOnSendTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             std::get<2>(info.param).name + "_" + to_string(std::get<3>(info.param));
    });

class AgGemmFp8KernelTest : public ::testing::TestWithParam<std::tuple<int, Fp8Scaling>> {};

// Every compiled FP8 configuration of the scaling mode (the clustered ones too), both shapes.
TEST_P(AgGemmFp8KernelTest, EveryConfigurationMatchesTheReference) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scaling] = GetParam();
  const std::vector<std::string> kernels = AgGemm::kernel_names(DType::kE4m3, scaling);
  ASSERT_GE(kernels.size(), 2u);
  for (const std::string& kernel : kernels) {
    for (bool odd : {false, true}) {
      SCOPED_TRACE(kernel + (odd ? " odd" : " tiles"));
      check(world_size, kAgComms[2], scaling, odd, false, OpMethod::kFused, kernel);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmFp8KernelTest,
    ::testing::Combine(::testing::Values(1, 4),
                       ::testing::Values(Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock)),
    [](const ::testing::TestParamInfo<AgGemmFp8KernelTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
    });

// Bad FP8 input is refused by name before anything launches.
TEST(AgGemmFp8ArgumentsTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 8 << 20, 1024);
  const World& world = env.world;
  SymmetricBuffer gathered = env.heap.allocate(2 * 256 * fp8_row_pitch(256, Fp8Scaling::kRow));
  DeviceBuffer b(256 * 256, world.device(0)), c(512 * 256 * 2, world.device(0)), scales(4096, world.device(0));
  AgGemmArguments good;
  good.a = &gathered;
  good.m_per_rank = 256;
  good.n = 256;
  good.k = 256;
  good.dtype = DType::kE4m3;
  good.scaling = Fp8Scaling::kRow;
  good.b = {b.get(), b.get()};
  good.c = {c.get(), c.get()};
  good.b_scale = {scales.get<float>(), scales.get<float>()};
  ASSERT_EQ(AgGemm::can_implement(world, env.heap, good), "");

  using A = AgGemmArguments;
  float* sc = scales.get<float>();
  void* cp = c.get();
  expect_refusals<AgGemm>(
      env, good,
      {{[](A& a) { a.k = 200; }, "'k' = 200"},
       {[](A& a) { a.scaling = Fp8Scaling::kBlock; a.k = 192; }, "multiple of 128"},
       {[](A& a) { a.b_scale.clear(); }, "b_scale"},
       {[](A& a) { a.scaling = Fp8Scaling::kTensor; }, "a_scale"},
       {[sc](A& a) { a.a_scale = {sc, sc}; }, "'a_scale'"},
       {[sc, cp](A& a) {
          a.scaling = Fp8Scaling::kTensor;
          a.a_scale = {sc, sc};
          a.a_source = {cp, cp};
        },
        "a_source"},
       {[](A& a) { a.config.kernel = "128x256x64_c2x1"; }, "config.kernel"},
       {[](A& a) { a.dtype = static_cast<DType>(7); }, "'dtype' = 7"},
       {[](A& a) { a.m_per_rank = 512; }, "'a'"}});  // the gathered buffer is too small
  A bf16 = good;
  bf16.dtype = DType::kBf16;
  expect_refused<AgGemm>(env, bf16, "expected empty with dtype bf16");
}

}  // namespace tilelink::test::ag_gemm_fp8
