// MoE part 1 (MoeAgGroupGemm: all-gather + gather + grouped GEMM) on virtual ranks (world 1, 2,
// 4, 8) against cuBLAS, expert by expert, on rows placed by the host mapping.
//
// Routings uniform, skewed to one expert and few-experts (most experts without tokens); top-k 1,
// 2, 4, 6, 8; token counts, hidden and n that are not multiples of the 128x256x64 tile. Each case
// makes two calls, each with a fresh routing and fresh tokens (the mapping is rebuilt on the
// device every call); before each call every rank's out and the peer rows of its gathered X are
// poisoned (a tile computed before its rows arrived reads NaN). Checked on every rank: every
// pair's row within bf16 tolerance of cuBLAS, padding rows exactly zero, rows past the routing's
// tiles never written, and the device's tile count against the host mapping's.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "moe_test_util.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::test::moe_ag {
namespace {

struct Shape {
  uint32_t tokens_per_rank, hidden, n, experts;
};
constexpr Shape kOdd{150, 200, 264, 10};  // nothing divides the tiles

// The arguments of shape `s` and top-k `topk` on the tokens `x`, without the per-rank buffers.
MoeAgGroupGemmArguments sized_arguments(const SymmetricBuffer& x, const Shape& s, uint32_t topk) {
  MoeAgGroupGemmArguments args;
  args.x = &x;
  args.tokens_per_rank = s.tokens_per_rank;
  args.hidden = s.hidden;
  args.n = s.n;
  args.experts = s.experts;
  args.topk = topk;
  return args;
}

// Every one of `ranks` ranks names the same ids, w and out: enough for the argument checks, which
// run nothing.
void attach_shared_buffers(MoeAgGroupGemmArguments& args, int ranks, const DeviceBuffer& ids, const DeviceBuffer& w,
                           const DeviceBuffer& out) {
  args.ids.assign(size_t(ranks), ids.get<int32_t>());
  args.w.assign(size_t(ranks), w.get());
  args.out.assign(size_t(ranks), out.get());
}

// With `from_source` every rank's shard comes from its own buffer outside the heap (x_source), the
// second call's from a second buffer (set_operands); the heap's rows, the rank's own included, are
// poisoned before each call, and so is the source buffer not in use.
std::string run_case(int world_size, uint32_t topk, SyntheticRouting routing, const Shape& s, CommResource resource,
                     std::mt19937_64& rng, uint32_t swizzle = 0, bool from_source = false,
                     OpMethod method = OpMethod::kAuto) {
  constexpr int kCalls = 2;
  const uint32_t tokens = s.tokens_per_rank * static_cast<uint32_t>(world_size);
  const size_t x_bytes = size_t(tokens) * s.hidden * 2, shard_bytes = size_t(s.tokens_per_rank) * s.hidden * 2;
  TestWorld env(world_size, x_bytes + (2 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer x = env.heap.allocate(x_bytes);

  MoeAgGroupGemmArguments args = sized_arguments(x, s, topk);
  args.config.comm.resource = resource;
  args.config.swizzle = swizzle;
  args.config.method = method;
  const uint64_t out_rows = MoeAgGroupGemm::out_rows(world, args);
  std::vector<DeviceBuffer> ids, w, out, source[2];
  std::vector<std::vector<__nv_bfloat16>> w_host;
  for (int r = 0; r < world_size; ++r) {
    ids.emplace_back(size_t(tokens) * topk * 4, world.device(r));
    w.emplace_back(size_t(s.experts) * s.n * s.hidden * 2, world.device(r));
    out.emplace_back(out_rows * s.n * 2, world.device(r));
    upload(w[r].get(), random_bf16(size_t(s.experts) * s.n * s.hidden, rng).data(), w[r].bytes());
    args.ids.push_back(ids[r].get<int32_t>());
    args.w.push_back(w[r].get());
    args.out.push_back(out[r].get());
    if (from_source) {
      for (auto& set : source) set.emplace_back(shard_bytes, world.device(r));
      args.x_source.push_back(source[0][r].get());
    }
  }
  if (std::string why = MoeAgGroupGemm::can_implement(world, env.heap, args); !why.empty()) return why;
  MoeAgGroupGemm op(world, env.heap, env.signals, args, "moe_ag_test");
  if (method != OpMethod::kAuto && op.method() != method) {
    return std::string("the op runs ") + to_string(op.method()) + ", expected " + to_string(method);
  }
  if (from_source) {  // built with x_source: the overload without it is refused by name
    try {
      op.set_operands(0, ids[0].get<int32_t>(), w[0].get(), out[0].get());
      return "set_operands without x_source was accepted by an op built with it";
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("built with x_source") == std::string::npos) return e.what();
    }
  }
  CublasHandle cublas;
  DeviceBuffer sorted(out_rows * s.hidden * 2, world.device(0)), ref(out_rows * s.n * sizeof(float), world.device(0));

  for (int call = 1; call <= kCalls; ++call) {
    const std::string where = "call " + std::to_string(call);
    settle();
    const std::vector<int32_t> routing_ids = synthetic_routing(rng, tokens, topk, s.experts, routing);
    const std::vector<__nv_bfloat16> x_host = random_bf16(size_t(tokens) * s.hidden, rng);
    for (int r = 0; r < world_size; ++r) {
      upload(ids[r].get(), routing_ids.data(), ids[r].bytes());
      char* g = static_cast<char*>(x.data(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, x_bytes));  // bf16 0xFFFF is NaN
      const char* shard = reinterpret_cast<const char*>(x_host.data()) + r * shard_bytes;
      if (from_source) {
        DeviceBuffer& now = source[(call - 1) % 2][r];
        TL_CUDA_CHECK(cudaMemset(source[call % 2][r].get(), 0xFF, shard_bytes));
        upload(now.get(), shard, shard_bytes);
        if (call > 1) op.set_operands(r, ids[r].get<int32_t>(), w[r].get(), out[r].get(), now.get());
      } else {
        upload(g + r * shard_bytes, shard, shard_bytes);
      }
      poison(out[r].get(), out[r].bytes());
    }
    settle();
    op.run();
    world.synchronize();

    // The reference: rows placed by the host mapping, each expert's block by cuBLAS.
    const MoeMapping host = build_moe_mapping({tokens, topk, s.experts, routing_ids.data(), nullptr}, op.tile_m());
    const uint32_t rows = host.num_tiles() * host.bm;
    const std::vector<__nv_bfloat16> a_host = sorted_rows(host, x_host, s.hidden);
    upload(sorted.get(), a_host.data(), a_host.size() * 2);
    for (int r = 0; r < world_size; ++r) {
      const std::string at = where + ", rank " + std::to_string(r);
      const uint32_t device_tiles = download<uint32_t>(op.mapping(r).num_tiles_device(), 1)[0];
      if (device_tiles != host.num_tiles()) {
        return at + ": device mapping has " + std::to_string(device_tiles) + " tiles, host " +
               std::to_string(host.num_tiles());
      }
      for (uint32_t e = 0; e < s.experts; ++e) {
        const uint32_t row0 = host.row_offset[e], rows_e = host.row_offset[e + 1] - row0;
        if (rows_e == 0) continue;
        cublas_reference(cublas.get(), static_cast<const char*>(sorted.get()) + size_t(row0) * s.hidden * 2,
                         static_cast<const char*>(w[r].get()) + size_t(e) * s.n * s.hidden * 2,
                         ref.get<float>() + size_t(row0) * s.n, rows_e, s.n, s.hidden);
      }
      settle();
      const auto got = download<__nv_bfloat16>(out[r].get(), out_rows * s.n);
      const auto want = download<float>(ref.get(), size_t(rows) * s.n);
      for (size_t i = 0; i < size_t(rows) * s.n; ++i) {
        const float g = __bfloat162float(got[i]);
        const bool pad = host.row_pair[i / s.n] == kPadRow;
        const bool ok = pad ? g == 0.0f : std::fabs(g - want[i]) <= 8e-3f * std::fabs(want[i]) + 1e-2f;
        if (!ok) {
          return at + ": row " + std::to_string(i / s.n) + (pad ? " (padding)" : "") + " col " +
                 std::to_string(i % s.n) + " = " + std::to_string(g) + ", cuBLAS " + std::to_string(want[i]);
        }
      }
      const auto tail = download<uint8_t>(static_cast<const char*>(out[r].get()) + size_t(rows) * s.n * 2,
                                          (out_rows - rows) * s.n * 2);
      if (!all_poison(tail)) return at + ": rows past the routing's " + std::to_string(rows) + " were written";
    }
  }
  return "";
}

class MoeAgGroupGemmTest : public ::testing::TestWithParam<WorldRouting> {};

TEST_P(MoeAgGroupGemmTest, EveryPairRowMatchesCublas) {
  TL_SKIP_WITHOUT_GPU();
  const int world = std::get<0>(GetParam());
  const SyntheticRouting routing = std::get<1>(GetParam());
  expect_every_topk([&](uint32_t topk, std::mt19937_64& rng) {
    return run_case(world, topk, routing, kOdd, CommResource::kCopyEngine, rng);
  });
}

INSTANTIATE_TEST_SUITE_P(World, MoeAgGroupGemmTest, worlds_and_routings(), world_routing_name);

// The all-gather on SM blocks instead of the copy engine.
TEST(MoeAgGroupGemm, SmAllGather) {
  TL_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  EXPECT_EQ(run_case(4, 2, SyntheticRouting::kUniform, kOdd, CommResource::kSm, rng), "");
}

// Each rank's shard where the caller has it (x_source, a PyTorch tensor's place): copied into the
// gathered rows under the all-gather beyond one rank, read in place at world 1; the copy engine and
// SM all-gathers, fused and non-overlapped, the shard moving to another buffer on the second call.
TEST(MoeAgGroupGemm, TakesTheShardFromASource) {
  TL_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int world : {1, 2, 3, 8}) {
    for (CommResource resource : {CommResource::kCopyEngine, CommResource::kSm}) {
      for (OpMethod method : {OpMethod::kFused, OpMethod::kNonOverlapped}) {
        const Shape s{world == 8 ? 40u : 150u, 200, 264, 10};
        EXPECT_EQ(run_case(world, 2, SyntheticRouting::kSkewed, s, resource, rng, 0, true, method), "")
            << "world " << world << ", " << to_string(resource) << ", " << to_string(method);
      }
    }
  }
}

// The scheduler's bands of tile rows (config.swizzle; 0 = automatic, 8) on a shape of 6 N tiles
// (3 cluster columns) and 9-12 tile rows a rank: bands that end inside the rows, one band for
// all, row by row; each band's rows walked column by column while the gather still fills them.
TEST(MoeAgGroupGemm, EveryBandOfTileRowsMatchesCublas) {
  TL_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (uint32_t swizzle : {0u, 1u, 2u, 4u, 16u}) {
    for (int world : {1, 3}) {
      for (SyntheticRouting routing : {SyntheticRouting::kUniform, SyntheticRouting::kSkewed}) {
        EXPECT_EQ(run_case(world, 2, routing, Shape{600 / static_cast<uint32_t>(world), 264, 1288, 6},
                           CommResource::kCopyEngine, rng, swizzle),
                  "")
            << "swizzle " << swizzle << ", world " << world << ", routing " << static_cast<int>(routing);
      }
    }
  }
}

TEST(MoeAgGroupGemm, RefusesBadArgumentsByName) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 4 << 20, 4096);
  SymmetricBuffer x = env.heap.allocate(2 << 20);
  DeviceBuffer ids(4096, 0), w(1 << 20, 0), out(1 << 20, 0);
  MoeAgGroupGemmArguments good = sized_arguments(x, Shape{64, 256, 256, 4}, 2);
  attach_shared_buffers(good, 2, ids, w, out);
  ASSERT_EQ(MoeAgGroupGemm::can_implement(env.world, env.heap, good), "");
  using A = MoeAgGroupGemmArguments;
  const uint32_t budget = static_cast<uint32_t>(env.world.sm_budget(0));
  expect_refusals<MoeAgGroupGemm>(env, good, {
      {[](A& a) { a.n = 100; }, "'n' = 100"},
      {[](A& a) { a.topk = 5; }, "'topk' = 5"},
      {[](A& a) { a.config.kernel = "nope"; }, "'config.kernel' = 'nope'"},
      {[](A& a) { a.config.swizzle = 3; }, "'config.swizzle' = 3: expected 1, 2, 4, 8 or 16"},
      {[](A& a) { a.tokens_per_rank = 1 << 20; }, "argument 'x'"},
      {[](A& a) { a.ids.pop_back(); }, "ids"},
      {[&](A& a) { a.x_source.assign(1, w.get()); }, "argument 'x_source' has 1 pointers: expected one per rank"},
      {[&](A& a) { a.x_source.assign(2, static_cast<const char*>(w.get()) + 2); }, "argument 'x_source[0]'"},
      // The fuzzer's deadlocks (issue 24): the grouped GEMM's and the gather's CTAs of both ranks
      // filled the GPU, and the copy engine's device-local copies never ran. Refused, by the knob.
      {[&](A& a) {
         a.config.comm.resource = CommResource::kCopyEngine;
         a.config.gather_blocks = 1;
         a.config.gemm_sms = budget;
       },
       "'config.gemm_sms' = " + std::to_string(budget) + ": 2 virtual ranks would keep"},
      // Nothing left for the grouped GEMM: the gather's knob is named.
      {[&](A& a) { a.config.gather_blocks = budget; }, "'config.gather_blocks' = " + std::to_string(budget)},
  });
}

// 11 virtual ranks fit a World (23 streams) but not a gather stream each as well (34 > 32): the
// gather then runs on each rank's compute stream before the GEMM, beside the all-gather, with the
// same results.
TEST(MoeAgGroupGemm, GathersOnTheComputeStreamWhereQueuesRunOut) {
  TL_SKIP_WITHOUT_GPU();
  constexpr int kRanks = 11;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  EXPECT_EQ(run_case(kRanks, 2, SyntheticRouting::kUniform, Shape{40, 200, 264, 10}, CommResource::kCopyEngine, rng),
            "");
}

}  // namespace
}  // namespace tilelink::test::moe_ag
