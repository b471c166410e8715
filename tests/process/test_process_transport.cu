// The process suite's transport cases (tests/process/test_process.cu says how the suite runs): the
// copy-engine all-gather, pull and push, and GEMM+AR's two paths, with either transport (ctest
// gpu_process_put_signal_* sets TILELINK_TRANSPORT=put_signal: every put and signal to a peer
// through NVSHMEM), and what the put-with-signal transport refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../gpu/cublas_ref.hpp"
#include "../gpu/gpu_test_util.hpp"
#include "process_env.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"

namespace tilelink::test::process {
namespace {

struct CeMethod {
  const char* name;
  AgMethod method;
};

class ProcessTransport : public ::testing::TestWithParam<CeMethod> {};

// Every rank's shard (an off-grid row count, tiles of 32 rows) in every rank's buffer over three
// calls of fresh rows, the peers' rows poisoned before each. Under put_signal the copy engine
// pushes whatever the configuration says (AllGather: the transport has no get).
TEST_P(ProcessTransport, CopyEngineAllGatherBringsEveryShard) {
  const int w = world().size();
  const uint32_t rows = 100, row_bytes = 272;  // 136 bf16: rows are not a power of two either
  const size_t shard = size_t(rows) * row_bytes, bytes = shard * size_t(w);
  SymmetricHeap heap(world(), bytes + (2 << 20));
  SignalSet signals(heap, 1024);
  SymmetricBuffer gathered = heap.allocate(bytes);
  AllGatherArguments args;
  args.gathered = &gathered;
  args.rows_per_rank = rows;
  args.row_bytes = row_bytes;
  args.config.resource = CommResource::kCopyEngine;
  args.config.method = GetParam().method;
  args.config.comm_rows = 32;
  ASSERT_EQ(AllGather::can_implement(world(), heap, args), "");
  AllGather ag(world(), heap, signals, args, std::string("process_transport_") + GetParam().name);
  const bool pushes = GetParam().method == AgMethod::kPush || world().transport() == Transport::kPutSignal;
  EXPECT_EQ(ag.plan().method, pushes ? AgMethod::kPush : AgMethod::kPull);
  char* g = static_cast<char*>(gathered.data(me()));
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    auto rng = shared_rng(700, call);  // every process draws every shard alike
    std::vector<uint8_t> want(bytes);
    for (uint8_t& b : want) b = static_cast<uint8_t>(rng());
    poison(g, bytes);
    upload(g + size_t(me()) * shard, want.data() + size_t(me()) * shard, shard);
    world().barrier();  // every rank's shard in place (a fresh poison must not land after a peer's put)
    ag.run();
    world().synchronize();
    EXPECT_TRUE(bytes_equal(download<uint8_t>(g, bytes), want));
    world().barrier();  // every rank checked before the next call's poison
  }
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessTransport,
                         ::testing::Values(CeMethod{"ce_pull", AgMethod::kPull}, CeMethod{"ce_push", AgMethod::kPush}),
                         [](const auto& info) { return std::string(info.param.name); });

struct ArCase {
  const char* name;
  GemmArPath path;
  AllReduceMethod method;
  GemmArSchedule schedule;
};

class ProcessGemmAr : public ::testing::TestWithParam<ArCase> {};

// GEMM+AR across processes: every rank's out is the sum of every rank's cuBLAS product within the
// rounding of each bf16 partial, at M = 7 (one tile row) and 136 (two, the last one short), three
// calls of fresh inputs and a repeated call that must give the same bits. The sm path is refused
// under put_signal (the refusal test checks the message); the copy-engine path runs everywhere.
TEST_P(ProcessGemmAr, SumsEveryRanksProductOnEveryRank) {
  const ArCase c = GetParam();
  const int w = world().size();
  const uint32_t n = 264, k = 256;
  const int dev = world().device(me());
  for (uint32_t m : {7u, 136u}) {
    SCOPED_TRACE("m " + std::to_string(m));
    SymmetricHeap heap(world(), size_t(w + 2) * m * n * 2 + (4 << 20));
    SignalSet signals(heap, 4096);
    DeviceBuffer a(size_t(m) * k * 2, dev), b(size_t(n) * k * 2, dev), out(size_t(m) * n * 2, dev);
    DeviceBuffer ref(size_t(m) * n * 4, dev), ap(a.bytes(), dev), bp(b.bytes(), dev);
    GemmArArguments args;
    args.m = m;
    args.n = n;
    args.k = k;
    args.config.path = c.path;
    args.config.method = c.method;
    args.config.schedule = c.schedule;
    args.config.splits = 1;
    args.a.assign(w, nullptr);
    args.b.assign(w, nullptr);
    args.out.assign(w, nullptr);
    args.a[me()] = a.get();
    args.b[me()] = b.get();
    args.out[me()] = out.get();
    const std::string why = GemmAr::can_implement(world(), heap, args);
    if (!why.empty() && c.path == GemmArPath::kSm && world().transport() == Transport::kPutSignal) {
      GTEST_SKIP() << "the sm path is refused under put_signal: " << why;
    }
    ASSERT_EQ(why, "");
    GemmAr op(world(), heap, signals, args, std::string("process_gemm_ar_") + c.name);
    EXPECT_EQ(op.path(), c.path == GemmArPath::kCopyEngine || world().transport() == Transport::kPutSignal
                             ? GemmArPath::kCopyEngine
                             : GemmArPath::kSm);
    CublasHandle cublas;
    for (int call = 1; call <= 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      std::vector<float> want(size_t(m) * n, 0.f), bound(size_t(m) * n, 1e-2f);
      std::vector<std::vector<float>> each(static_cast<size_t>(w));  // every rank's product, for the failure message
      for (int p = 0; p < w; ++p) {  // every rank's operands, drawn alike in every process
        auto rng = shared_rng(900 + p, call * 1000 + m);
        const auto a_p = random_bf16(size_t(m) * k, rng);
        const auto b_p = random_bf16(size_t(n) * k, rng);
        if (p == me()) {
          upload(a.get(), a_p.data(), a.bytes());
          upload(b.get(), b_p.data(), b.bytes());
        }
        upload(ap.get(), a_p.data(), ap.bytes());
        upload(bp.get(), b_p.data(), bp.bytes());
        cublas_reference(cublas.get(), ap.get(), bp.get(), ref.get<float>(), m, n, k);
        settle();
        const auto full = download<float>(ref.get(), size_t(m) * n);
        for (size_t i = 0; i < want.size(); ++i) {
          want[i] += full[i];
          bound[i] += std::fabs(full[i]) / 256.0f;  // each partial rounded to bf16
        }
        each[size_t(p)] = full;
      }
      for (size_t i = 0; i < want.size(); ++i) bound[i] += std::fabs(want[i]) / 256.0f;  // and the sum
      std::vector<__nv_bfloat16> first;
      for (int repeat = 0; repeat < 2; ++repeat) {
        poison(out.get(), out.bytes());
        world().barrier();  // no rank's poison lands after another's call began
        op.run();
        world().synchronize();
        const auto got = download<__nv_bfloat16>(out.get(), size_t(m) * n);
        if (repeat == 1) {
          EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * 2), 0)
              << "a repeated call on the same inputs changed the bits";
          break;
        }
        first = got;
        size_t bad = 0, at = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (!(std::fabs(__bfloat162float(got[i]) - want[i]) <= bound[i]) && bad++ == 0) at = i;
        }
        std::string terms;
        for (int p = 0; p < w; ++p) terms += " " + std::to_string(each[size_t(p)][at]);
        EXPECT_EQ(bad, 0u) << bad << " bad elements, the first row " << at / n << " col " << at % n << ": got "
                           << __bfloat162float(got[at]) << ", want " << want[at] << " (the ranks' products:" << terms
                           << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Process, ProcessGemmAr,
    ::testing::Values(ArCase{"one_shot_sm", GemmArPath::kSm, AllReduceMethod::kOneShot, GemmArSchedule::kNonOverlapped},
                      ArCase{"two_shot_fused_sm", GemmArPath::kSm, AllReduceMethod::kTwoShot, GemmArSchedule::kFused},
                      ArCase{"one_shot_ce", GemmArPath::kCopyEngine, AllReduceMethod::kOneShot,
                             GemmArSchedule::kNonOverlapped},
                      ArCase{"two_shot_ce", GemmArPath::kCopyEngine, AllReduceMethod::kTwoShot,
                             GemmArSchedule::kNonOverlapped},
                      ArCase{"one_shot_fused_ce", GemmArPath::kCopyEngine, AllReduceMethod::kOneShot,
                             GemmArSchedule::kFused},
                      ArCase{"two_shot_fused_ce", GemmArPath::kCopyEngine, AllReduceMethod::kTwoShot,
                             GemmArSchedule::kFused}),
    [](const auto& info) { return std::string(info.param.name); });

// The test's own reference on the shapes GEMM+AR's process cases use, against the host in fp64: at 3
// processes sharing the GPU under MPS those cases saw cuBLAS give whole tiles of one rank's inputs for
// every rank's (docs/PERF.md, 2026-12-05 thirteenth session). Run alone at 3 processes with
// `tilelink launch --nproc 3 --mps -- tilelink_process_tests --gtest_filter='ProcessReference.*'`.
TEST(ProcessReference, CublasMatchesTheHostOnEachRanksInputs) {
  const int dev = world().device(me());
  const uint32_t n = 264, k = 256;
  CublasHandle cublas;
  for (uint32_t m : {7u, 136u}) {
    DeviceBuffer a(size_t(m) * k * 2, dev), b(size_t(n) * k * 2, dev), ref(size_t(m) * n * 4, dev);
    for (int p = 0; p < world().size(); ++p) {
      SCOPED_TRACE("m " + std::to_string(m) + ", rank " + std::to_string(p) + "'s inputs");
      auto rng = shared_rng(950 + p, m);
      const auto a_p = random_bf16(size_t(m) * k, rng);
      const auto b_p = random_bf16(size_t(n) * k, rng);
      upload(a.get(), a_p.data(), a.bytes());
      upload(b.get(), b_p.data(), b.bytes());
      poison(ref.get(), ref.bytes());
      cublas_reference(cublas.get(), a.get(), b.get(), ref.get<float>(), m, n, k);
      settle();
      const auto got = download<float>(ref.get(), size_t(m) * n);
      size_t bad = 0, at = 0;
      double want_at = 0;
      for (uint32_t i = 0; i < m; ++i) {
        for (uint32_t j = 0; j < n; ++j) {
          double want = 0, mag = 0;
          for (uint32_t kk = 0; kk < k; ++kk) {
            const double x = double(__bfloat162float(a_p[size_t(i) * k + kk])) * __bfloat162float(b_p[size_t(j) * k + kk]);
            want += x;
            mag += std::fabs(x);
          }
          if (!(std::fabs(got[size_t(i) * n + j] - want) <= 1e-4 * mag + 1e-6) && bad++ == 0) {
            at = size_t(i) * n + j;
            want_at = want;
          }
        }
      }
      EXPECT_EQ(bad, 0u) << bad << " elements differ, the first row " << at / n << " col " << at % n << ": cuBLAS "
                         << got[at] << ", host " << want_at;
    }
  }
}

// Under put_signal, kernels that load or store peers' memory themselves are refused by name (and a
// call captured into a CUDA graph); the copy-engine paths are not.
TEST(ProcessTransportRefusals, KernelsThatReachPeersThemselves) {
  if (world().transport() != Transport::kPutSignal || world().size() == 1) {
    GTEST_SKIP() << "the world's transport is " << to_string(world().transport()) << " with "
                 << world().size() << " rank(s): nothing is refused";
  }
  const int w = world().size();
  SymmetricHeap heap(world(), 8 << 20);
  SignalSet signals(heap, 1024);
  SymmetricBuffer buf = heap.allocate(4 << 20);
  AllGatherArguments ag;
  ag.gathered = &buf;
  ag.rows_per_rank = 64;
  ag.row_bytes = 256;
  ag.config.resource = CommResource::kSm;
  EXPECT_NE(AllGather::can_implement(world(), heap, ag).find("put_signal"), std::string::npos);
  ag.config.resource = CommResource::kCopyEngine;
  EXPECT_EQ(AllGather::can_implement(world(), heap, ag), "");

  DeviceBuffer a(1 << 20, world().device(me())), b(1 << 20, world().device(me())), out(1 << 20, world().device(me()));
  GemmRsArguments rs;
  rs.partial = &buf;
  rs.m = 128 * uint32_t(w);
  rs.n = 256;
  rs.k = 128;
  rs.a.assign(w, nullptr);
  rs.b.assign(w, nullptr);
  rs.out.assign(w, nullptr);
  rs.a[me()] = a.get();
  rs.b[me()] = b.get();
  rs.out[me()] = out.get();
  rs.config.scatter = GemmRsScatter::kPull;
  const std::string why = GemmRs::can_implement(world(), heap, rs);
  EXPECT_NE(why.find("put_signal"), std::string::npos) << why;
  EXPECT_NE(why.find("config.scatter"), std::string::npos) << why;
  // The copy-engine scatter and the decomposed method reach peers only through puts and signals
  // (their runs: Process/ProcessGemmRs.*/ce and .../decomposed_136_rows under put_signal).
  rs.recv = &buf;
  rs.m = 64 * uint32_t(w);
  rs.config.scatter = GemmRsScatter::kCopyEngine;
  rs.config.granularity = SignalGranularity::kTileRow;
  EXPECT_EQ(GemmRs::can_implement(world(), heap, rs), "");
  rs.config.scatter = GemmRsScatter::kPull;
  rs.config.granularity = SignalGranularity::kTile;
  rs.config.method = OpMethod::kDecomposed;
  EXPECT_EQ(GemmRs::can_implement(world(), heap, rs), "");

  ReduceScatterArguments sum;
  sum.partial = &buf;
  sum.rows_per_rank = 64;
  sum.cols = 64;
  EXPECT_NE(ReduceScatter::can_implement(world(), heap, sum).find("put_signal"), std::string::npos);

  GemmArArguments ar;
  ar.m = 16;
  ar.n = 256;
  ar.k = 128;
  ar.a.assign(w, nullptr);
  ar.b.assign(w, nullptr);
  ar.out.assign(w, nullptr);
  ar.a[me()] = a.get();
  ar.b[me()] = b.get();
  ar.out[me()] = out.get();
  ar.config.path = GemmArPath::kSm;
  const std::string ar_why = GemmAr::can_implement(world(), heap, ar);
  EXPECT_NE(ar_why.find("put_signal"), std::string::npos) << ar_why;
  ar.config.path = GemmArPath::kAuto;  // the copy-engine path (Process/ProcessGemmAr.*_ce under put_signal)
  EXPECT_EQ(GemmAr::can_implement(world(), heap, ar), "");

  // A call captured into a CUDA graph begins with the call-barrier kernel, which stores into
  // peers: refused by name under put_signal, and nothing of it is left in the capture.
  ag.config.comm_rows = 32;
  AllGather gather(world(), heap, signals, ag, "process_transport_capture");
  const cudaStream_t stream = world().compute_stream(me());
  TL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::string what;
  try {
    gather.run();
  } catch (const InvalidArgument& e) {
    what = e.what();
  }
  cudaGraph_t graph = nullptr;
  TL_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  if (graph != nullptr) TL_CUDA_CHECK(cudaGraphDestroy(graph));
  EXPECT_NE(what.find("'transport' = put_signal"), std::string::npos) << what;
}

}  // namespace
}  // namespace tilelink::test::process
