// AG+GEMM configuration, FP8 with row scaling (fp8.hpp): e4m3 A and B, 128x128x128 CTA tile, no
// cluster, cooperative (sm90_fp8_tn_gemm.cuh).
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {

Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_row_128x128x128_c1x1() {
  using Impl = Sm90AgGemmKernelImpl<Sm90AgGemmFp8Types<cute::Shape<cute::_128, cute::_128, cute::_128>,
                                                        cute::Shape<cute::_1, cute::_1, cute::_1>, Fp8Scaling::kRow>>;
  return Impl::info("e4m3_row_128x128x128_c1x1");
}

}  // namespace tilelink::detail
