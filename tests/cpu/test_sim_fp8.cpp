// The plan model with FP8 operands (issue 22): the GEMM at the FP8 rate, the all-gather's packed
// e4m3 rows, GEMM+RS's bf16 partials unchanged.
#include <gtest/gtest.h>

#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tilelink/sim/gemm_rs_sim.hpp"
#include "tilelink/sim/mlp_sim.hpp"

namespace tilelink::sim {
namespace {

// 2 SMs; one 128 x 256 bf16 tile with k = 64 takes 1 µs on one SM.
CostModel one_tile_per_us() {
  CostModel cost;
  cost.sms = 2;
  cost.flops = 2.0 * (2.0 * 128 * 256 * 64) / 1e-6;
  cost.notify_latency = 0;
  return cost;
}

// FP8: the GEMM at the FP8 rate (fp8_flops), the all-gather moving packed e4m3 rows (K bytes
// plus the row's scales, padded to 16), about half of bf16's bytes.
TEST(AgGemmSim, Fp8ComputesAtItsRateAndSendsPackedRows) {
  AgGemmProblem bf16{256, 512, 256, 2, 2, 1};
  AgGemmProblem fp8 = bf16;
  fp8.dtype = DType::kE4m3;
  fp8.scaling = Fp8Scaling::kRow;
  AgGemmPlanConfig c;
  c.op.comm.comm_rows = 128;
  CostModel cost = one_tile_per_us();
  cost.fp8_flops = 2 * cost.flops;
  cost.ce_chunk_overhead = 0;
  cost.ce_bandwidth = 1e9;
  cost.nvlink_bandwidth = 1e15;
  const AgGemmPrediction a = predict_ag_gemm(bf16, c, cost), b = predict_ag_gemm(fp8, c, cost);
  EXPECT_NEAR(b.t_comp, a.t_comp / 2, 1e-15);
  // Rank 1's 128 rows: 128 x 512 bytes in bf16, 128 x fp8_row_pitch(256, row) = 128 x 272 in e4m3.
  EXPECT_NEAR(a.t_comm, 128.0 * 512 / 1e9, 1e-12);
  EXPECT_NEAR(b.t_comm, 128.0 * fp8_row_pitch(256, Fp8Scaling::kRow) / 1e9, 1e-12);
  EXPECT_EQ(fp8_row_pitch(256, Fp8Scaling::kRow), 272u);
}

// FP8 GEMM+RS: the GEMM at the FP8 rate, the bf16 partials' traffic unchanged.
TEST(GemmRsSim, Fp8HalvesTheGemmNotThePartials) {
  GemmRsProblem bf16{256, 512, 128, 2, 2, 2, 1};  // two ranks, one tile row of two tiles each
  GemmRsProblem fp8 = bf16;
  fp8.dtype = DType::kE4m3;
  GemmRsPlanConfig c;
  c.op.reduce_blocks = 1;
  CostModel cost = one_tile_per_us();
  cost.sm_copy_bandwidth_per_cta = 128.0 * 256 * 2 / 1e-6;
  cost.nvlink_bandwidth = 1e15;
  cost.fp8_flops = 2 * cost.flops;
  const GemmRsPrediction a = predict_gemm_rs(bf16, c, cost), b = predict_gemm_rs(fp8, c, cost);
  EXPECT_NEAR(b.t_comp, a.t_comp / 2, 1e-15);
  EXPECT_NEAR(b.t_comm, a.t_comm, 1e-15);
}

// The FP8 MLP: each GEMM at the FP8 rate, so the whole block's compute halves, the activation
// pass grows by fc2's quantisation of it.
TEST(MlpSim, Fp8HalvesBothGemmsAndQuantisesTheActivation) {
  MlpProblem bf16;
  bf16.world = 8;
  MlpProblem fp8 = bf16;
  fp8.dtype = DType::kE4m3;
  fp8.scaling = Fp8Scaling::kRow;
  const MlpPrediction a = predict_mlp(bf16, MlpPlanConfig{}), b = predict_mlp(fp8, MlpPlanConfig{});
  EXPECT_NEAR(b.t_comp, a.t_comp / 2, a.t_comp * 1e-9);
  EXPECT_LT(b.t_comm, a.t_comm);  // fc1's rows are packed e4m3
  EXPECT_GT(b.t_act, a.t_act);
}

}  // namespace
}  // namespace tilelink::sim
