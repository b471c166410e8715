// Failure reporting:
//  - a device wait that nobody satisfies traps and becomes TimeoutError naming the op, rank,
//    block, tile, channel and expected value (death test: the trap poisons the CUDA context);
//  - a stream wait (rank_wait) that never completes becomes TimeoutError naming the op, rank and
//    channel, and the world stays usable;
//  - bad arguments throw InvalidArgument before anything is launched: the destinations keep their
//    poison, and no signal channel stays claimed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "gpu_test_util.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::test::errors {

constexpr uint64_t kShortTimeoutNs = 200'000'000;  // 200 ms

WorldOptions short_timeout() {
  WorldOptions options;
  options.wait_timeout_ns = kShortTimeoutNs;
  return options;
}

// Ends the death-test child without running destructors: after a trap the CUDA context is gone.
[[noreturn]] void child_exit(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

// Seconds a death-test child may take: GoogleTest waits for the child without a time limit, so a
// child that hangs (a wait the library failed to bound) is killed by SIGALRM instead, and the
// parent reports it killed by signal 14 rather than hanging the suite. The child's work is a
// 200 ms wait plus CUDA's start-up.
constexpr unsigned kChildLimitS = 60;

// The body of a timeout death test, run in the child with the 200 ms wait bound whatever the
// environment says: `body` sets up a wait that nobody satisfies and ends in exit_on_timeout. An
// exception on the way (the set-up, or `surface` throwing anything but TimeoutError) exits 5.
template <class Body>
[[noreturn]] void run_timeout_child(Body&& body) {
  alarm(kChildLimitS);
  unsetenv("TILELINK_WAIT_TIMEOUT_MS");
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    child_exit(5);
  }
  std::fprintf(stderr, "the test body returned without a verdict\n");
  child_exit(6);
}

// Calls `surface`, which must throw TimeoutError: prints its message (the parent matches it) and
// exits 0 if `record_ok` accepts the error (which may also check that the world is usable), 4 if
// not; exits 3 with `if_none` when `surface` returns.
template <class Surface, class RecordOk>
[[noreturn]] void exit_on_timeout(Surface&& surface, RecordOk&& record_ok, const char* if_none) {
  try {
    surface();
  } catch (const TimeoutError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    const bool ok = record_ok(e);
    if (!ok) std::fprintf(stderr, "error record does not match the wait\n");
    child_exit(ok ? 0 : 4);
  }
  std::fprintf(stderr, "%s\n", if_none);
  child_exit(3);
}

constexpr const char* kNoTimeout = "synchronize returned without TimeoutError";

// ---- timeouts -------------------------------------------------------------------------------------

// The waiter of the timeout test: block 3 of rank 1 waits for channel 2 of its slice to reach
// epoch 2 x 3 arrivals = 6, on behalf of tile 7. Nobody notifies.
constexpr int kWaitRank = 1;
constexpr uint32_t kWaitBlock = 3;
constexpr uint32_t kWaitChannel = 2;
constexpr uint32_t kWaitArrivals = 3;
constexpr int32_t kWaitTile = 7;
constexpr uint64_t kWaitEpoch = 2;

__global__ void wait_forever_kernel(SignalView sig) {
  if (blockIdx.x == kWaitBlock && threadIdx.x == 0) {
    consumer_tile_wait(sig, kWaitChannel, 1, kWaitArrivals, kWaitTile);
  }
}

// Launches the waiter on rank kWaitRank of `env`, on a slice named `op` at epoch kWaitEpoch.
void launch_forever_wait(TestWorld& env, const char* op) {
  SignalSlice slice = env.signals.allocate(4, op);
  while (slice.epoch() < kWaitEpoch) slice.begin_call();
  env.world.set_device(kWaitRank);
  wait_forever_kernel<<<kWaitBlock + 2, 32, 0, env.world.compute_stream(kWaitRank)>>>(
      slice.device_view(kWaitRank));
  TL_CHECK_LAUNCH();
}

void device_wait_times_out() {
  run_timeout_child([] {
    TestWorld env(2, 1 << 20, 64, short_timeout());
    launch_forever_wait(env, "never_notified");
    exit_on_timeout([&] { env.world.synchronize(); },
                    [](const TimeoutError& e) {
                      const ErrorRecord& r = e.record();
                      return r.kind == WaitKind::kConsumerTile && r.rank == kWaitRank &&
                             r.block == int32_t(kWaitBlock) && r.tile == kWaitTile &&
                             r.channel == kWaitChannel && r.peer == kWaitRank &&
                             r.expected == kWaitEpoch * kWaitArrivals && r.observed == 0 &&
                             r.elapsed_ns >= kShortTimeoutNs && e.op_name() == "never_notified";
                    },
                    kNoTimeout);
  });
}

TEST(ErrorsDeathTest, DeviceWaitTimeoutNamesTheWaiter) {
  TL_SKIP_WITHOUT_GPU();
  // Wording of describe_timeout (core/error.hpp): "timeout in op 'x': rank r, block b, tile t
  // waited on channel c in rank p's memory for value >= v, observed o after s".
  EXPECT_EXIT(device_wait_times_out(), ::testing::ExitedWithCode(0),
              "never_notified.*rank 1.*block 3.*tile 7.*channel 2.*>= 6");
}

constexpr uint32_t kStalledChannel = 3;

void stream_wait_times_out() {
  run_timeout_child([] {
    TestWorld env(2, 1 << 20, 64, short_timeout());
    SignalSlice slice = env.signals.allocate(4, "stalled_stream");
    slice.begin_call();
    rank_wait(env.world.comm_stream(kWaitRank), slice.host_view(kWaitRank), kStalledChannel);
    exit_on_timeout([&] { env.world.synchronize(); },
                    [&](const TimeoutError& e) {
                      const ErrorRecord& r = e.record();
                      const bool record_ok = r.kind == WaitKind::kRankWait && r.rank == kWaitRank &&
                                             r.channel == kStalledChannel && r.expected == 1 &&
                                             r.observed == 0 && e.op_name() == "stalled_stream";
                      // The stream was released: the world is usable again.
                      env.world.synchronize();
                      return record_ok;
                    },
                    kNoTimeout);
  });
}

// A stream wait does not trap; it runs in a child anyway so that a runtime that cannot release
// the stream fails this test alone.
TEST(ErrorsDeathTest, StreamWaitTimeoutNamesTheWaiter) {
  TL_SKIP_WITHOUT_GPU();
  EXPECT_EXIT(stream_wait_times_out(), ::testing::ExitedWithCode(0),
              "stalled_stream.*rank 1.*channel 3");
}

// A trap that CUDA reports at a later, unrelated call (here a copy, as the host's next enqueue
// would meet it) still names the waiter: the call's error becomes the record's TimeoutError.
void trap_surfaces_at_a_later_call() {
  run_timeout_child([] {
    TestWorld env(2, 1 << 20, 64, short_timeout());
    launch_forever_wait(env, "trapped_waiter");
    DeviceBuffer scratch(256, env.world.device(kWaitRank));
    std::vector<char> host(256);
    exit_on_timeout(
        [&] {
          // Synchronous copies until the trap (after the 200 ms timeout) ends the context.
          for (int i = 0; i < 100000; ++i) {
            TL_CUDA_CHECK(cudaMemcpy(host.data(), scratch.get(), host.size(), cudaMemcpyDeviceToHost));
            TL_CUDA_CHECK(cudaDeviceSynchronize());
          }
        },
        [](const TimeoutError& e) {
          const ErrorRecord& r = e.record();
          return r.rank == kWaitRank && r.block == int32_t(kWaitBlock) && r.tile == kWaitTile &&
                 r.channel == kWaitChannel && e.op_name() == "trapped_waiter";
        },
        "no call failed after the trap");
  });
}

TEST(ErrorsDeathTest, TrapReportedAtALaterCallNamesTheWaiter) {
  TL_SKIP_WITHOUT_GPU();
  EXPECT_EXIT(trap_surfaces_at_a_later_call(), ::testing::ExitedWithCode(0),
              "trapped_waiter.*rank 1.*block 3.*tile 7.*channel 2.*later call \\(CUDA call failed: cuda");
}

// An all-gather whose peer never runs: rank 0 pulls alone, and its timeout names the kernel and
// whose rows it waited for (rank 1's shard), not only the channel number.
void all_gather_peer_missing() {
  run_timeout_child([] {
    TestWorld env(2, 4 << 20, 256, short_timeout());
    constexpr uint32_t kRows = 64, kRowBytes = 256;
    SymmetricBuffer gathered = env.heap.allocate(2 * kRows * kRowBytes);
    AllGatherArguments args;
    args.gathered = &gathered;
    args.rows_per_rank = kRows;
    args.row_bytes = kRowBytes;
    args.config.comm_rows = 16;
    args.config.num_blocks = 2;
    AllGather ag(env.world, env.heap, env.signals, args, "lonely_all_gather");
    ag.begin_call();
    ag.announce(0);
    ag.transfer(0);  // rank 1 never runs
    exit_on_timeout([&] { env.world.synchronize(); },
                    [](const TimeoutError& e) { return e.record().rank == 0 && e.record().peer == 1; },
                    kNoTimeout);
  });
}

TEST(ErrorsDeathTest, AllGatherTimeoutNamesTheSourceRows) {
  TL_SKIP_WITHOUT_GPU();
  EXPECT_EXIT(all_gather_peer_missing(), ::testing::ExitedWithCode(0),
              "lonely_all_gather.*, kernel all_gather_kernel<ldst>: rank 0.*waited for rows \\[(64|80|96|112), [0-9]+\\) of the gathered tensor: rank 1's shard");
}

// A replayable slice's call (CUDA graphs) starts with a device barrier over the ranks. Rank 1's
// compute stream is held by a stream wait nobody satisfies, so its barrier never runs: rank 0's
// barrier times out and names the op, the rank and the barrier (1 of 2 arrivals).
void call_barrier_peer_missing() {
  run_timeout_child([] {
    TestWorld env(2, 1 << 20, 64, short_timeout());
    SignalSlice blocker = env.signals.allocate(1, "blocker");
    SignalSlice slice = env.signals.allocate(4, "replayed_op");  // claiming waits for the streams
    blocker.begin_call();
    rank_wait(env.world.compute_stream(1), blocker.host_view(1), 0);
    slice.make_replayable();
    EXPECT_EQ(slice.begin_call(), 1u);
    exit_on_timeout([&] { env.world.synchronize(); },
                    [](const TimeoutError& e) {
                      const ErrorRecord& r = e.record();
                      return r.kind == WaitKind::kCallBarrier && r.rank == 0 && r.expected == 2 && r.observed == 1 &&
                             e.op_name() == "replayed_op";
                    },
                    kNoTimeout);
  });
}

TEST(ErrorsDeathTest, ReplayableCallBarrierTimeoutNamesTheRank) {
  TL_SKIP_WITHOUT_GPU();
  EXPECT_EXIT(call_barrier_peer_missing(), ::testing::ExitedWithCode(0),
              "replayed_op.*call_barrier_kernel: rank 0.*call_barrier.*>= 2, observed 1.*every rank to enter the call");
}

// ---- resources -------------------------------------------------------------------------------------

// A heap larger than the device: ResourceError saying what was asked for where and what is free,
// not a raw CUDA error; the process's CUDA context stays usable.
TEST(ResourceErrorTest, HeapLargerThanTheDeviceSaysWhatDidNotFit) {
  TL_SKIP_WITHOUT_GPU();
  World world = make_test_world(2);
  const size_t per_rank = size_t(1) << 46;  // 64 TiB
  try {
    SymmetricHeap heap(world, per_rank);
    ADD_FAILURE() << "a 64 TiB heap was allocated";
  } catch (const ResourceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SymmetricHeap ("), std::string::npos) << what;
    EXPECT_NE(what.find("64.0 TiB"), std::string::npos) << what;
    EXPECT_NE(what.find("on device"), std::string::npos) << what;
    EXPECT_NE(what.find("free of"), std::string::npos) << what;
  }
  SymmetricHeap small(world, 1 << 20);  // still usable
  EXPECT_EQ(small.capacity(), size_t(1) << 20);
  EXPECT_THROW(DeviceBuffer(size_t(1) << 46, world.device(0)), ResourceError);
}

// ---- bad arguments ---------------------------------------------------------------------------------

// Runs `call`, which must throw InvalidArgument whose message contains `needle`.
template <class F>
::testing::AssertionResult throws_invalid_argument(F&& call, const std::string& needle) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      return ::testing::AssertionFailure() << "message \"" << e.what() << "\" does not name \"" << needle << "\"";
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something else: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// The put-with-signal transport goes through NVSHMEM, whose PEs are processes: one-process worlds
// refuse it by name.
TEST(InvalidArgumentTest, OneProcessWorldsRefuseThePutSignalTransport) {
  TL_SKIP_WITHOUT_GPU();
  WorldOptions options;
  options.transport = Transport::kPutSignal;
  EXPECT_TRUE(throws_invalid_argument([&] { World::virtual_ranks(2, 0, options); }, "put_signal"));
  EXPECT_TRUE(throws_invalid_argument([&] { World::multi_gpu({0}, options); }, "put_signal"));
}

TEST(InvalidArgumentTest, HeapRefusesWhatDoesNotFit) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 1 << 20, 64);
  SymmetricBuffer half = env.heap.allocate(env.heap.capacity() / 2);
  const size_t free_before = env.heap.bytes_free();
  const size_t too_big = free_before + 1;
  EXPECT_TRUE(throws_invalid_argument([&] { env.heap.allocate(too_big); }, std::to_string(too_big)));
  EXPECT_TRUE(throws_invalid_argument([&] { env.heap.allocate(env.heap.capacity()); }, ""));
  EXPECT_TRUE(throws_invalid_argument([&] { env.heap.allocate(0); }, ""));
  EXPECT_TRUE(throws_invalid_argument([&] { env.heap.allocate(256, 48); }, "48"));
  EXPECT_EQ(env.heap.bytes_free(), free_before);
}

// fits() answers as allocate() would, free ranges and not only free bytes: two holes of a quarter
// each hold two quarters but not a half, although half the heap is free.
TEST(InvalidArgumentTest, HeapFitsAnswersAsAllocateWould) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 1 << 20, 64);  // its signal set takes the heap's first bytes
  const size_t avail = env.heap.bytes_free();
  const size_t quarter = avail / 4 / 1024 * 1024, rest = avail - 4 * quarter;  // rest < 4 KiB
  std::vector<SymmetricBuffer> q;
  for (int i = 0; i < 4; ++i) q.push_back(env.heap.allocate(quarter));
  q[0] = SymmetricBuffer();  // free the first and third quarters: two holes (and the rest at the end)
  q[2] = SymmetricBuffer();
  ASSERT_EQ(env.heap.bytes_free(), 2 * quarter + rest);
  EXPECT_FALSE(env.heap.fits({2 * quarter}));
  EXPECT_TRUE(throws_invalid_argument([&] { env.heap.allocate(2 * quarter); }, ""));
  EXPECT_TRUE(env.heap.fits({quarter, 0, quarter}));
  EXPECT_FALSE(env.heap.fits({quarter, quarter, rest + 1}));
  EXPECT_TRUE(env.heap.fits({quarter - 100, quarter}));  // rounded up to the alignment, as allocate does
  SymmetricBuffer a = env.heap.allocate(quarter), b = env.heap.allocate(quarter);
  EXPECT_FALSE(env.heap.fits({rest + 1}));
  EXPECT_EQ(env.heap.bytes_free(), rest);
}

TEST(InvalidArgumentTest, WorldRefusesBadSizesAndRanks) {
  TL_SKIP_WITHOUT_GPU();
  EXPECT_TRUE(throws_invalid_argument([] { World::virtual_ranks(0); }, "0"));
  EXPECT_TRUE(throws_invalid_argument([] { World::virtual_ranks(kMaxWorldSize + 1); },
                                      std::to_string(kMaxWorldSize + 1)));
  const World world = World::virtual_ranks(4);
  EXPECT_TRUE(throws_invalid_argument([&] { world.check_rank(-1, "check_rank_test"); }, "-1"));
  EXPECT_TRUE(throws_invalid_argument([&] { world.check_rank(4, "check_rank_test"); }, "check_rank_test"));
  EXPECT_NO_THROW(world.check_rank(0, "check_rank_test"));
  EXPECT_NO_THROW(world.check_rank(3, "check_rank_test"));
}

TEST(InvalidArgumentTest, SignalSliceOverlapNamesTheOwner) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 1 << 20, 64);
  {
    SignalSlice first = env.signals.slice(8, 8, "first_owner");
    EXPECT_TRUE(throws_invalid_argument([&] { env.signals.slice(12, 8, "second_owner"); }, "first_owner"));
    EXPECT_TRUE(throws_invalid_argument([&] { env.signals.slice(4, 5, "second_owner"); }, "first_owner"));
    EXPECT_TRUE(throws_invalid_argument([&] { env.signals.slice(60, 8, "out_of_range"); }, ""));
    EXPECT_TRUE(throws_invalid_argument([&] { env.signals.slice(0, 0, "empty"); }, ""));
    SignalSlice adjacent = env.signals.slice(16, 8, "adjacent_owner");
    EXPECT_TRUE(adjacent.valid());
  }
  // Released with its owner: the range can be claimed again.
  SignalSlice again = env.signals.slice(12, 8, "second_owner");
  EXPECT_TRUE(again.valid());
}

TEST(InvalidArgumentTest, RankCopyDataRefusesNullPointers) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 1 << 20, 64);
  constexpr size_t kBytes = 4096;
  DeviceBuffer src(kBytes, env.world.device(0)), dst(kBytes, env.world.device(0));
  TL_CUDA_CHECK(cudaMemset(src.get(), 0, kBytes));
  poison(dst.get(), kBytes);
  settle();
  const cudaStream_t stream = env.world.comm_stream(0);
  EXPECT_TRUE(throws_invalid_argument([&] { rank_copy_data(stream, nullptr, src.get(), kBytes); }, "'dst'"));
  EXPECT_TRUE(throws_invalid_argument([&] { rank_copy_data(stream, dst.get(), nullptr, kBytes); }, "'src'"));
  env.world.synchronize();
  EXPECT_TRUE(all_poison(download<uint8_t>(dst.get(), kBytes))) << "a refused copy wrote";
}

// Fixture of the collective argument checks: a 2-rank world, and a valid all-gather to start from.
class CollectiveArgumentsTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kRowsPerRank = 64;
  static constexpr uint32_t kRowBytes = 256;
  static constexpr uint32_t kChannels = 64;

  void poison_all(const SymmetricBuffer& buffer) {
    for (int r = 0; r < env_->world.size(); ++r) poison(buffer.data(r), buffer.bytes());
    settle();
  }
  // Nothing ran: every byte of `buffer` still holds the poison, no heap memory leaked
  // (`free_before`: bytes_free() before the refused calls) and no channel stayed claimed.
  void expect_untouched(const SymmetricBuffer& buffer, size_t free_before) {
    env_->world.synchronize();
    for (int r = 0; r < env_->world.size(); ++r) {
      EXPECT_TRUE(all_poison(download<uint8_t>(buffer.data(r), buffer.bytes()))) << "rank " << r;
    }
    EXPECT_EQ(env_->heap.bytes_free(), free_before);
    SignalSlice all = env_->signals.allocate(kChannels, "probe");
    EXPECT_TRUE(all.valid());
  }
  AllGatherArguments valid_all_gather(const SymmetricBuffer& gathered) const {
    AllGatherArguments args;
    args.gathered = &gathered;
    args.rows_per_rank = kRowsPerRank;
    args.row_bytes = kRowBytes;
    args.config.comm_rows = 16;
    return args;
  }
  ::testing::AssertionResult all_gather_refused(const AllGatherArguments& args, const std::string& needle) {
    const std::string why = AllGather::can_implement(env_->world, env_->heap, args);
    if (why.empty()) return ::testing::AssertionFailure() << "can_implement accepted it";
    return throws_invalid_argument(
        [&] { AllGather ag(env_->world, env_->heap, env_->signals, args, "bad_all_gather"); }, needle);
  }

  void SetUp() override {
    if (gpu_present()) env_ = std::make_unique<TestWorld>(2, 4 << 20, kChannels);
  }
  std::unique_ptr<TestWorld> env_;
};

TEST_F(CollectiveArgumentsTest, AllGatherRefusesBadRowsAndBuffers) {
  TL_SKIP_WITHOUT_GPU();
  const size_t bytes = size_t(2) * kRowsPerRank * kRowBytes;
  SymmetricBuffer gathered = env_->heap.allocate(bytes);
  poison_all(gathered);
  const size_t free_before = env_->heap.bytes_free();
  EXPECT_EQ(AllGather::can_implement(env_->world, env_->heap, valid_all_gather(gathered)), "");

  AllGatherArguments args = valid_all_gather(gathered);
  args.row_bytes = 200;  // not a multiple of 16 (and still fits the buffer)
  EXPECT_TRUE(all_gather_refused(args, "row_bytes"));

  args = valid_all_gather(gathered);
  args.rows_per_rank = kRowsPerRank + 1;  // one row more than the buffer holds
  EXPECT_TRUE(all_gather_refused(args, "gathered"));

  args = valid_all_gather(gathered);
  args.gathered = nullptr;
  EXPECT_TRUE(all_gather_refused(args, "gathered"));

  // A buffer of another heap: its pointers mean nothing to this heap's peers.
  SymmetricHeap other_heap(env_->world, 1 << 20);
  SymmetricBuffer foreign = other_heap.allocate(bytes);
  args = valid_all_gather(foreign);
  EXPECT_TRUE(all_gather_refused(args, "gathered"));

  expect_untouched(gathered, free_before);
}

TEST_F(CollectiveArgumentsTest, AllGatherRefusesMisalignedBuffer) {
  TL_SKIP_WITHOUT_GPU();
  const size_t bytes = size_t(2) * kRowsPerRank * kRowBytes;
  SymmetricBuffer gathered = env_->heap.allocate(bytes + 64);
  poison_all(gathered);
  const size_t free_before = env_->heap.bytes_free();
  AllGatherArguments args = valid_all_gather(gathered);
  args.gathered_offset = 16;  // aligned: fine
  EXPECT_EQ(AllGather::can_implement(env_->world, env_->heap, args), "");
  args.gathered_offset = 8;  // the tensor would start 8 bytes into the buffer
  EXPECT_TRUE(all_gather_refused(args, "gathered"));
  expect_untouched(gathered, free_before);
}

TEST_F(CollectiveArgumentsTest, ReduceScatterRefusesBadOutputs) {
  TL_SKIP_WITHOUT_GPU();
  constexpr uint32_t kCols = 64;
  const size_t out_bytes = size_t(kRowsPerRank) * kCols * sizeof(float);
  SymmetricBuffer partial = env_->heap.allocate(2 * out_bytes);
  poison_all(partial);
  DeviceBuffer out0(out_bytes, env_->world.device(0)), out1(out_bytes, env_->world.device(1));
  poison(out0.get(), out_bytes);
  poison(out1.get(), out_bytes);
  settle();
  const size_t free_before = env_->heap.bytes_free();

  ReduceScatterArguments args;
  args.partial = &partial;
  args.out = {out0.get<float>(), out1.get<float>()};
  args.rows_per_rank = kRowsPerRank;
  args.cols = kCols;
  args.config.comm_rows = 16;
  EXPECT_EQ(ReduceScatter::can_implement(env_->world, env_->heap, args), "");

  auto refused = [&](const ReduceScatterArguments& bad) -> ::testing::AssertionResult {
    if (ReduceScatter::can_implement(env_->world, env_->heap, bad).empty()) {
      return ::testing::AssertionFailure() << "can_implement accepted it";
    }
    return throws_invalid_argument(
        [&] { ReduceScatter rs(env_->world, env_->heap, env_->signals, bad, "bad_reduce_scatter"); }, "out");
  };
  ReduceScatterArguments bad = args;
  bad.out = {out0.get<float>()};
  EXPECT_TRUE(refused(bad)) << "one output for two ranks";
  bad.out = {out0.get<float>(), out1.get<float>(), out1.get<float>()};
  EXPECT_TRUE(refused(bad)) << "three outputs for two ranks";
  bad.out = {out0.get<float>(), nullptr};
  EXPECT_TRUE(refused(bad)) << "a null output";

  expect_untouched(partial, free_before);
  EXPECT_TRUE(all_poison(download<uint8_t>(out0.get(), out_bytes)));
  EXPECT_TRUE(all_poison(download<uint8_t>(out1.get(), out_bytes)));
}

}  // namespace tilelink::test::errors
