// Views of a producer's tiled operand that ops share (host and device: the CPU suite checks them
// on identity tensors, tests/cpu/test_gemm_rs_views.cu).
#pragma once

#include <cute/tensor.hpp>

namespace tilelink::detail {

// A producer's tiled view of an operand, (BLK, BLK_K, tile, k tile, l), with its batch mode l
// given `extent` and `stride` (a coordinate stride of the operand's TMA tensor): Int<0> for an
// operand the batch coordinate must leave alone, a multiple of a mode's own stride to step along
// that mode (the TMA tensor's basis elements need not be in the operand's mode order).
template <class Tiled, class Extent, class Stride>
CUTE_HOST_DEVICE auto with_batch_mode(Tiled const& tiled, Extent extent, Stride stride) {
  static_assert(decltype(cute::rank(tiled.layout()))::value == 5);
  return cute::make_tensor(tiled.data(), cute::make_layout(cute::replace<4>(tiled.shape(), extent),
                                                           cute::replace<4>(tiled.stride(), stride)));
}

// The same view with its tile mode (2) of `tiles` tiles.
template <class Tiled, class Extent>
CUTE_HOST_DEVICE auto with_tile_count(Tiled const& tiled, Extent tiles) {
  static_assert(decltype(cute::rank(tiled.layout()))::value == 5);
  return cute::make_tensor(tiled.data(), cute::make_layout(cute::replace<2>(tiled.shape(), tiles), tiled.stride()));
}

}  // namespace tilelink::detail
