// FP8 operands (e4m3, fp32 scales) of the dense ops: a value is e4m3 * scale, the GEMM accumulates
// in fp32 and writes bf16. Three ways to scale:
//  - kTensor: one scale for all of A, one for all of B;
//  - kRow:    one per row of A (per token) and one per row of B (per output channel), torchtitan's
//             "rowwise";
//  - kBlock:  DeepSeek-V3's: one per 1 x 128 block of A along K, one per 128 x 128 block of B,
//             applied in the GEMM's main loop.
//
// Packed rows. An FP8 A row, as the ops read it and as AG+GEMM all-gathers it, carries its own
// scales in its tail: K e4m3 bytes, then the row's scales in fp32 (row: 1; block: K / 128; tensor:
// none, the one scale is passed apart), then zeros to a multiple of 16 bytes (TMA's row pitch).
// One all-gather tile -- and so one signal -- covers the rows and their scales.
// B (N x K e4m3, K contiguous) keeps its scales apart: tensor 1 float; row N; block
// ceil(N / 128) x (K / 128), row-major (DeepSeek-V3's weight_scale_inv).
//
// Quantisation (ops/common/fp8_quantize.hpp and the CPU reference of the tests) is one rule:
// scale = amax / 448 (1 when amax is 0), value = e4m3(x / scale) with saturation.
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/core/macros.hpp"

namespace tilelink {

enum class DType : uint32_t {
  kBf16 = 0,
  kE4m3 = 1,  // FP8 e4m3 with fp32 scales (Fp8Scaling)
};
const char* to_string(DType d);  // "bf16", "e4m3"

enum class Fp8Scaling : uint32_t {
  kTensor = 0,
  kRow = 1,
  kBlock = 2,
};
const char* to_string(Fp8Scaling s);  // "tensor", "row", "block"

constexpr uint32_t kFp8BlockK = 128;  // block scaling: A's 1 x 128 and B's 128 x 128 blocks
constexpr uint32_t kFp8BlockN = 128;
constexpr float kE4m3Max = 448.0f;

// The scale of values whose largest magnitude is `amax`.
TL_HOST_DEVICE float e4m3_scale(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

// fp32 scales in the tail of one packed A row of K values.
TL_HOST_DEVICE uint32_t fp8_row_scales(uint32_t k, Fp8Scaling s) {
  return s == Fp8Scaling::kRow ? 1u : s == Fp8Scaling::kBlock ? (k + kFp8BlockK - 1) / kFp8BlockK : 0u;
}

// Bytes from one packed A row to the next: K, the tail's scales, padding to 16.
TL_HOST_DEVICE uint64_t fp8_row_pitch(uint32_t k, Fp8Scaling s) {
  return (uint64_t(k) + 4ull * fp8_row_scales(k, s) + 15ull) / 16ull * 16ull;
}

// fp32 scales of an N x K B.
TL_HOST_DEVICE uint64_t fp8_b_scales(uint32_t n, uint32_t k, Fp8Scaling s) {
  if (s == Fp8Scaling::kTensor) return 1;
  if (s == Fp8Scaling::kRow) return n;
  return uint64_t((n + kFp8BlockN - 1) / kFp8BlockN) * ((k + kFp8BlockK - 1) / kFp8BlockK);
}

// "" if an FP8 GEMM of inner extent k can use `s`, else why not (argument, value, expectation):
// rows of 16 bytes for TMA, whole K blocks for block scaling.
std::string check_fp8_extents(uint32_t k, Fp8Scaling s);

}  // namespace tilelink
