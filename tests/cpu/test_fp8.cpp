// FP8 operands (ops/common/fp8.hpp): the packed-row layout, the checks, and the CPU quantiser the
// GPU suite compares the device kernels with (tilelink/testing/fp8_reference.hpp) -- round trips
// within e4m3's precision, scales where the layout says, saturation, zero rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_policy.hpp"
#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/testing/fp8_reference.hpp"

namespace tilelink::test {
namespace {

namespace tt = tilelink::testing;

TEST(Fp8Layout, PackedRowsCarryTheirScalesAndStay16ByteAligned) {
  EXPECT_EQ(fp8_row_pitch(8192, Fp8Scaling::kTensor), 8192u);
  EXPECT_EQ(fp8_row_pitch(8192, Fp8Scaling::kRow), 8192u + 16);         // 1 scale, padded
  EXPECT_EQ(fp8_row_pitch(8192, Fp8Scaling::kBlock), 8192u + 64 * 4);   // 64 blocks of 128
  EXPECT_EQ(fp8_row_pitch(400, Fp8Scaling::kRow), 416u);
  EXPECT_EQ(fp8_row_pitch(384, Fp8Scaling::kBlock), 384u + 16);         // 3 scales, padded to 16
  for (uint32_t k : {16u, 48u, 128u, 400u, 28672u}) {
    for (Fp8Scaling s : {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock}) {
      EXPECT_EQ(fp8_row_pitch(k, s) % 16, 0u);
      EXPECT_GE(fp8_row_pitch(k, s), k + 4ull * fp8_row_scales(k, s));
    }
  }
  EXPECT_EQ(fp8_b_scales(264, 384, Fp8Scaling::kBlock), 3u * 3u);  // ceil(264 / 128) x 384 / 128
  EXPECT_EQ(fp8_b_scales(264, 384, Fp8Scaling::kRow), 264u);
  EXPECT_EQ(fp8_b_scales(264, 384, Fp8Scaling::kTensor), 1u);
  EXPECT_EQ(e4m3_scale(0.0f), 1.0f);
  EXPECT_EQ(e4m3_scale(448.0f), 1.0f);
}

TEST(Fp8Layout, ChecksNameTheArgument) {
  EXPECT_EQ(check_fp8_extents(400, Fp8Scaling::kRow), "");
  EXPECT_NE(check_fp8_extents(200, Fp8Scaling::kRow).find("'k' = 200"), std::string::npos);
  EXPECT_NE(check_fp8_extents(400, Fp8Scaling::kBlock).find("multiple of 128"), std::string::npos);
  EXPECT_NE(check_fp8_extents(128, static_cast<Fp8Scaling>(5)).find("'scaling' = 5"), std::string::npos);
}

std::vector<__nv_bfloat16> random_rows(uint32_t rows, uint32_t k, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<__nv_bfloat16> v(size_t(rows) * k);
  for (auto& x : v) x = __float2bfloat16(normal(rng));
  for (uint32_t i = 0; i < k; ++i) v[i] = __float2bfloat16(0.0f);  // row 0 all zero: scale 1, values 0
  v[size_t(1) * k + 5] = __float2bfloat16(1000.0f);                 // an outlier in row 1
  return v;
}

TEST(Fp8Reference, RowsRoundTripWithinE4m3PrecisionAndScalesSitInTheTail) {
  std::mt19937_64 rng(7);
  const uint32_t rows = 5, k = 384;
  const std::vector<__nv_bfloat16> x = random_rows(rows, k, rng);
  for (Fp8Scaling s : {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock}) {
    SCOPED_TRACE(to_string(s));
    const float tensor = e4m3_scale(tt::amax_of(x.data(), x.size()));
    const std::vector<uint8_t> packed = tt::quantize_rows(x, rows, k, s, tensor);
    ASSERT_EQ(packed.size(), rows * fp8_row_pitch(k, s));
    const std::vector<float> back = tt::dequantize_rows(packed.data(), rows, k, s, tensor);
    for (uint32_t r = 0; r < rows; ++r) {
      const uint8_t* row = packed.data() + r * fp8_row_pitch(k, s);
      for (uint32_t i = 0; i < k; ++i) {
        float scale = tensor;
        if (s != Fp8Scaling::kTensor) std::memcpy(&scale, row + k + 4 * (s == Fp8Scaling::kBlock ? i / 128 : 0), 4);
        const float v = __bfloat162float(x[size_t(r) * k + i]);
        // e4m3: 3 mantissa bits (relative step 2^-3, half of it when rounding); values far below
        // the scale fall to the subnormals' absolute step of 2^-9 * scale.
        EXPECT_LE(std::fabs(back[size_t(r) * k + i] - v), std::fabs(v) * 0.0625f + scale * 0.002f)
            << "row " << r << " col " << i;
      }
      for (uint64_t b = k + 4ull * fp8_row_scales(k, s); b < fp8_row_pitch(k, s); ++b) EXPECT_EQ(row[b], 0);
    }
    // The zero row: scale 1 (not 0: no division by zero), every value 0.
    if (s != Fp8Scaling::kTensor) {
      float scale0 = 0;
      std::memcpy(&scale0, packed.data() + k, 4);
      EXPECT_EQ(scale0, 1.0f);
    }
    for (uint32_t i = 0; i < k; ++i) EXPECT_EQ(back[i], 0.0f);
  }
}

TEST(Fp8Reference, TensorScalingSaturatesBeyondTheScale) {
  std::vector<__nv_bfloat16> x(16, __float2bfloat16(1.0f));
  x[3] = __float2bfloat16(-5000.0f);
  const std::vector<uint8_t> packed = tt::quantize_rows(x, 1, 16, Fp8Scaling::kTensor, 1.0f);
  EXPECT_EQ(tt::from_e4m3(packed[3]), -448.0f);  // satfinite, not NaN
  EXPECT_EQ(tt::from_e4m3(packed[0]), 1.0f);
}

TEST(Fp8Reference, WeightScalesFollowTheirBlocks) {
  std::mt19937_64 rng(11);
  const uint32_t n = 264, k = 256;
  std::vector<__nv_bfloat16> w(size_t(n) * k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : w) v = __float2bfloat16(normal(rng));
  w[size_t(200) * k + 130] = __float2bfloat16(64.0f);  // block (1, 1) only
  const tt::QuantizedWeight q = tt::quantize_weight(w, n, k, Fp8Scaling::kBlock);
  ASSERT_EQ(q.scales.size(), 3u * 2u);
  EXPECT_EQ(q.scales[1 * 2 + 1], 64.0f / 448.0f);
  EXPECT_LT(q.scales[0], 64.0f / 448.0f);
  const std::vector<float> back = tt::dequantize_weight(q, n, k, Fp8Scaling::kBlock);
  EXPECT_EQ(back[size_t(200) * k + 130], 64.0f);
  const tt::QuantizedWeight rows = tt::quantize_weight(w, n, k, Fp8Scaling::kRow);
  EXPECT_EQ(rows.scales[200], 64.0f / 448.0f);
}

TEST(Fp8Policy, FP8RowsMoveFewerBytesAndTheGemmRunsAtTheFp8Rate) {
  ag_gemm_policy::MethodShape bf16;
  bf16.world = 8;
  bf16.m_per_rank = 1024;
  bf16.n = 3584;
  bf16.k = 8192;
  ag_gemm_policy::MethodShape fp8 = bf16;
  fp8.row_bytes = fp8_row_pitch(8192, Fp8Scaling::kBlock);
  fp8.fp8 = true;
  const auto e16 = ag_gemm_policy::estimate_methods(bf16), e8 = ag_gemm_policy::estimate_methods(fp8);
  EXPECT_LT(e8.non_overlapped, e16.non_overlapped);
  EXPECT_LT(e8.fused, e16.fused);
  // The copy engine's automatic tile is sized in bytes: packed FP8 rows are about half of bf16's.
  EXPECT_EQ(all_gather_policy::auto_comm_rows_bytes(CommResource::kCopyEngine, 2048, 8192 + 256), 1024u);
  EXPECT_EQ(all_gather_policy::auto_comm_rows(CommResource::kCopyEngine, 2048, 8192), 512u);
}

}  // namespace
}  // namespace tilelink::test
