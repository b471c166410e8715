// The tensor-parallel MLP's configuration (Mlp, mlp.hpp): its activation and the configurations
// of its two ops, each tuned and cached as that op's (fc1 AG+GEMM, fc2 GEMM+RS).
#pragma once

#include <cstdint>

#include "tilelink/ops/ag_gemm/ag_gemm_config.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"

namespace tilelink {

enum class MlpActivation : uint32_t { kSwiGlu = 0, kGelu = 1 };
const char* to_string(MlpActivation a);

struct MlpConfig {
  MlpActivation activation = MlpActivation::kSwiGlu;
  AgGemmConfig fc1;
  GemmRsConfig fc2;
};

}  // namespace tilelink
