// SP attention's method estimate (SpAttentionConfig::method = auto without a tune-cache entry),
// per call of one rank, from the H200 rates (core/h200_rates.hpp):
//   the attention: the slowest rank's flops at the dense bf16 rate of the method's CTAs (fused: the
//   SMs the all-gather leaves; the non-overlapped kernel and the ring's: the whole budget);
//   the K/V all-gather: (world - 1) shards over NVLink (one rank per GPU) or through the one HBM
//   that virtual ranks share;
//   non-overlapped = all-gather + attention;
//   fused          = max(attention, all-gather + a shard's share of the attention);
//   decomposed     = the ring: world steps, each the larger of a shard's attention and a shard's
//                    pass to the next rank (one-process worlds only).
// With the same CTAs fused would never lose by this estimate; what can make another method win is
// the two SMs and the all-gather's blocks fused leaves free, where the all-gather is short. The
// tune cache's measurement decides where it exists.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tilelink/core/h200_rates.hpp"
#include "tilelink/ops/common/op_method.hpp"

namespace tilelink::sp_attention_policy {

struct MethodShape {
  uint32_t world = 1;
  double flops = 0;        // the slowest rank's attention flops (SpAttention::flops)
  double shard_bytes = 0;  // one rank's K and V
  int ctas = 130;          // the fused kernel's CTAs
  int budget = 132;        // the rank's SM budget: the non-overlapped and ring kernels' CTAs
  bool one_rank_per_gpu = true;
};
struct MethodEstimates {
  double fused = 0, decomposed = 0, non_overlapped = 0;  // seconds
  double of(OpMethod m) const {
    return m == OpMethod::kDecomposed ? decomposed : m == OpMethod::kNonOverlapped ? non_overlapped : fused;
  }
};

inline MethodEstimates estimate_methods(const MethodShape& s) {
  const uint32_t w = std::max(s.world, 1u);
  auto attention_on = [&](int ctas) { return s.flops / (h200::kBf16GemmFlops * std::max(ctas, 1) / h200::kSms); };
  const double attention = attention_on(s.ctas), whole = attention_on(s.budget);
  const double link = s.one_rank_per_gpu ? h200::kNvlinkBandwidth : h200::kHbmBandwidth / (2.0 * w);
  const double comm = double(w - 1) * s.shard_bytes / link;
  MethodEstimates e;
  e.non_overlapped = comm + whole;
  e.fused = std::max(attention, comm + attention / w);
  e.decomposed = w > 1 ? w * std::max(whole / w, comm / (w - 1)) : whole;
  return e;
}

// The configured method, else the estimate's fastest of those allowed (fused on a tie, then
// non-overlapped; the ring only where `ring_allowed`).
inline OpMethod choose_method(OpMethod configured, const MethodEstimates& e, bool ring_allowed) {
  if (configured != OpMethod::kAuto) return configured;
  OpMethod best = OpMethod::kFused;
  if (e.non_overlapped < e.of(best)) best = OpMethod::kNonOverlapped;
  if (ring_allowed && e.decomposed < e.of(best)) best = OpMethod::kDecomposed;
  return best;
}

}  // namespace tilelink::sp_attention_policy
