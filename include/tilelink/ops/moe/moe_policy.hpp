// The MoE ops' automatic resource split, one place for the ops and the plan model
// (tilelink plan moe_ag / moe). Header-only, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tilelink::moe_policy {

// Part 1's gather CTAs: enough to copy the rows in ~70 % of the grouped GEMM's time. Per rank the
// gather moves 4 * pairs * hidden bytes (read + write), the GEMM does 2 * pairs * n * hidden FLOPs
// at ~5.3 TFLOP/s per SM, a gather CTA ~50 GB/s (measured: 35-55) -- about budget * 300 / n CTAs;
// at most a quarter of the budget (for small n the gather costs as much as the GEMM).
inline uint32_t gather_blocks(int sm_budget, uint32_t n) {
  const int want = static_cast<int>((uint64_t(sm_budget) * 300 + n - 1) / n);
  return static_cast<uint32_t>(std::max(1, std::min(want, sm_budget / 4)));
}

// Part 2's combine CTAs: enough to keep up with the GEMM's tiles in ~70 % of its time. Per rank
// the combine moves about (pairs + tokens) * n * 2 bytes, the reduction (with peers) tokens * n *
// 2 more; a CTA ~80 GB/s (512 threads, 8 x topk vectors each in flight); the GEMM does 2 * pairs *
// n * k FLOPs at ~5.3 TFLOP/s per SM -- about (1 + 2/topk) * budget * 95 / k CTAs (1 + 1/topk
// with no peers); at most a quarter of the budget. Whole clusters of `cluster` CTAs.
inline uint32_t combine_blocks(int sm_budget, uint32_t topk, uint32_t k, int world, uint32_t cluster) {
  const double per_pair = world > 1 ? 1.0 + 2.0 / std::max(topk, 1u) : 1.0 + 1.0 / std::max(topk, 1u);
  const double want = per_pair * sm_budget * 95.0 / std::max(k, 1u);
  const uint32_t cap = std::max(static_cast<uint32_t>(sm_budget / 4), 1u);
  const uint32_t blocks = std::min(std::max(static_cast<uint32_t>(want + 0.999), 1u), cap);
  return (blocks + cluster - 1) / cluster * cluster;
}

}  // namespace tilelink::moe_policy
