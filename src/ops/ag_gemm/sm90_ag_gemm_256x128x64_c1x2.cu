// AG+GEMM configuration: 256x128x64 CTA tile, 1x2x1 cluster (A multicast across the pair, so both
// CTAs of a cluster wait on the same 256 rows), cooperative.
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {

Sm90AgGemmConfigInfo sm90_ag_gemm_256x128x64_c1x2() {
  using Impl = Sm90AgGemmKernelImpl<Sm90AgGemmTypes<cute::Shape<cute::_256, cute::_128, cute::_64>,
                                                     cute::Shape<cute::_1, cute::_2, cute::_1>>>;
  return Impl::info("256x128x64_c1x2");
}

}  // namespace tilelink::detail
