// MoE grouped GEMM configuration: 128x128x64 CTA tile, 1x2x1 cluster, cooperative -- for the
// narrow per-rank expert slices of many-expert models (n = 1408 is 11 tiles of 128, 5.5 of 256).
#include "ops/moe/sm90_moe_gemm.cuh"

namespace tilelink::detail {

Sm90MoeGemmConfigInfo sm90_moe_gemm_128x128x64_c1x2() {
  using Impl = Sm90MoeGemmKernelImpl<cute::Shape<cute::_128, cute::_128, cute::_64>,
                                     cute::Shape<cute::_1, cute::_2, cute::_1>>;
  return Impl::info("128x128x64_c1x2");
}

}  // namespace tilelink::detail
