// MoE part 2 (MoeGemmRs: grouped GEMM + top-k combine + reduce-scatter) on virtual ranks (world
// 1, 2, 4, 8), against cuBLAS GEMMs expert by expert on rows placed by the host mapping, with the
// top-k combine and the rank-order reduction on the CPU (the whole layer: test_moe_layer.cu).
// Routings uniform, skewed and few-experts; top-k 1, 2, 4, 6, 8; sizes off the tiles. Two calls
// per case with fresh routings, weights and inputs; before each, every rank's output and receive
// slots poisoned. Every element within bf16 tolerance of the reference, relative to the magnitude
// of its terms; also bit-identical over repeated calls.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "moe_test_util.hpp"
#include "tilelink/ops/moe/moe_gemm_rs.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::test::moe_rs {
namespace {

struct Part2Shape {
  uint32_t tokens_per_rank, n, k, experts;
};
constexpr Part2Shape kOdd2{150, 200, 72, 10};  // nothing divides the 128x256x64 tiles

// The op and its buffers for one world; the mapping is built per call from fresh ids.
struct Part2Case {
  TestWorld env;
  SymmetricBuffer recv;
  std::vector<std::unique_ptr<MoeMappingBuffers>> mapping;
  std::vector<DeviceBuffer> ids, weights, h, w, out;
  MoeGemmRsArguments args;

  Part2Case(int world_size, uint32_t topk, const Part2Shape& s, std::mt19937_64& rng)
      : env(world_size, size_t(s.tokens_per_rank) * world_size * s.n * 2 + (2 << 20), 8192),
        recv(env.heap.allocate(size_t(s.tokens_per_rank) * world_size * s.n * 2)) {
    const uint32_t tokens = s.tokens_per_rank * static_cast<uint32_t>(world_size);
    const World& world = env.world;
    args.tokens_per_rank = s.tokens_per_rank;
    args.n = s.n;
    args.k = s.k;
    args.experts = s.experts;
    args.topk = topk;
    args.recv = &recv;
    for (int r = 0; r < world_size; ++r) {
      mapping.push_back(
          std::make_unique<MoeMappingBuffers>(tokens, topk, s.experts, MoeGemmRs::tile_m_of(), world.device(r)));
      ids.emplace_back(size_t(tokens) * topk * 4, world.device(r));
      weights.emplace_back(size_t(tokens) * topk * 4, world.device(r));
      h.emplace_back(size_t(mapping.back()->max_rows()) * s.k * 2, world.device(r));
      w.emplace_back(size_t(s.experts) * s.n * s.k * 2, world.device(r));
      out.emplace_back(size_t(s.tokens_per_rank) * s.n * 2, world.device(r));
      upload(w[r].get(), random_bf16(size_t(s.experts) * s.n * s.k, rng).data(), w[r].bytes());
      args.mapping.push_back(mapping.back().get());
      args.h.push_back(h[r].get());
      args.w.push_back(w[r].get());
      args.weights.push_back(weights[r].get<float>());
      args.out.push_back(out[r].get());
    }
  }

  // Fresh routing, weights and rows on every rank; outputs and slots poisoned; mappings built.
  MoeMapping prepare(SyntheticRouting routing, std::vector<float>& weights_host, std::mt19937_64& rng) {
    const World& world = env.world;
    const uint32_t tokens = args.tokens_per_rank * static_cast<uint32_t>(world.size());
    const std::vector<int32_t> routing_ids = synthetic_routing(rng, tokens, args.topk, args.experts, routing);
    weights_host = random_weights(size_t(tokens) * args.topk, rng);
    settle();
    for (int r = 0; r < world.size(); ++r) {
      upload(ids[r].get(), routing_ids.data(), ids[r].bytes());
      upload(weights[r].get(), weights_host.data(), weights[r].bytes());
      upload(h[r].get(), random_bf16(h[r].bytes() / 2, rng).data(), h[r].bytes());
      poison(out[r].get(), out[r].bytes());
      poison(recv.data(r), recv.bytes());
      mapping[r]->build(ids[r].get<int32_t>(), world.compute_stream(r));
    }
    settle();
    return build_moe_mapping({tokens, args.topk, args.experts, routing_ids.data(), weights_host.data()},
                             MoeGemmRs::tile_m_of());
  }
};

std::string run_part2(int world_size, uint32_t topk, SyntheticRouting routing, std::mt19937_64& rng,
                      MoeCombine combine = MoeCombine::kAuto, const Part2Shape& s = kOdd2, uint32_t swizzle = 0) {
  Part2Case c(world_size, topk, s, rng);
  c.args.config.combine = combine;
  c.args.config.swizzle = swizzle;
  if (std::string why = MoeGemmRs::can_implement(c.env.world, c.env.heap, c.args); !why.empty()) return why;
  MoeGemmRs op(c.env.world, c.env.heap, c.env.signals, c.args, "moe_rs_test");
  CublasHandle cublas;
  for (int call = 1; call <= 2; ++call) {
    std::vector<float> weights;
    const MoeMapping host = c.prepare(routing, weights, rng);
    op.run();
    c.env.world.synchronize();
    std::vector<std::vector<float>> y;
    for (int r = 0; r < world_size; ++r) {
      y.push_back(grouped_reference(cublas, host, c.h[r].get(), c.w[r].get(), s.n, s.k, 0));
    }
    if (std::string e = check_moe_outputs(host, weights, y, c.args.out, s.tokens_per_rank, s.n,
                                          "call " + std::to_string(call));
        !e.empty()) {
      return e;
    }
  }
  return "";
}

class MoeGemmRsTest : public ::testing::TestWithParam<WorldRouting> {};

TEST_P(MoeGemmRsTest, OwnersGetTheRankSumOfTopkWeightedExpertRows) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world, routing] = GetParam();
  // The combine blocks, asked for (auto takes the epilogue with peers: MoeGemmRsEpilogueTest).
  expect_every_topk(
      [&](uint32_t topk, std::mt19937_64& rng) { return run_part2(world, topk, routing, rng, MoeCombine::kBlocks); });
}

INSTANTIATE_TEST_SUITE_P(World, MoeGemmRsTest, worlds_and_routings(), world_routing_name);

// The scheduler's bands of tile rows (config.swizzle) over 3 cluster columns, at worlds 1 and 2:
// the combine blocks' and the epilogue combine's counts of landed tiles hold in every walk.
TEST(MoeGemmRs, EveryBandOfTileRowsCombinesCorrectly) {
  TL_SKIP_WITHOUT_GPU();
  expect_every_topk([](uint32_t topk, std::mt19937_64& rng) {
    std::string failed;
    for (uint32_t swizzle : {1u, 2u, 16u}) {
      for (MoeCombine combine : {MoeCombine::kBlocks, MoeCombine::kEpilogue}) {
        const std::string e =
            run_part2(1 + topk / 2 % 2, topk, SyntheticRouting::kSkewed, rng, combine, {300, 1288, 136, 10}, swizzle);
        if (!e.empty()) failed += "swizzle " + std::to_string(swizzle) + ", " + to_string(combine) + ": " + e + "; ";
      }
    }
    return failed;
  });
}

// The combine's tile order is built with atomics (it varies call to call); the bits must not.
TEST(MoeGemmRs, BitIdenticalOverRepeatedCalls) {
  TL_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Part2Case c(4, 4, kOdd2, rng);
  MoeGemmRs op(c.env.world, c.env.heap, c.env.signals, c.args, "moe_rs_determinism");
  std::vector<float> weights;
  c.prepare(SyntheticRouting::kUniform, weights, rng);
  std::vector<std::vector<uint8_t>> first;
  for (int call = 0; call < 20; ++call) {
    for (int r = 0; r < 4; ++r) poison(c.out[r].get(), c.out[r].bytes());
    op.run();
    c.env.world.synchronize();
    for (int r = 0; r < 4; ++r) {
      const auto bits = download<uint8_t>(c.out[r].get(), c.out[r].bytes());
      if (call == 0) {
        ASSERT_FALSE(all_poison(bits));
        first.push_back(bits);
      } else {
        ASSERT_TRUE(bytes_equal(bits, first[r])) << "call " << call << ", rank " << r;
      }
    }
  }
}

// The combine in the GEMM's epilogue (the tile that completes an item combines it; the owners'
// sums follow the GEMM): the same cases as the combine blocks.
class MoeGemmRsEpilogueTest : public ::testing::TestWithParam<WorldRouting> {};

TEST_P(MoeGemmRsEpilogueTest, OwnersGetTheRankSumOfTopkWeightedExpertRows) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world, routing] = GetParam();
  expect_every_topk(
      [&](uint32_t topk, std::mt19937_64& rng) { return run_part2(world, topk, routing, rng, MoeCombine::kEpilogue); });
}

INSTANTIATE_TEST_SUITE_P(World, MoeGemmRsEpilogueTest, worlds_and_routings(), world_routing_name);

// Both combines sum in the same order: on the same inputs the epilogue's output has the combine
// blocks' bits, call after call (the items' completing tiles vary, the sums do not).
TEST(MoeGemmRsEpilogue, SameBitsAsTheCombineBlocksOverRepeatedCalls) {
  TL_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int world : {1, 3, 4}) {
    std::mt19937_64 rng(seed + world);
    Part2Case c(world, 6, kOdd2, rng);
    c.args.config.combine = MoeCombine::kBlocks;
    MoeGemmRs blocks(c.env.world, c.env.heap, c.env.signals, c.args, "moe_rs_blocks");
    c.args.config.combine = MoeCombine::kEpilogue;
    MoeGemmRs epilogue(c.env.world, c.env.heap, c.env.signals, c.args, "moe_rs_epilogue");
    ASSERT_EQ(epilogue.combine(), MoeCombine::kEpilogue);
    std::vector<float> weights;
    c.prepare(SyntheticRouting::kSkewed, weights, rng);
    blocks.run();
    c.env.world.synchronize();
    std::vector<std::vector<uint8_t>> want;
    for (int r = 0; r < world; ++r) want.push_back(download<uint8_t>(c.out[r].get(), c.out[r].bytes()));
    for (int call = 0; call < 10; ++call) {
      for (int r = 0; r < world; ++r) poison(c.out[r].get(), c.out[r].bytes());
      epilogue.run();
      c.env.world.synchronize();
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(bytes_equal(download<uint8_t>(c.out[r].get(), c.out[r].bytes()), want[r]))
            << "world " << world << ", call " << call << ", rank " << r;
      }
    }
  }
}

TEST(MoeGemmRs, RefusesBadArgumentsByName) {
  TL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  Part2Case c(2, 2, kOdd2, rng);
  ASSERT_EQ(MoeGemmRs::can_implement(c.env.world, c.env.heap, c.args), "");
  auto bad = c.args;
  bad.n = 100;
  expect_refused<MoeGemmRs>(c.env, bad, "'n' = 100");
  bad = c.args;
  bad.topk = 3;
  expect_refused<MoeGemmRs>(c.env, bad, "argument 'mapping[0]': built for (tokens, topk, experts)");
  bad = c.args;
  bad.mapping[1] = nullptr;
  expect_refused<MoeGemmRs>(c.env, bad, "'mapping[1]' is null");
  MoeMappingBuffers small_tiles(kOdd2.tokens_per_rank * 2, 2, kOdd2.experts, 64, 0);
  bad = c.args;
  bad.mapping[0] = &small_tiles;
  expect_refused<MoeGemmRs>(c.env, bad, "tiles of 64 rows, expected the kernel's 128");
  bad = c.args;
  bad.config.comm_rows = 4096;  // the combine blocks' staging holds comm_rows * topk pairs (the epilogue has none)
  bad.config.combine = MoeCombine::kBlocks;
  expect_refused<MoeGemmRs>(c.env, bad, "'config.comm_rows' = 4096");
  bad = c.args;
  bad.config.kernel = "nope";
  expect_refused<MoeGemmRs>(c.env, bad, "'config.kernel' = 'nope'");
  bad = c.args;
  bad.tokens_per_rank = 1 << 16;
  expect_refused<MoeGemmRs>(c.env, bad, "argument 'recv'");
  bad = c.args;
  bad.weights.pop_back();
  expect_refused<MoeGemmRs>(c.env, bad, "weights");
  bad = c.args;
  bad.config.method = OpMethod::kDecomposed;
  expect_refused<MoeGemmRs>(c.env, bad, "'config.method' = decomposed");
  bad = c.args;
  bad.config.combine = static_cast<MoeCombine>(7);
  expect_refused<MoeGemmRs>(c.env, bad, "'config.combine' = 7");
  bad = c.args;
  bad.config.combine = MoeCombine::kEpilogue;
  bad.config.method = OpMethod::kNonOverlapped;
  expect_refused<MoeGemmRs>(c.env, bad, "the epilogue combine runs inside the fused GEMM");
}

}  // namespace
}  // namespace tilelink::test::moe_rs
