// The tensor-parallel MLP's configuration (Mlp, mlp.hpp): its activation and the configurations
// of its two ops, each tuned and cached as that op's (fc1 AG+GEMM, fc2 GEMM+RS).
#pragma once

#include <cstdint>

#include "tilelink/ops/ag_gemm/ag_gemm_config.hpp"
#include "tilelink/ops/common/mlp_activation.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"

namespace tilelink {

struct MlpConfig {
  MlpActivation activation = MlpActivation::kSwiGlu;
  AgGemmConfig fc1;
  GemmRsConfig fc2;
};

}  // namespace tilelink
