// AG+GEMM configuration: 128x256x64 CTA tile, 2x1x1 cluster (B multicast across the pair),
// cooperative (two consumer warp groups share each tile).
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {

Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c2x1() {
  using Impl = Sm90AgGemmKernelImpl<Sm90AgGemmTypes<cute::Shape<cute::_128, cute::_256, cute::_64>,
                                                     cute::Shape<cute::_2, cute::_1, cute::_1>>>;
  return Impl::info("128x256x64_c2x1");
}

}  // namespace tilelink::detail
