// The process-world suite: one process per rank (World::from_launcher), started by
// `tilelink launch --nproc N [--mps] -- tilelink_process_tests` (ctest: gpu_process_*). Every
// process runs the same tests in the same order, since heaps, signal sets and ops are built
// collectively. Each checks its own rank's output against a reference -- a plain GEMM kernel or the
// host, not cuBLAS, which under some MPS shares leaves tiles unwritten (docs/PERF.md, fourteenth
// session) -- on inputs every process draws from the same fresh seed (the launch's unique id), with
// poisoned outputs and repeated calls.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../gpu/cublas_ref.hpp"
#include "../gpu/gpu_test_util.hpp"
#include "process_env.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/primitives/host.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"

namespace tilelink::test::process {

World* g_world = nullptr;
uint64_t g_seed = 0;

const World& world() { return *g_world; }
int me() { return world().local_ranks().front(); }
std::mt19937_64 shared_rng(uint64_t what, uint64_t call) { return std::mt19937_64(g_seed ^ (what << 32) ^ call); }

namespace {

// got (bf16) against want (fp32): bf16 rounding of the output plus accumulation-order noise.
::testing::AssertionResult close_to(const std::vector<__nv_bfloat16>& got, const std::vector<float>& want,
                                    uint32_t cols, float rel = 8e-3f, float abs = 1e-2f) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = __bfloat162float(got[i]);
    if (!(std::fabs(g - want[i]) <= rel * std::fabs(want[i]) + abs)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank " << me() << ": " << bad << " of " << got.size()
                                       << " elements off; first at row " << first / cols << " col " << first % cols
                                       << ": got " << __bfloat162float(got[first]) << ", reference " << want[first];
}

// got (bf16) against want (fp32) within bound[i] plus the output's own bf16 rounding.
::testing::AssertionResult within(const std::vector<__nv_bfloat16>& got, const std::vector<float>& want,
                                  const std::vector<float>& bound, uint32_t cols) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = __bfloat162float(got[i]);
    if (!(std::fabs(g - want[i]) <= bound[i] + std::fabs(want[i]) / 128.0f)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank " << me() << ": " << bad << " of " << got.size()
                                       << " elements off; first at row " << first / cols << " col " << first % cols
                                       << ": got " << __bfloat162float(got[first]) << ", reference " << want[first]
                                       << " (bound " << bound[first] << ")";
}

TEST(ProcessWorld, DrivesOnlyItsOwnRank) {
  EXPECT_EQ(world().mode(), WorldMode::kProcess);
  ASSERT_EQ(world().local_ranks().size(), 1u);
  EXPECT_TRUE(world().is_local(me()));
  EXPECT_EQ(world().scope(), MemScope::kSys);
  if (world().size() > 1) {
    const int other = (me() + 1) % world().size();
    EXPECT_FALSE(world().is_local(other));
    EXPECT_TRUE(throws_invalid_argument([&] { (void)world().compute_stream(other); }, "process"));
  }
}

// Every rank's word reaches every peer's copy of one allocation through the world's transport
// (rank_put_signal: a copy to the mapped peer under load_store, NVSHMEM's put-with-signal under
// put_signal). Under load_store every peer's segment is mapped and read back by pointer; under
// put_signal no peer is mapped (as on another node): the heap's base is null and data() refuses by
// name. Without TILELINK_TRANSPORT the world's auto choice on one node is load_store.
TEST(ProcessWorld, HeapReachesEveryPeersSegment) {
  const int w = world().size();
  constexpr uint32_t kSlot = 16;  // one word per rank, 16 bytes apart
  SymmetricHeap heap(world(), 1 << 20);
  SignalSet signals(heap, 64);
  SignalSlice slice = signals.slice(0, static_cast<uint32_t>(w), "process_heap_reach");
  SymmetricBuffer buf = heap.allocate(size_t(kSlot) * size_t(w));
  if (std::getenv("TILELINK_TRANSPORT") == nullptr) {
    EXPECT_EQ(world().transport(), Transport::kLoadStore) << "auto: every peer is mapped on one node";
  }
  char* mine = static_cast<char*>(buf.data(me())) + size_t(kSlot) * size_t(me());
  std::vector<uint32_t> word(kSlot / 4, 0u);
  word[0] = 0xC0DE0000u + static_cast<uint32_t>(me());
  int sms = 0;  // what this process's device reports (its MPS share): every process's World must read it as rank me's
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, world().device(me())));
  word[1] = static_cast<uint32_t>(sms);
  poison(buf.data(me()), buf.bytes());
  upload(mine, word.data(), kSlot);
  world().barrier();  // every rank's poison in place before any put lands
  slice.begin_call();
  const SignalView sig = slice.host_view(me());
  const cudaStream_t stream = world().compute_stream(me());
  for (int p = 0; p < w; ++p) {  // channel q of every rank: rank q's word has landed there
    if (p != me()) {
      rank_put_signal(stream, heap.host_view(me()), mine, mine, kSlot, TileShape{1, kSlot}, sig,
                      static_cast<uint32_t>(me()), p, world().transport());
    }
  }
  for (int q = 0; q < w; ++q) {
    if (q != me()) rank_wait(stream, sig, static_cast<uint32_t>(q), 1);
  }
  world().synchronize();
  const auto got = download<uint32_t>(buf.data(me()), buf.bytes() / 4);
  int tightest = 0;
  for (int q = 0; q < w; ++q) {
    EXPECT_EQ(got[size_t(q) * kSlot / 4], 0xC0DE0000u + static_cast<uint32_t>(q)) << "rank " << me() << ", rank " << q << "'s word";
    // The SM budgets the World gathered when it started: rank q's as rank q's device reports it.
    const int q_sms = static_cast<int>(got[size_t(q) * kSlot / 4 + 1]);
    EXPECT_EQ(world().sm_budget(q), q_sms) << "rank " << me() << " reads rank " << q << "'s budget";
    if (q_sms < static_cast<int>(got[size_t(tightest) * kSlot / 4 + 1])) tightest = q;
  }
  EXPECT_EQ(world().tightest_rank(), tightest);
  EXPECT_EQ(world().tightest_budget(), static_cast<int>(got[size_t(tightest) * kSlot / 4 + 1]));
  world().barrier();  // every rank's words in place everywhere
  for (int r = 0; r < w; ++r) {
    if (r == me()) continue;
    if (world().transport() == Transport::kPutSignal) {
      EXPECT_EQ(heap.base(r), nullptr) << "under put_signal rank " << me() << " maps rank " << r << "'s segment";
      EXPECT_TRUE(throws_invalid_argument([&] { (void)buf.data(r); }, "put_signal"));
      continue;
    }
    uint32_t seen = 0;
    TL_CUDA_CHECK(cudaMemcpy(&seen, static_cast<char*>(buf.data(r)) + size_t(kSlot) * size_t(r), sizeof(seen),
                             cudaMemcpyDefault));
    EXPECT_EQ(seen, 0xC0DE0000u + static_cast<uint32_t>(r)) << "rank " << me() << " reading rank " << r;
  }
  // The affine view the epilogue push stores through: from this rank's own segment, peer (me + k)
  // mod P at k strides; none under put_signal (no peer mapped).
  const size_t stride = heap.affine_stride();
  EXPECT_EQ(heap.affine_origin(me()), me());
  if (world().transport() == Transport::kPutSignal || w == 1) {
    EXPECT_EQ(stride, w == 1 ? heap.capacity() : 0u);
  } else if (stride != 0) {
    for (int k = 1; k < w; ++k) {
      EXPECT_EQ(heap.base((me() + k) % w), heap.base(me()) + size_t(k) * stride) << "rank " << me() << ", k " << k;
    }
  }
  world().barrier();
}

struct AgComm {
  const char* name;
  CommResource resource;
  bool from_source = false;  // the shard handed over by a_source (as torch.ops.tilelink.ag_gemm does)
};

class ProcessAgGemm : public ::testing::TestWithParam<AgComm> {};

TEST_P(ProcessAgGemm, MatchesCublasOnTheGatheredA) {
  const AgComm comm = GetParam();
  const int w = world().size();
  const uint32_t m_per_rank = 256, n = 512, k = 384, m = m_per_rank * uint32_t(w);
  const size_t a_bytes = size_t(m) * k * 2, shard = size_t(m_per_rank) * k * 2;
  SymmetricHeap heap(world(), a_bytes + (4 << 20));
  SignalSet signals(heap, 4096);
  SymmetricBuffer gathered = heap.allocate(a_bytes);
  // Two weight/output pairs: calls alternate between them through set_operands (the PyTorch ops'
  // use: a fresh output every call).
  DeviceBuffer bs[2] = {DeviceBuffer(size_t(n) * k * 2, world().device(me())), DeviceBuffer(size_t(n) * k * 2, world().device(me()))};
  DeviceBuffer cs[2] = {DeviceBuffer(size_t(m) * n * 2, world().device(me())), DeviceBuffer(size_t(m) * n * 2, world().device(me()))};
  DeviceBuffer a_full(a_bytes, world().device(me())), ref(size_t(m) * n * 4, world().device(me()));
  // from_source: the shard's two homes outside the heap, alternating call by call.
  DeviceBuffer xs[2] = {DeviceBuffer(shard, world().device(me())), DeviceBuffer(shard, world().device(me()))};
  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = m_per_rank;
  args.n = n;
  args.k = k;
  args.config.comm.resource = comm.resource;
  args.config.comm.comm_rows = 128;
  args.b.assign(w, nullptr);  // other processes' entries are not read
  args.c.assign(w, nullptr);
  args.b[me()] = bs[0].get();
  args.c[me()] = cs[0].get();
  if (comm.from_source) {
    args.a_source.assign(w, nullptr);
    args.a_source[me()] = xs[0].get();
  }
  ASSERT_EQ(AgGemm::can_implement(world(), heap, args), "");
  AgGemm op(world(), heap, signals, args, std::string("process_ag_gemm_") + comm.name);
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    DeviceBuffer &b = bs[(call - 1) % 2], &c = cs[(call - 1) % 2], &x = xs[(call - 1) % 2];
    if (comm.from_source) {
      op.set_operands(me(), b.get(), c.get(), x.get());
    } else {
      op.set_operands(me(), b.get(), c.get());
    }
    auto rng = shared_rng(1, call);
    const auto a_host = random_bf16(size_t(m) * k, rng);
    auto b_rng = shared_rng(100 + me(), call);
    upload(b.get(), random_bf16(size_t(n) * k, b_rng).data(), b.bytes());
    upload(a_full.get(), a_host.data(), a_bytes);
    char* g = static_cast<char*>(gathered.data(me()));
    poison(g, a_bytes);  // peers' rows stay poison unless gathered (with a_source, the own rows too)
    const char* own = reinterpret_cast<const char*>(a_host.data()) + me() * shard;
    if (comm.from_source) {
      poison(xs[call % 2].get(), shard);  // the other home: a stale read shows
      upload(x.get(), own, shard);
    } else {
      upload(g + me() * shard, own, shard);
    }
    poison(c.get(), c.bytes());
    op.run();
    world().synchronize();
    // The plain kernel, not cuBLAS: under an MPS client of 38-44 SMs (3 processes on an H100)
    // cuBLAS leaves tiles of small GEMMs unwritten (docs/PERF.md, fourteenth session).
    simple_reference(a_full.get(), b.get(), ref.get<float>(), m, n, k);
    settle();
    EXPECT_TRUE(close_to(download<__nv_bfloat16>(c.get(), size_t(m) * n), download<float>(ref.get(), size_t(m) * n), n));
  }
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessAgGemm,
                         ::testing::Values(AgComm{"sm", CommResource::kSm}, AgComm{"ce", CommResource::kCopyEngine},
                                           AgComm{"sm_source", CommResource::kSm, true},
                                           AgComm{"ce_source", CommResource::kCopyEngine, true}),
                         [](const auto& info) { return std::string(info.param.name); });

struct RsScatter {
  const char* name;
  GemmRsScatter scatter;
  GemmRsReducer reducer = GemmRsReducer::kAuto;
  uint32_t rows = 256;  // per rank: whole tile rows, or (136) a partial last one
  OpMethod method = OpMethod::kAuto;
  GemmRsPushNotify push_notify = GemmRsPushNotify::kDeferred;
  GemmRsEngine engine = GemmRsEngine::kOwnerTiles;
  uint32_t k = 256;  // 1024 and more: the small-M engine cuts K into slices
};

class ProcessGemmRs : public ::testing::TestWithParam<RsScatter> {};

TEST_P(ProcessGemmRs, MatchesTheSumOfEveryRanksCublasProduct) {
  const RsScatter s = GetParam();
  const int w = world().size();
  const uint32_t rows = s.rows, n = 512, k = s.k, m = rows * uint32_t(w);
  SymmetricHeap heap(world(), size_t(m) * n * 2 * 2 + (4 << 20));
  SignalSet signals(heap, 4096);
  SymmetricBuffer partial = heap.allocate(size_t(m) * n * 2), recv = heap.allocate(size_t(m) * n * 2);
  const int dev = world().device(me());
  // Two sets of operands: calls alternate between them through set_operands.
  DeviceBuffer as[2] = {DeviceBuffer(size_t(m) * k * 2, dev), DeviceBuffer(size_t(m) * k * 2, dev)};
  DeviceBuffer bs[2] = {DeviceBuffer(size_t(n) * k * 2, dev), DeviceBuffer(size_t(n) * k * 2, dev)};
  DeviceBuffer outs[2] = {DeviceBuffer(size_t(rows) * n * 2, dev), DeviceBuffer(size_t(rows) * n * 2, dev)};
  DeviceBuffer ref(size_t(m) * n * 4, dev);
  GemmRsArguments args;
  args.partial = &partial;
  args.recv = &recv;
  args.m = m;
  args.n = n;
  args.k = k;
  args.config.scatter = s.scatter;
  // The copy engine moves whole groups of rows: a signal per tile row.
  args.config.granularity = s.scatter == GemmRsScatter::kCopyEngine ? SignalGranularity::kTileRow
                                                                     : SignalGranularity::kTile;
  args.config.reducer = s.reducer;
  args.config.method = s.method;
  args.config.push_notify = s.push_notify;
  args.config.engine = s.engine;
  args.a.assign(w, nullptr);
  args.b.assign(w, nullptr);
  args.out.assign(w, nullptr);
  args.a[me()] = as[0].get();
  args.b[me()] = bs[0].get();
  args.out[me()] = outs[0].get();
  const std::string why = GemmRs::can_implement(world(), heap, args);
  if (!why.empty() && s.scatter == GemmRsScatter::kCopyEngine) {
    FAIL() << "the copy-engine scatter runs on every process world and transport: " << why;
  }
  if (!why.empty() && s.scatter == GemmRsScatter::kEpiloguePush && world().transport() == Transport::kLoadStore &&
      heap.affine_stride() != 0) {
    FAIL() << "push through the affine view every process agreed on: " << why;
  }
  if (!why.empty()) {
    // The same answer in every process: under the put-with-signal transport only the copy-engine
    // paths run; push needs the heap's affine view, which every process found alike or none uses.
    // (Once rank 0 alone saw an affine heap, ran push and waited for pushes that never came.)
    GTEST_SKIP() << "scatter " << s.name << " refused on this process world: " << why;
  }
  GemmRs op(world(), heap, signals, args, std::string("process_gemm_rs_") + s.name);
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    DeviceBuffer &a = as[(call - 1) % 2], &b = bs[(call - 1) % 2], &out = outs[(call - 1) % 2];
    op.set_operands(me(), a.get(), b.get(), out.get());
    // Every rank's A and B (each process makes all of them, for the reference).
    // want: the fp32 sum of every rank's product for this rank's rows; bound: the rounding of each
    // rank's partial to bf16 before the sum (2^-8 of its magnitude, each).
    std::vector<float> want(size_t(rows) * n, 0.0f), bound(size_t(rows) * n, 1e-2f);
    for (int p = 0; p < w; ++p) {
      auto rng = shared_rng(200 + p, call);
      const auto a_p = random_bf16(size_t(m) * k, rng);
      const auto b_p = random_bf16(size_t(n) * k, rng);
      if (p == me()) {
        upload(a.get(), a_p.data(), a.bytes());
        upload(b.get(), b_p.data(), b.bytes());
      }
      DeviceBuffer ap(a.bytes(), dev), bp(b.bytes(), dev);
      upload(ap.get(), a_p.data(), ap.bytes());
      upload(bp.get(), b_p.data(), bp.bytes());
      simple_reference(ap.get(), bp.get(), ref.get<float>(), m, n, k);  // not cuBLAS: as above
      settle();
      const auto full = download<float>(ref.get(), size_t(m) * n);
      for (size_t i = 0; i < want.size(); ++i) {
        const float x = full[size_t(me()) * rows * n + i];
        want[i] += x;
        bound[i] += std::fabs(x) / 256.0f;
      }
      if (op.engine() == GemmRsEngine::kSmallM) {
        // Each K slice is rounded to bf16 on its own: 2^-8 of |A_p| |B_p|^T bounds them all.
        auto magnitude = [](std::vector<__nv_bfloat16> v) {
          for (__nv_bfloat16& x : v) {  // clear the sign bit
            uint16_t bits;
            std::memcpy(&bits, &x, 2);
            bits &= 0x7FFF;
            std::memcpy(&x, &bits, 2);
          }
          return v;
        };
        upload(ap.get(), magnitude(a_p).data(), ap.bytes());
        upload(bp.get(), magnitude(b_p).data(), bp.bytes());
        simple_reference(ap.get(), bp.get(), ref.get<float>(), m, n, k);
        settle();
        const auto mag = download<float>(ref.get(), size_t(m) * n);
        for (size_t i = 0; i < want.size(); ++i) bound[i] += mag[size_t(me()) * rows * n + i] / 256.0f;
      }
    }
    poison(out.get(), out.bytes());
    op.run();
    world().synchronize();
    EXPECT_TRUE(within(download<__nv_bfloat16>(out.get(), size_t(rows) * n), want, bound, n));
  }
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessGemmRs,
                         ::testing::Values(RsScatter{"pull", GemmRsScatter::kPull},
                                           RsScatter{"push", GemmRsScatter::kEpiloguePush},
                                           RsScatter{"ce", GemmRsScatter::kCopyEngine},
                                           // the GEMM's epilogue sums; a partial last tile row
                                           RsScatter{"pull_epilogue", GemmRsScatter::kPull, GemmRsReducer::kEpilogue},
                                           RsScatter{"push_epilogue_136_rows", GemmRsScatter::kEpiloguePush,
                                                     GemmRsReducer::kEpilogue, 136},
                                           // the push's notify as soon as its store lands (deferred above)
                                           RsScatter{"push_immediate_epilogue", GemmRsScatter::kEpiloguePush,
                                                     GemmRsReducer::kEpilogue, 256, OpMethod::kAuto,
                                                     GemmRsPushNotify::kImmediate},
                                           RsScatter{"pull_136_rows", GemmRsScatter::kPull, GemmRsReducer::kAuto, 136},
                                           // block GEMMs, each peer block's copy behind it (issue 21)
                                           RsScatter{"decomposed_136_rows", GemmRsScatter::kPull, GemmRsReducer::kAuto,
                                                     136, OpMethod::kDecomposed},
                                           // decode's M: GEMM+AR's engine, K slices, each owner its rows
                                           // (3 a rank: a tile row shared by every owner), both paths
                                           RsScatter{"small_m_3_rows", GemmRsScatter::kAuto, GemmRsReducer::kAuto, 3,
                                                     OpMethod::kAuto, GemmRsPushNotify::kDeferred,
                                                     GemmRsEngine::kSmallM, 2048},
                                           RsScatter{"small_m_ce_40_rows", GemmRsScatter::kCopyEngine,
                                                     GemmRsReducer::kAuto, 40, OpMethod::kAuto,
                                                     GemmRsPushNotify::kDeferred, GemmRsEngine::kSmallM, 1024}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- A rank that never arrives (ctest gpu_process_fault_*: TILELINK_PROCESS_FAULT set) --------------
// The last rank stays away; every other rank must end in a TimeoutError that names it, not hang. A
// timed-out wait traps and the waiting process's CUDA context is lost, so each fault has a launch of
// its own and main() leaves without destructors. The absent rank stays alive (its memory mapped)
// until the others have reported, then leaves too.
int absent_rank() { return world().size() - 1; }
void stay_away() {
  // Past the others' bound (the suite sets TILELINK_*_TIMEOUT_MS to a few seconds).
  std::this_thread::sleep_for(std::chrono::seconds(12));
}

TEST(ProcessFault, BarrierNamesTheRankThatNeverArrives) {
  ASSERT_GE(world().size(), 2) << "needs a peer to stay away";
  if (me() == absent_rank()) return stay_away();
  try {
    world().barrier();
    ADD_FAILURE() << "rank " << me() << ": World::barrier returned although rank " << absent_rank() << " never arrived";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.op_name(), "World::barrier") << e.what();
    EXPECT_EQ(e.record().kind, WaitKind::kWorldBarrier) << e.what();
    const std::string named = "rank " + std::to_string(absent_rank()) + " never arrived at World::barrier";
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    std::printf("rank %d: %s\n", me(), e.what());
  }
}

TEST(ProcessFault, AnOpsWaitNamesTheRankThatNeverCalls) {
  ASSERT_GE(world().size(), 2) << "needs a peer to stay away";
  const int w = world().size();
  const uint32_t m_per_rank = 128, n = 256, k = 128, m = m_per_rank * uint32_t(w);
  // Never destroyed: the heap's collective free would wait for a peer that has left, on a lost
  // context (the Python test leaves with os._exit for the same reason).
  struct Setup {
    SymmetricHeap heap;
    SignalSet signals;
    SymmetricBuffer gathered;
    DeviceBuffer b, c;
    Setup(size_t a_bytes, size_t b_bytes, size_t c_bytes)
        : heap(world(), a_bytes + (4 << 20)), signals(heap, 4096), gathered(heap.allocate(a_bytes)),
          b(b_bytes, world().device(me())), c(c_bytes, world().device(me())) {}
  };
  auto* setup = new Setup(size_t(m) * k * 2, size_t(n) * k * 2, size_t(m) * n * 2);
  AgGemmArguments args;
  args.a = &setup->gathered;
  args.m_per_rank = m_per_rank;
  args.n = n;
  args.k = k;
  // Under put_signal the copy engine's pushes (its entry barrier a stream wait on the absent rank).
  args.config.comm.resource =
      world().transport() == Transport::kPutSignal ? CommResource::kCopyEngine : CommResource::kSm;
  args.config.comm.comm_rows = 128;
  args.b.assign(w, nullptr);
  args.c.assign(w, nullptr);
  args.b[me()] = setup->b.get();
  args.c[me()] = setup->c.get();
  ASSERT_EQ(AgGemm::can_implement(world(), setup->heap, args), "");
  // Built by every rank (collective), and one call by every rank.
  auto* op = new AgGemm(world(), setup->heap, setup->signals, args, "process_fault_ag_gemm");
  op->run();
  world().synchronize();
  world().barrier();
  if (me() == absent_rank()) return stay_away();
  try {
    op->run();  // the absent rank makes no second call
    world().synchronize();
    ADD_FAILURE() << "rank " << me() << ": the call completed although rank " << absent_rank() << " never made it";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.op_name().find("process_fault_ag_gemm"), std::string::npos) << e.what();
    // Named directly (a tile of its shard) or as the rank that had not entered the call.
    const std::string what = e.what(), absent = "rank " + std::to_string(absent_rank());
    EXPECT_TRUE(what.find(absent + "'s") != std::string::npos ||
                what.find(absent + " had not entered this call") != std::string::npos)
        << what;
    std::printf("rank %d: %s\n", me(), e.what());
  }
}

// After every test, the device of this process must be idle: a kernel still waiting on a peer
// would otherwise trap later, inside whatever comes next (an NVSHMEM barrier, which then exits
// the process without saying more). Waiting here turns it into the waiter's TimeoutError (op, rank,
// tile, channel) against the test that left it.
class DeviceIdleAfterEachTest : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    try {
      settle();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: after %s.%s the device was not idle: %s\n", me(), info.test_suite_name(),
                   info.name(), e.what());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
};

}  // namespace
}  // namespace tilelink::test::process

int main(int argc, char** argv) {
  // One JUnit file per rank: process_[fault_][put_signal_]<size>_rank_<rank>.xml in
  // TILELINK_PROCESS_RESULTS. Set before
  // InitGoogleTest, which installs the XML printer from the flag (a --gtest_output still wins).
  // The fault tests (a rank that never arrives) kill the waiters' CUDA contexts: they run only in
  // launches of their own (TILELINK_PROCESS_FAULT), and those run nothing else.
  const bool fault_mode = std::getenv("TILELINK_PROCESS_FAULT") != nullptr;
  if (const char* dir = std::getenv("TILELINK_PROCESS_RESULTS")) {
    const char* rank = std::getenv("RANK");
    const char* size = std::getenv("WORLD_SIZE");
    const char* transport = std::getenv("TILELINK_TRANSPORT");
    const bool put_signal = transport != nullptr && std::string(transport) == "put_signal";
    const std::string kind = std::string(fault_mode ? "/process_fault_" : "/process_") + (put_signal ? "put_signal_" : "");
    GTEST_FLAG_SET(output, std::string("xml:") + dir + kind + (size ? size : "1") + "_rank_" + (rank ? rank : "0") +
                               ".xml");
  }
  ::testing::InitGoogleTest(&argc, argv);
  // After InitGoogleTest, so that a --gtest_filter of the command line keeps the exclusion.
  {
    std::string filter = GTEST_FLAG_GET(filter);
    if (fault_mode) {
      filter = std::getenv("TILELINK_PROCESS_FAULT");
    } else {
      filter += filter.find('-') == std::string::npos ? "-ProcessFault.*" : ":ProcessFault.*";
    }
    GTEST_FLAG_SET(filter, filter);
  }
  tilelink::configure_cuda_environment();
  if (!tilelink::test::gpu_present()) {
    std::cout << "no CUDA GPU found: process test skipped\n";
    return 0;
  }
  try {
    static tilelink::World world = tilelink::World::from_launcher();
    tilelink::test::process::g_world = &world;
  } catch (const std::exception& e) {
    std::cerr << "tilelink_process_tests: " << e.what()
              << "\n(run it under `tilelink launch --nproc N -- ...` or `torchrun --no-python ...`)\n";
    return 1;
  }
  // Fresh per launch and the same in every process: `tilelink launch`'s unique id, or torchrun's
  // run id and port.
  // TILELINK_TEST_SEED replays a launch's data (the seed is printed first).
  auto env = [](const char* name) { const char* v = std::getenv(name); return std::string(v ? v : ""); };
  const std::string replay = env("TILELINK_TEST_SEED");
  tilelink::test::process::g_seed =
      !replay.empty() ? std::stoull(replay, nullptr, 0)
                      : std::hash<std::string>{}(env("TILELINK_UNIQUE_ID") + env("TORCHELASTIC_RUN_ID") + env("MASTER_PORT"));
  std::printf("tilelink_process_tests: data seed 0x%llx (TILELINK_TEST_SEED=0x%llx replays it)\n",
              static_cast<unsigned long long>(tilelink::test::process::g_seed),
              static_cast<unsigned long long>(tilelink::test::process::g_seed));
  std::fflush(stdout);
  if (fault_mode) {
    // No destructors: the waiters' contexts are lost, and the heaps' collective frees would wait
    // for peers that have left.
    const int rc = RUN_ALL_TESTS();
    std::fflush(stdout);
    std::_Exit(rc);
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new tilelink::test::process::DeviceIdleAfterEachTest);
  return RUN_ALL_TESTS();
}
