// A CPU reference of fp8.hpp's quantisation and of dequantisation, for the tests: the same rule as
// the device kernels (scale = e4m3_scale(amax), value = e4m3(x / scale) saturated, CUDA's host
// conversion), so that packed rows and quantised weights compare byte for byte; and the fp32
// values an FP8 GEMM multiplies, for a reference GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tilelink/ops/common/fp8.hpp"

namespace tilelink::testing {

inline uint8_t to_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
inline float from_e4m3(uint8_t v) {
  __nv_fp8_e4m3 f;
  f.__x = v;
  return static_cast<float>(f);
}

// amax of n bf16 values (stride `step`).
inline float amax_of(const __nv_bfloat16* x, size_t n, size_t step = 1) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(__bfloat162float(x[i * step])));
  return m;
}

// `rows` rows of k bf16 (row-major, packed) as packed FP8 rows (fp8.hpp); tensor scaling divides by
// `tensor_scale`.
inline std::vector<uint8_t> quantize_rows(const std::vector<__nv_bfloat16>& x, uint32_t rows, uint32_t k,
                                          Fp8Scaling s, float tensor_scale = 1.0f) {
  const uint64_t pitch = fp8_row_pitch(k, s);
  std::vector<uint8_t> out(rows * pitch, 0);
  for (uint32_t r = 0; r < rows; ++r) {
    const __nv_bfloat16* in = x.data() + size_t(r) * k;
    uint8_t* row = out.data() + r * pitch;
    auto put_scale = [&](uint32_t i, float v) { std::memcpy(row + k + 4 * i, &v, 4); };
    if (s == Fp8Scaling::kBlock) {
      for (uint32_t b = 0; b < k / kFp8BlockK; ++b) {
        const float scale = e4m3_scale(amax_of(in + b * kFp8BlockK, kFp8BlockK));
        for (uint32_t i = b * kFp8BlockK; i < (b + 1) * kFp8BlockK; ++i) row[i] = to_e4m3(__bfloat162float(in[i]) / scale);
        put_scale(b, scale);
      }
    } else {
      const float scale = s == Fp8Scaling::kRow ? e4m3_scale(amax_of(in, k)) : tensor_scale;
      for (uint32_t i = 0; i < k; ++i) row[i] = to_e4m3(__bfloat162float(in[i]) / scale);
      if (s == Fp8Scaling::kRow) put_scale(0, scale);
    }
  }
  return out;
}

struct QuantizedWeight {
  std::vector<uint8_t> values;  // N x K e4m3
  std::vector<float> scales;    // fp8_b_scales(n, k, s)
};

// An N x K bf16 weight quantised as quantize_weight_e4m3 does.
inline QuantizedWeight quantize_weight(const std::vector<__nv_bfloat16>& w, uint32_t n, uint32_t k, Fp8Scaling s) {
  QuantizedWeight q;
  q.values.resize(size_t(n) * k);
  q.scales.resize(fp8_b_scales(n, k, s));
  auto scale_of = [&](uint32_t row, uint32_t col) -> float {
    if (s == Fp8Scaling::kTensor) return q.scales[0];
    if (s == Fp8Scaling::kRow) return q.scales[row];
    return q.scales[(row / kFp8BlockN) * (k / kFp8BlockK) + col / kFp8BlockK];
  };
  if (s == Fp8Scaling::kTensor) {
    q.scales[0] = e4m3_scale(amax_of(w.data(), w.size()));
  } else if (s == Fp8Scaling::kRow) {
    for (uint32_t r = 0; r < n; ++r) q.scales[r] = e4m3_scale(amax_of(w.data() + size_t(r) * k, k));
  } else {
    for (uint32_t bn = 0; bn < (n + kFp8BlockN - 1) / kFp8BlockN; ++bn) {
      for (uint32_t bk = 0; bk < k / kFp8BlockK; ++bk) {
        float m = 0.0f;
        for (uint32_t r = bn * kFp8BlockN; r < std::min(n, (bn + 1) * kFp8BlockN); ++r) {
          m = std::max(m, amax_of(w.data() + size_t(r) * k + bk * kFp8BlockK, kFp8BlockK));
        }
        q.scales[bn * (k / kFp8BlockK) + bk] = e4m3_scale(m);
      }
    }
  }
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t c = 0; c < k; ++c) q.values[size_t(r) * k + c] = to_e4m3(__bfloat162float(w[size_t(r) * k + c]) / scale_of(r, c));
  }
  return q;
}

// The fp32 values of packed FP8 rows (rows x k, row-major).
inline std::vector<float> dequantize_rows(const uint8_t* packed, uint32_t rows, uint32_t k, Fp8Scaling s,
                                          float tensor_scale = 1.0f) {
  const uint64_t pitch = fp8_row_pitch(k, s);
  std::vector<float> out(size_t(rows) * k);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* row = packed + r * pitch;
    for (uint32_t i = 0; i < k; ++i) {
      float scale = tensor_scale;
      if (s != Fp8Scaling::kTensor) std::memcpy(&scale, row + k + 4 * (s == Fp8Scaling::kBlock ? i / kFp8BlockK : 0), 4);
      out[size_t(r) * k + i] = from_e4m3(row[i]) * scale;
    }
  }
  return out;
}

// The fp32 values of a quantised N x K weight.
inline std::vector<float> dequantize_weight(const QuantizedWeight& q, uint32_t n, uint32_t k, Fp8Scaling s) {
  std::vector<float> out(size_t(n) * k);
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t c = 0; c < k; ++c) {
      const float scale = s == Fp8Scaling::kTensor ? q.scales[0]
                          : s == Fp8Scaling::kRow  ? q.scales[r]
                                                   : q.scales[(r / kFp8BlockN) * (k / kFp8BlockK) + c / kFp8BlockK];
      out[size_t(r) * k + c] = from_e4m3(q.values[size_t(r) * k + c]) * scale;
    }
  }
  return out;
}

}  // namespace tilelink::testing
