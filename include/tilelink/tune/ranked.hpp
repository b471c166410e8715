// A candidate configuration of a tune search with the plan model's predicted time, and the last
// step every search's model-ranked stage shares: keep the best predicted, always with the
// automatic configuration among them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tilelink {

template <class Config>
struct RankedConfig {
  Config config;
  double predicted_us = 0;  // the plan model's fused time (0 where nothing was predicted)
};

namespace detail {

// The compute stage of the GEMM searches: `base` (unless `with_base` is false: it is timed
// already) and then `base` with each rasterization swizzle, 1, 2, 4, 8, appended to `out`.
template <class Config>
void append_swizzles(std::vector<Config>& out, const Config& base, bool with_base) {
  if (with_base) out.push_back(base);
  for (uint32_t swizzle : {1u, 2u, 4u, 8u}) {
    Config c = base;
    c.swizzle = swizzle;
    out.push_back(c);
  }
}

// The automatic configuration of a model-ranked stage around `base` (`reset` puts the stage's
// knobs back to automatic) with its predicted time -- none at world 1, where there is nothing to
// communicate and the stage is that configuration alone.
template <class Config, class Reset, class Predict>
RankedConfig<Config> ranked_automatic(Config base, int world, Reset&& reset, Predict&& predict) {
  reset(base);
  return {base, world > 1 ? predict(base) : 0.0};
}

// `all` sorted by predicted time (stable: ties keep their order), cut to `top`, and `automatic`
// appended unless a kept candidate is `same` as it.
template <class Config, class Same>
std::vector<RankedConfig<Config>> keep_top(std::vector<RankedConfig<Config>> all, size_t top,
                                           const RankedConfig<Config>& automatic, Same&& same) {
  std::stable_sort(all.begin(), all.end(), [](const RankedConfig<Config>& a, const RankedConfig<Config>& b) {
    return a.predicted_us < b.predicted_us;
  });
  if (all.size() > top) all.resize(top);
  const bool has_auto = std::any_of(all.begin(), all.end(),
                                    [&](const RankedConfig<Config>& r) { return same(r.config, automatic.config); });
  if (!has_auto) all.push_back(automatic);
  return all;
}

}  // namespace detail
}  // namespace tilelink
