// GEMM+RS configuration: 128x128x64 CTA tile, 2x1x1 cluster, cooperative. Twice the tiles of
// 128x256x64 (a shorter last wave, more owner tiles to overlap), at a lower tile rate; by name
// (GemmRsConfig::kernel).
#include "ops/gemm_rs/sm90_gemm_rs.cuh"

namespace tilelink::detail {

Sm90GemmRsConfigInfo sm90_gemm_rs_128x128x64_c2x1() {
  using Impl = Sm90GemmRsKernelImpl<
      Sm90GemmRsTypes<cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_2, cute::_1, cute::_1>>>;
  return Impl::info("128x128x64_c2x1");
}

}  // namespace tilelink::detail
