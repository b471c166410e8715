// The all-gather protocol (comm/all_gather.hpp) on the CPU executor: SM path (pull/push, full
// mesh/ring) and copy-engine path, with a consumer role that reads compute tiles of BM rows as
// soon as all_gather_wait_rows lets it, at world sizes 1..8. Checked row by row against the
// source shards; fresh random data each call, outputs poisoned, channels never reset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "protocol_runners.hpp"
#include "tilelink/comm/all_gather.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"

namespace tilelink {
namespace {

using cpu::BlockCtx;
using cpu::Executor;
using test::AgCase;
using test::check_gathered;
using test::consume_tiles;
using test::run_all_gather;

struct Variant {
  AgMethod method;
  CommOrder order;
  bool copy_engine;
  bool own_rows = false;  // the shards outside the heap: the call copies each rank's in (own_rows)
};

// `c` at `world` ranks, moved the variant's way.
AgCase with_variant(AgCase c, int world, const Variant& v) {
  c.world = world;
  c.method = v.method;
  c.order = v.order;
  c.copy_engine = v.copy_engine;
  c.own_rows = v.own_rows;
  return c;
}

class AllGatherProtocol : public ::testing::TestWithParam<Variant> {};

TEST_P(AllGatherProtocol, EveryWorldSize) {
  for (int world = 1; world <= 8; ++world) {
    EXPECT_EQ(run_all_gather(with_variant(AgCase{}, world, GetParam()), 1000 + world, 3), "");
  }
}

TEST_P(AllGatherProtocol, TileShapes) {
  // comm tile > shard, comm tile = 1 row, consumer tile of 1 row and of several shards, one
  // communication block per rank and more blocks than work items; rows of 32 bytes.
  const AgCase shapes[] = {
      {.rows_per_rank = 7, .comm_rows = 16, .row_bytes = 32, .comm_blocks = 2, .consumer_blocks = 1, .bm = 5},
      {.rows_per_rank = 6, .comm_rows = 1, .row_bytes = 32, .comm_blocks = 1, .consumer_blocks = 3, .bm = 1},
      {.rows_per_rank = 9, .comm_rows = 4, .row_bytes = 32, .comm_blocks = 7, .consumer_blocks = 1, .bm = 20},
      {.rows_per_rank = 12, .comm_rows = 5, .row_bytes = 32, .comm_blocks = 16, .consumer_blocks = 2, .bm = 12}};
  for (int world : {3, 5}) {
    for (const AgCase& s : shapes) {
      EXPECT_EQ(run_all_gather(with_variant(s, world, GetParam()), 77 * world + s.comm_rows, 2), "");
    }
  }
}

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  const std::string own = v.own_rows ? "OwnRows" : "";
  if (v.copy_engine) return (v.method == AgMethod::kPull ? "CopyEngine" : "CopyEnginePush") + own;
  return std::string(v.method == AgMethod::kPull ? "Pull" : "Push") +
         (v.order == CommOrder::kRing ? "Ring" : "FullMesh") + own;
}

// Every variant with the shards in place, then with each rank's own rows outside the heap.
const Variant kVariants[] = {
    {AgMethod::kPull, CommOrder::kFullMesh, false},       {AgMethod::kPull, CommOrder::kRing, false},
    {AgMethod::kPush, CommOrder::kFullMesh, false},       {AgMethod::kPush, CommOrder::kRing, false},
    {AgMethod::kPull, CommOrder::kFullMesh, true},        {AgMethod::kPush, CommOrder::kFullMesh, true},
    {AgMethod::kPull, CommOrder::kFullMesh, false, true}, {AgMethod::kPull, CommOrder::kRing, false, true},
    {AgMethod::kPush, CommOrder::kFullMesh, false, true}, {AgMethod::kPush, CommOrder::kRing, false, true},
    {AgMethod::kPull, CommOrder::kFullMesh, true, true},  {AgMethod::kPush, CommOrder::kFullMesh, true, true}};

INSTANTIATE_TEST_SUITE_P(Sm, AllGatherProtocol, ::testing::ValuesIn(kVariants), variant_name);

// A block context whose peer_tile_wait returns at once.
class NoPeerWaitCtx : public BlockCtx {
 public:
  explicit NoPeerWaitCtx(const BlockCtx& ctx) : BlockCtx(ctx) {}
  void peer_tile_wait(const SignalView&, uint32_t, int, uint32_t = 1, int32_t = -1) {}
};

// The ring pull without the wait on the upstream rank's channel (the library's block with its
// peer waits skipped): a rank may copy a tile its neighbour has not received yet. With delays on,
// the check must catch it as a wrong result.
void ring_pull_without_wait(BlockCtx& ctx, const AllGatherPlan& plan, const SignalView& sig,
                            const SymmetricView& heap, void* gathered, const void* own_rows) {
  NoPeerWaitCtx no_wait(ctx);
  all_gather_block(no_wait, plan, sig, heap, gathered, own_rows);
}

TEST(AllGatherBroken, MissingWaitIsCaughtAsWrongResult) {
  AgCase c;
  c.world = 4;
  c.method = AgMethod::kPull;
  c.order = CommOrder::kRing;
  int detected = 0;
  std::string example;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::string err = run_all_gather(c, seed, 1, ring_pull_without_wait);
    if (!err.empty()) {
      ++detected;
      example = err;
    }
  }
  EXPECT_GE(detected, 1) << "the executor never exposed the missing wait";
  std::cout << "[          ] broken protocol detected in " << detected << "/5 seeds, e.g. " << example << "\n";
}

// With own_rows, a rank whose own tiles' channels are set before the tiles are copied (as if they
// were in place) lets its consumers and pulling peers read the poisoned rows.
TEST(AllGatherBroken, OwnRowsAnnouncedBeforeTheyAreCopiedIsCaught) {
  for (const bool copy_engine : {false, true}) {
    AgCase c;
    c.world = 3;
    c.own_rows = true;
    c.copy_engine = false;  // the broken body below stands in for either path (a stream: one block)
    c.comm_blocks = copy_engine ? 1u : 3u;
    const auto early = [copy_engine](BlockCtx& ctx, const AllGatherPlan& plan, const SignalView& sig,
                                     const SymmetricView& heap, void* gathered, const void* own_rows) {
      if (copy_engine) {  // the stream's announcement without its copies, then the transfer
        all_gather_stream_announce(ctx, plan, sig);
        if (ctx.block() == 0) {
          for (uint32_t ch = 0; ch < plan.map.chunks_per_rank(); ++ch) {
            const uint32_t own = plan.map.channel(static_cast<uint32_t>(ctx.rank()), ch);
            ctx.rank_copy_data(plan.tile_ref(gathered, own).ptr, plan.own_tile_ref(own_rows, own).ptr,
                               plan.tile_shape(own).bytes());
          }
        }
        all_gather_stream_transfer(ctx, plan, sig, heap, gathered);
      } else {  // block 0 sets the own channels first, then the blocks copy as usual
        if (ctx.block() == 0) {
          for (uint32_t ch = 0; ch < plan.map.chunks_per_rank(); ++ch) {
            ctx.producer_tile_notify(sig, plan.tile_channel(plan.map.channel(static_cast<uint32_t>(ctx.rank()), ch)));
          }
        }
        all_gather_block(ctx, plan, sig, heap, gathered, own_rows);
      }
    };
    int detected = 0;
    for (uint64_t seed = 1; seed <= 5; ++seed) detected += !run_all_gather(c, seed, 1, early).empty();
    EXPECT_GE(detected, 1) << (copy_engine ? "stream" : "SM") << ": the executor never exposed the early announcement";
  }
}

// A consumer that skips all_gather_wait_rows reads rows before they arrive.
TEST(AllGatherBroken, ConsumerWithoutWaitIsCaughtAsWrongResult) {
  AgCase c;
  c.world = 3;
  c.method = AgMethod::kPush;
  const AllGatherPlan plan = c.plan();
  const uint64_t bytes = uint64_t(plan.map.total_rows()) * plan.pitch;
  int detected = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Executor ex(c.world, bytes, plan.num_channels(), test::stress_options(seed));
    const uint32_t op = ex.register_op("all_gather");
    const size_t gathered = ex.allocate(bytes);
    std::mt19937_64 rng(seed);
    std::vector<std::vector<unsigned char>> shards(c.world);
    std::vector<std::vector<unsigned char>> out(c.world, std::vector<unsigned char>(bytes, test::kPoison));
    for (int r = 0; r < c.world; ++r) {
      shards[r] = test::random_bytes(rng, uint64_t(c.rows_per_rank) * c.row_bytes);
      std::memcpy(ex.at<char>(r, gathered) + uint64_t(r) * c.rows_per_rank * plan.pitch, shards[r].data(),
                  shards[r].size());
    }
    ex.run({{"comm", c.comm_blocks,
             [&](BlockCtx& ctx) {
               all_gather_block(ctx, plan, ex.signals(ctx.rank(), 0, plan.num_channels(), 1, op),
                                ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), gathered));
             }},
            {"consumer", 1, [&](BlockCtx& ctx) {
               ctx.jitter();
               std::memcpy(out[ctx.rank()].data(), ex.at<char>(ctx.rank(), gathered), bytes);
             }}});
    bool wrong = false;
    for (int r = 0; r < c.world; ++r) wrong |= !check_gathered(c, r, 1, out[r], shards).empty();
    detected += wrong;
  }
  EXPECT_GE(detected, 1);
}

// all_gather_stream is documented as full mesh only: on a ring the stream copies a tile from
// its upstream neighbour without waiting for it to arrive there.
TEST(AllGatherBroken, CopyEngineRingIsNotSupported) {
  AgCase c;
  c.world = 4;
  c.order = CommOrder::kRing;
  c.copy_engine = true;
  int detected = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) detected += !run_all_gather(c, seed, 1).empty();
  EXPECT_GE(detected, 1);
}

// Several calls inside one run(): between calls only the threads of the same rank are joined,
// as two kernels on one stream are; ranks are not synchronised with each other. Rank 0's
// first block writes the rank's next input (its own rows, in place in `gathered`, as the
// collective's contract says) at the start of each call; with own_rows each call is given the
// call's shard outside the heap instead, and copies it over the previous call's rows itself.
// Returns the first wrong row, or "".
std::string run_back_to_back(const AgCase& c, uint64_t seed, int calls) {
  const AllGatherPlan plan = c.plan();
  const uint32_t total = plan.map.total_rows();
  const uint64_t bytes = uint64_t(total) * plan.pitch;
  const uint32_t fence_channel = plan.num_channels();
  Executor ex(c.world, bytes, fence_channel + 1, test::stress_options(seed));
  const uint32_t op = ex.register_op("all_gather");
  const uint32_t comm_blocks = c.copy_engine ? 1u : c.comm_blocks;
  const test::RankFence fence{&ex, fence_channel, ex.register_op("rank_fence"), comm_blocks + c.consumer_blocks};
  const size_t gathered = ex.allocate(bytes);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::vector<unsigned char>>> shards(calls);
  std::vector<std::vector<std::vector<unsigned char>>> out(calls);
  for (int k = 0; k < calls; ++k) {
    for (int r = 0; r < c.world; ++r) {
      shards[k].push_back(test::random_bytes(rng, uint64_t(c.rows_per_rank) * c.row_bytes));
      out[k].emplace_back(bytes, test::kPoison);
    }
  }
  auto begin_call = [&](BlockCtx& ctx, int k, bool writer) {
    fence.arrive_and_wait(ctx, 2 * uint64_t(k) + 1);  // the previous call is over on this rank
    if (writer && !c.own_rows) {
      std::memcpy(ex.at<char>(ctx.rank(), gathered) + uint64_t(ctx.rank()) * c.rows_per_rank * plan.pitch,
                  shards[k][ctx.rank()].data(), shards[k][ctx.rank()].size());
    }
    fence.arrive_and_wait(ctx, 2 * uint64_t(k) + 2);  // this call's input is in place
  };
  ex.run({{"comm", comm_blocks,
           [&](BlockCtx& ctx) {
             for (int k = 0; k < calls; ++k) {
               begin_call(ctx, k, ctx.block() == 0);
               const SignalView sig = ex.signals(ctx.rank(), 0, plan.num_channels(), k + 1, op);
               void* g = ex.at<char>(ctx.rank(), gathered);
               const void* own = c.own_rows ? shards[k][ctx.rank()].data() : nullptr;
               if (c.copy_engine) {
                 all_gather_stream(ctx, plan, sig, ex.heap(ctx.rank()), g, own);
               } else {
                 all_gather_block(ctx, plan, sig, ex.heap(ctx.rank()), g, own);
               }
             }
           }},
          {"consumer", c.consumer_blocks, [&](BlockCtx& ctx) {
             for (int k = 0; k < calls; ++k) {
               begin_call(ctx, k, false);
               const SignalView sig = ex.signals(ctx.rank(), 0, plan.num_channels(), k + 1, op);
               consume_tiles(ctx, c, plan, sig, ex.at<char>(ctx.rank(), gathered), out[k][ctx.rank()].data());
             }
           }}});
  for (int k = 0; k < calls; ++k) {
    for (int r = 0; r < c.world; ++r) {
      const std::string err = check_gathered(c, r, k + 1, out[k][r], shards[k]);
      if (!err.empty()) return err;
    }
  }
  return "";
}

class AllGatherBackToBack : public ::testing::TestWithParam<Variant> {};

TEST_P(AllGatherBackToBack, ConsecutiveCallsWithoutHostSync) {
  const Variant v = GetParam();
  for (int world : {2, 3, 5}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      AgCase c;
      c.world = world;
      c.method = v.method;
      c.order = v.order;
      c.copy_engine = v.copy_engine;
      c.own_rows = v.own_rows;
      EXPECT_EQ(run_back_to_back(c, seed * 31 + world, 4), "");
    }
  }
}

// Back-to-back calls where the input is rewritten as soon as a rank's own call is complete. In
// the pull variants peers read that input; the exit barrier keeps the call open until they did.
INSTANTIATE_TEST_SUITE_P(Sm, AllGatherBackToBack, ::testing::ValuesIn(kVariants), variant_name);

// A timeout's report names the ranks that had not entered the call, from the snapshot of the
// waiter's entry-barrier channels (set-mode: a rank's channel holds the epoch once it entered).
TEST(AllGatherTimeoutReport, NamesTheRanksThatHadNotEnteredTheCall) {
  const AllGatherPlan plan = test::all_gather_plan(4, 256, 128, 64, AgMethod::kPull, CommOrder::kFullMesh);
  ErrorRecord r{};
  r.rank = 0;
  r.epoch = 7;
  r.snapshot_count = plan.num_channels() < ErrorRecord::kSnapshotChannels ? plan.num_channels()
                                                                           : ErrorRecord::kSnapshotChannels;
  for (uint32_t q = 0; q < 4; ++q) r.snapshot[plan.barrier_channel() + q] = 7;
  EXPECT_EQ(describe_all_gather_entry_state(plan, r), "");  // every rank entered
  r.snapshot[plan.barrier_channel() + 2] = 6;                 // rank 2 still in call 6
  const std::string one = describe_all_gather_entry_state(plan, r);
  EXPECT_NE(one.find("rank 2 had not entered this call"), std::string::npos) << one;
  r.snapshot[plan.barrier_channel() + 3] = 0;  // rank 3 never came at all
  const std::string two = describe_all_gather_entry_state(plan, r);
  EXPECT_NE(two.find("ranks 2, 3 had not entered this call"), std::string::npos) << two;
  r.snapshot[plan.barrier_channel() + 2] = 8;  // ahead (already in the next call) counts as entered
  EXPECT_EQ(describe_all_gather_entry_state(plan, r).find("rank 2"), std::string::npos);
  r.epoch = 2;  // the wrap-safe comparison: a value far below the epoch is not "ahead"
  r.snapshot[plan.barrier_channel() + 0] = r.snapshot[plan.barrier_channel() + 1] = 2;
  r.snapshot[plan.barrier_channel() + 2] = 2;
  r.snapshot[plan.barrier_channel() + 3] = ~0ull;  // -1 as a signed difference: behind
  EXPECT_NE(describe_all_gather_entry_state(plan, r).find("rank 3 had not"), std::string::npos);
  r.snapshot_count = 3;  // the snapshot does not cover the barrier: nothing said
  EXPECT_EQ(describe_all_gather_entry_state(plan, r), "");
}

}  // namespace
}  // namespace tilelink
