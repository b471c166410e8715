// What the MoE GPU tests share: the world x routing parameter grid and the top-k sweep of a case.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>

#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::test {

using WorldRouting = std::tuple<int, SyntheticRouting>;

// World 1, 2, 4, 8 x uniform, skewed, few-experts routing.
inline auto worlds_and_routings() {
  return ::testing::Combine(::testing::Values(1, 2, 4, 8),
                            ::testing::Values(SyntheticRouting::kUniform, SyntheticRouting::kSkewed,
                                              SyntheticRouting::kFewExperts));
}

inline std::string world_routing_name(const ::testing::TestParamInfo<WorldRouting>& info) {
  return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
}

// run(topk, rng) for top-k 1, 2, 4, 6, 8 from one fresh seed (traced, so a failure can be
// replayed); each returns "" or what failed.
inline void expect_every_topk(const std::function<std::string(uint32_t topk, std::mt19937_64& rng)>& run) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (uint32_t topk : {1u, 2u, 4u, 6u, 8u}) EXPECT_EQ(run(topk, rng), "") << "topk " << topk;
}

}  // namespace tilelink::test
