// The collectives alone (`tilelink bench all_gather|reduce_scatter`).
#pragma once

#include <cstdint>
#include <string>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/comm/collectives.hpp"

namespace tilelink::bench {

struct AllGatherBenchOptions : RunOptions {
  AllGatherBenchOptions() { world = 2; }
  uint32_t rows_per_rank = 1024;
  uint32_t row_bytes = 16384;
  AllGatherConfig config;
};

struct ReduceScatterBenchOptions : RunOptions {
  ReduceScatterBenchOptions() { world = 2; }
  uint32_t rows_per_rank = 1024;
  uint32_t cols = 8192;  // fp32 columns
  ReduceScatterConfig config;
};

struct AllReduceBenchOptions : RunOptions {
  AllReduceBenchOptions() { world = 2; }
  uint32_t rows = 128;   // tokens (decode: 1 ... 512)
  uint32_t cols = 8192;  // fp32 columns (the hidden size)
  AllReduceConfig config;  // its method is ignored: one-shot and two-shot are both timed
};

// Times AllGather::run / ReduceScatter::run across all ranks (slowest rank per call) and the
// same bytes moved by cudaMemcpyAsync D2D. collectives.cu.
Table bench_all_gather(const AllGatherBenchOptions& options);
Table bench_reduce_scatter(const ReduceScatterBenchOptions& options);
// AllReduce::run one-shot and two-shot (which one `auto` picks is noted) against each rank copying
// every peer's partial with cudaMemcpyAsync (one-shot's bytes, no signals, no sum).
Table bench_all_reduce(const AllReduceBenchOptions& options);

}  // namespace tilelink::bench
