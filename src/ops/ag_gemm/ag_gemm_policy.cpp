#include "tilelink/ops/ag_gemm/ag_gemm_policy.hpp"

#include <algorithm>

#include "tilelink/core/h200_rates.hpp"

namespace tilelink::ag_gemm_policy {

namespace {

constexpr double kLaunch = 2e-6;  // a kernel launch's gap on a busy stream

}  // namespace

MethodEstimates estimate_methods(const MethodShape& s) {
  const double per_sm = (s.fp8 ? h200::kE4m3GemmFlops : h200::kBf16GemmFlops) / h200::kSms;
  const double tile_time = 2.0 * s.tile_m * s.tile_n * s.k / per_sm;
  const uint64_t n_tiles = (uint64_t(s.n) + s.tile_n - 1) / s.tile_n;
  auto gemm_on = [&](uint64_t rows, int ctas) {
    const uint64_t tiles = (rows + s.tile_m - 1) / s.tile_m * n_tiles, sms = uint64_t(std::max(ctas, 1));
    return double((tiles + sms - 1) / sms) * tile_time;
  };
  auto gemm = [&](uint64_t rows) { return gemm_on(rows, s.gemm_sms); };
  const uint32_t w = std::max(s.world, 1u);
  const double row_bytes = s.row_bytes != 0 ? double(s.row_bytes) : double(s.k) * all_gather_policy::kElementBytes;
  const double shard = double(s.m_per_rank) * row_bytes;
  const double link = s.one_rank_per_gpu ? h200::kNvlinkBandwidth : h200::kHbmBandwidth / (2.0 * w);
  const double comm = double(w - 1) * shard / link;
  MethodEstimates e;
  const uint64_t m = uint64_t(s.m_per_rank) * w;
  e.non_overlapped = comm + gemm_on(m, s.budget);
  e.fused = std::max(gemm(m), comm + (w > 1 ? gemm(s.m_per_rank) : 0.0));
  double t = 0;
  for (uint32_t i = 0; i < w; ++i) {  // the own shard first, then in arrival order
    const double lands = w > 1 ? comm * i / (w - 1) : 0.0;
    t = std::max(t, lands) + gemm(s.m_per_rank) + kLaunch;
  }
  e.decomposed = t;
  return e;
}

OpMethod choose_method(OpMethod configured, const MethodEstimates& e) {
  if (configured != OpMethod::kAuto) return configured;
  OpMethod best = OpMethod::kFused;
  for (OpMethod m : {OpMethod::kNonOverlapped, OpMethod::kDecomposed}) {
    if (e.of(m) < e.of(best)) best = m;
  }
  return best;
}

}  // namespace tilelink::ag_gemm_policy
