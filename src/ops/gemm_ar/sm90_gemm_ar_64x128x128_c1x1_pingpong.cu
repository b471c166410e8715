// GEMM+AR configuration for small M: 64x128x128 CTA tile, 1x1x1 cluster, ping-pong (each consumer
// warp group its own tile). A 64-row tile halves the MMA work a CTA spends on rows past M, which
// bounds the 128-row tile's time at decode's M (docs/PERF.md, sixth session). K blocks of 128
// (4 stages of 48 KiB) stream the weight 2-5 % faster than K blocks of 64 (7 stages of 24 KiB) at
// M 1-64 on an H100; a 64x256x64 tile was 5-7 % slower (docs/PERF.md, twenty-seventh session).
#include "ops/gemm_ar/sm90_gemm_ar.cuh"

namespace tilelink::detail {

Sm90GemmArConfigInfo sm90_gemm_ar_64x128x128_c1x1_pingpong() {
  using Impl = Sm90GemmArKernelImpl<cute::Shape<cute::_64, cute::_128, cute::_128>,
                                    cute::Shape<cute::_1, cute::_1, cute::_1>, PingPong>;
  return Impl::info("64x128x128_c1x1_pingpong");
}

}  // namespace tilelink::detail
