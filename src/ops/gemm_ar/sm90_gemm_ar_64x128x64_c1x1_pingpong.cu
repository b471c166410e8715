// GEMM+AR configuration for small M: 64x128x64 CTA tile, 1x1x1 cluster, ping-pong (each consumer
// warp group its own tile). A 64-row tile halves the MMA work a CTA spends on rows past M, which
// bounds the 128-row tile's time at decode's M (docs/PERF.md, sixth session).
#include "ops/gemm_ar/sm90_gemm_ar.cuh"

namespace tilelink::detail {

Sm90GemmArConfigInfo sm90_gemm_ar_64x128x64_c1x1_pingpong() {
  using Impl = Sm90GemmArKernelImpl<cute::Shape<cute::_64, cute::_128, cute::_64>,
                                    cute::Shape<cute::_1, cute::_1, cute::_1>, PingPong>;
  return Impl::info("64x128x64_c1x1_pingpong");
}

}  // namespace tilelink::detail
