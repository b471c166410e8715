// AG+GEMM protocol on the CPU executor: the all-gather protocol (SM pull/push, mesh/ring, or the
// copy-engine stream) runs next to compute blocks that walk C in the arrival-ordered schedule
// and wait per tile on the channels of its A rows. C must equal a reference GEMM on the gathered
// A, bit for bit (same summation order), at world sizes 1-8 with compute and communication tile
// sizes that divide nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "tilelink/testing/ag_gemm_naive_blocks.hpp"

namespace tilelink::test {
namespace {

struct AgGemmCase {
  int world;
  uint32_t rows_per_rank, k, n, comm_rows, bm, bn;
  AgMethod method;
  CommOrder order;
  bool copy_engine;
};

std::string describe(const AgGemmCase& c) {
  return "world " + std::to_string(c.world) + (c.copy_engine ? " ce" : "") +
         (c.method == AgMethod::kPull ? " pull" : " push") + (c.order == CommOrder::kRing ? " ring" : " mesh") +
         " rows/rank " + std::to_string(c.rows_per_rank) + " k " + std::to_string(c.k) + " n " +
         std::to_string(c.n) + " comm_rows " + std::to_string(c.comm_rows) + " bm " + std::to_string(c.bm) +
         " bn " + std::to_string(c.bn);
}

// Runs `calls` consecutive calls with fresh A and B each; returns "" or the first mismatch.
std::string run_ag_gemm(const AgGemmCase& c, uint64_t seed, int calls) {
  const uint32_t w = static_cast<uint32_t>(c.world);
  AllGatherPlan ag;
  ag.map = RowShardMapping{c.rows_per_rank, c.comm_rows, w};
  ag.row_bytes = c.k * 4;
  ag.pitch = ag.row_bytes;
  ag.method = c.method;
  ag.order = c.order;
  const uint32_t m = ag.map.total_rows();

  cpu::Executor ex(c.world, 64 << 20, ag.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("ag_gemm");
  const size_t a_off = ex.allocate(size_t(m) * ag.pitch);
  const size_t b_off = ex.allocate(size_t(c.k) * c.n * 4);
  const size_t c_off = ex.allocate(size_t(m) * c.n * 4);
  std::vector<std::vector<uint32_t>> m_order(w);
  std::vector<AgGemmSchedule> schedule(w);
  for (uint32_t r = 0; r < w; ++r) {
    m_order[r].resize((m + c.bm - 1) / c.bm);
    make_m_order(ag, r, c.bm, m_order[r].data());
    schedule[r] = AgGemmSchedule{m, c.n, c.bm, c.bn, m_order[r].data()};
  }

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    // Fresh inputs: each rank's own A rows in place, its own B; C poisoned.
    std::vector<float> a_full = random_floats(rng, size_t(m) * c.k);
    std::vector<std::vector<float>> b(w);
    for (uint32_t r = 0; r < w; ++r) {
      b[r] = random_floats(rng, size_t(c.k) * c.n);
      std::memcpy(ex.at<float>(r, b_off), b[r].data(), b[r].size() * 4);
      std::memcpy(ex.at<char>(r, a_off) + size_t(r) * c.rows_per_rank * ag.pitch,
                  a_full.data() + size_t(r) * c.rows_per_rank * c.k, size_t(c.rows_per_rank) * ag.pitch);
      std::memset(ex.at<float>(r, c_off), kPoison, size_t(m) * c.n * 4);
    }
    const uint64_t epoch = static_cast<uint64_t>(call);
    std::vector<cpu::Role> roles;
    if (c.copy_engine) {
      roles.push_back({"copy_engine", 1, [&](cpu::BlockCtx& ctx) {
                         all_gather_stream(ctx, ag, ex.signals(ctx.rank(), 0, ag.num_channels(), epoch, op),
                                           ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), a_off));
                       }});
    } else {
      roles.push_back({"comm", 3, [&](cpu::BlockCtx& ctx) {
                         all_gather_block(ctx, ag, ex.signals(ctx.rank(), 0, ag.num_channels(), epoch, op),
                                          ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), a_off));
                       }});
    }
    roles.push_back({"gemm", 4, [&](cpu::BlockCtx& ctx) {
                       const int r = ctx.rank();
                       ag_gemm_tiles_block(ctx, ag, schedule[r], ex.signals(r, 0, ag.num_channels(), epoch, op),
                                           ex.at<char>(r, a_off), c.k, ex.at<float>(r, b_off), ex.at<float>(r, c_off));
                     }});
    ex.run(roles);

    for (uint32_t r = 0; r < w; ++r) {
      const float* got = ex.at<float>(r, c_off);
      for (uint32_t row = 0; row < m; ++row) {
        for (uint32_t col = 0; col < c.n; ++col) {
          float want = 0.f;
          for (uint32_t kk = 0; kk < c.k; ++kk) want += a_full[size_t(row) * c.k + kk] * b[r][size_t(kk) * c.n + col];
          const float g = got[size_t(row) * c.n + col];
          if (std::memcmp(&g, &want, 4) != 0) {
            return describe(c) + ": call " + std::to_string(call) + ", rank " + std::to_string(r) + " C[" +
                   std::to_string(row) + "][" + std::to_string(col) + "] = " + std::to_string(g) +
                   ", expected " + std::to_string(want);
          }
        }
      }
    }
  }
  return "";
}

class AgGemmProtocolTest : public ::testing::TestWithParam<int> {};

TEST_P(AgGemmProtocolTest, MatchesTheReferenceGemmOnTheGatheredA) {
  const int world = GetParam();
  const AgGemmCase base{world, 10, 8, 12, 4, 6, 5, AgMethod::kPull, CommOrder::kFullMesh, false};
  std::vector<AgGemmCase> cases;
  for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
    for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
      AgGemmCase c = base;
      c.method = method;
      c.order = order;
      cases.push_back(c);
    }
  }
  AgGemmCase ce = base;
  ce.copy_engine = true;
  cases.push_back(ce);
  AgGemmCase big_tiles = base;  // compute tiles spanning several shards and comm tiles
  big_tiles.bm = 23;
  big_tiles.comm_rows = 3;
  cases.push_back(big_tiles);
  for (const AgGemmCase& c : cases) {
    EXPECT_EQ(run_ag_gemm(c, 1000 + world, 2), "") << describe(c);
  }
}

INSTANTIATE_TEST_SUITE_P(World, AgGemmProtocolTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) { return "world" + std::to_string(info.param); });

TEST(AgGemmSchedule, OwnShardFirstThenInArrivalOrder) {
  for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
    for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
      AllGatherPlan ag;
      ag.map = RowShardMapping{16, 8, 4};
      ag.method = method;
      ag.order = order;
      for (uint32_t rank = 0; rank < 4; ++rank) {
        std::vector<uint32_t> order_m(8);
        make_m_order(ag, rank, 8, order_m.data());
        // Every tile row once.
        std::vector<uint32_t> sorted = order_m;
        std::sort(sorted.begin(), sorted.end());
        for (uint32_t t = 0; t < 8; ++t) EXPECT_EQ(sorted[t], t);
        // The first two tile rows are this rank's own shard (rows [16 rank, 16 rank + 16)).
        EXPECT_EQ(order_m[0], 2 * rank);
        EXPECT_EQ(order_m[1], 2 * rank + 1);
        // Steps never decrease along the schedule.
        for (uint32_t j = 1; j < 8; ++j) {
          EXPECT_LE(arrival_step(ag, rank, order_m[j - 1] * 8, 8), arrival_step(ag, rank, order_m[j] * 8, 8));
        }
        // The shard delivered at step 1 comes next: rank+1 for a mesh pull, rank-1 otherwise.
        const bool mesh_pull = order == CommOrder::kFullMesh && method == AgMethod::kPull;
        EXPECT_EQ(order_m[2] / 2, mesh_pull ? (rank + 1) % 4 : (rank + 3) % 4);
      }
    }
  }
}

}  // namespace
}  // namespace tilelink::test
