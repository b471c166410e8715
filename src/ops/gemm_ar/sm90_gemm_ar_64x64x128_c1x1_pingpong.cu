// GEMM+AR configuration for decode's few rows where N is narrow for the SMs: 64x64x128 CTA tile,
// 1x1x1 cluster, ping-pong. Twice the 64x128 tile's CTAs over N, so the weight streams through
// about every SM in one K slice: no slices' partials to sum, and at one rank (no norm) the GEMM
// writes the output itself -- the op is the GEMM (sm90_gemm_ar_config, issue 21).
#include "ops/gemm_ar/sm90_gemm_ar.cuh"

namespace tilelink::detail {

Sm90GemmArConfigInfo sm90_gemm_ar_64x64x128_c1x1_pingpong() {
  using Impl = Sm90GemmArKernelImpl<cute::Shape<cute::_64, cute::_64, cute::_128>,
                                    cute::Shape<cute::_1, cute::_1, cute::_1>, PingPong>;
  return Impl::info("64x64x128_c1x1_pingpong");
}

}  // namespace tilelink::detail
