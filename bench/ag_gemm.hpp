// `tilelink bench ag_gemm`: AG+GEMM against its baselines.
#pragma once

#include <cstdint>
#include <string>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"

namespace tilelink::bench {

struct AgGemmBenchOptions : RunOptions {
  uint32_t m = 8192;   // rows of A and C (all ranks)
  uint32_t n = 28672;  // columns of C over all ranks: each rank computes n / world
  uint32_t k = 8192;
  AgGemmConfig config;
  DType dtype = DType::kBf16;  // e4m3: bench_ag_gemm_fp8
  Fp8Scaling scaling = Fp8Scaling::kTensor;
};

// AgGemm::run against cuBLAS, the all-gather alone, their ideal overlap, the non-overlapped and
// decomposed baselines, and the fused kernel without waits. ag_gemm.cu.
Table bench_ag_gemm(const AgGemmBenchOptions& options);
// The FP8 table (options.dtype e4m3; bench_ag_gemm hands it over): against cuBLASLt's e4m3 GEMM with
// the same scaling mode, and the all-gather of e4m3 rows next to bf16's. ag_gemm_fp8.cu.
Table bench_ag_gemm_fp8(const AgGemmBenchOptions& options);

}  // namespace tilelink::bench
