// The CPU protocol executor itself: heap, views, threads, validation, and that a deadlock becomes
// a prompt TimeoutError naming who waited for what.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"
#include "tilelink/mapping/mapping.hpp"

namespace tilelink {
namespace {

using cpu::BlockCtx;
using cpu::Executor;
using cpu::ExecutorOptions;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ExecutorOptions quick_timeout(std::chrono::milliseconds t) {
  ExecutorOptions o;
  o.wait_timeout = t;
  o.max_delay_us = 20;
  return o;
}

TEST(Executor, RejectsBadWorldSizes) {
  EXPECT_THROW(Executor(0, 1024, 1), InvalidArgument);
  EXPECT_THROW(Executor(65, 1024, 1), InvalidArgument);
  EXPECT_THROW(Executor(2, 1024, 0), InvalidArgument);
  ExecutorOptions unbounded;
  unbounded.wait_timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(Executor(2, 1024, 1, unbounded), InvalidArgument);
  EXPECT_NO_THROW(Executor(64, 256, 1));
}

TEST(Executor, SymmetricAllocationIsPoisonedAndAligned) {
  Executor ex(3, 4096, 1);
  const size_t a = ex.allocate(100);
  const size_t b = ex.allocate(10, 64);
  const size_t c = ex.allocate(1000, 1024);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b % 64, 0u);
  EXPECT_GE(b, a + 100);
  EXPECT_EQ(c % 1024, 0u);
  EXPECT_GE(c, b + 10);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ex.at<char>(r, c)) % 1024, 0u) << "rank " << r;
    for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<unsigned char>(ex.at<char>(r, c)[i]), test::kPoison);
  }
  try {
    ex.allocate(4096);
    FAIL() << "allocating past the segment must throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'bytes'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ex.allocate(8, 48), InvalidArgument);  // not a power of two
}

TEST(Executor, HeapViewTranslatesBetweenRanks) {
  Executor ex(4, 2048, 1);
  const size_t off = ex.allocate(64);
  const SymmetricView v = ex.heap(2);
  EXPECT_EQ(v.rank, 2);
  EXPECT_EQ(v.world, 4);
  EXPECT_EQ(v.local_base, ex.base(2));
  EXPECT_EQ(v.capacity, 2048u);
  char* mine = ex.at<char>(2, off) + 16;
  for (int p = 0; p < 4; ++p) EXPECT_EQ(v.translate(mine, p), ex.at<char>(p, off) + 16);
  EXPECT_TRUE(v.contains(mine, 48));
  EXPECT_FALSE(v.contains(ex.at<char>(1, off), 1));
  EXPECT_THROW(ex.heap(4), InvalidArgument);
}

TEST(Executor, SignalViewFields) {
  ExecutorOptions o;
  o.wait_timeout = std::chrono::milliseconds(1234);
  Executor ex(3, 256, 16, o);
  EXPECT_EQ(ex.register_op("first"), 0u);
  const uint32_t op = ex.register_op("second");
  EXPECT_EQ(op, 1u);
  const SignalView v = ex.signals(1, 5, 6, 9, op);
  const SignalView v0 = ex.signals(0, 5, 6, 9, op);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.world, 3);
  EXPECT_EQ(v.first, 5u);
  EXPECT_EQ(v.num_channels, 6u);
  EXPECT_EQ(v.epoch, 9u);
  EXPECT_EQ(v.op_id, op);
  EXPECT_EQ(v.scope, MemScope::kGpu);
  EXPECT_EQ(v.errors.timeout_ns, 1'234'000'000u);
  EXPECT_NE(v.errors.claim, nullptr);
  EXPECT_NE(v.errors.record, nullptr);
  EXPECT_EQ(v.on(1, 2), v.local(2));
  EXPECT_EQ(v.on(0, 2), v0.local(2));
  EXPECT_EQ(*v.local(0), 0u) << "channels start at zero";
  EXPECT_THROW(ex.signals(0, 10, 7, 1, op), InvalidArgument);  // past the last channel
  EXPECT_THROW(ex.signals(0, 0, 1, 0, op), InvalidArgument);   // epoch 0
  EXPECT_THROW(ex.signals(0, 0, 1, 1, 7), InvalidArgument);    // unregistered op
  EXPECT_THROW(ex.signals(3, 0, 1, 1, op), InvalidArgument);   // rank out of range
}

TEST(Executor, RunsOneThreadPerRankRoleAndInstance) {
  Executor ex(3, 256, 1, test::stress_options(1));
  std::mutex m;
  std::set<std::tuple<std::string, int, uint32_t, uint32_t>> seen;
  auto body = [&](const std::string& role) {
    return [&, role](BlockCtx& ctx) {
      ctx.jitter();
      EXPECT_EQ(ctx.world(), 3);
      std::lock_guard<std::mutex> lock(m);
      EXPECT_TRUE(seen.emplace(role, ctx.rank(), ctx.block(), ctx.num_blocks()).second);
    };
  };
  ex.run({{"a", 2, body("a")}, {"b", 5, body("b")}});
  EXPECT_EQ(seen.size(), 3u * (2 + 5));
  for (int r = 0; r < 3; ++r) {
    for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(seen.count({"b", r, i, 5u}), 1u);
  }
}

// A wait nobody notifies: TimeoutError after the bound, naming the op, rank, block, tile,
// channel, the memory it lives in, and the expected and observed values.
TEST(Executor, DeadlockBecomesTimeoutErrorNamingTheWaiter) {
  Executor ex(3, 256, 8, quick_timeout(std::chrono::milliseconds(150)));
  ex.register_op("unrelated");
  const uint32_t op = ex.register_op("stuck_op");
  const auto t0 = Clock::now();
  try {
    ex.run({{"idle", 2, [](BlockCtx& ctx) { ctx.jitter(); }},
            {"waiter", 3, [&](BlockCtx& ctx) {
               if (ctx.rank() != 1 || ctx.block() != 2) return;
               const SignalView s = ex.signals(1, 2, 6, 5, op);
               ctx.producer_tile_notify(s, 2);                 // channel 2 reaches 5
               ctx.consumer_tile_wait(s, 2, 3, 1, 17);         // channel 3 never does
             }}});
    FAIL() << "a wait that is never notified must throw";
  } catch (const TimeoutError& e) {
    const double s = seconds_since(t0);
    EXPECT_GE(s, 0.15);
    EXPECT_LT(s, 2.0) << "the timeout must fire promptly";
    const std::string what = e.what();
    for (const char* part : {"stuck_op", "rank 1", "block 2", "tile 17", "channel 3", ">= 5",
                             "observed 0"}) {
      EXPECT_NE(what.find(part), std::string::npos) << "missing '" << part << "' in: " << what;
    }
    EXPECT_EQ(e.op_name(), "stuck_op");
    const ErrorRecord& r = e.record();
    EXPECT_EQ(r.state, ErrorRecord::kValid);
    EXPECT_EQ(r.kind, WaitKind::kConsumerTile);
    EXPECT_EQ(r.op_id, op);
    EXPECT_EQ(r.rank, 1);
    EXPECT_EQ(r.block, 2);
    EXPECT_EQ(r.tile, 17);
    EXPECT_EQ(r.channel, 3u);
    EXPECT_EQ(r.peer, 1);
    EXPECT_EQ(r.expected, 5u);
    EXPECT_EQ(r.observed, 0u);
    EXPECT_GE(r.elapsed_ns, 150'000'000u);
  }
  // The next run starts clean: the claim and the abort flag were reset.
  EXPECT_NO_THROW(ex.run({{"ok", 2, [&](BlockCtx& ctx) {
                           const SignalView s = ex.signals(ctx.rank(), 0, 1, 1, op);
                           ctx.producer_tile_notify(s, 0);
                           ctx.consumer_tile_wait(s, 0);
                         }}}));
}

TEST(Executor, PeerWaitTimeoutNamesThePeerMemory) {
  Executor ex(4, 256, 4, quick_timeout(std::chrono::milliseconds(100)));
  const uint32_t op = ex.register_op("peer_op");
  try {
    ex.run({{"w", 1, [&](BlockCtx& ctx) {
               if (ctx.rank() != 3) return;
               const SignalView s = ex.signals(3, 0, 4, 2, op);
               ctx.peer_tile_wait(s, 1, 0, 3);  // channel 1 in rank 0's memory, for 2 * 3
             }}});
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.record().kind, WaitKind::kPeerTile);
    EXPECT_EQ(e.record().peer, 0);
    EXPECT_EQ(e.record().expected, 6u);
    EXPECT_NE(std::string(e.what()).find("rank 0's memory"), std::string::npos) << e.what();
  }
}

TEST(Executor, StreamWaitTimeoutIsReportedAsAStream) {
  Executor ex(2, 256, 4, quick_timeout(std::chrono::milliseconds(100)));
  const uint32_t op = ex.register_op("ce_op");
  try {
    ex.run({{"stream", 1, [&](BlockCtx& ctx) {
               const SignalView s = ex.signals(ctx.rank(), 0, 4, 1, op);
               ctx.rank_notify(s, 0, 1 - ctx.rank());
               ctx.rank_wait(s, 0);  // satisfied by the peer
               if (ctx.rank() == 0) ctx.rank_wait(s, 3);
             }}});
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.record().kind, WaitKind::kRankWait);
    EXPECT_EQ(e.record().rank, 0);
    EXPECT_EQ(e.record().channel, 3u);
    EXPECT_NE(std::string(e.what()).find("rank_wait"), std::string::npos) << e.what();
  }
}

// A failure in one thread stops every waiter long before their own timeouts, and run() rethrows
// that failure (not an abort or a timeout of a thread that was only waiting).
TEST(Executor, FirstFailureStopsEveryOtherThread) {
  Executor ex(4, 256, 4, quick_timeout(std::chrono::milliseconds(5000)));
  const uint32_t op = ex.register_op("fails");
  std::atomic<int> entered{0}, stopped{0};
  const auto t0 = Clock::now();
  try {
    ex.run({{"waiters", 3,
             [&](BlockCtx& ctx) {
               ++entered;
               const SignalView s = ex.signals(ctx.rank(), 0, 4, 1, op);
               try {
                 ctx.consumer_tile_wait(s, 1);
               } catch (...) {
                 ++stopped;
                 throw;
               }
             }},
            {"thrower", 1, [&](BlockCtx& ctx) {
               if (ctx.rank() == 2) throw std::logic_error("role failed on rank 2");
             }}});
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "role failed on rank 2");
  }
  EXPECT_LT(seconds_since(t0), 1.0);
  // Waiters that had not started when the failure came never run their body.
  EXPECT_EQ(stopped.load(), entered.load());
}

TEST(Executor, PrimitivesValidateTheirArguments) {
  Executor ex(2, 1024, 8, quick_timeout(std::chrono::milliseconds(1000)));
  const uint32_t op = ex.register_op("validate");
  const size_t buf = ex.allocate(256);
  auto expect_invalid = [&](const char* fragment, std::function<void(BlockCtx&)> body) {
    try {
      ex.run({{"r", 1, [&](BlockCtx& ctx) {
                 if (ctx.rank() == 0) body(ctx);
               }}});
      ADD_FAILURE() << "expected InvalidArgument mentioning " << fragment;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_invalid("'channel'", [&](BlockCtx& c) { c.producer_tile_notify(ex.signals(0, 0, 4, 1, op), 4); });
  expect_invalid("'channel'", [&](BlockCtx& c) { c.consumer_tile_wait(ex.signals(0, 0, 4, 1, op), 2, 3); });
  expect_invalid("'peer'", [&](BlockCtx& c) { c.peer_tile_notify(ex.signals(0, 0, 4, 1, op), 0, 2); });
  expect_invalid("'peer'", [&](BlockCtx& c) { c.peer_tile_wait(ex.signals(0, 0, 4, 1, op), 0, -1); });
  expect_invalid("'peer'", [&](BlockCtx& c) { c.rank_notify(ex.signals(0, 0, 4, 1, op), 0, 5); });
  expect_invalid("'sig.rank'", [&](BlockCtx& c) { c.producer_tile_notify(ex.signals(1, 0, 4, 1, op), 0); });
  expect_invalid("'heap.rank'", [&](BlockCtx& c) {
    c.tile_push_data(ex.heap(1), {ex.at<char>(1, buf), 16}, 1, {1, 16}, {ex.at<char>(0, buf), 16});
  });
  expect_invalid("'dst_sym'", [&](BlockCtx& c) {  // not in this rank's segment
    c.tile_push_data(ex.heap(0), {ex.at<char>(1, buf), 16}, 1, {1, 16}, {ex.at<char>(0, buf), 16});
  });
  expect_invalid("'src_sym'", [&](BlockCtx& c) {  // misaligned
    c.tile_pull_data({ex.at<char>(0, buf), 16}, ex.heap(0), {ex.at<char>(0, buf) + 8, 16}, 1, {1, 16});
  });
  expect_invalid("'src_sym'", [&](BlockCtx& c) {  // runs past the segment
    c.tile_pull_data({ex.at<char>(0, buf), 16}, ex.heap(0), {ex.at<char>(0, buf + 768), 16}, 1, {17, 16});
  });
}

// Message passing through the primitives, many rounds with stragglers:
//  push: every rank stores its message into its slot on every peer, then adds 1 to the peer's
//        inbox channel; the receiver waits for world arrivals (add mode) and reads all slots.
//  pull: every rank writes its own outbox and sets its ready channel; readers wait on each
//        peer's ready channel and load the message from it.
void message_passing(bool push, int world, uint64_t seed) {
  constexpr uint32_t kMsgBytes = 64;
  Executor ex(world, 64 * 1024, 4, test::stress_options(seed));
  const uint32_t op = ex.register_op(push ? "mp_push" : "mp_pull");
  const size_t slots = ex.allocate(size_t(world) * kMsgBytes);  // slot q: message from rank q
  std::mt19937_64 rng(seed);
  for (uint64_t e = 1; e <= 4; ++e) {
    std::vector<std::vector<unsigned char>> msg(world);
    for (int r = 0; r < world; ++r) {
      msg[r] = test::random_bytes(rng, kMsgBytes);
      std::memcpy(ex.at<char>(r, slots) + size_t(r) * kMsgBytes, msg[r].data(), kMsgBytes);
    }
    std::vector<std::vector<unsigned char>> got(world, std::vector<unsigned char>(size_t(world) * kMsgBytes));
    ex.run({{"rank", 1, [&](BlockCtx& ctx) {
               const int me = ctx.rank();
               const SignalView s = ex.signals(me, 0, 4, e, op);
               const SymmetricView heap = ex.heap(me);
               char* mine = ex.at<char>(me, slots);
               const TileRef own{mine + size_t(me) * kMsgBytes, kMsgBytes};
               if (push) {
                 for (int step = 0; step < world; ++step) {
                   const int p = static_cast<int>(swizzled_peer(me, step, world));
                   if (p != me) ctx.tile_push_data(heap, own, p, {1, kMsgBytes}, own);
                   ctx.peer_tile_notify(s, 1, p, NotifyMode::kAdd);
                 }
                 ctx.consumer_tile_wait(s, 1, 1, static_cast<uint32_t>(world));
               } else {
                 ctx.producer_tile_notify(s, 2);
                 for (int step = 1; step < world; ++step) {
                   const int p = static_cast<int>(swizzled_peer(me, step, world));
                   const TileRef slot{mine + size_t(p) * kMsgBytes, kMsgBytes};
                   ctx.peer_tile_wait(s, 2, p);
                   ctx.tile_pull_data(slot, heap, slot, p, {1, kMsgBytes});
                 }
               }
               std::memcpy(got[me].data(), mine, got[me].size());
             }}});
    for (int r = 0; r < world; ++r) {
      for (int q = 0; q < world; ++q) {
        ASSERT_EQ(0, std::memcmp(got[r].data() + size_t(q) * kMsgBytes, msg[q].data(), kMsgBytes))
            << (push ? "push" : "pull") << ": rank " << r << " has a wrong message from rank " << q
            << " in call " << e;
      }
    }
  }
}

TEST(Executor, MessagePassingPushWithAddModeArrivals) {
  for (int world : {1, 2, 3, 5, 8}) message_passing(true, world, 100 + world);
}

TEST(Executor, MessagePassingPull) {
  for (int world : {1, 2, 3, 5, 8}) message_passing(false, world, 200 + world);
}

}  // namespace
}  // namespace tilelink
