// TL_CUBLAS_CHECK: every cuBLAS call of code that uses cuBLAS (the tests' and benchmarks'
// references and baselines; the library itself does not link it) throws CudaError on failure.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "tilelink/core/error.hpp"

#define TL_CUBLAS_CHECK(expr)                                                               \
  do {                                                                                      \
    const cublasStatus_t tl_st_ = (expr);                                                   \
    if (tl_st_ != CUBLAS_STATUS_SUCCESS) {                                                  \
      throw ::tilelink::CudaError(std::string(#expr) + ": " + cublasGetStatusString(tl_st_), \
                                  static_cast<int>(tl_st_));                                \
    }                                                                                       \
  } while (0)
