// AG+GEMM configuration: 128x256x64_c2x1 with the last, partial wave of tiles split along K over the
// CTAs it would leave idle (sm90_split_tail_scheduler.cuh); the whole tiles run as 128x256x64_c2x1's.
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {

Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c2x1_splittail() {
  using Impl = Sm90AgGemmKernelImpl<Sm90AgGemmSplitTailTypes<cute::Shape<cute::_128, cute::_256, cute::_64>,
                                                              cute::Shape<cute::_2, cute::_1, cute::_1>>>;
  return Impl::info("128x256x64_c2x1_splittail");
}

}  // namespace tilelink::detail
