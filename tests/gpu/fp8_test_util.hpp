// What the FP8 GPU tests share: inputs of realistic magnitudes and the fp32 reference GEMM the
// dequantised operands go through.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/core/cublas_check.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/testing/fp8_reference.hpp"

namespace tilelink::test {

// The FP8 GEMMs' accumulation error relative to the sum of their terms' magnitudes (|A| |B|^T):
// Hopper's FP8 WGMMA adds a promotion interval's products (CUTLASS: 4 MMAs of k = 32, 128
// products) in an accumulator of about 14 bits that truncates (DeepSeek-V3's measurement on the
// H800) before they reach the fp32 registers: at most 128 x 2^-14 = 7.8e-3 of those terms'
// magnitude. A factor of 2e-3 failed once on the H200 (2026-12-05): one element of a tensor-scaled
// call with 200x outliers, 3.5e-3 of its terms' magnitude off -- the truncation next to a large
// term, not a wrong tile (which is off by the order of the value itself).
constexpr float kFp8AccumulationTolerance = 8e-3f;

// Normal-ish values, some rows 50x, single elements 200x.
inline std::vector<__nv_bfloat16> realistic_bf16(uint32_t rows, uint32_t k, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> pick(0, 63);
  std::vector<__nv_bfloat16> v(size_t(rows) * k);
  for (uint32_t r = 0; r < rows; ++r) {
    const float row_scale = pick(rng) == 0 ? 50.0f : 1.0f;
    for (uint32_t i = 0; i < k; ++i) {
      float x = normal(rng) * row_scale;
      if (pick(rng) == 0 && pick(rng) < 8) x *= 200.0f;
      v[size_t(r) * k + i] = __float2bfloat16(x);
    }
  }
  return v;
}

// ref (M x N fp32) = A * B^T for fp32 row-major A (M x K) and B (N x K).
inline void sgemm_reference(cublasHandle_t h, const float* a, const float* b, float* ref, uint32_t m, uint32_t n, uint32_t k) {
  const float one = 1.0f, zero = 0.0f;
  TL_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                              static_cast<int>(k), &one, b, static_cast<int>(k), a, static_cast<int>(k), &zero, ref,
                              static_cast<int>(n)));
  TL_CUDA_CHECK(cudaDeviceSynchronize());
}

inline std::vector<float> absolute(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

// The FP8 tests' reference on host fp32 operands: ref = a * b^T (rows x n; a rows x k, b n x k) and
// the magnitude its tolerance scales with, |a| |b|^T, both by cuBLAS SGEMM on `device`.
inline void dequantised_product(cublasHandle_t h, const std::vector<float>& a, const std::vector<float>& b,
                                uint32_t rows, uint32_t n, uint32_t k, int device, std::vector<float>& ref,
                                std::vector<float>& magnitude) {
  DeviceBuffer da(a.size() * 4, device), db(b.size() * 4, device), dc(size_t(rows) * n * 4, device);
  auto product = [&](const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& out) {
    upload(da.get(), x.data(), da.bytes());
    upload(db.get(), y.data(), db.bytes());
    sgemm_reference(h, da.get<float>(), db.get<float>(), dc.get<float>(), rows, n, k);
    out = download<float>(dc.get(), size_t(rows) * n);
  };
  product(a, b, ref);
  product(absolute(a), absolute(b), magnitude);
}

// An N x K bf16 weight quantised by the device quantiser into `values` (N x K e4m3) and `scales`
// (fp8_b_scales floats), both on `device`; returns the fp32 values an FP8 GEMM multiplies.
inline std::vector<float> device_quantized_weight(const std::vector<__nv_bfloat16>& w, uint32_t n, uint32_t k,
                                                  Fp8Scaling s, DeviceBuffer& values, DeviceBuffer& scales,
                                                  int device) {
  DeviceBuffer src(w.size() * 2, device);
  upload(src.get(), w.data(), w.size() * 2);
  quantize_weight_e4m3(src.get(), n, k, s, values.get(), scales.get<float>(), nullptr);
  TL_CUDA_CHECK(cudaDeviceSynchronize());
  const testing::QuantizedWeight q{download<uint8_t>(values.get(), size_t(n) * k),
                                   download<float>(scales.get(), fp8_b_scales(n, k, s))};
  return testing::dequantize_weight(q, n, k, s);
}

}  // namespace tilelink::test
