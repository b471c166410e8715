// MoE grouped GEMM configuration: 128x256x64 CTA tile, 1x2x1 cluster (A multicast across the
// N pair, which shares the tile row's expert), cooperative.
#include "ops/moe/sm90_moe_gemm.cuh"

namespace tilelink::detail {

Sm90MoeGemmConfigInfo sm90_moe_gemm_128x256x64_c1x2() {
  using Impl = Sm90MoeGemmKernelImpl<cute::Shape<cute::_128, cute::_256, cute::_64>,
                                     cute::Shape<cute::_1, cute::_2, cute::_1>>;
  return Impl::info("128x256x64_c1x2");
}

}  // namespace tilelink::detail
