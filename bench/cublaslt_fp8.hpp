// The FP8 baseline GEMM of the benchmarks: cuBLASLt's e4m3 matmul with the scaling mode matched
// (tensor: two scalar scales; row: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F; block: A's
// VEC128_32F and B's BLK128x128_32F), bf16 output, fp32 compute.
//   C (M x N row-major bf16) = A (M x K e4m3, row-major, packed) * B^T (B: N x K e4m3),
// A's values copied K-contiguous at construction when packed (the layout cuBLASLt's users have),
// A's scales contiguous (row: M floats; block: the layout cuBLASLt documents for VEC128), B's as
// tilelink's (fp8.hpp). cuBLASLt's column-major view is C^T = B * A^T ("TN", which its FP8 kernels
// need).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/ops/common/fp8.hpp"

namespace tilelink::bench {

// Host transpose of a rows x cols float matrix.
std::vector<float> transposed(const std::vector<float>& v, size_t rows, size_t cols);

// A's row or block scales as a contiguous array for cuBLASLt, copied (host round trip: setup only)
// from the tails of `rows` packed FP8 rows on the device (pitch bytes, fp8.hpp): row scaling one
// per row; block scaling rows x K/128, row-major, or K-block-major with `k_block_major`.
std::vector<float> lt_a_scales(const void* packed, uint64_t pitch, uint32_t rows, uint32_t k, Fp8Scaling scaling,
                               bool k_block_major);

class LtFp8Gemm {
 public:
  // Throws Error naming the mode when cuBLASLt has no kernel for it on this GPU (`available`
  // false leaves the reason in why()).
  LtFp8Gemm(uint32_t m, uint32_t n, uint32_t k, Fp8Scaling scaling, const void* a, uint64_t lda, const float* a_scale,
            const void* b, const float* b_scale, void* c, int device);
  ~LtFp8Gemm();
  LtFp8Gemm(const LtFp8Gemm&) = delete;
  LtFp8Gemm& operator=(const LtFp8Gemm&) = delete;

  bool available() const { return available_; }
  const std::string& why() const { return why_; }
  void run(cudaStream_t stream) const;

 private:
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  void* workspace_ = nullptr;
  void* compact_a_ = nullptr;  // A's values K-contiguous when they came packed (lda != k)
  size_t workspace_bytes_ = 32u << 20;
  const void *a_ = nullptr, *b_ = nullptr;
  void* c_ = nullptr;
  bool available_ = false;
  std::string why_;
};

}  // namespace tilelink::bench
