// Model of the tensor-parallel MLP as tilelink::Mlp runs it: AG+GEMM (fc1) -> activation ->
// GEMM+RS (fc2), one after another on each rank's compute stream, each op overlapped within
// itself (sim/ag_gemm_sim.hpp, sim/gemm_rs_sim.hpp). The activation kernel reads fc1's output
// and writes half (SwiGLU) or all (GELU) of it at the HBM bandwidth.
#pragma once

#include <cstdint>
#include <vector>

#include "tilelink/ops/mlp/mlp_config.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct MlpProblem {
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 8192;         // LLaMA-3.1-70B
  uint32_t intermediate = 28672;  // over all ranks
  MlpActivation activation = MlpActivation::kSwiGlu;  // SwiGLU: fc1 gives gate and up halves (2 x intermediate columns)
  int world = 8;
  int nodes = 1;
  // e4m3 (Mlp's FP8): both GEMMs at the FP8 rate, fc1's all-gather of packed e4m3 token rows, the
  // activation in bf16 (fc2 quantises it: one more pass over it, counted with the activation).
  DType dtype = DType::kBf16;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
};

struct MlpPlanConfig {
  AgGemmPlanConfig fc1;
  GemmRsPlanConfig fc2;
};

struct MlpPrediction {
  double fused = 0, non_overlapped = 0, decomposed = 0, ideal = 0;
  double t_comp = 0, t_comm = 0, t_act = 0;
  double flop = 0;  // per rank, both GEMMs
  uint32_t fc2_reduce_ctas = 0;    // fc2's reduction CTAs per rank, as predicted
  GemmRsScatter fc2_scatter = GemmRsScatter::kPull;    // fc2's path, as predicted (the op's rule on auto)
  GemmRsReducer fc2_reducer = GemmRsReducer::kBlocks;
  std::vector<Interval> timeline;  // rank 0: fc1's lanes, the activation, fc2's lanes (prefixed)
};

MlpPrediction predict_mlp(const MlpProblem& problem, const MlpPlanConfig& config, const CostModel& cost = {});

}  // namespace tilelink::sim
