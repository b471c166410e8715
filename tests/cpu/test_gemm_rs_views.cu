// GEMM+RS's owner-block views (src/ops/gemm_rs/gemm_rs_owner_view.hpp) on identity tensors, on
// the host: the producer's A tile of kernel tile row m must cover rows owner * R + (m within the
// block) * bm of A, whatever R and M; B must ignore the owner; the coordinate map must send every
// kernel tile row to its owner block and a cluster's padding row past the last block. The GEMM
// kernel applies the same views to its TMA coordinate tensors (sm90_gemm_rs.cuh), so this checks
// its addressing without a GPU.
#include <gtest/gtest.h>

#include <cute/tensor.hpp>

#include <cstdint>
#include <string>

#include "ops/gemm_rs/gemm_rs_owner_view.hpp"

namespace tilelink::test {
namespace {

using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;  // the op's GEMM tile

// The producer's tiled views as CUTLASS's sm90 mainloop makes them (load_init: local_tile of the
// TMA coordinate tensor, (BLK, BLK_K, tiles, k tiles, l)). For a K-major operand the TMA tensor's
// basis is (rows, K, l) -> (E<1>, E<0>, E<2>) -- TMA's coordinate 0 is K, the contiguous mode --
// as cute::make_tma_copy builds it (copy_traits_sm90_tma.hpp, construct_tma_gbasis); `tma_basis`
// false gives the identity basis instead. The views must be right for both.
template <bool kTmaBasis, class Shape>
auto coord_tensor(Shape shape) {
  using namespace cute;
  if constexpr (kTmaBasis) {
    return make_coord_tensor(make_layout(shape, make_stride(E<1>{}, E<0>{}, E<2>{})));
  } else {
    return make_coord_tensor(make_layout(shape, make_stride(E<0>{}, E<1>{}, E<2>{})));
  }
}
template <bool kTmaBasis, class Coord>
int row_of(const Coord& c) {
  if constexpr (kTmaBasis) return cute::get<1>(c); else return cute::get<0>(c);
}
template <bool kTmaBasis, class Coord>
int k_of(const Coord& c) {
  if constexpr (kTmaBasis) return cute::get<0>(c); else return cute::get<1>(c);
}

template <bool kTmaBasis>
auto tiled_a(int m, int k) {
  return cute::local_tile(coord_tensor<kTmaBasis>(cute::make_shape(m, k, 1)), TileShape{},
                          cute::make_coord(cute::_, cute::_, cute::_), cute::Step<cute::_1, cute::X, cute::_1>{});
}
template <bool kTmaBasis>
auto tiled_b(int n, int k) {
  return cute::local_tile(coord_tensor<kTmaBasis>(cute::make_shape(n, k, 1)), TileShape{},
                          cute::make_coord(cute::_, cute::_, cute::_), cute::Step<cute::X, cute::_1, cute::_1>{});
}

GemmRsFusedPlan plan_of(uint32_t m, uint32_t world) {
  GemmRsFusedPlan plan;
  plan.set_rows(m, world);
  plan.n = 512;
  plan.bm = 128;
  plan.bn = 256;
  return plan;
}

template <bool kTmaBasis>
void check_owner_block_a() {
  SCOPED_TRACE(kTmaBasis ? "TMA basis (K first)" : "identity basis");
  constexpr int kK = 192;
  for (uint32_t world : {1u, 2u, 3u, 8u}) {
    for (uint32_t m : {1u, 7u, 128u * world, 136u * world, 300u * world + world - 1, 1000u}) {
      const GemmRsFusedPlan plan = plan_of(m, world);
      const auto gA = detail::owner_block_a(tiled_a<kTmaBasis>(static_cast<int>(m), kK), plan);
      ASSERT_EQ(static_cast<uint32_t>(cute::size<2>(gA)), plan.m_tiles());
      ASSERT_EQ(static_cast<uint32_t>(cute::size<4>(gA)), world);
      for (uint32_t m_tile = 0; m_tile < world * plan.m_tiles(); ++m_tile) {
        const auto c = detail::owner_block_coord(plan, cute::make_coord(static_cast<int>(m_tile), 1, 0, 0));
        const int row_in_block = cute::get<0>(c), owner = cute::get<3>(c);
        EXPECT_EQ(static_cast<uint32_t>(owner), plan.tile_owner(m_tile));
        EXPECT_EQ(cute::get<1>(c), 1);
        for (int i : {0, 1, 77, 127}) {
          for (int kt : {0, 2}) {
            const auto at = gA(i, 5, row_in_block, kt, owner);
            const uint32_t want_row = plan.tile_row0(m_tile) + static_cast<uint32_t>(i);
            EXPECT_EQ(static_cast<uint32_t>(row_of<kTmaBasis>(at)), want_row)
                << "world " << world << " m " << m << " tile row " << m_tile << " i " << i;
            EXPECT_EQ(k_of<kTmaBasis>(at), kt * 64 + 5);
            EXPECT_EQ(cute::get<2>(at), 0);  // A's one batch: the descriptor spans A's own rows
          }
        }
      }
    }
  }
}

template <bool kTmaBasis>
void check_any_owner_b() {
  const auto gB = detail::any_owner_b(tiled_b<kTmaBasis>(512, 192));
  for (int owner : {0, 1, 7}) {
    const auto at = gB(3, 4, 1, 2, owner);
    EXPECT_EQ(row_of<kTmaBasis>(at), 256 + 3);
    EXPECT_EQ(k_of<kTmaBasis>(at), 2 * 64 + 4);
    EXPECT_EQ(cute::get<2>(at), 0);
  }
}

TEST(GemmRsViews, ProducerTilesOfAStartAtTheirOwnersRows) {
  check_owner_block_a<true>();
  check_owner_block_a<false>();
}

TEST(GemmRsViews, BIgnoresTheOwnerAndPaddingRowsLandPastTheLastBlock) {
  check_any_owner_b<true>();
  check_any_owner_b<false>();
  // A 2x1 cluster rounds 3 owners x 3 tile rows up to 10: the tenth row is the last owner's
  // fourth, past its R = 300 rows (stored nowhere; its A rows past M load as zeros).
  const GemmRsFusedPlan plan = plan_of(900, 3);
  ASSERT_EQ(plan.m_tiles(), 3u);
  const auto c = detail::owner_block_coord(plan, cute::make_coord(9, 0, 0, 0));
  EXPECT_EQ(cute::get<3>(c), 2);
  EXPECT_EQ(cute::get<0>(c), 3);
  EXPECT_GE(uint32_t(cute::get<0>(c)) * plan.bm, plan.rows_per_rank);
}

// The epilogue's destination through a rotated affine view: storing rank r of a process world sees
// owner o's segment at block (o - r) mod P of its view (NVSHMEM maps peer (r + k) mod P at k
// strides); on one device every view starts at rank 0 (origin 0: the owner itself). Every kernel
// tile row, every origin, worlds 1 to 8, padding rows included.
TEST(GemmRsViews, PushDestinationsRotateWithTheViewsOrigin) {
  for (uint32_t world : {1u, 2u, 3u, 8u}) {
    const GemmRsFusedPlan plan = plan_of(300 * world + world - 1, world);
    for (uint32_t origin = 0; origin < world; ++origin) {
      for (uint32_t m_tile = 0; m_tile < world * plan.m_tiles() + 1; ++m_tile) {  // + a cluster's padding row
        const auto at = cute::make_coord(static_cast<int>(m_tile), 3, 0, 0);
        const auto plain = detail::owner_block_coord(plan, at);
        const auto rotated = detail::destination_block_coord(plan, at, origin);
        const uint32_t owner = static_cast<uint32_t>(cute::get<3>(plain));
        EXPECT_EQ((origin + static_cast<uint32_t>(cute::get<3>(rotated))) % world, owner)
            << "world " << world << " origin " << origin << " tile row " << m_tile;
        EXPECT_EQ(cute::get<0>(rotated), cute::get<0>(plain));
        EXPECT_EQ(cute::get<1>(rotated), 3);
        if (origin == 0) EXPECT_EQ(cute::get<3>(rotated), cute::get<3>(plain));
      }
    }
  }
}

}  // namespace
}  // namespace tilelink::test
