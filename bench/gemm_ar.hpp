// `tilelink bench gemm_ar`: GEMM+AR (decode's row-parallel linear + all-reduce) against its chain.
#pragma once

#include <cstdint>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"

namespace tilelink::bench {

struct GemmArBenchOptions : RunOptions {
  uint32_t m = 8;      // tokens
  uint32_t n = 8192;   // the hidden size
  uint32_t k = 28672;  // inner dimension over all ranks: each rank holds k / world
  GemmArConfig config;  // splits, reduction CTAs (its method and schedule are ignored: all are timed)
};

// GemmAr one-shot, two-shot, automatic and non-overlapped against cuBLAS followed by the op's own
// bf16 all-reduce (the chain), with each half alone; latency median and p99. gemm_ar.cu.
Table bench_gemm_ar(const GemmArBenchOptions& options);

}  // namespace tilelink::bench
