// The compiled configurations of the MoE grouped GEMM (parts 1 and 2 share them), first the
// default.
#include "ops/moe/sm90_moe_gemm_kernel.hpp"

#include "ops/common/kernel_configs.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::detail {

// One function per compiled configuration (sm90_moe_gemm_<config>.cu).
Sm90MoeGemmConfigInfo sm90_moe_gemm_128x256x64_c1x2();
Sm90MoeGemmConfigInfo sm90_moe_gemm_128x128x64_c1x2();

const std::vector<Sm90MoeGemmConfigInfo>& sm90_moe_gemm_configs() {
  static const std::vector<Sm90MoeGemmConfigInfo> configs = {sm90_moe_gemm_128x256x64_c1x2(),
                                                             sm90_moe_gemm_128x128x64_c1x2()};
  return configs;
}

uint32_t moe_gemm_tile_m(const std::string& kernel, const char* where) {
  const Sm90MoeGemmConfigInfo* info = find_config(sm90_moe_gemm_configs(), kernel);
  if (info == nullptr) throw InvalidArgument(std::string(where) + ": " + unknown_config(sm90_moe_gemm_configs(), kernel));
  return info->tile_m;
}

}  // namespace tilelink::detail
