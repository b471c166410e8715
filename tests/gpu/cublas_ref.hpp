// cuBLAS references of the GPU suite: a handle owner and the bf16 "TN" GEMM with fp32 or bf16
// output.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/core/cublas_check.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::test {

class CublasHandle {
 public:
  CublasHandle() { TL_CUBLAS_CHECK(cublasCreate(&h_)); }
  ~CublasHandle() { (void)cublasDestroy(h_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// ref (M x N fp32, row-major) = A (M x K bf16, row-major) * B^T (B: N x K bf16, row-major).
inline void cublas_reference(cublasHandle_t h, const void* a, const void* b, float* ref, uint32_t m, uint32_t n,
                             uint32_t k) {
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: ref^T (N x M) = B (N x K, i.e. K x N col-major transposed) * A^T.
  TL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                               static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF,
                               static_cast<int>(k), &beta, ref, CUDA_R_32F, static_cast<int>(n),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The same product as cublas_reference from a plain kernel (one thread per output, fp32 sums in
// k order), for references that must not depend on cuBLAS's choice of kernel: under an MPS client
// of 38-44 SMs (H100) cuBLAS leaves whole output tiles of small GEMMs unwritten (docs/PERF.md,
// fourteenth session). Small problems only (M <= 65535 rows). CUDA translation units only.
#if defined(__CUDACC__)
template <int kThreads = 128>
__global__ void __launch_bounds__(kThreads) simple_gemm_tn_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                                  float* ref, uint32_t m, uint32_t n, uint32_t k) {
  const uint32_t j = blockIdx.x * kThreads + threadIdx.x, i = blockIdx.y;
  if (j >= n || i >= m) return;
  float acc = 0.f;
  for (uint32_t kk = 0; kk < k; ++kk) {
    acc += __bfloat162float(a[size_t(i) * k + kk]) * __bfloat162float(b[size_t(j) * k + kk]);
  }
  ref[size_t(i) * n + j] = acc;
}

inline void simple_reference(const void* a, const void* b, float* ref, uint32_t m, uint32_t n, uint32_t k) {
  TL_REQUIRE(m <= 65535, "simple_reference", "m", m, "at most 65535 rows");
  if (m == 0 || n == 0) return;
  simple_gemm_tn_kernel<128><<<dim3((n + 127) / 128, m), 128>>>(static_cast<const __nv_bfloat16*>(a),
                                                               static_cast<const __nv_bfloat16*>(b), ref, m, n, k);
  TL_CUDA_CHECK(cudaGetLastError());
}
#endif

// c (M x N bf16, row-major) = A (M x K bf16, row-major) * B^T (B: N x K bf16, row-major), fp32
// accumulation; waits for the device before returning.
inline void cublas_reference_bf16(cublasHandle_t h, const void* a, const void* b, void* c, uint32_t m, uint32_t n,
                                  uint32_t k) {
  const float alpha = 1.0f, beta = 0.0f;
  TL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                               static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF,
                               static_cast<int>(k), &beta, c, CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  TL_CUDA_CHECK(cudaDeviceSynchronize());
}

// ref (M x N fp32) = A[:, k0:k0+ks] * B[:, k0:k0+ks]^T, A and B with row pitch k: one K slice's
// product (the ops that cut K into slices round each to bf16); waits for the device.
inline void cublas_slice(cublasHandle_t h, const void* a, const void* b, float* ref, uint32_t m, uint32_t n,
                         uint32_t k, uint32_t k0, uint32_t ks) {
  const float alpha = 1.0f, beta = 0.0f;
  const auto* a16 = static_cast<const __nv_bfloat16*>(a) + k0;
  const auto* b16 = static_cast<const __nv_bfloat16*>(b) + k0;
  TL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                               static_cast<int>(ks), &alpha, b16, CUDA_R_16BF, static_cast<int>(k), a16, CUDA_R_16BF,
                               static_cast<int>(k), &beta, ref, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  TL_CUDA_CHECK(cudaDeviceSynchronize());
}

// Expects c (M x N bf16 on the device) to be A * B^T within bf16 output rounding (2^-8 relative)
// plus fp32 accumulation-order noise; `ref` (M x N fp32 on the device) is scratch for cuBLAS.
// `who` names c in the failure message.
inline void expect_bf16_gemm(cublasHandle_t h, const void* a, const void* b, const void* c, float* ref, uint32_t m,
                             uint32_t n, uint32_t k, const std::string& who) {
  cublas_reference(h, a, b, ref, m, n, k);
  TL_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> got(size_t(m) * n);
  std::vector<float> want(size_t(m) * n);
  TL_CUDA_CHECK(cudaMemcpy(got.data(), c, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost));
  TL_CUDA_CHECK(cudaMemcpy(want.data(), ref, want.size() * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = 8e-3f * std::fabs(want[i]) + 1e-2f;
    if (!(std::fabs(__bfloat162float(got[i]) - want[i]) <= tol) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << who << ": " << bad << " of " << got.size() << " elements off; first at row " << first / n
                     << " col " << first % n << ": got " << __bfloat162float(got[first]) << ", cuBLAS "
                     << want[first];
}

}  // namespace tilelink::test
