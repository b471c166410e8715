// GEMM+RS's automatic choices (GemmRs applies them; the tune models them). The measurements
// behind each rule are in docs/gemm_rs.md.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tilelink::gemm_rs_policy {

// The compiled GEMM's output tile (rows x columns): what the op's plan and the tune's model cut
// the owner blocks into.
struct GemmTile {
  uint32_t m = 0;
  uint32_t n = 0;
};
GemmTile gemm_tile();

// Reduction CTAs per rank: `configured`, else 1/32 of the rank's `sm_budget` SMs (4 of the H200's
// 132: enough to keep pace with the GEMM, few enough to keep its waves whole); rounded up to whole
// clusters of the GEMM kernel (launched in clusters, see gemm_rs_reduce.cu).
uint32_t reduce_blocks(uint32_t configured, int sm_budget);

// GEMM CTAs: the configured count, else the rank's budget less the reduction CTAs. No slack SMs
// (unlike AG+GEMM): the reduction runs in whole clusters next to the GEMM and neither waits for
// SMs the other holds. May be < 1.
inline int gemm_sm_count(int sm_budget, uint32_t reduce_blocks, uint32_t configured) {
  const int left = sm_budget - static_cast<int>(reduce_blocks);
  return configured != 0 ? std::min(left, static_cast<int>(configured)) : left;
}

// The configured swizzle, else the widest band (up to 8 cluster rows of `cluster_rows` rows) that
// leaves at least 4 bands per owner block of `rows_per_rank` rows: rows of a band share B's
// k-slices in L2, and the compute order interleaves the owners band by band, so the reductions run
// under the GEMM.
inline uint32_t auto_swizzle(uint32_t configured, uint32_t cluster_rows, uint32_t rows_per_rank) {
  if (configured != 0) return configured;
  uint32_t s = 1;
  while (s < 8 && 4 * 2 * s * cluster_rows <= rows_per_rank) s *= 2;
  return s;
}

}  // namespace tilelink::gemm_rs_policy
