// GEMM+RS configuration: 128x128x64 CTA tile, 2x2x1 cluster, cooperative: the 128x128 tile with
// A multicast along N as well as B along M, so that each CTA loads as many bytes per FLOP as the
// 128x256x64 2x1 one (the 2x1 128x128 tile asks L2 for about 1.5x as much); by name
// (GemmRsConfig::kernel).
#include "ops/gemm_rs/sm90_gemm_rs.cuh"

namespace tilelink::detail {

Sm90GemmRsConfigInfo sm90_gemm_rs_128x128x64_c2x2() {
  using Impl = Sm90GemmRsKernelImpl<
      Sm90GemmRsTypes<cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_2, cute::_2, cute::_1>>>;
  return Impl::info("128x128x64_c2x2");
}

}  // namespace tilelink::detail
