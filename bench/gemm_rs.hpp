// `tilelink bench gemm_rs`: GEMM+RS against its baselines.
#pragma once

#include <cstdint>
#include <string>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::bench {

struct GemmRsBenchOptions : RunOptions {
  uint32_t m = 8192;   // rows of the output over all ranks: each rank gets m / world
  uint32_t n = 8192;
  uint32_t k = 28672;  // inner dimension over all ranks: each rank holds k / world
  GemmRsConfig config;
  DType dtype = DType::kBf16;  // e4m3: bench_gemm_rs_fp8
  Fp8Scaling scaling = Fp8Scaling::kTensor;
};

// GemmRs::run against cuBLAS, the copy-engine reduce-scatter alone, their ideal overlap, the
// non-overlapped and decomposed baselines. gemm_rs.cu.
Table bench_gemm_rs(const GemmRsBenchOptions& options);
// The same in FP8 (e4m3 A and B, `options.scaling`) against cuBLASLt's e4m3 GEMM. gemm_rs_fp8.cu.
Table bench_gemm_rs_fp8(const GemmRsBenchOptions& options);

}  // namespace tilelink::bench
