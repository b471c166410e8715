// AG+GEMM configuration, FP8 with block scaling (fp8.hpp): e4m3 A and B, 128x128x128 CTA tile, 2x1
// cluster (B multicast to the pair: a 128x128 FP8 tile without it asks L2 for about 11 TB/s at
// cuBLASLt's rate), cooperative (sm90_fp8_tn_gemm.cuh).
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {

Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_block_128x128x128_c2x1() {
  using Impl = Sm90AgGemmKernelImpl<Sm90AgGemmFp8Types<cute::Shape<cute::_128, cute::_128, cute::_128>,
                                                        cute::Shape<cute::_2, cute::_1, cute::_1>, Fp8Scaling::kBlock>>;
  return Impl::info("e4m3_block_128x128x128_c2x1");
}

}  // namespace tilelink::detail
