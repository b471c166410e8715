// Discrete-event model of MoE part 1 as tilelink::MoeAgGroupGemm runs it: the all-gather of the
// tokens (as in ag_gemm_sim.hpp), the dynamic mapping of a routing (build_moe_mapping and rank
// 0's tile order, make_moe_tile_order), the gather CTAs and the grouped GEMM.
//
// Per rank (rank 0 stands for all):
//  - gather: gather_ctas CTAs take the tiles in the rank's order round-robin; a tile starts when
//    its CTA is free and the all-gather channels of its token span have arrived, and copies
//    bm rows of hidden elements at one CTA's copy bandwidth; then it is notified;
//  - grouped GEMM: the remaining SMs (less the SM all-gather's CTAs and, when world > 1, the 2
//    SMs of slack the op keeps, in whole 2-CTA clusters) take the output tiles (each tile row's
//    N tiles in turn) round-robin; a tile starts when its CTA is free and its row's gather is
//    done, and takes 2 bm bn K / (flops / SMs).
// Both start after the device mapping (config.mapping_time; the all-gather does not wait for it).
// The baselines: non-overlapped = the all-gather, then the gather on the whole GPU (its bytes
// read and written at HBM bandwidth), then the grouped GEMM on every SM; ideal = max(T_comp,
// T_comm).
#pragma once

#include <cstdint>
#include <vector>

#include "tilelink/ops/moe/synthetic_routing.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct MoeProblem {
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 4096;         // K
  uint32_t intermediate = 14336;  // each expert's columns over all ranks (n per rank = / world)
  uint32_t experts = 8;
  uint32_t topk = 2;
  std::vector<int32_t> ids;       // m x topk expert ids; empty = a synthetic routing of `seed`
  SyntheticRouting routing = SyntheticRouting::kUniform;
  uint64_t seed = 1;
  uint32_t element_bytes = 2;
  int world = 8;
  int nodes = 1;
};

struct MoeConfig {
  uint32_t bm = 128;
  uint32_t bn = 256;
  uint32_t comm_rows = 1024;
  Resource resource = Resource::kCopyEngine;
  uint32_t comm_ctas = 0;    // SM all-gather's CTAs
  uint32_t gather_ctas = 2;
  uint32_t slack_sms = 2;    // kept free when world > 1 (the op's rule)
  uint32_t cluster = 2;      // GEMM CTAs come in clusters of this many
  double mapping_time = 0;   // seconds of the device mapping before the gather and the GEMM start
                             // (data-dependent: take it from bench moe_ag's "device mapping" row)
};

struct MoePrediction {
  double fused = 0;
  double non_overlapped = 0;
  double ideal = 0;
  double t_comp = 0;    // the grouped GEMM alone on every SM
  double t_comm = 0;    // the all-gather alone
  double t_gather = 0;  // the gather alone on the op's gather CTAs
  uint32_t tiles = 0;   // tile rows of the routing
  uint32_t gemm_ctas = 0;
  double flop = 0;      // per rank, the pairs' (no padding)
  std::vector<Interval> timeline;
};

// Throws InvalidArgument for shapes, routings or configurations the op could not run.
MoePrediction predict_moe_ag(const MoeProblem& problem, const MoeConfig& config, const CostModel& cost = {});

}  // namespace tilelink::sim
