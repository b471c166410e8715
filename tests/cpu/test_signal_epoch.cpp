// Epoch arithmetic (primitives/signal.hpp) and epochs across calls on the executor: channels are
// never reset, and a wait of call e must not be satisfied by call e-1's notify.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"
#include "tilelink/primitives/signal.hpp"

namespace tilelink {
namespace {

TEST(Epoch, ReachedIsWrapSafe) {
  EXPECT_TRUE(epoch_reached(5, 5));
  EXPECT_TRUE(epoch_reached(6, 5));
  EXPECT_FALSE(epoch_reached(4, 5));
  EXPECT_FALSE(epoch_reached(0, 1));
  // The counter wrapped past the expected value: reached.
  EXPECT_TRUE(epoch_reached(2, UINT64_MAX - 1));
  EXPECT_TRUE(epoch_reached(0, UINT64_MAX));
  // The expected value wrapped, the counter has not yet: not reached.
  EXPECT_FALSE(epoch_reached(UINT64_MAX - 1, 2));
  EXPECT_FALSE(epoch_reached(UINT64_MAX, 0));
  // Half the ring apart is the limit of the signed comparison.
  EXPECT_TRUE(epoch_reached(uint64_t(1) << 62, 0));
  EXPECT_FALSE(epoch_reached(0, uint64_t(1) << 62));
}

TEST(Epoch, ExpectedValuesForSetAndAdd) {
  SignalView v;
  v.epoch = 7;
  EXPECT_EQ(v.set_value(), 7u);
  EXPECT_EQ(v.expected(1), 7u);
  EXPECT_EQ(v.expected(3), 21u);  // three add-mode arrivals per call, seven calls
  v.epoch = (uint64_t(1) << 63) + 1;
  EXPECT_EQ(v.expected(2), 2u);   // wraps like the counter does
}

TEST(Epoch, ViewAddressing) {
  uint64_t rank0[8] = {}, rank1[8] = {};
  uint64_t* table[2] = {rank0, rank1};
  SignalView v;
  v.peer_channels = table;
  v.local_channels = rank1 + 3;
  v.first = 3;
  v.num_channels = 4;
  v.rank = 1;
  v.world = 2;
  EXPECT_EQ(v.local(2), rank1 + 5);
  EXPECT_EQ(v.on(0, 2), rank0 + 5);
  EXPECT_EQ(v.on(1, 0), v.local(0));
}

// Call e's consumer must wait for call e's data even though the channel holds e-1 from the
// previous call: the producer sleeps before writing, so an early pass would read stale data.
TEST(Epoch, ChannelsAreNotResetBetweenCalls) {
  cpu::ExecutorOptions o;
  o.delay_probability = 0;
  cpu::Executor ex(2, 4096, 4, o);
  const uint32_t op = ex.register_op("epochs");
  const size_t data = ex.allocate(sizeof(uint64_t) * 4);
  for (uint64_t e = 1; e <= 4; ++e) {
    uint64_t seen = 0;
    ex.run({{"producer", 1,
             [&](cpu::BlockCtx& ctx) {
               if (ctx.rank() != 0) return;
               std::this_thread::sleep_for(std::chrono::milliseconds(20));
               const SignalView s = ex.signals(0, 1, 2, e, op);
               const SymmetricView heap = ex.heap(0);
               alignas(16) uint64_t msg[2] = {1000 + e, 2000 + e};
               ctx.tile_push_data(heap, {ex.at<uint64_t>(0, data), 16}, 1, {1, 16}, {msg, 16});
               ctx.peer_tile_notify(s, 1, 1);
             }},
            {"consumer", 1, [&](cpu::BlockCtx& ctx) {
               if (ctx.rank() != 1) return;
               const SignalView s = ex.signals(1, 1, 2, e, op);
               ctx.consumer_tile_wait(s, 1);
               seen = ex.at<uint64_t>(1, data)[0] * 10000 + ex.at<uint64_t>(1, data)[1];
             }}});
    EXPECT_EQ(seen, (1000 + e) * 10000 + 2000 + e) << "call " << e;
  }
}

// Add mode: k notifies per channel per call; call e waits for e * k.
TEST(Epoch, AddModeAccumulatesAcrossCalls) {
  constexpr int kWorld = 4;
  cpu::Executor ex(kWorld, 4096, 2, test::stress_options(3));
  const uint32_t op = ex.register_op("add_epochs");
  for (uint64_t e = 1; e <= 5; ++e) {
    std::vector<int> done(kWorld, 0);
    ex.run({{"adder", 3,
             [&](cpu::BlockCtx& ctx) {
               const SignalView s = ex.signals(ctx.rank(), 0, 2, e, op);
               // Every (rank, block) adds 1 to channel 0 of every rank: 3 * world arrivals.
               for (int p = 0; p < kWorld; ++p) ctx.peer_tile_notify(s, 0, p, NotifyMode::kAdd);
               ctx.consumer_tile_wait(s, 0, 1, 3 * kWorld);
               if (ctx.block() == 0) done[ctx.rank()] = 1;
             }}});
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(done[r], 1);
  }
  // Too many arrivals expected: the wait cannot complete and must time out, not pass.
  cpu::ExecutorOptions quick;
  quick.wait_timeout = std::chrono::milliseconds(100);
  cpu::Executor ex2(1, 4096, 1, quick);
  const uint32_t op2 = ex2.register_op("short_count");
  EXPECT_THROW(ex2.run({{"adder", 1,
                         [&](cpu::BlockCtx& ctx) {
                           const SignalView s = ex2.signals(0, 0, 1, 1, op2);
                           ctx.producer_tile_notify(s, 0, NotifyMode::kAdd);
                           ctx.consumer_tile_wait(s, 0, 1, 2);
                         }}}),
               TimeoutError);
}

}  // namespace
}  // namespace tilelink
