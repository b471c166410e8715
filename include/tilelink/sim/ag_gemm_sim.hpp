// Discrete-event model of AG+GEMM: predicts the op's timeline from a cost model, with the same
// mapping (RowShardMapping), tile schedule (AgGemmSchedule) and communication order as the real
// protocol. Runs without a GPU: this is how a user sizes a job before having the machines.
//
// The model, per rank (ranks are symmetric, so one rank is simulated and stands for all):
//  - communication: the rank pulls the world-1 foreign shards in communication tiles of
//    comm_rows rows, in the protocol's item order, one tile after another on its resource:
//      copy engine: chunk time = ce_chunk_overhead + bytes / min(ce_bandwidth, ingress bandwidth)
//      k SMs:       chunk time = bytes / min(k * sm_copy_bandwidth_per_cta, ingress bandwidth)
//    plus the notify -> wait latency before a compute tile sees the channel;
//  - compute: a persistent grid of (SMs - k) CTAs takes output tiles round-robin in schedule
//    order (as CUTLASS's persistent scheduler does); a tile starts when its CTA is free and all
//    the channels of its A rows have arrived; it takes 2 * BM * BN * K / (flops / SMs) seconds.
// Ingress bandwidth is the NVLink bandwidth within a node and the network bandwidth for shards
// that come from another node (ranks are numbered node-major).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_config.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct AgGemmProblem {
  uint32_t m = 8192;       // rows of the gathered A and of C
  uint32_t n = 28672;      // columns of C across all ranks (each rank has n / world)
  uint32_t k = 8192;
  uint32_t element_bytes = 2;  // bf16
  int world = 8;
  int nodes = 1;           // world must be a multiple of nodes
  // e4m3: the GEMM at CostModel::fp8_flops and the all-gather of packed rows (fp8_row_pitch bytes
  // each, element_bytes unused).
  DType dtype = DType::kBf16;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
};

// What the model runs besides the problem: the GEMM's tile and the op's configuration, of which
// the model follows the all-gather as the op would run it -- comm.comm_rows rows per
// communication tile (no automatic: 0 is refused), comm.resource, comm.order, and with
// CommResource::kSm comm.num_blocks CTAs that copy, taken from the GEMM. The all-gather's method,
// data path and threads, and the GEMM's kernel, SMs and swizzle do not change the prediction.
struct AgGemmPlanConfig {
  uint32_t bm = 128;
  uint32_t bn = 256;
  AgGemmConfig op = plan_op_config<AgGemmConfig>();
};

struct AgGemmPrediction {
  double fused = 0;           // the overlapped op
  double non_overlapped = 0;  // all-gather (same resource), then the GEMM on every SM
  double decomposed = 0;      // per-shard GEMMs interleaved with the copies (async-TP style)
  double ideal = 0;           // max(T_comp, T_comm) of the isolated parts
  double t_comp = 0;          // GEMM alone on every SM
  double t_comm = 0;          // all-gather alone
  double flop = 0;            // per rank
  std::vector<Interval> timeline;  // rank 0's fused timeline
};

// Throws InvalidArgument for shapes or configurations the op could not run.
AgGemmPrediction predict_ag_gemm(const AgGemmProblem& problem, const AgGemmPlanConfig& config,
                                 const CostModel& cost = {});

}  // namespace tilelink::sim
