// AG+GEMM's own automatic choices, as pure functions (AgGemm applies them; the CPU suite checks
// them). Its all-gather, and the GEMM's SMs next to it, follow comm/all_gather_policy.hpp. The
// measurements behind each rule are in docs/ag_gemm.md.
#pragma once

#include <cstdint>

#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/common/op_method.hpp"

namespace tilelink::ag_gemm_policy {

// The configured swizzle, or the widest band (2^s bands of `band_rows` rows, up to 8) that stays
// inside one shard and whose rows of A fit in the rank's share of L2.
// A's rows are `row_bytes` long (K bf16, or a packed FP8 row).
inline uint32_t auto_swizzle(uint32_t configured, uint32_t band_rows, uint32_t m_per_rank, uint64_t row_bytes,
                             uint64_t l2_share) {
  if (configured != 0) return configured;
  uint32_t s = 1;
  while (s < 8 && 2 * s * band_rows <= m_per_rank && 2ull * s * band_rows * row_bytes <= l2_share) s *= 2;
  return s;
}

// The method's estimate (OpMethod::kAuto without a tune-cache entry), per call of one rank, from
// the rates the plan's cost model starts from (core/h200_rates.hpp); `tilelink plan ag_gemm`
// prints it beside its timeline:
//   a GEMM of `rows` rows on `sms` SMs: waves of bm x bn tiles at the dense bf16 (or e4m3) rate per SM;
//   the all-gather: (world - 1) shards over NVLink (one rank per GPU) or through the one HBM that
//   virtual ranks share;
//   non-overlapped = all-gather + GEMM(M) on the whole budget (nothing runs beside it);
//   fused          = max(GEMM(M), all-gather + GEMM(last shard)) on the SMs the all-gather leaves:
//                    the last shard lands at the end;
//   decomposed     = a GEMM per shard, each after its shard lands and the previous one, plus a
//                    launch each (partial waves are its cost).
// The estimate does not see the fused kernel's waits or the copy engine's contention, so it
// leaves fused only where the whole budget's extra SMs save more than the all-gather costs;
// `tilelink tune ag_gemm` times all three, and its winner decides where it exists.
struct MethodShape {
  uint32_t world = 1, m_per_rank = 0, n = 0, k = 0;
  uint64_t row_bytes = 0;  // bytes of one gathered row of A; 0: K bf16
  bool fp8 = false;        // e4m3 operands: the GEMM at the FP8 rate (h200::kE4m3GemmFlops)
  uint32_t tile_m = 128, tile_n = 256;
  int gemm_sms = 130;            // the fused and per-shard GEMMs' CTAs (beside the all-gather)
  int budget = 132;              // the rank's SM budget: the non-overlapped GEMM's CTAs
  bool one_rank_per_gpu = true;  // peers over NVLink; false: virtual ranks sharing one GPU
};
struct MethodEstimates {
  double fused = 0, decomposed = 0, non_overlapped = 0;  // seconds
  double of(OpMethod m) const {
    return m == OpMethod::kDecomposed ? decomposed : m == OpMethod::kNonOverlapped ? non_overlapped : fused;
  }
};
MethodEstimates estimate_methods(const MethodShape& s);
// The configured method, else the estimate's fastest (fused on a tie, then non-overlapped).
OpMethod choose_method(OpMethod configured, const MethodEstimates& e);

}  // namespace tilelink::ag_gemm_policy
