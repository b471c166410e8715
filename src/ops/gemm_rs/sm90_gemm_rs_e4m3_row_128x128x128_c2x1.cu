// GEMM+RS configuration, FP8 with row scaling (fp8.hpp): e4m3 A (packed rows) and B, 128x128x128 CTA
// tile, 2x1 cluster (B multicast: AG+GEMM's fastest FP8 tile, docs/PERF.md), cooperative
// (sm90_fp8_tn_gemm.cuh).
#include "ops/gemm_rs/sm90_gemm_rs.cuh"

namespace tilelink::detail {

Sm90GemmRsConfigInfo sm90_gemm_rs_e4m3_row_128x128x128_c2x1() {
  using Impl = Sm90GemmRsKernelImpl<Sm90GemmRsFp8Types<cute::Shape<cute::_128, cute::_128, cute::_128>,
                                                        cute::Shape<cute::_2, cute::_1, cute::_1>, Fp8Scaling::kRow>>;
  return Impl::info("e4m3_row_128x128x128_c2x1");
}

}  // namespace tilelink::detail
