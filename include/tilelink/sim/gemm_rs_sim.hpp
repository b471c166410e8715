// Discrete-event model of GEMM+RS (row-parallel): predicts the timeline of the protocol in
// ops/gemm_rs/gemm_rs_protocol.hpp -- its owner-swizzled tile order, epilogue pushes, signal
// groups and fixed-order reduction -- under the cost model of sim/timeline.hpp.
//
// Ranks run the same schedule shifted by their rank, so rank 0's compute schedule gives every
// arrival: the tile that owner o receives from rank q is the one q computes at step (o - q) mod P,
// which finishes at the time rank 0 finishes the same step and tile. Compute CTAs (SMs minus the
// reduction CTAs) take tiles round-robin; a tile costs its MMA time plus, for another owner, the
// push of its partial at one CTA's copy bandwidth (capped by the link). The owner's reduction
// CTAs reduce tile t once its whole signal group has arrived from every rank.
#pragma once

#include <cstdint>

#include "tilelink/ops/gemm_rs/gemm_rs_protocol.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct GemmRsProblem {
  uint32_t m = 8192;   // rows of C (each rank owns m / world)
  uint32_t n = 8192;   // columns of C
  uint32_t k = 28672;  // inner dimension across all ranks (each rank has k / world)
  uint32_t element_bytes = 2;  // inputs (bf16)
  uint32_t partial_bytes = 2;  // partial tiles as pushed (bf16; the reduction accumulates in fp32)
  int world = 8;
  int nodes = 1;
};

struct GemmRsConfig {
  uint32_t bm = 128;
  uint32_t bn = 256;
  uint32_t reduce_ctas = 6;  // FLUX's default on Hopper (DESIGN.md §9)
  SignalGranularity granularity = SignalGranularity::kTile;
};

struct GemmRsPrediction {
  double fused = 0;
  double non_overlapped = 0;  // GEMM on every SM, then reduce-scatter, then the reduction
  double decomposed = 0;      // per-owner GEMMs, each block's send overlapping the next GEMM
  double ideal = 0;           // max(T_comp, T_comm)
  double t_comp = 0;
  double t_comm = 0;
  double flop = 0;            // per rank
  std::vector<Interval> timeline;  // rank 0: compute CTAs, then reduction CTAs
};

GemmRsPrediction predict_gemm_rs(const GemmRsProblem& problem, const GemmRsConfig& config,
                                 const CostModel& cost = {});

}  // namespace tilelink::sim
