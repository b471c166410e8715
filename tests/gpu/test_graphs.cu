// CUDA-graph capture and replay of whole op calls (SignalSlice::begin_call's replayable slices).
//
// Every rank's compute stream joins one capture; the op's call is captured once, after an eager
// call, and the graph is then replayed on fresh random inputs (outputs and the peer rows of the
// gathered A poisoned first), with an eager call between two replays, each result against cuBLAS.
// A replay that passed on the previous call's signals reads poison or stale rows. AG+GEMM over
// the copy engine (stream memops) and the SM paths, GEMM+RS over pull, epilogue push and the copy
// engine, at worlds 1 and 3, off-tile shapes; GEMM+RS also bit-identical over replays. GEMM+AR
// (its reduction launched early behind the GEMM on the non-overlapped schedule: a programmatic
// dependency inside the graph) replays the eager call's bits on the same fresh inputs -- the eager
// op is checked against cuBLAS in test_gemm_ar.cu.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ag_gemm_comms.hpp"
#include "cublas_ref.hpp"
#include "gemm_rs_problem.hpp"
#include "gemm_ar_problem.hpp"
#include "gpu_test_util.hpp"

namespace tilelink::test::graphs {

// One call of `call` captured from the compute streams of every rank into a graph that replays
// on a stream of its own. The ops join their other streams into the compute streams by the end of
// a call, so the compute streams are all the capture has to join.
class CapturedCall {
 public:
  template <class Call>
  CapturedCall(const World& world, Call&& call) : world_(world) {
    const std::vector<int>& ranks = world.local_ranks();
    world.set_device(ranks.front());
    TL_CUDA_CHECK(cudaStreamCreateWithFlags(&origin_, cudaStreamNonBlocking));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    TL_CUDA_CHECK(cudaStreamBeginCapture(origin_, cudaStreamCaptureModeThreadLocal));
    try {
      TL_CUDA_CHECK(cudaEventRecord(fork_, origin_));
      for (int r : ranks) {
        world.set_device(r);
        TL_CUDA_CHECK(cudaStreamWaitEvent(world.compute_stream(r), fork_, 0));
      }
      call();
      for (int r : ranks) {
        world.set_device(r);
        cudaEvent_t joined = nullptr;
        TL_CUDA_CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
        joins_.push_back(joined);
        TL_CUDA_CHECK(cudaEventRecord(joined, world.compute_stream(r)));
        TL_CUDA_CHECK(cudaStreamWaitEvent(origin_, joined, 0));
      }
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(origin_, &broken);
      if (broken != nullptr) (void)cudaGraphDestroy(broken);
      throw;
    }
    world.set_device(ranks.front());
    TL_CUDA_CHECK(cudaStreamEndCapture(origin_, &graph_));
    TL_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  CapturedCall(const CapturedCall&) = delete;
  CapturedCall& operator=(const CapturedCall&) = delete;
  ~CapturedCall() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    for (cudaEvent_t e : joins_) (void)cudaEventDestroy(e);
    (void)cudaEventDestroy(fork_);
    (void)cudaStreamDestroy(origin_);
  }

  // Launches the graph and waits for it (a trapped wait surfaces as TimeoutError).
  void replay() {
    world_.set_device(world_.local_ranks().front());
    TL_CUDA_CHECK(cudaGraphLaunch(exec_, origin_));
    TL_CUDA_CHECK(cudaStreamSynchronize(origin_));
    world_.synchronize();
  }

 private:
  const World& world_;
  cudaStream_t origin_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  std::vector<cudaEvent_t> joins_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// The calls of each case: an eager call, then (capture) replay, replay, eager, replay.
enum class Step { kEager, kReplay };
constexpr Step kSteps[] = {Step::kEager, Step::kReplay, Step::kReplay, Step::kEager, Step::kReplay};

// One call of `op`: eagerly, or by replaying its graph (captured at the first replay).
template <class Op>
void run_step(Step step, const World& world, Op& op, std::unique_ptr<CapturedCall>& graph) {
  if (step == Step::kEager) {
    op.run();
    world.synchronize();
  } else {
    if (!graph) graph = std::make_unique<CapturedCall>(world, [&] { op.run(); });
    graph->replay();
  }
}

std::string step_name(int i) {
  return "call " + std::to_string(i + 1) + (kSteps[i] == Step::kEager ? " (eager)" : " (replay)");
}

// ---- AG+GEMM -------------------------------------------------------------------------------------

class AgGemmGraphTest : public ::testing::TestWithParam<std::tuple<int, AgComm>> {};

TEST_P(AgGemmGraphTest, ReplaysMatchCublasOnFreshInputs) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, comm] = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr uint32_t kRowsPerRank = 136, kN = 264, kK = 200, kCommRows = 48;  // none on the 128x256x64 grid
  const uint32_t m = kRowsPerRank * world_size;
  const size_t a_bytes = size_t(m) * kK * 2, shard_bytes = size_t(kRowsPerRank) * kK * 2;

  TestWorld env(world_size, a_bytes + (2 << 20), 4096);
  const World& world = env.world;
  SymmetricBuffer gathered = env.heap.allocate(a_bytes);
  std::vector<DeviceBuffer> b, c, ref;
  DeviceBuffer a_full(a_bytes, world.device(0));
  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = kRowsPerRank;
  args.n = kN;
  args.k = kK;
  args.config.comm = {comm.resource, comm.method, comm.path, comm.order, kCommRows, 0, 512};
  for (int r = 0; r < world_size; ++r) {
    b.emplace_back(size_t(kN) * kK * 2, world.device(r));
    c.emplace_back(size_t(m) * kN * 2, world.device(r));
    ref.emplace_back(size_t(m) * kN * sizeof(float), world.device(r));
    upload(b[r].get(), random_bf16(size_t(kN) * kK, rng).data(), b[r].bytes());
    args.b.push_back(b[r].get());
    args.c.push_back(c[r].get());
  }
  AgGemm op(world, env.heap, env.signals, args, "ag_gemm_graph_test");
  CublasHandle cublas;
  std::unique_ptr<CapturedCall> graph;

  for (int i = 0; i < int(std::size(kSteps)); ++i) {
    SCOPED_TRACE(step_name(i));
    const std::vector<__nv_bfloat16> a_host = random_bf16(size_t(m) * kK, rng);
    upload(a_full.get(), a_host.data(), a_bytes);
    for (int r = 0; r < world_size; ++r) {
      char* g = static_cast<char*>(gathered.data(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, a_bytes));  // bf16 0xFFFF is NaN: a row read early shows
      upload(g + r * shard_bytes, reinterpret_cast<const char*>(a_host.data()) + r * shard_bytes, shard_bytes);
      TL_CUDA_CHECK(cudaMemset(c[r].get(), 0xFF, c[r].bytes()));
    }
    settle();
    run_step(kSteps[i], world, op, graph);
    for (int r = 0; r < world_size; ++r) {
      expect_bf16_gemm(cublas.get(), a_full.get(), b[r].get(), c[r].get(), ref[r].get<float>(), m, kN, kK,
                       "rank " + std::to_string(r));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Graphs, AgGemmGraphTest,
                         ::testing::Combine(::testing::Values(1, 3),
                                            ::testing::Values(kAgComms[0], kAgComms[2], kAgComms[4])),
                         [](const ::testing::TestParamInfo<AgGemmGraphTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param).name;
                         });

// ---- GEMM+RS -------------------------------------------------------------------------------------

class GemmRsGraphTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsGraphTest, ReplaysMatchCublasAndRepeatBitForBit) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr uint32_t kRowsPerRank = 256, kN = 264, kK = 200;
  const uint32_t m = kRowsPerRank * world_size;
  const size_t partial_bytes = size_t(m) * kN * 2;

  TestWorld env(world_size, 2 * partial_bytes + (2 << 20), 4096);
  const World& world = env.world;
  GemmRsProblem p(env, m, kN, kK, rng);
  p.args.config.scatter = scatter;
  p.args.config.granularity = SignalGranularity::kTileRow;  // one the copy engine moves too
  p.args.config.engine = GemmRsEngine::kOwnerTiles;
  std::vector<DeviceBuffer> ref;
  for (int r = 0; r < world_size; ++r) ref.emplace_back(partial_bytes, world.device(r));
  GemmRs op(world, env.heap, env.signals, p.args, "gemm_rs_graph_test");
  CublasHandle cublas;
  std::unique_ptr<CapturedCall> graph;
  auto call = [&](Step step) {
    for (int r = 0; r < world_size; ++r) {
      TL_CUDA_CHECK(cudaMemset(p.out[r].get(), 0xFF, p.out[r].bytes()));
      TL_CUDA_CHECK(cudaMemset(p.partial.data(r), 0xFF, partial_bytes));
      TL_CUDA_CHECK(cudaMemset(p.recv.data(r), 0xFF, partial_bytes));
    }
    settle();
    run_step(step, world, op, graph);
  };

  for (int i = 0; i < int(std::size(kSteps)); ++i) {
    SCOPED_TRACE(step_name(i));
    for (int r = 0; r < world_size; ++r) {
      upload(p.a[r].get(), random_bf16(size_t(m) * kK, rng).data(), p.a[r].bytes());
      upload(p.b[r].get(), random_bf16(size_t(kN) * kK, rng).data(), p.b[r].bytes());
    }
    call(kSteps[i]);
    const auto bits = expect_rank_order_sum(cublas.get(), world, p.a, p.b, p.out, ref, m, kN, kK);
    if (kSteps[i] == Step::kReplay) {  // the same inputs again: the same bits
      call(Step::kReplay);
      for (int q = 0; q < world_size; ++q) {
        const auto again = download<uint16_t>(p.out[q].get(), bits[q].size());
        EXPECT_EQ(again, bits[q]) << "owner " << q << ": same inputs, different bits";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Graphs, GemmRsGraphTest,
                         ::testing::Combine(::testing::Values(1, 3),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush,
                                                              GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsGraphTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// ---- GEMM+AR -------------------------------------------------------------------------------------

class GemmArGraphTest : public ::testing::TestWithParam<std::tuple<int, GemmArSchedule>> {};

TEST_P(GemmArGraphTest, ReplaysGiveTheEagerCallsBits) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = std::get<0>(GetParam());
  const GemmArSchedule schedule = std::get<1>(GetParam());
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr uint32_t kM = 129, kN = 264, kK = 1024;  // a tail tile row and column; 2 K slices
  TestWorld env(world_size, 64 << 20, 4096);
  const World& world = env.world;
  GemmArConfig config;
  config.schedule = schedule;
  config.splits = 2;
  GemmArProblem p(world, kM, kN, kK, /*norm=*/true, config, 1e-6f);
  GemmAr op(world, env.heap, env.signals, p.args, "gemm_ar_graph_test");
  // Every rank's out and residual_out, poisoned first, after an eager call or a replay.
  std::unique_ptr<CapturedCall> graph;
  auto call = [&](Step step) {
    for (int r = 0; r < world_size; ++r) p.poison_outputs(size_t(r));
    run_step(step, world, op, graph);
    std::vector<uint16_t> bits;
    for (int r = 0; r < world_size; ++r) {
      for (const DeviceBuffer* buf : {&p.out[r], &p.residual_out[r]}) {
        const auto got = download<uint16_t>(buf->get(), size_t(kM) * kN);
        bits.insert(bits.end(), got.begin(), got.end());
      }
    }
    return bits;
  };
  for (int i = 0; i < int(std::size(kSteps)); ++i) {
    SCOPED_TRACE(step_name(i));
    p.fresh(rng);
    const std::vector<uint16_t> got = call(kSteps[i]);
    const std::vector<uint16_t> eager = call(Step::kEager);  // the same inputs, eagerly
    constexpr uint16_t kPoisoned = uint16_t(kPoison) << 8 | kPoison;  // |x| ~ 1e-16: no sum of these inputs
    size_t differ = 0, poisoned = 0;
    for (size_t e = 0; e < got.size(); ++e) {
      differ += got[e] != eager[e];
      poisoned += got[e] == kPoisoned;
    }
    EXPECT_EQ(poisoned, 0u) << "elements of every rank's out and residual_out still poisoned";
    EXPECT_EQ(differ, 0u) << "elements of every rank's out and residual_out that differ from an eager call's";
  }
}

INSTANTIATE_TEST_SUITE_P(Graphs, GemmArGraphTest,
                         ::testing::Combine(::testing::Values(1, 3),
                                            ::testing::Values(GemmArSchedule::kNonOverlapped, GemmArSchedule::kFused)),
                         [](const ::testing::TestParamInfo<GemmArGraphTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

}  // namespace tilelink::test::graphs
