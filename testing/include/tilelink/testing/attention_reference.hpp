// Reference attention forward (host): plain two-pass softmax attention in double, over a whole
// sequence in position order, independent of any sharding, chunking or online rescaling. The CPU
// protocol tests compare against it (the GPU tests use its GPU twin, tests/gpu/attention_ref.cuh).
//
//   q, o     seq x q_heads x head_dim floats
//   k, v     seq x kv_heads x head_dim floats (GQA: q head h reads kv head h / (q_heads / kv_heads))
//   lse      q_heads x seq floats: log(sum_j exp(score_j)), natural log, score = q.k / sqrt(head_dim)
// Under the causal mask, the query at position i sees the keys at positions 0..i.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace tilelink {

struct AttentionShape {
  uint32_t seq = 0;
  uint32_t q_heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  bool causal = false;
};

inline void attention_reference(const AttentionShape& s, const float* q, const float* k, const float* v, float* o,
                                float* lse) {
  const uint32_t d = s.head_dim;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> score(s.seq);
  std::vector<double> acc(d);
  for (uint32_t h = 0; h < s.q_heads; ++h) {
    const uint32_t kv_h = h / (s.q_heads / s.kv_heads);
    for (uint32_t i = 0; i < s.seq; ++i) {
      const float* q_row = q + (uint64_t(i) * s.q_heads + h) * d;
      const uint32_t keys = s.causal ? i + 1 : s.seq;
      double max = -INFINITY;
      for (uint32_t j = 0; j < keys; ++j) {
        const float* k_row = k + (uint64_t(j) * s.kv_heads + kv_h) * d;
        double dot = 0.0;
        for (uint32_t e = 0; e < d; ++e) dot += double(q_row[e]) * double(k_row[e]);
        score[j] = dot * scale;
        max = std::fmax(max, score[j]);
      }
      double sum = 0.0;
      for (uint32_t e = 0; e < d; ++e) acc[e] = 0.0;
      for (uint32_t j = 0; j < keys; ++j) {
        const double p = std::exp(score[j] - max);
        sum += p;
        const float* v_row = v + (uint64_t(j) * s.kv_heads + kv_h) * d;
        for (uint32_t e = 0; e < d; ++e) acc[e] += p * double(v_row[e]);
      }
      float* o_row = o + (uint64_t(i) * s.q_heads + h) * d;
      for (uint32_t e = 0; e < d; ++e) o_row[e] = float(acc[e] / sum);
      lse[uint64_t(h) * s.seq + i] = float(max + std::log(sum));
    }
  }
}

}  // namespace tilelink
