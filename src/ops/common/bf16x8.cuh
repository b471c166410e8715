// Eight bf16 in one 16-byte vector (uint4), the unit the memory-bound kernels move: fp32 math on
// them and the round back.
#pragma once

#include <cuda_bf16.h>

#include "tilelink/core/macros.hpp"

namespace tilelink::detail {

// acc[i] += scale * v[i], i in [0, 8), in fp32.
TL_DEVICE void fma_bf16x8(float* acc, float scale, const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] = fmaf(scale, f.x, acc[2 * i]);
    acc[2 * i + 1] = fmaf(scale, f.y, acc[2 * i + 1]);
  }
}

// acc[i] += v[i], i in [0, 8), in fp32.
TL_DEVICE void add_bf16x8(float* acc, const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}

// The eight fp32 values rounded to bf16 (round to nearest even).
TL_DEVICE uint4 pack_bf16x8(const float* acc) {
  uint4 packed;
  auto* o = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return packed;
}

}  // namespace tilelink::detail
