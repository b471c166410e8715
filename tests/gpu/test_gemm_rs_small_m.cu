// GEMM+RS's small-M engine (GemmRsEngine::kSmallM, issue 21: decode's M) on virtual ranks: worlds
// 1, 2, 3, 4, 8 x the load/store and copy-engine paths x M in {1, 2, 7, 7 P, 64, 129, 300} (M < P:
// owners with no rows; blocks that share a tile row or span two) x its schedules, with K cut into
// slices where K allows. Reference: every rank's and K slice's product by cuBLAS in fp32, summed
// on the host; the op's sum of bf16-rounded slices must be within one bf16 rounding of each slice
// and of the result, in each owner's rows of `out` only (the rest keeps its poison). Two calls of
// fresh inputs, then calls on the second one's inputs, each the same bits. Also: auto takes the
// engine at decode's M, set_operands repoints it, and what it cannot run is refused by name.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cublas_ref.hpp"
#include "gemm_rs_problem.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::test::gemm_rs_small_m {
namespace {

constexpr uint32_t kN = 264;  // two full 128-column tiles and an 8-column tail

float bf(__nv_bfloat16 x) { return __bfloat162float(x); }

size_t heap_bytes(int world, uint32_t m) {
  // GemmRsProblem's partial and recv, and the engine's own: up to 16 K slices of M x N bf16, and on
  // the copy-engine path every rank's as many again.
  return 2 * GemmRs::buffer_rows(m, world) * kN * 2 + size_t(16) * (world + 1) * m * kN * 2 + (2 << 20);
}

// Checks every owner's rows of `out` against cuBLAS slices (the op's own slice count) and the
// poison after them; returns each owner's bits.
std::vector<std::vector<uint16_t>> check(const CublasHandle& cublas, const World& world, GemmRsProblem& p,
                                         uint32_t splits, DeviceBuffer& ref) {
  const uint32_t m = p.args.m, k = p.args.k, ks = k / splits;
  const size_t elems = size_t(m) * kN;
  std::vector<float> want(elems, 0.f), magnitude(elems, 0.f);
  for (int r = 0; r < world.size(); ++r) {
    for (uint32_t s = 0; s < splits; ++s) {
      cublas_slice(cublas.get(), p.a[r].get(), p.b[r].get(), ref.get<float>(), m, kN, k, s * ks, ks);
      const std::vector<float> slice = download<float>(ref.get(), elems);
      for (size_t i = 0; i < elems; ++i) {
        want[i] += slice[i];
        magnitude[i] += std::fabs(slice[i]);
      }
    }
  }
  std::vector<std::vector<uint16_t>> bits(world.size());
  const uint32_t rows_per_rank = (m + world.size() - 1) / world.size();
  for (int q = 0; q < world.size(); ++q) {
    const uint32_t rows = GemmRs::rows_of(m, world.size(), q);
    const size_t own = size_t(rows) * kN, row0 = size_t(q) * rows_per_rank;
    const auto whole = download<__nv_bfloat16>(p.out[q].get(), p.out[q].bytes() / 2);
    size_t untouched = 0;
    const uint16_t poisoned = uint16_t(kPoison) * 0x101;  // poison()'s byte, twice
    for (size_t i = own; i < whole.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, &whole[i], 2);
      untouched += v == poisoned;
    }
    EXPECT_EQ(untouched, whole.size() - own) << "owner " << q << ": written past its " << rows << " rows";
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < own; ++i) {
      const size_t at = row0 * kN + i;
      const float tol = 0.0078125f * (magnitude[at] + std::fabs(want[at])) + 1e-3f;
      if (!(std::fabs(bf(whole[i]) - want[at]) <= tol) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << "owner " << q << ": first bad element row " << row0 + first / kN << " col " << first % kN
                       << ": got " << (own ? bf(whole[first]) : 0.f) << ", want " << (own ? want[row0 * kN + first] : 0.f);
    bits[q].resize(own);
    std::memcpy(bits[q].data(), whole.data(), own * 2);
  }
  return bits;
}

void run_case(int world_size, uint32_t m, uint32_t k, GemmRsScatter scatter, OpMethod method, int repeats,
              std::mt19937_64& rng, uint32_t* sliced) {
  TestWorld env(world_size, heap_bytes(world_size, m), 4096);
  const World& world = env.world;
  const std::string what = "m " + std::to_string(m) + " k " + std::to_string(k) + " scatter " + to_string(scatter) +
                           " method " + to_string(method);
  SCOPED_TRACE(what);
  GemmRsProblem p(env, m, kN, k, rng);
  p.args.config.engine = GemmRsEngine::kSmallM;
  p.args.config.scatter = scatter;
  p.args.config.method = method;
  ASSERT_EQ(GemmRs::can_implement(world, env.heap, p.args), "");
  GemmRs op(world, env.heap, env.signals, p.args, "gemm_rs_small_m_test");
  ASSERT_EQ(op.engine(), GemmRsEngine::kSmallM);
  ASSERT_NE(op.small_m(), nullptr);
  EXPECT_EQ(op.small_m()->path(), scatter == GemmRsScatter::kCopyEngine ? GemmArPath::kCopyEngine : GemmArPath::kSm);
  if (method != OpMethod::kAuto) EXPECT_EQ(op.method(), method);
  const uint32_t splits = op.small_m()->splits();  // the partials per rank (1 where the GEMM sums its slices)
  *sliced += op.small_m()->choice().splits > 1 ? 1 : 0;  // the GEMM's K slices
  SCOPED_TRACE(op.method_why());
  CublasHandle cublas;
  DeviceBuffer ref(size_t(m) * kN * 4, world.device(0));
  std::vector<std::vector<uint16_t>> previous;
  for (int call = 1; call <= 2 + repeats; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    settle();
    if (call == 2) {  // the problem's constructor drew call 1's inputs
      for (int r = 0; r < world.size(); ++r) {
        upload(p.a[r].get(), random_bf16(size_t(m) * k, rng).data(), p.a[r].bytes());
        upload(p.b[r].get(), random_bf16(size_t(kN) * k, rng).data(), p.b[r].bytes());
      }
    }
    for (int r = 0; r < world.size(); ++r) poison(p.out[r].get(), p.out[r].bytes());
    settle();
    op.run();
    world.synchronize();
    if (call <= 2) {
      previous = check(cublas, world, p, splits, ref);
      if (::testing::Test::HasFailure()) return;
      continue;
    }
    for (int q = 0; q < world.size(); ++q) {  // same inputs as call 2: the same bits
      const auto got = download<__nv_bfloat16>(p.out[q].get(), previous[q].size());
      std::vector<uint16_t> bits(previous[q].size());
      std::memcpy(bits.data(), got.data(), bits.size() * 2);
      ASSERT_EQ(bits, previous[q]) << "owner " << q << ": same inputs, different bits";
    }
  }
}

class GemmRsSmallMTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsSmallMTest, MatchesCublasSlicesSummedInRankOrder) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint32_t w = uint32_t(world_size);
  std::mt19937_64 rng(std::random_device{}());
  uint32_t sliced = 0;
  struct Shape {
    uint32_t m, k;
  };
  const Shape shapes[] = {{1, 2048}, {2, 1024}, {7, 2048}, {7 * w, 1024}, {64, 2048}, {129, 1024}, {300, 200}};
  int i = 0;
  for (const Shape& s : shapes) {
    const OpMethod method = i % 3 == 0 ? OpMethod::kAuto : i % 3 == 1 ? OpMethod::kNonOverlapped : OpMethod::kFused;
    run_case(world_size, s.m, s.k, scatter, method, i == 0 ? 20 : 2, rng, &sliced);
    if (::testing::Test::HasFailure()) return;
    ++i;
  }
  EXPECT_GT(sliced, 0u) << "no case cut K into slices";
}

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsSmallMTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(GemmRsScatter::kAuto, GemmRsScatter::kCopyEngine)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == GemmRsScatter::kCopyEngine ? "_ce" : "_sm");
                         });

// Automatic at decode's M on 8 ranks: the small-M engine, by the estimate; set_operands points it
// at other buffers (new A, B and out), whose results are checked in turn.
TEST(GemmRsSmallM, AutoTakesItAtDecodeAndRepointsIt) {
  TL_SKIP_WITHOUT_GPU();
  constexpr int kWorld = 8;
  constexpr uint32_t kM = 8, kK = 2048;
  std::mt19937_64 rng(std::random_device{}());
  TestWorld env(kWorld, 2 * heap_bytes(kWorld, kM), 4096);
  GemmRsProblem first(env, kM, kN, kK, rng), second(env, kM, kN, kK, rng);
  GemmRs op(env.world, env.heap, env.signals, first.args, "gemm_rs_small_m_auto");
  ASSERT_EQ(op.engine(), GemmRsEngine::kSmallM) << op.engine_why();
  EXPECT_NE(op.engine_why().find("small_m"), std::string::npos) << op.engine_why();
  CublasHandle cublas;
  DeviceBuffer ref(size_t(kM) * kN * 4, env.world.device(0));
  for (GemmRsProblem* p : {&first, &second, &first}) {
    for (int r = 0; r < kWorld; ++r) {
      op.set_operands(r, p->a[r].get(), p->b[r].get(), p->out[r].get());
      poison(p->out[r].get(), p->out[r].bytes());
    }
    settle();
    op.run();
    env.world.synchronize();
    check(cublas, env.world, *p, op.small_m()->splits(), ref);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(GemmRsSmallM, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, heap_bytes(2, 64), 1024);
  std::mt19937_64 rng(1);
  GemmRsProblem problem(env, 64, kN, 1024, rng);
  GemmRsArguments good = problem.args;
  good.config.engine = GemmRsEngine::kSmallM;
  ASSERT_EQ(GemmRs::can_implement(env.world, env.heap, good), "");
  using A = GemmRsArguments;
  expect_refusals<GemmRs>(env, good, {
      {[](A& a) { a.config.engine = static_cast<GemmRsEngine>(7); }, "'config.engine' = 7"},
      {[](A& a) { a.config.method = static_cast<OpMethod>(9); }, "'config.method' = 9"},
      {[](A& a) { a.config.method = OpMethod::kDecomposed; }, "'config.method' = decomposed with config.engine"},
      {[](A& a) { a.config.scatter = GemmRsScatter::kEpiloguePush; }, "'config.scatter' = push with config.engine"},
      {[](A& a) { a.config.reducer = GemmRsReducer::kEpilogue; }, "'config.reducer' = epilogue with config.engine"},
      {[](A& a) { a.dtype = DType::kE4m3; }, "'dtype' = e4m3 with config.engine = small_m"},
      {[](A& a) { a.b_scale = {nullptr, nullptr}; }, "expected empty with dtype bf16"},
      {[](A& a) { a.out[1] = nullptr; }, "'out[1]'"},
      {[](A& a) { a.n = 260; }, "'n' = 260"},
      {[](A& a) { a.m = 0; }, "'m' = 0"},
      // The engine's partials come from the heap: more than it has is refused before any launch.
      {[](A& a) { a.m = 1 << 16; }, "GEMM+AR's symmetric buffers need"},
  });
  settle();
}

}  // namespace
}  // namespace tilelink::test::gemm_rs_small_m
