// GEMM+AR configuration: 128x128x64 CTA tile, 1x1x1 cluster, cooperative. Narrow tiles: decode's
// N = hidden gives N / 128 tiles per tile row to stream the weight with (split K adds more).
#include "ops/gemm_ar/sm90_gemm_ar.cuh"

namespace tilelink::detail {

Sm90GemmArConfigInfo sm90_gemm_ar_128x128x64_c1x1() {
  using Impl = Sm90GemmArKernelImpl<cute::Shape<cute::_128, cute::_128, cute::_64>,
                                    cute::Shape<cute::_1, cute::_1, cute::_1>>;
  return Impl::info("128x128x64_c1x1");
}

}  // namespace tilelink::detail
