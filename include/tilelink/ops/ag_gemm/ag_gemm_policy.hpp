// AG+GEMM's own automatic choices, as pure functions (AgGemm applies them; the CPU suite checks
// them). Its all-gather, and the GEMM's SMs next to it, follow comm/all_gather_policy.hpp. The
// measurements behind each rule are in docs/ag_gemm.md.
#pragma once

#include <cstdint>

#include "tilelink/comm/all_gather_policy.hpp"

namespace tilelink::ag_gemm_policy {

// The configured swizzle, or the widest band (2^s bands of `band_rows` rows, up to 8) that stays
// inside one shard and whose rows of A fit in the rank's share of L2.
inline uint32_t auto_swizzle(uint32_t configured, uint32_t band_rows, uint32_t m_per_rank, uint32_t k,
                             uint64_t l2_share) {
  if (configured != 0) return configured;
  const uint64_t row_bytes = uint64_t(k) * all_gather_policy::kElementBytes;
  uint32_t s = 1;
  while (s < 8 && 2 * s * band_rows <= m_per_rank && 2ull * s * band_rows * row_bytes <= l2_share) s *= 2;
  return s;
}

}  // namespace tilelink::ag_gemm_policy
