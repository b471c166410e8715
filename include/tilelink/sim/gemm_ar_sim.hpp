// Model of GEMM+AR (decode's row-parallel linear + all-reduce), one rank per GPU: the op's own
// estimate (ops/gemm_ar/gemm_ar_policy.hpp) at the cost model's rates (sim/timeline.hpp), for the
// configuration the op would choose and for each forced variant, next to the chain (cuBLAS, then
// the all-reduce on every SM).
#pragma once

#include <cstdint>

#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct GemmArProblem {
  uint32_t m = 8;      // tokens
  uint32_t n = 8192;   // the hidden size
  uint32_t k = 28672;  // inner dimension across all ranks (each rank has k / world)
  int world = 8;
  int nodes = 1;
};

struct GemmArPlanConfig {
  GemmArConfig op;  // as the op takes it (auto knobs: the op's choice)
  bool norm = false;
};

struct GemmArPrediction {
  double t_gemm = 0;          // cuBLAS: its FLOPs or the weight's bytes over HBM, the longer
  double t_ar = 0;            // the all-reduce alone on every SM (the faster method)
  double ideal = 0;           // max(t_gemm, t_ar)
  double chain = 0;           // the GEMM, then the all-reduce
  double fused_one_shot = 0;  // fused schedule, one-shot (other knobs as configured)
  double fused_two_shot = 0;
  double non_overlapped = 0;  // the op's non-overlapped schedule (its own slices)
  GemmArChoice choice;        // what the op runs for the configuration, and its estimate
  double weight_bytes = 0;    // one rank's weight
};

// The rates of `cost` as the op's estimate takes them, for `world` ranks on `nodes` nodes and the
// configured `path` (auto: the copy-engine path across nodes, where the transport is put_signal).
GemmArRates gemm_ar_rates(const CostModel& cost, int world, int nodes, GemmArPath path = GemmArPath::kAuto);

GemmArPrediction predict_gemm_ar(const GemmArProblem& problem, const GemmArPlanConfig& config,
                                 const CostModel& cost = {});

}  // namespace tilelink::sim
