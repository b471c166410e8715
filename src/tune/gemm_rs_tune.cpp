#include "tilelink/tune/gemm_rs_tune.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"
#include "tune/model_config.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"

namespace tilelink {
namespace {

// The automatic reduction's inputs on the searched machine.
gemm_rs_policy::ReduceLoad load(const GemmRsTuneShape& s) {
  return {s.world, s.k_local, s.one_rank_per_gpu};
}

double predict_us(const GemmRsConfig& c, const GemmRsTuneShape& s, const sim::CostModel& gpu) {
  sim::GemmRsProblem p;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k_local * static_cast<uint32_t>(s.world);
  p.world = s.world;
  p.dtype = s.dtype;
  sim::GemmRsPlanConfig q;
  detail::kernel_tile(GemmRs::kernel_name(s.dtype, s.scaling), "gemm_rs tune", &q.bm, &q.bn);  // the op's GEMM
  q.op = c;
  // The path the op takes on the searched machine (the model's own rule assumes one rank per GPU).
  gemm_rs_policy::PathContext x = gemm_rs_policy::path_context(c, static_cast<uint32_t>(s.world), s.m, s.n,
                                                                s.k_local, s.one_rank_per_gpu);
  x.affine_heap = s.affine_heap;
  const gemm_rs_policy::Path path = gemm_rs_policy::path(c.scatter, c.reducer, x);
  q.op.scatter = path.scatter;
  q.op.reducer = path.reducer;
  q.op.reduce_blocks = path.reducer == GemmRsReducer::kEpilogue
                           ? 0u
                           : gemm_rs_policy::reduce_blocks(c.reduce_blocks, s.sm_budget, load(s));
  return sim::predict_gemm_rs(p, q, gpu.share(s.sm_budget)).fused * 1e6;
}

bool same_comm(const GemmRsConfig& a, const GemmRsConfig& b) {
  return a.scatter == b.scatter && a.granularity == b.granularity && a.reduce_blocks == b.reduce_blocks &&
         a.reducer == b.reducer && a.push_notify == b.push_notify;
}

}  // namespace

std::vector<GemmRsConfig> gemm_rs_compute_candidates() {
  GemmRsConfig automatic;
  automatic.use_tune_cache = false;
  std::vector<GemmRsConfig> out{automatic};
  detail::append_swizzles(out, automatic, false);
  // The op's methods (issue 21), timed like any candidate: where another wins, the cache stores it
  // and GemmRs's automatic method runs it (decomposed where the call gives a recv buffer; a
  // candidate the op refuses is left out by the tuner).
  for (OpMethod m : {OpMethod::kFused, OpMethod::kNonOverlapped, OpMethod::kDecomposed}) {
    GemmRsConfig c = automatic;
    c.method = m;
    out.push_back(c);
  }
  // Either engine where auto would take the other (the small-M one refused for e4m3, left out).
  for (GemmRsEngine e : {GemmRsEngine::kOwnerTiles, GemmRsEngine::kSmallM}) {
    GemmRsConfig c = automatic;
    c.engine = e;
    out.push_back(c);
  }
  return out;
}

std::vector<RankedGemmRsConfig> gemm_rs_comm_candidates(const GemmRsConfig& base, const GemmRsTuneShape& shape,
                                                        size_t top, const sim::CostModel& gpu) {
  TL_REQUIRE(top >= 1, "gemm_rs_comm_candidates", "top", top, ">= 1");
  const RankedGemmRsConfig auto_ranked = detail::ranked_automatic(
      base, shape.world,
      [](GemmRsConfig& c) {
        c.scatter = GemmRsConfig{}.scatter;
        c.granularity = GemmRsConfig{}.granularity;
        c.reduce_blocks = GemmRsConfig{}.reduce_blocks;
        c.reducer = GemmRsConfig{}.reducer;
      },
      [&](const GemmRsConfig& c) { return predict_us(c, shape, gpu); });
  // One rank, or the decomposed method (whole blocks by the copy engine): the fused path's scatter,
  // granularity and reduction knobs do not apply.
  if (shape.world == 1 || base.method == OpMethod::kDecomposed) return {auto_ranked};

  const uint32_t auto_blocks = gemm_rs_policy::reduce_blocks(0, shape.sm_budget, load(shape));
  std::vector<RankedGemmRsConfig> all;
  for (GemmRsScatter scatter : {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine}) {
    for (SignalGranularity g : {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}) {
      if (scatter == GemmRsScatter::kCopyEngine && g == SignalGranularity::kTile) continue;  // refused by the op
      for (uint32_t blocks : {0u, 2u, 4u, 8u, 12u, 16u}) {
        if (blocks != 0 && blocks > static_cast<uint32_t>(shape.sm_budget / 2)) continue;  // the GEMM keeps half
        if (blocks != 0 && gemm_rs_policy::reduce_blocks(blocks, shape.sm_budget, load(shape)) == auto_blocks) {
          continue;  // the automatic count already
        }
        GemmRsConfig c = base;
        c.scatter = scatter;
        c.granularity = g;
        c.reduce_blocks = blocks;
        c.reducer = GemmRsReducer::kBlocks;  // explicit: the candidates below are the epilogue's
        all.push_back({c, predict_us(c, shape, gpu)});
      }
      if (g == SignalGranularity::kTile && scatter != GemmRsScatter::kCopyEngine) {  // the GEMM's CTAs sum
        GemmRsConfig c = base;
        c.scatter = scatter;
        c.granularity = g;
        c.reduce_blocks = 0;
        c.reducer = GemmRsReducer::kEpilogue;
        all.push_back({c, predict_us(c, shape, gpu)});
      }
    }
  }
  return detail::keep_top(std::move(all), top, auto_ranked, same_comm);
}

}  // namespace tilelink
