// Host references of the GPU suite that need no device: the reduce-scatter's rank-order sum and
// the feed-forward activations. Written from the ops' definitions, sharing nothing with them.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "tilelink/ops/mlp/mlp.hpp"

namespace tilelink::test {

// Owner `owner`'s block of a reduce-scatter: element i is the fp32 sum over ranks q = 0, 1, ...,
// P-1, in that order, of partials[q][owner * block + i] (each partial holds P blocks of `block`
// floats). With `magnitude`, also the same sums of absolute values: the scale of a tolerance.
// Elements [begin, begin + count) of the sum of `partials` in rank order (an owner's rows of a
// reduce-scatter), and the sum of magnitudes for tolerances.
inline std::vector<float> reduce_scatter_range(const std::vector<std::vector<float>>& partials, size_t begin,
                                               size_t count, std::vector<float>* magnitude = nullptr) {
  std::vector<float> sum(count, 0.f);
  if (magnitude != nullptr) magnitude->assign(count, 0.f);
  for (size_t q = 0; q < partials.size(); ++q) {
    const float* p = partials[q].data() + begin;
    for (size_t i = 0; i < count; ++i) {
      sum[i] += p[i];
      if (magnitude != nullptr) (*magnitude)[i] += std::fabs(p[i]);
    }
  }
  return sum;
}

// Owner `owner`'s equal block of `block` elements.
inline std::vector<float> reduce_scatter_reference(const std::vector<std::vector<float>>& partials, size_t owner,
                                                   size_t block, std::vector<float>* magnitude = nullptr) {
  return reduce_scatter_range(partials, owner * block, block, magnitude);
}

// The activation of a gate value g (and, for SwiGLU, its up value u) in fp32: silu(g) * u, or
// gelu(g) with erf.
inline float host_activation(MlpActivation act, float g, float u) {
  if (act == MlpActivation::kSwiGlu) return g / (1.0f + std::exp(-g)) * u;
  return 0.5f * g * (1.0f + std::erf(g * 0.70710678118654752f));
}

// How far the activation moves, to first order, when g moves by dg and u by du (an input rounded
// to bf16 the other way from a reference's): |dh/dg| dg + |dh/du| du. SwiGLU: h = silu(g) u, so a
// one-ulp move of u is scaled by silu(g) -- at g ~ 5 that is five times the ulp.
inline float host_activation_sensitivity(MlpActivation act, float g, float u, float dg, float du) {
  if (act == MlpActivation::kSwiGlu) {
    const float s = 1.0f / (1.0f + std::exp(-g));
    return std::fabs(s * (1.0f + g * (1.0f - s)) * u) * dg + std::fabs(g * s) * du;
  }
  const float cdf = 0.5f * (1.0f + std::erf(g * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * std::exp(-0.5f * g * g);
  return std::fabs(cdf + g * pdf) * dg;
}

}  // namespace tilelink::test
