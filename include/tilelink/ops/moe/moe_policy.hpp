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
// 2 more; a CTA ~30 GB/s next to the GEMM (measured on the H200, Mixtral-8x7B at world 1: 2 CTAs
// moved 201 MB in ~3.5 ms); the GEMM does 2 * pairs * n * k FLOPs at ~5.3 TFLOP/s per SM -- about
// (1 + 2/topk) * budget * 250 / k CTAs (1 + 1/topk with no peers); at most a quarter of the
// budget. Whole clusters of `cluster` CTAs.
inline uint32_t combine_blocks(int sm_budget, uint32_t topk, uint32_t k, int world, uint32_t cluster) {
  const double per_pair = world > 1 ? 1.0 + 2.0 / std::max(topk, 1u) : 1.0 + 1.0 / std::max(topk, 1u);
  const double want = per_pair * sm_budget * 250.0 / std::max(k, 1u);
  const uint32_t cap = std::max(static_cast<uint32_t>(sm_budget / 4), 1u);
  const uint32_t blocks = std::min(std::max(static_cast<uint32_t>(want + 0.999), 1u), cap);
  return (blocks + cluster - 1) / cluster * cluster;
}

// Part 2's GEMM order: weight sweeps over the combine's rounds (MoeMappingBuffers::
// build_combine_order). Token order (0) interleaves every expert in each wave of tiles, which
// costs nothing while the experts' weights stay in L2 but re-streams them per tile row when they
// do not. Measured on the H200 (docs/PERF.md), Mixtral-8x7B part 2's grouped GEMM: world 1 (117
// MB per expert slice) 4107 µs in token order, 2808 µs with 4 sweeps (cuBLAS per-expert loop
// ~2900); world 8 virtual (14.7 MB) 4441 -> 3773 µs. So: token order when one expert's slice is
// at most 8 MB, else 4 sweeps (the combine of the last quarter runs after the GEMM).
inline uint32_t weight_sweeps(uint32_t n, uint32_t k) {
  return uint64_t(n) * k * 2 <= (8u << 20) ? 0u : 4u;
}

}  // namespace tilelink::moe_policy
