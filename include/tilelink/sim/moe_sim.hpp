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

#include "tilelink/ops/moe/moe_config.hpp"
#include "tilelink/sim/synthetic_routing.hpp"
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

// What the model of part 1 runs besides the problem: the tile, the op's configuration -- of which
// it follows the all-gather as AG+GEMM's model does (comm.comm_rows, no automatic; comm.resource;
// with CommResource::kSm comm.num_blocks copying CTAs) and gather_blocks (0 = the op's automatic
// count, moe_policy::gather_blocks) -- and the GEMM's placement rules.
struct MoeAgPlanConfig {
  uint32_t bm = 128;
  uint32_t bn = 256;
  MoeAgGroupGemmConfig op = plan_op_config<MoeAgGroupGemmConfig>();
  uint32_t slack_sms = 2;    // kept free when world > 1 (the op's rule)
  uint32_t cluster = 2;      // GEMM CTAs come in clusters of this many
  double mapping_time = 0;   // seconds of the device mapping before the gather and the GEMM start
                             // (data-dependent: take it from bench moe_ag's "device mapping" row)
  // A design, not built (issue 23): > 0 models the row gather inside the GEMM's producer (cp.async
  // loads of A's rows by index, B by TMA) in place of the gather stage -- no gather CTA; a tile
  // waits only for the all-gather channels of its token span; its time is the TMA mainloop's over
  // this efficiency (an assumption: cp.async loads of A against TMA's, not measured). 0: the
  // gather stage the op runs.
  double producer_gather_efficiency = 0;
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
  uint32_t gather_ctas = 0;   // part 1's, as used (the automatic count when the config says 0)
  uint32_t combine_ctas = 0;  // part 2's, likewise
  double flop = 0;      // per rank, the pairs' (no padding)
  std::vector<Interval> timeline;
};

// Throws InvalidArgument for shapes, routings or configurations the op could not run.
MoePrediction predict_moe_ag(const MoeProblem& problem, const MoeAgPlanConfig& config, const CostModel& cost = {});

// MoE part 2 as tilelink::MoeGemmRs runs it (the problem's hidden is the output's columns, its
// intermediate / world the GEMM's K); rank 0 stands for all, every rank's routing and timing
// alike:
//  - grouped GEMM: the SMs left by the combine CTAs (whole clusters) take the tiles in the
//    combine's order (tile rows by the round, then owner, of their first token:
//    MoeRsPlan::combine_key), each tile row's N tiles in turn, round-robin; a tile takes
//    2 bm bn K / (flops / SMs); a tile row is ready when its last tile is (plus a notify);
//  - combine CTAs take the work items as the protocol deals them (item i to CTA i mod CTAs):
//    per round b, the combines of token block b of every owner (owner 1 first), then -- with
//    peers -- the reduction of the rank's block b. A combine starts when its CTA is free and the
//    tile rows of all its pairs are ready, and moves (pairs + tokens) x hidden x 2 bytes at one
//    CTA's copy bandwidth; a reduction starts when the world's combines of the block are done
//    (by symmetry, this rank's combines of the round) and moves (world + 1) x tokens x hidden x 2.
// Baselines: non-overlapped = the grouped GEMM on every SM, the combine at HBM bandwidth, the
// reduce-scatter ((world - 1) blocks per rank over NVLink) and its sum at HBM bandwidth; ideal =
// max(T_comp, T_comm = the reduce-scatter).
// The model of part 2 follows the op's comm_rows (tokens per combine block; no automatic) and
// combine_blocks (0 = the op's automatic count, moe_policy::combine_blocks).
struct MoeRsPlanConfig {
  uint32_t bm = 128;
  uint32_t bn = 256;
  MoeGemmRsConfig op = [] {
    MoeGemmRsConfig c;
    c.comm_rows = 64;
    return c;
  }();
  uint32_t cluster = 2;
};
MoePrediction predict_moe_gemm_rs(const MoeProblem& problem, const MoeRsPlanConfig& config,
                                  const CostModel& cost = {});

// The MoE layer as tilelink::MoeLayer runs it: part 1 (its problem's intermediate doubled for
// SwiGLU's gate and up halves), the activation on the sorted rows at HBM bandwidth, part 2, in a
// row; one timeline. t_comp / t_comm: the parts' sums.
//
// micro_batches > 1 (a design, not built; issue 25): the layer pipelined over token micro-batches
// -- each rank's tokens in that many contiguous pieces, batch i = piece i of every rank -- so that
// one batch's communication runs under another's GEMMs (DeepEP's two-batch overlap, in the tile
// model). Every batch's all-gather is issued at the start, back to back on the copy engine; the
// compute stream runs part 1 of batch i, then batch i - 1's owners' sums (left until then), the
// activation, and part 2's GEMM, whose epilogue pushes to the owners. The port serves in issue
// order: the all-gathers, then each part 2's pushes from its GEMM's start, each sum waiting for its
// share of them. Part 2's combine must be the epilogue's and world > 1. The baselines
// (non-overlapped, ideal, t_comp, t_comm) stay the whole layer's; `fused` is the pipeline's end.
MoePrediction predict_moe_layer(const MoeProblem& problem, MlpActivation activation, const MoeAgPlanConfig& part1,
                                const MoeRsPlanConfig& part2, const CostModel& cost = {}, uint32_t micro_batches = 1);

}  // namespace tilelink::sim
