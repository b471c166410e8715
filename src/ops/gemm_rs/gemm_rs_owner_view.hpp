// GEMM+RS's owner-block views (host and device; tests/cpu/test_gemm_rs_views.cu checks them on
// identity tensors): the kernel's M is P owner blocks of whole tile rows (GemmRsFusedPlan), and
// each block starts at row owner * R of A and of the owner's destination.
#pragma once

#include <cute/tensor.hpp>

#include "ops/common/cute_views.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"

namespace tilelink::detail {

// A kernel tile coordinate (m over every owner's tile rows, n, k, l) -> (tile row within the
// owner block, n, k, owner). A cluster's padding tile row (m >= P * m_tiles) maps past the last
// block's rows, where TMA loads zeros and stores nothing.
template <class TileCoord>
CUTE_HOST_DEVICE auto owner_block_coord(const GemmRsFusedPlan& plan, TileCoord const& coord) {
  const int m = static_cast<int>(cute::get<0>(coord));
  const int mt = static_cast<int>(plan.m_tiles()), last = static_cast<int>(plan.world) - 1;
  const int owner = m < mt * (last + 1) ? m / mt : last;
  return cute::make_coord(m - owner * mt, static_cast<int>(cute::get<1>(coord)), static_cast<int>(cute::get<2>(coord)),
                          owner);
}

// The epilogue's destination coordinate: owner_block_coord with the owner mode rotated by `origin`,
// the rank whose segment starts the store's affine view of the heap (SymmetricHeap::affine_origin:
// 0 on one device, where every view starts at rank 0's segment; the storing rank itself in a
// process world, where NVSHMEM maps peer (me + k) mod P at k strides). Owner o is then block
// (o - origin) mod P of the view; its padding rows stay past the last rows of their block.
template <class TileCoord>
CUTE_HOST_DEVICE auto destination_block_coord(const GemmRsFusedPlan& plan, TileCoord const& coord, uint32_t origin) {
  const auto c = owner_block_coord(plan, coord);
  const int block = static_cast<int>((static_cast<uint32_t>(cute::get<3>(c)) + plan.world - origin) % plan.world);
  return cute::make_coord(cute::get<0>(c), cute::get<1>(c), cute::get<2>(c), block);
}

// The kernel's problem (P blocks of whole tile rows, N, K, L) with A's own M rows: what A's TMA
// descriptor and tiled view are built over.
template <class ProblemShape>
CUTE_HOST_DEVICE auto a_rows_problem(const GemmRsFusedPlan& plan, ProblemShape const& problem) {
  return cute::make_shape(static_cast<int>(plan.m), cute::get<1>(problem), cute::get<2>(problem),
                          cute::get<3>(problem));
}

// The producer's A, (BLK_M, BLK_K, m, k, l) over A's own rows -> (BLK_M, BLK_K, tile row within
// the block, k, owner), owner l's rows from l * R. The step is R times the row mode's own stride:
// in the TMA coordinate tensor of a K-major A, TMA's coordinate 0 is K and the rows are E<1>
// (CuTe orders the TMA modes by the shared-memory layout's contiguous mode), so a step written
// as R * E<0> would have moved along K (found by review before the kernel first ran).
template <class TiledA>
CUTE_HOST_DEVICE auto owner_block_a(TiledA const& gA, const GemmRsFusedPlan& plan) {
  return with_batch_mode(with_tile_count(gA, static_cast<int>(plan.m_tiles())), static_cast<int>(plan.world),
                         static_cast<int>(plan.rows_per_rank) * cute::get<0>(gA.stride()));
}

// The producer's B, whose batch coordinate (the owner) must leave it alone.
template <class TiledB>
CUTE_HOST_DEVICE auto any_owner_b(TiledB const& gB) {
  return with_batch_mode(gB, cute::get<4>(gB.shape()), cute::Int<0>{});
}

}  // namespace tilelink::detail
