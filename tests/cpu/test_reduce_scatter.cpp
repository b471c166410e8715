// The reduce-scatter protocol (comm/reduce_scatter.hpp) on the CPU executor at world sizes 1..8,
// push and pull, communication tiles that do and do not divide the shard. The protocol sums in
// rank order 0..P-1, so the result must be bitwise equal to a float reference in that order.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "protocol_runners.hpp"
#include "tilelink/comm/reduce_scatter.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"

namespace tilelink {
namespace {

using cpu::BlockCtx;
using cpu::Executor;
using test::check_out;
using test::reference_sum;
using test::RsCase;
using test::run_reduce_scatter;

class ReduceScatterProtocol : public ::testing::TestWithParam<RsMethod> {};

TEST_P(ReduceScatterProtocol, EveryWorldSize) {
  for (int world = 1; world <= 8; ++world) {
    RsCase c;
    c.world = world;
    c.method = GetParam();
    EXPECT_EQ(run_reduce_scatter(c, 500 + world, 3), "");
  }
}

TEST_P(ReduceScatterProtocol, CommunicationTileSizes) {
  // comm_rows dividing the shard, not dividing it, one row, larger than the shard; one block and
  // more blocks than chunks.
  for (int world : {2, 3, 6, 7}) {
    for (uint32_t comm_rows : {1u, 3u, 4u, 12u, 20u}) {
      for (uint32_t blocks : {1u, 5u}) {
        RsCase c;
        c.world = world;
        c.method = GetParam();
        c.rows_per_rank = 12;
        c.comm_rows = comm_rows;
        c.cols = 4;
        c.blocks = blocks;
        EXPECT_EQ(run_reduce_scatter(c, 31 * world + comm_rows + blocks, 2), "");
      }
    }
  }
}

std::string method_name(const ::testing::TestParamInfo<RsMethod>& info) {
  return info.param == RsMethod::kPush ? "Push" : "Pull";
}

TEST_P(ReduceScatterProtocol, OneResidentBlockDoesTheRanksWork) {
  // The last rank's blocks but one start only after that one has finished: the announcement, the
  // sends and the reductions come from the rank's queue, not bound to block indices, so the one
  // block does all of them while the peers wait for its entry, parts or partials.
  for (int world : {1, 2, 3, 5}) {
    for (uint32_t rows : {1u, 7u}) {
      RsCase c;
      c.world = world;
      c.rows_per_rank = rows;
      c.comm_rows = 2;
      c.reduce_rows = 1;
      c.blocks = 4;
      c.method = GetParam();
      c.late_blocks = true;
      EXPECT_EQ(run_reduce_scatter(c, 8300 * world + rows, 2), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sm, ReduceScatterProtocol, ::testing::Values(RsMethod::kPush, RsMethod::kPull),
                         method_name);

// Several calls inside one run(), ranks synchronised only with themselves between calls (as
// consecutive kernels on one stream); each rank writes its next partial at the start of a call.
std::string run_back_to_back(const RsCase& c, uint64_t seed, int calls) {
  const ReduceScatterPlan plan = c.plan();
  const size_t pbytes = plan.partial_elems() * sizeof(float);
  const uint32_t fence_channel = plan.num_channels();
  Executor ex(c.world, 2 * pbytes + 4096, fence_channel + 1, test::stress_options(seed));
  const uint32_t op = ex.register_op("reduce_scatter");
  const test::RankFence fence{&ex, fence_channel, ex.register_op("rank_fence"), c.blocks};
  const size_t partial = ex.allocate(pbytes);
  const size_t recv = ex.allocate(pbytes);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::vector<float>>> in(calls), out(calls);
  std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));  // per rank, across the calls
  for (int k = 0; k < calls; ++k) {
    for (int r = 0; r < c.world; ++r) {
      in[k].push_back(test::random_floats(rng, plan.partial_elems()));
      out[k].emplace_back(plan.out_elems());
      std::memset(out[k][r].data(), test::kPoison, out[k][r].size() * sizeof(float));
    }
  }
  ex.run({{"rs", c.blocks, [&](BlockCtx& ctx) {
             const int r = ctx.rank();
             for (int k = 0; k < calls; ++k) {
               fence.arrive_and_wait(ctx, 2 * uint64_t(k) + 1);
               if (ctx.block() == 0) std::memcpy(ex.at<float>(r, partial), in[k][r].data(), pbytes);
               fence.arrive_and_wait(ctx, 2 * uint64_t(k) + 2);
               reduce_scatter_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), k + 1, op), ex.heap(r),
                                    ex.at<float>(r, partial), ex.at<float>(r, recv), out[k][r].data(),
                                    queues[static_cast<size_t>(r)]);
             }
           }}});
  for (int k = 0; k < calls; ++k) {
    const std::string err = check_out(c, k + 1, out[k], reference_sum(c, in[k]));
    if (!err.empty()) return err;
  }
  return test::check_queues_reset(queues, "after " + std::to_string(calls) + " back-to-back calls");
}

class ReduceScatterBackToBack : public ::testing::TestWithParam<RsMethod> {};

TEST_P(ReduceScatterBackToBack, ConsecutiveCallsWithoutHostSync) {
  for (int world : {2, 3, 5}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      RsCase c;
      c.world = world;
      c.method = GetParam();
      EXPECT_EQ(run_back_to_back(c, seed * 17 + world, 4), "");
    }
  }
}

// The owner reads its peers' partials in the pull variant; the exit barrier keeps each peer's
// call open until then, so the partial may be rewritten right after.
INSTANTIATE_TEST_SUITE_P(Sm, ReduceScatterBackToBack, ::testing::Values(RsMethod::kPush, RsMethod::kPull),
                         method_name);

}  // namespace
}  // namespace tilelink
