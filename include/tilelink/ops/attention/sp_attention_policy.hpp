// SP attention's method estimate (SpAttentionConfig::method = auto without a tune-cache entry),
// per call of one rank, from the H200 rates (core/h200_rates.hpp):
//   the attention: the rank's flops at the dense bf16 rate of its CTAs (every method runs the same
//   kernel, so the rate only scales all three alike);
//   the K/V all-gather: (world - 1) shards over NVLink (one rank per GPU) or through the one HBM
//   that virtual ranks share;
//   non-overlapped = all-gather + attention;
//   fused          = max(attention, all-gather + a shard's share of the attention);
//   decomposed     = the ring: world steps, each the larger of a shard's attention and a shard's
//                    pass to the next rank (one-process worlds only).
#pragma once

#include <algorithm>
#include <cstdint>

#include "tilelink/core/h200_rates.hpp"
#include "tilelink/ops/common/op_method.hpp"

namespace tilelink::sp_attention_policy {

struct MethodShape {
  uint32_t world = 1;
  double flops = 0;        // the rank's attention flops (SpAttention::flops)
  double shard_bytes = 0;  // one rank's K and V
  int ctas = 132;          // the attention kernel's CTAs
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
  const double attention = s.flops / (h200::kBf16GemmFlops * std::max(s.ctas, 1) / h200::kSms);
  const double link = s.one_rank_per_gpu ? h200::kNvlinkBandwidth : h200::kHbmBandwidth / (2.0 * w);
  const double comm = double(w - 1) * s.shard_bytes / link;
  MethodEstimates e;
  e.non_overlapped = comm + attention;
  e.fused = std::max(attention, comm + attention / w);
  e.decomposed = w > 1 ? w * std::max(attention / w, comm / (w - 1)) : attention;
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
