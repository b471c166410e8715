// The inner product of the naive blocks in testing/ (not part of the library).
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink {

// The protocols' stand-in for a GEMM mainloop: the dot product of a row of A (k floats) with
// column `col` of B (k rows of pitch ldb floats), summed in k order (references match it bit for
// bit).
TL_HOST_DEVICE float naive_dot(const float* a_row, const float* b, uint32_t k, uint64_t ldb, uint32_t col) {
  float acc = 0.f;
  for (uint32_t kk = 0; kk < k; ++kk) acc += a_row[kk] * b[uint64_t(kk) * ldb + col];
  return acc;
}

}  // namespace tilelink
