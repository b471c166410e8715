// Synthetic top-k routings: the three shapes of load a router produces that stress the MoE mapping
// differently. The plan model and the tune use one when given no routing (sim::MoeProblem,
// MoeTuneShape); tests and benchmarks draw theirs from the same generator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace tilelink {

enum class SyntheticRouting {
  kUniform,     // every token picks topk distinct experts uniformly
  kSkewed,      // expert 0 among the picks of ~90 % of the tokens (one hot expert)
  kFewExperts,  // only the first topk + 1 experts are used: the others get no token
};

inline const char* to_string(SyntheticRouting r) {
  return r == SyntheticRouting::kUniform ? "uniform" : r == SyntheticRouting::kSkewed ? "skewed" : "few_experts";
}

// tokens x topk expert ids, distinct per token.
inline std::vector<int32_t> synthetic_routing(std::mt19937_64& rng, uint32_t tokens, uint32_t topk, uint32_t experts,
                                              SyntheticRouting kind) {
  std::vector<int32_t> ids(size_t(tokens) * topk);
  const uint32_t used = kind == SyntheticRouting::kFewExperts ? std::min(experts, topk + 1) : experts;
  std::vector<int32_t> pool(used);
  for (uint32_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    if (kind == SyntheticRouting::kSkewed && rng() % 10 != 0) {
      std::iter_swap(pool.begin(), std::find(pool.begin(), pool.end(), 0));
    }
    std::copy(pool.begin(), pool.begin() + topk, ids.begin() + size_t(t) * topk);
  }
  return ids;
}

}  // namespace tilelink
