// AG+GEMM configuration: 128x256x64 CTA tile, no cluster (no multicast; every CTA places on any
// free SM, which matters when several virtual ranks' kernels share the GPU), cooperative.
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {

Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c1x1() {
  using Impl = Sm90AgGemmKernelImpl<Sm90AgGemmTypes<cute::Shape<cute::_128, cute::_256, cute::_64>,
                                                     cute::Shape<cute::_1, cute::_1, cute::_1>>>;
  return Impl::info("128x256x64_c1x1");
}

}  // namespace tilelink::detail
