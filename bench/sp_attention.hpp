// `tilelink bench sp_attention`: sequence-parallel attention against its baselines.
#pragma once

#include <cstdint>
#include <string>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"

namespace tilelink::bench {

struct SpAttentionBenchOptions : RunOptions {
  uint32_t seq = 32768;  // tokens over all ranks
  uint32_t q_heads = 32, kv_heads = 8, head_dim = 128;
  bool causal = true;
  SpAttentionConfig config;
  std::string dump;  // a directory: write inputs and fused outputs for bench/sdpa_check.py
};
// SpAttention::run against the kernel alone, the all-gather alone, their ideal overlap, the
// non-overlapped and ring-attention baselines. sp_attention.cu.
Table bench_sp_attention(const SpAttentionBenchOptions& options);

}  // namespace tilelink::bench
