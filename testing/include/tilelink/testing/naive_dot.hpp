// The inner product of the naive blocks in testing/ (not part of the library).
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

// The protocols' stand-in for a GEMM mainloop: the dot product of a row of A (k floats) with
// column `col` of B (k rows of pitch ldb floats), summed in k order (references match it bit for
// bit).
TL_HOST_DEVICE float naive_dot(const float* a_row, const float* b, uint32_t k, uint64_t ldb, uint32_t col) {
  float acc = 0.f;
  for (uint32_t kk = 0; kk < k; ++kk) acc += a_row[kk] * b[uint64_t(kk) * ldb + col];
  return acc;
}

// This block's lanes' share of an output tile, rows [row0, row0 + rows) x columns `cols`: f(row,
// col) for each element, the elements dealt to the lanes in row-major order.
template <class F>
TL_HOST_DEVICE void for_each_tile_element(Lanes lanes, uint32_t row0, uint32_t rows, ColRange cols, F&& f) {
  for (uint32_t e = lanes.id; e < rows * cols.cols; e += lanes.count) f(row0 + e / cols.cols, cols.col0 + e % cols.cols);
}

}  // namespace tilelink
