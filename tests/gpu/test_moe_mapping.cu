// The MoE dynamic mapping built on the device (MoeMappingBuffers) against the host reference
// (build_moe_mapping, make_moe_tile_order), table by table, for random routings: uniform, skewed
// to one expert, experts without tokens; top-k 1, 2, 6, 8; token counts not multiples of the
// tile; every rank's tile order at world 1, 2, 4 and 8. Tables are poisoned before each build.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/ops/moe/moe_mapping_device.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::test::moe {
namespace {

std::vector<uint32_t> fetch(const uint32_t* p, size_t n) { return download<uint32_t>(p, n); }

TEST(MoeMappingDevice, MatchesTheHostTablesAndTileOrders) {
  TL_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (uint32_t world : {1u, 2u, 4u, 8u}) {
    for (uint32_t topk : {1u, 2u, 6u, 8u}) {
      for (int kind = 0; kind < 3; ++kind) {
        const uint32_t experts = 16, bm = 128, per_rank = 1000 + 37 * world;  // nothing divides
        const uint32_t tokens = world * per_rank;
        SCOPED_TRACE("world " + std::to_string(world) + " topk " + std::to_string(topk) + " routing " +
                     to_string(SyntheticRouting(kind)));
        const std::vector<int32_t> ids = synthetic_routing(rng, tokens, topk, experts, SyntheticRouting(kind));
        DeviceBuffer ids_dev(ids.size() * 4, 0);
        upload(ids_dev.get(), ids.data(), ids_dev.bytes());
        MoeMappingBuffers dev(tokens, topk, experts, bm, 0);
        const MoeMappingView poisoned = dev.view(dev.max_tiles());
        for (const uint32_t* p : {poisoned.tile_expert, poisoned.tile_token0, poisoned.tile_span}) {
          poison(const_cast<uint32_t*>(p), dev.max_tiles() * 4);
        }
        poison(const_cast<uint32_t*>(poisoned.pair_row), size_t(tokens) * topk * 4);
        dev.build(ids_dev.get<int32_t>(), nullptr);
        settle();
        const MoeMapping host = build_moe_mapping({tokens, topk, experts, ids.data(), nullptr}, bm);
        const uint32_t tiles = fetch(dev.num_tiles_device(), 1)[0];
        ASSERT_EQ(tiles, host.num_tiles());
        const MoeMappingView v = dev.view(tiles);
        EXPECT_EQ(fetch(v.row_offset, experts + 1), host.row_offset);
        EXPECT_EQ(fetch(v.row_pair, size_t(tiles) * bm), host.row_pair);
        EXPECT_EQ(fetch(v.tile_expert, tiles), host.tile_expert);
        EXPECT_EQ(fetch(v.tile_token0, tiles), host.tile_token0);
        EXPECT_EQ(fetch(v.tile_span, tiles), host.tile_span);
        EXPECT_EQ(fetch(v.pair_row, size_t(tokens) * topk), host.pair_row);

        AllGatherPlan ag;
        ag.map = RowShardMapping{per_rank, 256, world};
        ag.row_bytes = ag.pitch = 16;
        DeviceBuffer order_dev(dev.max_tiles() * 4, 0);
        for (uint32_t r = 0; r < world; ++r) {
          poison(order_dev.get(), order_dev.bytes());
          dev.build_order(ag, r, order_dev.get<uint32_t>(), nullptr);
          settle();
          std::vector<uint32_t> want(tiles);
          make_moe_tile_order(ag, r, host.view(), want.data());
          EXPECT_EQ(fetch(order_dev.get<uint32_t>(), tiles), want) << "rank " << r;
        }
      }
    }
  }
}

TEST(MoeMappingDevice, RefusesImpossibleSizes) {
  TL_SKIP_WITHOUT_GPU();
  EXPECT_THROW(MoeMappingBuffers(0, 2, 8, 128, 0), InvalidArgument);
  EXPECT_THROW(MoeMappingBuffers(64, 9, 8, 128, 0), InvalidArgument);
  EXPECT_THROW(MoeMappingBuffers(64, 2, 2000, 128, 0), InvalidArgument);
}

}  // namespace
}  // namespace tilelink::test::moe
