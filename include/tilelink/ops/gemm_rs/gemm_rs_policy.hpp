// GEMM+RS's automatic choices (GemmRs applies them; the tune models them). The measurements
// behind each rule are in docs/gemm_rs.md.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tilelink/core/h200_rates.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/common/op_method.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"

namespace tilelink::gemm_rs_policy {

// The compiled GEMM's output tile (rows x columns): what the op's plan and the tune's model cut
// the owner blocks into.
struct GemmTile {
  uint32_t m = 0;
  uint32_t n = 0;
};
GemmTile gemm_tile();

// What the automatic reduction count depends on besides the rank's SM budget: the machine the
// ranks run on and how fast the GEMM makes partials there.
struct ReduceLoad {
  int world = 1;
  uint32_t k_local = 0;           // the GEMM's K on one rank
  bool one_rank_per_gpu = false;  // the owners read their peers over NVLink (or the network), not
                                  // from one GPU's HBM as virtual ranks do
  // The rates of the one-rank-per-GPU rule (an H200's, core/h200_rates.hpp, which the plan's cost
  // model also starts from); the plan passes its cost model's.
  double gemm_flops_per_sm = h200::kBf16GemmFlops / h200::kSms;
  double cta_bandwidth = h200::kCtaCopyBandwidth;
};

// How many times the rate at which the GEMM makes the owner's partials the reduction CTAs read:
// fitted to `tilelink plan gemm_rs --world 8` on the paper's three shapes, whose best counts
// (12, 16, 8) it gives; the margin is the last bands' reduction after the GEMM, which no overlap
// hides and more CTAs shorten.
inline constexpr double kReduceHeadroom = 3.0;

// Reduction CTAs per rank: `configured`, else by the machine --
//  - virtual ranks (and world 1): 1/32 of the rank's `sm_budget` SMs, as measured on one H200's
//    virtual ranks, where the peers' partials are local HBM and SMs are scarce;
//  - one rank per GPU: enough CTAs (to the nearest) to read the peers' partials kReduceHeadroom
//    times as fast as the GEMM on the rank's budget makes them -- (world - 1) / world of 2 bytes
//    per output element every 2 * k_local flops -- at most 1/8 of the budget;
// rounded up to whole clusters of the GEMM kernel (launched in clusters, see gemm_rs_reduce.cu).
uint32_t reduce_blocks(uint32_t configured, int sm_budget, const ReduceLoad& load = {});


// GEMM CTAs: the configured count, else the rank's budget less the reduction CTAs. No slack SMs
// (unlike AG+GEMM): the reduction runs in whole clusters next to the GEMM and neither waits for
// SMs the other holds. May be < 1.
inline int gemm_sm_count(int sm_budget, uint32_t reduce_blocks, uint32_t configured) {
  const int left = sm_budget - static_cast<int>(reduce_blocks);
  return configured != 0 ? std::min(left, static_cast<int>(configured)) : left;
}

// The swizzle CUTLASS's persistent scheduler runs for a requested one, with `m_ctas` x `n_ctas`
// CTA tiles (its get_log_swizzle_size: 8 needs both at least 6, 4 at least 3, 2 at least 2). It
// also rounds both counts up to multiples of the swizzle (times the cluster): padding tiles, each
// a whole mainloop.
inline uint32_t scheduler_swizzle(uint32_t requested, uint32_t m_ctas, uint32_t n_ctas) {
  const uint32_t d = std::min(m_ctas, n_ctas);
  if (requested >= 8 && d >= 6) return 8;
  if (requested >= 4 && d >= 3) return 4;
  if (requested >= 2 && d >= 2) return 2;
  return 1;
}

// The configured swizzle, else, with the reduction blocks, the widest band (up to 8 cluster rows
// of `cluster_rows` rows) that leaves at least 4 bands per owner block of `rows_per_rank` rows:
// rows of a band share B's k-slices in L2, and the compute order interleaves the owners band by
// band, so the reductions run under the GEMM. With the epilogue reducer, the widest band that
// CUTLASS runs as asked without padding tiles (`m_ctas` CTA tile rows over all owners, `n_ctas`
// tile columns; clusters of `cluster_m` rows): the plan model's own tiles then fall in whole
// waves at each round's end, an even share of sums per CTA (narrow bands put 4 own tiles on some
// CTAs and 1 on others: `plan gemm_rs --reducer epilogue --band 2` against 16, 184 against 165 us
// at world 8 on 8192 x 4096 x 14336).
inline uint32_t auto_swizzle(uint32_t configured, uint32_t cluster_rows, uint32_t rows_per_rank,
                             GemmRsReducer reducer = GemmRsReducer::kBlocks, uint32_t m_ctas = 0,
                             uint32_t n_ctas = 0, uint32_t cluster_m = 1) {
  if (configured != 0) return configured;
  if (reducer == GemmRsReducer::kEpilogue) {
    for (uint32_t s = 8; s > 1; s /= 2) {
      if (scheduler_swizzle(s, m_ctas, n_ctas) == s && m_ctas % (s * cluster_m) == 0 && n_ctas % s == 0) return s;
    }
    return 1;
  }
  uint32_t s = 1;
  while (s < 8 && 4 * 2 * s * cluster_rows <= rows_per_rank) s *= 2;
  return s;
}

// The method's estimate (OpMethod::kAuto without a tune-cache entry), per call of one rank, from
// the H200 rates (core/h200_rates.hpp); `tilelink plan gemm_rs` prints it beside its timeline:
//   the GEMM on `sms` SMs: waves of the compiled tile over every owner block, at the dense bf16
//   rate per SM;
//   the reduction with `ctas` CTAs: the owner's block from each of the world ranks plus its
//   output, at one CTA's copy rate each, and no faster than the peers' parts cross the link
//   (NVLink one rank per GPU; virtual ranks: their share of the one HBM);
//   non-overlapped = GEMM(every SM) + reduction(every SM);
//   fused (reduction blocks) = max(GEMM(budget - blocks), reduction(blocks)) + the reduction of
//   one tile row of the block (the last band's, after the GEMM);
//   fused (epilogue reducer) = GEMM(every SM) + the own tiles' sums at the epilogue rate (+ each
//   CTA's wait for its pushed stores, with push_notify immediate);
//   decomposed = a GEMM per owner block on every SM (own block last), each peer block then copied
//   by the copy engine (a fixed 5 us and the link's rate per copy, one after another, each after
//   its block's GEMM), then the reduction on every SM once the GEMMs and copies are done, reading
//   the copies locally (CTA- or HBM-bound).
struct MethodShape {
  uint32_t world = 1, m = 0, n = 0, k = 0;  // k: one rank's K
  int sm_budget = 132;
  uint32_t reduce_blocks = 0;  // the fused call's reduction CTAs (0 with the epilogue reducer)
  GemmRsReducer reducer = GemmRsReducer::kBlocks;
  bool one_rank_per_gpu = true;
  GemmRsPushNotify push_notify = GemmRsPushNotify::kDeferred;  // the epilogue push's (GemmRsConfig)
  GemmTile tile;  // the GEMM's tile (GemmRsConfig::kernel's); {0, 0}: gemm_tile(), the default's
};
struct MethodEstimates {
  double fused = 0, non_overlapped = 0, decomposed = 0;  // seconds
  double of(OpMethod m) const {
    return m == OpMethod::kNonOverlapped ? non_overlapped : m == OpMethod::kDecomposed ? decomposed : fused;
  }
};
MethodEstimates estimate_methods(const MethodShape& s);

// How the peers' parts reach their owner and who sums them (GemmRsConfig::scatter and ::reducer):
// each as configured where it is not kAuto, else by the machine the ranks run on --
//  - peers reached only through NVSHMEM (the put_signal transport): the copy-engine scatter (its
//    puts; it needs a signal per tile row or block), the reduction blocks;
//  - one rank per GPU, more than one rank, a signal per tile, no reduction CTAs asked for, the
//    fused method allowed, a heap every rank views affinely (SymmetricHeap::affine_stride): the
//    GEMM's epilogue pushes each peer's tile into its owner as it finishes -- spreading the
//    link's traffic over the whole GEMM -- and sums each own tile after its epilogue, taking no SM
//    from the GEMM (the method then runs fused) -- where the method is auto, only if the estimate
//    of that fused op on a whole H200 is at most the GEMM then the reduction (few rows, one or two
//    waves, lose the overlap: 256 x 4096 x 14336 at world 8, 25.2 against 24.3 us). The rule reads
//    only what every process of a world shares (its mode, transport, the heap's agreed view, the
//    configuration, the shape), never a rank's SM budget, which under MPS may differ between
//    processes: a split decision would deadlock. `tilelink plan gemm_rs --world 8` on 8 H200s over
//    NVLink, with the rank's port shared: 645 / 179 / 1635 us on the paper's shapes (the push's
//    notify deferred; 671 / 197 / 1668 immediate) against 743 / 215 / 1830 for pull with
//    reduction blocks (docs/gemm_rs.md);
//  - else (virtual ranks, whose peers' parts are the one GPU's HBM; one rank): pull and the
//    reduction blocks, as measured on one H200's virtual ranks.
// A reducer configured as epilogue with the scatter on auto takes push where the heap allows
// (its sums then read local memory), else pull.
struct PathContext {
  bool one_rank_per_gpu = false;
  bool put_signal = false;   // the world's transport
  bool affine_heap = false;  // the heap's affine_stride() != 0 (push's TMA store needs it)
  SignalGranularity granularity = SignalGranularity::kTile;
  uint32_t reduce_blocks = 0;           // as configured (0: automatic)
  OpMethod method = OpMethod::kAuto;    // as configured
  MethodShape shape;  // world and problem (m, n, one rank's k); its SM budget is not read
};
struct Path {
  GemmRsScatter scatter = GemmRsScatter::kPull;
  GemmRsReducer reducer = GemmRsReducer::kBlocks;
};
Path path(GemmRsScatter scatter, GemmRsReducer reducer, const PathContext& c);
// The context of `config` for `world` ranks on m x n x k_local (one rank's K), one per GPU or not;
// put_signal and affine_heap are the caller's to set.
PathContext path_context(const GemmRsConfig& config, uint32_t world, uint32_t m, uint32_t n, uint32_t k_local,
                         bool one_rank_per_gpu);
// Whether auto may pick decomposed: not until the path has passed its GPU tests and been measured
// (written 2026-12-05 with no GPU lent; `tune gemm_rs` and `bench gemm_rs` time it meanwhile, and a
// tune-cache entry can still choose it).
inline constexpr bool kAutoMayDecompose = false;
// The configured method, else the estimate's fastest (fused on a tie, then non-overlapped);
// decomposed only where the call can run it (`decomposed_ok`: it needs the receive buffer).
inline OpMethod choose_method(OpMethod configured, const MethodEstimates& e, bool decomposed_ok = false) {
  if (configured != OpMethod::kAuto) return configured;
  OpMethod best = e.non_overlapped < e.fused ? OpMethod::kNonOverlapped : OpMethod::kFused;
  if (decomposed_ok && e.decomposed < e.of(best)) best = OpMethod::kDecomposed;
  return best;
}

// The engine (GemmRsConfig::engine on auto): small_m where its estimate (gemm_ar_choice's for the
// reduce-scatter: 64- or 128-row tiles over all M rows, K slices, each owner's block summed after
// the GEMM) is below the owner_tiles engine's at its automatic method (estimate_methods). At
// decode's M the owner blocks of whole 128-row tiles are mostly padding: `tilelink plan gemm_rs
// --world 8 --m 64 --n 8192 --k 28672` predicts 78.5 us of MMA for 64 rows, where the weight
// reads in ~14 us. Ties keep owner_tiles.
// The small-M engine's configuration and estimate (GEMM+AR's choice for its reduce-scatter) for
// `world` ranks of `sm_budget` SMs on m x n x k_local (one rank's K), at `rates` (GemmAr's, or
// the plan's cost model's).
GemmArChoice small_m_choice(int world, int sm_budget, uint32_t m, uint32_t n, uint32_t k_local,
                            const GemmArConfig& config, const GemmArRates& rates);
inline GemmRsEngine choose_engine(double owner_tiles_estimate, double small_m_estimate) {
  return small_m_estimate < owner_tiles_estimate ? GemmRsEngine::kSmallM : GemmRsEngine::kOwnerTiles;
}

}  // namespace tilelink::gemm_rs_policy
