// GEMM+RS's method estimate (gemm_rs_policy.hpp); the other rules that need the compiled kernel
// are in gemm_rs.cpp.
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

#include <algorithm>

namespace tilelink::gemm_rs_policy {

MethodEstimates estimate_methods(const MethodShape& s) {
  const GemmTile tile = s.tile.m != 0 ? s.tile : gemm_tile();
  const uint32_t w = std::max(s.world, 1u);
  const double per_sm = h200::kBf16GemmFlops / h200::kSms;
  const double tile_time = 2.0 * tile.m * tile.n * s.k / per_sm;
  const uint64_t rows_per_rank = (uint64_t(s.m) + w - 1) / w;
  const uint64_t block_tile_rows = (rows_per_rank + tile.m - 1) / tile.m;
  const uint64_t tiles = block_tile_rows * w * ((uint64_t(s.n) + tile.n - 1) / tile.n);
  auto gemm = [&](int sms) {
    const uint64_t ctas = uint64_t(std::max(sms, 1));
    return double((tiles + ctas - 1) / ctas) * tile_time;
  };
  const double block_bytes = double(rows_per_rank) * s.n * 2;  // one rank's part of an owner block
  const double link = s.one_rank_per_gpu ? h200::kNvlinkBandwidth : h200::kHbmBandwidth / (2.0 * w);
  auto reduction = [&](double ctas, double rows_share) {  // rows_share: the fraction of the block
    if (w == 1) return 0.0;
    const double bytes = (w + 1) * block_bytes * rows_share, remote = (w - 1) * block_bytes * rows_share;
    return std::max(bytes / (std::max(ctas, 1.0) * h200::kCtaCopyBandwidth), remote / link);
  };
  MethodEstimates e;
  e.non_overlapped = gemm(s.sm_budget) + reduction(s.sm_budget, 1.0);
  if (s.reducer == GemmRsReducer::kEpilogue) {
    // The epilogue push (the scatter the rule pairs with it): each CTA sums its own tiles and, with
    // the immediate notify, first waits for its stores into the peers ((w - 1) / w of its tiles at
    // one CTA's copy rate; deferred, they drain under its next tile); the peers' parts cross the
    // link under the GEMM, from the end of its first wave on (one wave: after it).
    const uint64_t ctas = uint64_t(std::max(s.sm_budget, 1));
    const double waves = double((tiles + ctas - 1) / ctas);
    const double tile_bytes = double(std::min<uint64_t>(tile.m, rows_per_rank)) * tile.n * 2;
    const double stores = s.push_notify == GemmRsPushNotify::kImmediate
                              ? waves * double(w - 1) / w * tile_bytes / h200::kEpilogueStoreBandwidth
                              : 0.0;
    const double sums = w > 1 ? (w + 1) * block_bytes / (double(ctas) * h200::kEpilogueSumBandwidth) : 0.0;
    e.fused = std::max(gemm(s.sm_budget), tile_time + (w - 1) * block_bytes / link) + stores + sums;
  } else {
    const int blocks = static_cast<int>(s.reduce_blocks);
    e.fused = std::max(gemm(s.sm_budget - blocks), reduction(blocks, 1.0)) +
              reduction(blocks, 1.0 / double(std::max<uint64_t>(block_tile_rows, 1)));
  }
  // Decomposed: per owner block its share of the tiles (a GEMM launch each), the copies queued
  // behind their GEMMs on the copy engine, the own block's GEMM last.
  const uint64_t block_tiles = tiles / w;
  const double block_gemm =
      double((block_tiles + uint64_t(std::max(s.sm_budget, 1)) - 1) / uint64_t(std::max(s.sm_budget, 1))) * tile_time;
  const double copy = h200::kCeChunkOverhead + block_bytes / std::min(h200::kCeBandwidth, link);
  double gemm_end = 0, copies_end = 0;
  for (uint32_t step = 1; step < w; ++step) {
    gemm_end += block_gemm;
    copies_end = std::max(copies_end, gemm_end) + copy;
  }
  gemm_end += block_gemm;
  // Its reduction reads the copies in local memory: CTA- or HBM-bound, no link.
  const double local_sum = double(w + 1) * block_bytes;
  e.decomposed = std::max(gemm_end, copies_end) +
                 std::max(local_sum / (std::max(s.sm_budget, 1) * h200::kCtaCopyBandwidth),
                          local_sum / h200::kHbmBandwidth);
  if (w == 1) e.fused = e.non_overlapped = e.decomposed = gemm(s.sm_budget);  // one rank: the GEMM alone
  return e;
}

PathContext path_context(const GemmRsConfig& config, uint32_t world, uint32_t m, uint32_t n, uint32_t k_local,
                         bool one_rank_per_gpu) {
  PathContext c;
  c.one_rank_per_gpu = one_rank_per_gpu;
  c.granularity = config.granularity;
  c.reduce_blocks = config.reduce_blocks;
  c.method = config.method;
  c.shape.world = world;
  c.shape.m = m;
  c.shape.n = n;
  c.shape.k = k_local;
  c.shape.one_rank_per_gpu = one_rank_per_gpu;
  c.shape.push_notify = config.push_notify;
  return c;
}

Path path(GemmRsScatter scatter, GemmRsReducer reducer, const PathContext& c) {
  Path p;
  const bool peers = c.shape.world > 1;
  if (c.put_signal && peers) {
    p.scatter = scatter != GemmRsScatter::kAuto ? scatter : GemmRsScatter::kCopyEngine;
    p.reducer = reducer != GemmRsReducer::kAuto ? reducer : GemmRsReducer::kBlocks;
    return p;
  }
  const bool push_ok = peers && c.affine_heap;
  const bool epilogue_ok = c.one_rank_per_gpu && peers && c.granularity == SignalGranularity::kTile &&
                           c.reduce_blocks == 0 && (c.method == OpMethod::kAuto || c.method == OpMethod::kFused);
  if (reducer == GemmRsReducer::kAuto) {
    bool epilogue = epilogue_ok && (scatter == GemmRsScatter::kEpiloguePush ||
                                    (scatter == GemmRsScatter::kAuto && push_ok));
    if (epilogue && c.method == OpMethod::kAuto) {
      // Few rows (one or two waves): the GEMM then the reduction may win. Estimated on a whole
      // H200 (kSms), not the rank's budget, which under MPS may differ between processes: every
      // process must decide alike.
      MethodShape s = c.shape;
      s.sm_budget = h200::kSms;
      s.reducer = GemmRsReducer::kEpilogue;
      s.reduce_blocks = 0;
      const MethodEstimates e = estimate_methods(s);
      epilogue = e.fused <= e.non_overlapped;
    }
    reducer = epilogue ? GemmRsReducer::kEpilogue : GemmRsReducer::kBlocks;
  }
  if (scatter == GemmRsScatter::kAuto) {
    scatter = reducer == GemmRsReducer::kEpilogue && push_ok ? GemmRsScatter::kEpiloguePush : GemmRsScatter::kPull;
  }
  p.scatter = scatter;
  p.reducer = reducer;
  return p;
}

}  // namespace tilelink::gemm_rs_policy
