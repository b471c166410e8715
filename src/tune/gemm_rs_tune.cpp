#include "tilelink/tune/gemm_rs_tune.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"

namespace tilelink {
namespace {

// The op's one compiled GEMM configuration (sm90_gemm_rs_128x256x64_c2x1.cu): its tile and the
// cluster whose multiple the reduction CTAs are rounded up to (GemmRs's reduce_blocks rule).
constexpr uint32_t kTileM = 128, kTileN = 256, kCluster = 2;

uint32_t reduction_ctas(const GemmRsConfig& c, int sm_budget) {
  const uint32_t wanted = c.reduce_blocks != 0 ? c.reduce_blocks : static_cast<uint32_t>(sm_budget / 32);
  return std::max(kCluster, (wanted + kCluster - 1) / kCluster * kCluster);
}

double predict_us(const GemmRsConfig& c, const GemmRsTuneShape& s, const sim::CostModel& gpu) {
  sim::GemmRsProblem p;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k_local * static_cast<uint32_t>(s.world);
  p.world = s.world;
  sim::GemmRsConfig q;
  q.bm = kTileM;
  q.bn = kTileN;
  q.reduce_ctas = reduction_ctas(c, s.sm_budget);
  q.granularity = c.granularity;
  q.scatter = c.scatter;
  return sim::predict_gemm_rs(p, q, gpu.share(s.sm_budget)).fused * 1e6;
}

GemmRsConfig c_with(GemmRsConfig c, uint32_t reduce_blocks) {
  c.reduce_blocks = reduce_blocks;
  return c;
}

bool same_comm(const GemmRsConfig& a, const GemmRsConfig& b) {
  return a.scatter == b.scatter && a.granularity == b.granularity && a.reduce_blocks == b.reduce_blocks;
}

}  // namespace

std::vector<GemmRsConfig> gemm_rs_compute_candidates() {
  GemmRsConfig automatic;
  automatic.use_tune_cache = false;
  std::vector<GemmRsConfig> out{automatic};
  for (uint32_t swizzle : {1u, 2u, 4u, 8u}) {
    GemmRsConfig c = automatic;
    c.swizzle = swizzle;
    out.push_back(c);
  }
  return out;
}

std::vector<RankedGemmRsConfig> gemm_rs_comm_candidates(const GemmRsConfig& base, const GemmRsTuneShape& shape,
                                                        size_t top, const sim::CostModel& gpu) {
  TL_REQUIRE(top >= 1, "gemm_rs_comm_candidates", "top", top, ">= 1");
  GemmRsConfig automatic = base;
  automatic.scatter = GemmRsConfig{}.scatter;
  automatic.granularity = GemmRsConfig{}.granularity;
  automatic.reduce_blocks = GemmRsConfig{}.reduce_blocks;
  if (shape.world == 1) return {{automatic, 0.0}};
  const RankedGemmRsConfig auto_ranked{automatic, predict_us(automatic, shape, gpu)};

  std::vector<RankedGemmRsConfig> all;
  for (GemmRsScatter scatter : {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine}) {
    for (SignalGranularity g : {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}) {
      if (scatter == GemmRsScatter::kCopyEngine && g == SignalGranularity::kTile) continue;  // refused by the op
      for (uint32_t blocks : {0u, 2u, 4u, 8u}) {
        if (blocks != 0 && blocks > static_cast<uint32_t>(shape.sm_budget / 2)) continue;  // the GEMM keeps half
        GemmRsConfig automatic_blocks;
        if (blocks != 0 && reduction_ctas(c_with(base, blocks), shape.sm_budget) ==
                               reduction_ctas(automatic_blocks, shape.sm_budget)) {
          continue;  // the automatic count already
        }
        GemmRsConfig c = base;
        c.scatter = scatter;
        c.granularity = g;
        c.reduce_blocks = blocks;
        all.push_back({c, predict_us(c, shape, gpu)});
      }
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const RankedGemmRsConfig& a, const RankedGemmRsConfig& b) {
    return a.predicted_us < b.predicted_us;
  });
  if (all.size() > top) all.resize(top);
  const bool has_auto =
      std::any_of(all.begin(), all.end(), [&](const RankedGemmRsConfig& r) { return same_comm(r.config, automatic); });
  if (!has_auto) all.push_back(auto_ranked);
  return all;
}

}  // namespace tilelink
