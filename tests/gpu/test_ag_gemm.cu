// AG+GEMM on virtual ranks (world 1, 2, 4, 8; the methods also 3) against cuBLAS on the gathered A.
//
// Each case makes three calls with fresh random A shards (B fixed), poisons every rank's C and
// the peer rows of every rank's gathered A before each call (a GEMM that reads a tile before it
// has arrived reads NaN), and compares every rank's C with cuBLAS (fp32 output) on the complete
// A. Shapes include M, N and K that are not multiples of the 128x256x64 tile, and communication
// tiles (comm_rows) that straddle GEMM tiles.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ag_gemm_comms.hpp"
#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/mapping/split_tail.hpp"


namespace tilelink::test::ag_gemm {

struct Shape {
  const char* name;
  uint32_t m_per_rank, n, k, comm_rows;
};
// "tiles": multiples of the tile, the op's automatic communication tile (comm_rows 0); "odd":
// none of M (per rank and total), N, K is, and 48-row communication tiles straddle GEMM tiles.
constexpr Shape kShapes[] = {{"tiles", 256, 512, 256, 0}, {"odd", 136, 264, 200, 48}};

using Comm = AgComm;
constexpr const auto& kComms = kAgComms;

// from_source: each rank's shard lives outside the heap (AgGemmArguments::a_source), in one of two
// buffers that alternate call by call (set_operands repoints it), and the rank's own rows of the
// gathered A are poisoned too: the op must copy them in (or, at world 1, read the shard itself).
// `gemm_ctas`: when given, set to rank 0's GEMM grid (CTAs).
void check_against_cublas(int world_size, const Comm& comm, const Shape& shape, const std::string& kernel,
                          uint32_t swizzle, OpMethod method = OpMethod::kAuto, bool from_source = false,
                          int* gemm_ctas = nullptr) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr int kCalls = 3;
  const uint32_t m = shape.m_per_rank * world_size, n = shape.n, k = shape.k;
  const size_t a_bytes = size_t(m) * k * 2, shard_bytes = size_t(shape.m_per_rank) * k * 2;

  TestWorld env(world_size, a_bytes + (2 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer gathered = env.heap.allocate(a_bytes);
  std::vector<DeviceBuffer> b, c, ref;
  std::vector<DeviceBuffer> sources[2];  // from_source: per rank, the shard's two alternating homes
  DeviceBuffer a_full(a_bytes, world.device(0));
  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = shape.m_per_rank;
  args.n = n;
  args.k = k;
  args.config.comm = {comm.resource, comm.method, comm.path, comm.order, shape.comm_rows, 0, 512};
  args.config.kernel = kernel;
  args.config.swizzle = swizzle;
  args.config.method = method;
  for (int r = 0; r < world_size; ++r) {
    b.emplace_back(size_t(n) * k * 2, world.device(r));
    c.emplace_back(size_t(m) * n * 2, world.device(r));
    ref.emplace_back(size_t(m) * n * sizeof(float), world.device(r));
    upload(b[r].get(), random_bf16(size_t(n) * k, rng).data(), b[r].bytes());
    args.b.push_back(b[r].get());
    args.c.push_back(c[r].get());
    if (from_source) {
      for (auto& home : sources) home.emplace_back(shard_bytes, world.device(r));
      args.a_source.push_back(sources[0][r].get());
    }
  }
  ASSERT_EQ(AgGemm::can_implement(world, env.heap, args), "");
  AgGemm op(world, env.heap, env.signals, args, "ag_gemm_test");
  if (gemm_ctas != nullptr) *gemm_ctas = op.gemm_ctas(0);
  if (method != OpMethod::kAuto) {
    EXPECT_EQ(op.method(), method);
    EXPECT_EQ(op.method_why(), "configured");
  } else {
    EXPECT_NE(op.method_why(), "") << "auto must say why it ran " << to_string(op.method());
  }
  CublasHandle cublas;

  for (int call = 1; call <= kCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    settle();
    const std::vector<__nv_bfloat16> a_host = random_bf16(size_t(m) * k, rng);
    upload(a_full.get(), a_host.data(), a_bytes);
    for (int r = 0; r < world_size; ++r) {
      char* g = static_cast<char*>(gathered.data(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, a_bytes));  // bf16 0xFFFF is NaN
      const char* shard = reinterpret_cast<const char*>(a_host.data()) + r * shard_bytes;
      if (from_source) {
        DeviceBuffer& home = sources[call % 2][r];
        TL_CUDA_CHECK(cudaMemset(sources[(call + 1) % 2][r].get(), 0xFF, shard_bytes));  // the other home: stale
        upload(home.get(), shard, shard_bytes);
        op.set_operands(r, b[r].get(), c[r].get(), home.get());
      } else {
        upload(g + r * shard_bytes, shard, shard_bytes);
      }
      TL_CUDA_CHECK(cudaMemset(c[r].get(), 0xFF, c[r].bytes()));
    }
    settle();
    op.run();
    world.synchronize();

    for (int r = 0; r < world_size; ++r) {
      expect_bf16_gemm(cublas.get(), a_full.get(), b[r].get(), c[r].get(), ref[r].get<float>(), m, n, k,
                       "rank " + std::to_string(r));
    }
  }
}

class AgGemmTest : public ::testing::TestWithParam<std::tuple<int, Comm, Shape>> {};

// Every communication variant with the default kernel.
TEST_P(AgGemmTest, MatchesCublasOnTheGatheredA) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, comm, shape] = GetParam();
  check_against_cublas(world_size, comm, shape, "", 0);
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8), ::testing::ValuesIn(kComms), ::testing::ValuesIn(kShapes)),
    [](const ::testing::TestParamInfo<AgGemmTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_" +
             std::get<2>(info.param).name;
    });

class AgGemmMethodTest : public ::testing::TestWithParam<std::tuple<int, OpMethod, Comm>> {};

// The decomposed and non-overlapped methods (issue 21): the same results as cuBLAS, on the
// all-gathers they run over, at odd worlds and off-grid shapes.
TEST_P(AgGemmMethodTest, MatchesCublasOnTheGatheredA) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, method, comm] = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.name);
    check_against_cublas(world_size, comm, shape, "", 0, method);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmMethodTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Values(OpMethod::kDecomposed, OpMethod::kNonOverlapped),
                       ::testing::Values(kComms[0], kComms[1], kComms[2], kComms[4])),
    [](const ::testing::TestParamInfo<AgGemmMethodTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             std::get<2>(info.param).name;
    });

class AgGemmSourceTest : public ::testing::TestWithParam<std::tuple<int, OpMethod, Comm>> {};

// The shard handed over where the caller has it (a_source, as the PyTorch operator does): every
// all-gather variant copies it into the rank's own rows tile by tile, at every method, and at
// world 1 the GEMM reads it in place; the shard moves between two buffers call by call.
TEST_P(AgGemmSourceTest, MatchesCublasOnTheGatheredA) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, method, comm] = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.name);
    check_against_cublas(world_size, comm, shape, "", 0, method, true);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmSourceTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 8),
                       ::testing::Values(OpMethod::kFused, OpMethod::kDecomposed, OpMethod::kNonOverlapped),
                       ::testing::ValuesIn(kComms)),
    [](const ::testing::TestParamInfo<AgGemmSourceTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) + "_" +
             std::get<2>(info.param).name;
    });

class AgGemmKernelTest : public ::testing::TestWithParam<std::tuple<int, std::string, uint32_t>> {};

// Every compiled kernel configuration, with and without the rasterization swizzle.
TEST_P(AgGemmKernelTest, MatchesCublasOnTheGatheredA) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, kernel, swizzle] = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.name);
    check_against_cublas(world_size, kComms[0], shape, kernel, swizzle);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AgGemm, AgGemmKernelTest,
    ::testing::Combine(::testing::Values(1, 4), ::testing::ValuesIn(AgGemm::kernel_names()),
                       ::testing::Values(1u, 8u)),
    [](const ::testing::TestParamInfo<AgGemmKernelTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) + "_swizzle" +
             std::to_string(std::get<2>(info.param));
    });

// The split tail (128x256x64_c2x1_splittail, sm90_split_tail_scheduler.cuh): shapes whose tiles
// leave the last wave partial, so its tiles run in K splits that the fixup sums. 2176 x 2304 is 153
// tiles, 162 with the 2x1 clusters' padding row: at world 1 (132 GEMM CTAs) 30 tail tiles in 4 splits;
// K = 2888 ends inside a K tile. 2048 x 2560 x 4096: 160 tiles, 28 in 4 at world 1. At 2 and 4 virtual
// ranks the grid is a rank's share, and whether a tail splits depends on it (reported, checked at
// world 1). Against cuBLAS, three calls with fresh inputs, the auto band and row by row.
constexpr Shape kTailShapes[] = {{"tail_2176x2304x2888", 2176, 2304, 2888, 0}, {"tail_2048x2560x4096", 2048, 2560, 4096, 0}};
constexpr const char* kSplitTailKernel = "128x256x64_c2x1_splittail";

// How the split-tail kernel cuts `shape` (all ranks' rows) on a grid of `ctas` (128 x 256 tiles, 2 x 1
// clusters, 64-deep K tiles, the scheduler's defaults: at most 8 runs of at least 4 K tiles).
SplitTail split_of(const Shape& shape, int ctas) {
  const uint64_t rows = (shape.m_per_rank + 127) / 128, cols = (shape.n + 255) / 256;
  return plan_split_tail(((rows + 1) / 2 * 2) * cols, static_cast<uint64_t>(ctas), (shape.k + 63) / 64, 8, 4);
}

TEST(AgGemmSplitTail, MatchesCublasWhereTheLastWaveSplits) {
  TL_SKIP_WITHOUT_GPU();
  for (int world : {1, 2, 4}) {
    for (const Shape& whole : kTailShapes) {
      for (uint32_t swizzle : {0u, 1u}) {
        Shape shape = whole;  // the rows per rank of this world
        shape.m_per_rank = whole.m_per_rank / static_cast<uint32_t>(world);
        int ctas = 0;
        SCOPED_TRACE(std::string(shape.name) + ", world " + std::to_string(world) + ", swizzle " +
                     std::to_string(swizzle));
        check_against_cublas(world, kComms[0], shape, kSplitTailKernel, swizzle, OpMethod::kAuto, false, &ctas);
        const SplitTail split = split_of(whole, ctas);
        std::printf("[ split    ] %s world %d: %d GEMM CTAs, %u tail tiles in %u splits\n", whole.name, world, ctas,
                    split.tail, split.splits);
        if (world == 1) EXPECT_GE(split.splits, 2u) << "the case must split its tail (" << ctas << " CTAs)";
      }
    }
  }
}

// With config.kernel automatic the op runs the split-tail twin of its default where the fused GEMM's
// grid leaves a tail that splits, and the default elsewhere; both against cuBLAS.
TEST(AgGemmSplitTail, IsTheAutomaticKernelWhereATailSplits) {
  TL_SKIP_WITHOUT_GPU();
  const Shape no_tail = {"one_wave_512x512x512", 512, 512, 512, 0};  // 4 tiles: fewer than a wave, nothing splits
  for (const bool tail : {true, false}) {
    const Shape shape = tail ? kTailShapes[1] : no_tail;
    SCOPED_TRACE(shape.name);
    TestWorld env(1, size_t(shape.m_per_rank) * shape.k * 2 + (2 << 20), 4096);
    SymmetricBuffer gathered = env.heap.allocate(size_t(shape.m_per_rank) * shape.k * 2);
    DeviceBuffer b(size_t(shape.n) * shape.k * 2, 0), c(size_t(shape.m_per_rank) * shape.n * 2, 0);
    AgGemmArguments args;
    args.a = &gathered;
    args.m_per_rank = shape.m_per_rank;
    args.n = shape.n;
    args.k = shape.k;
    args.b = {b.get()};
    args.c = {c.get()};
    AgGemm op(env.world, env.heap, env.signals, args, "ag_gemm_auto_split_tail");
    const bool splits = split_of(shape, op.gemm_ctas(0)).splits >= 2;
    EXPECT_EQ(splits, tail) << op.gemm_ctas(0) << " GEMM CTAs";
    EXPECT_EQ(op.kernel_name(), splits ? std::string(kSplitTailKernel) : AgGemm::kernel_names().front());
    check_against_cublas(1, kComms[0], shape, "", 0);
  }
}

// The fixup sums a tail tile's splits in split order, waits for all of them, and leaves its flags at 0:
// two input sets in turn must each give their own bits call after call (a run that read the previous
// call's slots, or did not wait, would mix the sets).
TEST(AgGemmSplitTail, RepeatsItsBits) {
  TL_SKIP_WITHOUT_GPU();
  const Shape shape = kTailShapes[0];
  const uint32_t m = shape.m_per_rank, n = shape.n, k = shape.k;
  std::mt19937_64 rng(5100);
  TestWorld env(1, size_t(m) * k * 2 + (2 << 20), 4096);
  SymmetricBuffer gathered = env.heap.allocate(size_t(m) * k * 2);
  DeviceBuffer b(size_t(n) * k * 2, 0), c(size_t(m) * n * 2, 0);
  upload(b.get(), random_bf16(size_t(n) * k, rng).data(), b.bytes());
  const std::vector<__nv_bfloat16> a_sets[2] = {random_bf16(size_t(m) * k, rng), random_bf16(size_t(m) * k, rng)};
  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = m;
  args.n = n;
  args.k = k;
  args.b = {b.get()};
  args.c = {c.get()};
  args.config.kernel = kSplitTailKernel;
  ASSERT_EQ(AgGemm::can_implement(env.world, env.heap, args), "");
  AgGemm op(env.world, env.heap, env.signals, args, "ag_gemm_split_tail_bits");
  ASSERT_GE(split_of(shape, op.gemm_ctas(0)).splits, 2u);
  std::vector<__nv_bfloat16> first[2];
  for (int call = 0; call < 6; ++call) {
    const int set = call % 2;
    upload(gathered.data(0), a_sets[set].data(), size_t(m) * k * 2);
    poison(c.get(), c.bytes());
    op.run();
    env.world.synchronize();
    auto got = download<__nv_bfloat16>(c.get(), size_t(m) * n);
    if (call < 2) {
      first[set] = std::move(got);
      continue;
    }
    ASSERT_EQ(std::memcmp(got.data(), first[set].data(), got.size() * sizeof(__nv_bfloat16)), 0)
        << "call " << call << " (input set " << set << ")";
  }
  EXPECT_NE(std::memcmp(first[0].data(), first[1].data(), first[0].size() * sizeof(__nv_bfloat16)), 0);
}

// Issue 24: the copy-engine all-gather with many communication tiles per rank at 7 and 8 ranks
// killed the CUDA context (a device wait timed out and trapped). Rank r's stream waited at the
// entry barrier for rank r + 1's arrival, which the host had not enqueued yet, and the host
// blocked in rank r's copies once that stream's queue was full. The exact cases of the report:
// `bench ag_gemm --world 8 --m 8192 --n 8192 --k 1024 --comm-rows 8` (128 tiles per rank),
// M 4688 x N 9152 x K 728 (74), and `--world 7 --m 2100 --n 1792 --k 512 --comm-rows 1` (300).
struct ManyTiles {
  int world;
  Shape shape;  // n per rank
};
constexpr ManyTiles kManyTiles[] = {{8, {"w8_128_tiles", 1024, 1024, 1024, 8}},
                                    {8, {"w8_74_tiles", 586, 1144, 728, 8}},
                                    {7, {"w7_300_tiles", 300, 256, 512, 1}}};

class AgGemmManyTilesTest : public ::testing::TestWithParam<ManyTiles> {};

TEST_P(AgGemmManyTilesTest, CopyEngineMatchesCublas) {
  TL_SKIP_WITHOUT_GPU();
  check_against_cublas(GetParam().world, kComms[0], GetParam().shape, "", 0);
}

INSTANTIATE_TEST_SUITE_P(AgGemm, AgGemmManyTilesTest, ::testing::ValuesIn(kManyTiles),
                         [](const ::testing::TestParamInfo<ManyTiles>& info) { return std::string(info.param.shape.name); });

// Bad arguments are refused with the argument's name, before anything is launched.
TEST(AgGemmArgumentsTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 8 << 20, 1024);
  const World& world = env.world;
  SymmetricBuffer gathered = env.heap.allocate(2 * 256 * 256 * 2);
  DeviceBuffer b(256 * 256 * 2, world.device(0)), c(512 * 256 * 2, world.device(0));
  AgGemmArguments good;
  good.a = &gathered;
  good.m_per_rank = 256;
  good.n = 256;
  good.k = 256;
  good.b = {b.get(), b.get()};
  good.c = {c.get(), c.get()};
  ASSERT_EQ(AgGemm::can_implement(world, env.heap, good), "");

  using A = AgGemmArguments;
  const std::string budget = std::to_string(world.sm_budget(0));
  expect_refusals<AgGemm>(env, good, {
      {[](A& a) { a.b_layout = BLayout::kKN; }, "'b_layout' = kn"},
      {[](A& a) { a.n = 260; }, "'n' = 260"},
      {[](A& a) { a.k = 100; }, "'k' = 100"},
      {[](A& a) { a.m_per_rank = 0; }, "'m_per_rank' = 0"},
      {[&](A& a) { a.b = {b.get()}; }, "'b' has 1 pointers"},
      {[](A& a) { a.c[1] = nullptr; }, "'c[1]' = nullptr"},
      {[&](A& a) { a.c[0] = static_cast<char*>(c.get()) + 2; }, "'c[0]'"},
      {[](A& a) { a.config.kernel = "64x64x64_c1x1"; }, "'config.kernel' = '64x64x64_c1x1'"},
      {[](A& a) { a.config.swizzle = 3; }, "'config.swizzle' = 3"},
      {[&](A& a) {
         a.config.comm = {CommResource::kSm, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, 128,
                          static_cast<uint32_t>(world.sm_budget(0)), 512};
       },
       "'config.comm.num_blocks' = " + budget},  // the knob that took the SMs
      {[&](A& a) {
         a.config.comm.resource = CommResource::kCopyEngine;
         a.config.comm.method = AgMethod::kPull;
         a.config.gemm_sms = static_cast<uint32_t>(world.sm_budget(0));  // every SM of the GPU waiting: no copy runs
       },
       "'config.gemm_sms' = " + budget + ": 2 virtual ranks would keep"},
      {[](A& a) { a.config.comm.method = static_cast<AgMethod>(7); }, "'config.method' = 7"},
      {[](A& a) { a.m_per_rank = 512; }, "'a' holds"},  // the gathered buffer holds 2 x 256 rows
      {[](A& a) { a.a = nullptr; }, "'a' = nullptr"},
      {[&](A& a) { a.a_source = {b.get()}; }, "'a_source' has 1 pointers"},
      {[&](A& a) {  // the own rows' device-local copy needs SMs beside the waiting GEMM
         a.a_source = {b.get(), b.get()};
         a.config.comm.resource = CommResource::kCopyEngine;
         a.config.gemm_sms = static_cast<uint32_t>(world.sm_budget(0));
       },
       "'config.gemm_sms' = " + budget + ": rank 0 would keep " + budget + " of its " + budget +
           " SMs waiting for its own rows"},
      {[&](A& a) { a.a_source = {b.get(), static_cast<char*>(b.get()) + 8}; }, "'a_source[1]'"},
  });
  // Built without a_source, a call cannot hand one over; built with it, a call must.
  AgGemm plain(world, env.heap, env.signals, good, "ag_gemm_plain");
  EXPECT_THROW(plain.set_operands(0, b.get(), c.get(), b.get()), InvalidArgument);
  AgGemmArguments with_source = good;
  with_source.a_source = {b.get(), b.get()};
  AgGemm sourced(world, env.heap, env.signals, with_source, "ag_gemm_sourced");
  EXPECT_THROW(sourced.set_operands(0, b.get(), c.get()), InvalidArgument);
  EXPECT_THROW(sourced.set_operands(0, b.get(), c.get(), static_cast<char*>(b.get()) + 8), InvalidArgument);
  settle();
}

}  // namespace tilelink::test::ag_gemm
