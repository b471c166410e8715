// Sequence-parallel attention on the CPU executor: the all-gather of K/V rows (SM pull or push,
// mesh or ring, or the copy-engine stream) next to attention blocks that walk each (q head, query
// block)'s K/V chunks in arrival order, skip the causal future and wait per chunk. O and LSE must
// match the two-pass double reference within float tolerance, at worlds 1 to 8, causal or not,
// contiguous or zig-zag, GQA, MQA and MHA, with shards that neither the chunk nor the query block
// divides. K/V rows not yet gathered hold poison, so a read before its wait shows up in O; and
// every block's waits are logged: exactly the chunks its queries can see, in arrival order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu_test_util.hpp"
#include "protocol_runners.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/testing/attention_reference.hpp"
#include "tilelink/testing/sp_attention_naive_blocks.hpp"

namespace tilelink::test {
namespace {

class SpAttentionProtocolTest : public ::testing::TestWithParam<int> {};

TEST_P(SpAttentionProtocolTest, MatchesTheReferenceAndWaitsOnExactlyTheChunksItReads) {
  const int world = GetParam();
  struct Heads {
    uint32_t q, kv, d;
  };
  struct Comm {
    AgMethod method;
    CommOrder order;
    bool copy_engine;
  };
  const Heads heads[] = {{4, 2, 8}, {4, 1, 8}, {3, 3, 16}};  // GQA, MQA, MHA
  const Comm comms[] = {{AgMethod::kPull, CommOrder::kFullMesh, false},
                        {AgMethod::kPush, CommOrder::kFullMesh, false},
                        {AgMethod::kPull, CommOrder::kRing, false},
                        {AgMethod::kPush, CommOrder::kRing, false},
                        {AgMethod::kPull, CommOrder::kFullMesh, true}};
  uint32_t n = 0;
  for (bool causal : {true, false}) {
    for (SeqLayout layout : {SeqLayout::kContiguous, SeqLayout::kZigZag}) {
      for (const Heads& h : heads) {
        // 14 tokens per rank (zig-zag pieces of 7) in chunks of 4 or 3 and query blocks of 5 or 8:
        // chunks and query blocks straddle the two zig-zag pieces of a rank.
        const Comm& cm = comms[n % 5];
        SpCase c{world, 14, n % 2 ? 3u : 4u, n % 2 ? 8u : 5u, h.q, h.kv, h.d, causal, layout,
                 cm.method, cm.order, cm.copy_engine};
        c.local_first = n % 3 == 2;  // every third case with the local pass first
        c.section_kv_heads = n % 4 == 1 ? 1 : 0;  // and every fourth in sections of one kv head
        EXPECT_EQ(run_sp_attention(c, 9000 + 100 * world + n, 2), "") << describe(c);
        ++n;
      }
    }
  }
  // One token per chunk; one chunk per shard and one query block per rank, rows padded.
  for (const auto [comm_rows, bq, pad] : {std::tuple{1u, 3u, 0u}, std::tuple{32u, 20u, 48u}}) {
    const SpCase c{world, 14, comm_rows, bq, 4, 2, 8, true, SeqLayout::kZigZag, AgMethod::kPull,
                   CommOrder::kFullMesh, false, pad};
    EXPECT_EQ(run_sp_attention(c, 9000 + 100 * world + n, 2), "") << describe(c);
    ++n;
  }
}

INSTANTIATE_TEST_SUITE_P(World, SpAttentionProtocolTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

SpAttentionPlan small_plan(uint32_t world, uint32_t seq_per_rank, uint32_t comm_rows, uint32_t bq, bool causal,
                           SeqLayout layout) {
  return make_plan({int(world), seq_per_rank, comm_rows, bq, 1, 1, 4, causal, layout, AgMethod::kPull,
                    CommOrder::kFullMesh, false});
}

TEST(SpAttentionPlan, ContiguousAndZigZagPositions) {
  // Positions of each rank's local rows.
  auto positions = [](const SpAttentionPlan& p, uint32_t rank) {
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < p.seq_per_rank(); ++i) v.push_back(p.position(rank, i));
    return v;
  };
  const SpAttentionPlan contiguous = small_plan(2, 3, 1, 1, true, SeqLayout::kContiguous);
  EXPECT_EQ(positions(contiguous, 0), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(positions(contiguous, 1), (std::vector<uint32_t>{3, 4, 5}));
  const SpAttentionPlan zz2 = small_plan(2, 4, 1, 1, true, SeqLayout::kZigZag);
  EXPECT_EQ(positions(zz2, 0), (std::vector<uint32_t>{0, 1, 6, 7}));
  EXPECT_EQ(positions(zz2, 1), (std::vector<uint32_t>{2, 3, 4, 5}));
  const SpAttentionPlan zz3 = small_plan(3, 2, 1, 1, true, SeqLayout::kZigZag);
  EXPECT_EQ(positions(zz3, 0), (std::vector<uint32_t>{0, 5}));
  EXPECT_EQ(positions(zz3, 1), (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(positions(zz3, 2), (std::vector<uint32_t>{2, 3}));
  // home() inverts position(), and gathered row r * seq_per_rank + i is local row i of rank r.
  for (SeqLayout layout : {SeqLayout::kContiguous, SeqLayout::kZigZag}) {
    for (uint32_t world : {1u, 3u, 8u}) {
      const SpAttentionPlan p = small_plan(world, 6, 4, 5, true, layout);
      for (uint32_t pos = 0; pos < p.seq_len(); ++pos) {
        const TokenHome t = p.home(pos);
        ASSERT_LT(t.rank, world);
        ASSERT_LT(t.row, 6u);
        EXPECT_EQ(p.position(t.rank, t.row), pos);
        EXPECT_EQ(p.kv_position(t.rank * 6 + t.row), pos);
      }
    }
  }
}

TEST(SpAttentionPlan, ChunkOrderStartsWithTheLocalShardThenFollowsArrival) {
  for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
    for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
      SpAttentionPlan p = small_plan(4, 8, 3, 4, false, SeqLayout::kContiguous);  // 3 chunks per rank
      p.ag.method = method;
      p.ag.order = order;
      const bool mesh_pull = method == AgMethod::kPull && order == CommOrder::kFullMesh;
      for (uint32_t rank = 0; rank < 4; ++rank) {
        std::vector<uint32_t> chunks;
        for (uint32_t j = 0; j < p.num_kv_chunks(); ++j) chunks.push_back(p.kv_chunk(rank, j));
        // Shards by step: own, then rank+1, +2, +3 for a mesh pull (it fetches them in that order),
        // rank-1, -2, -3 otherwise (the order they are written into this rank); chunks in row order.
        std::vector<uint32_t> want;
        for (uint32_t step = 0; step < 4; ++step) {
          const uint32_t owner = mesh_pull ? (rank + step) % 4 : (rank + 4 - step) % 4;
          for (uint32_t c = 0; c < 3; ++c) want.push_back(owner * 3 + c);
        }
        EXPECT_EQ(chunks, want) << "rank " << rank << (mesh_pull ? " mesh pull" : "");
      }
    }
  }
}

TEST(SpAttentionPlan, CausalSkipsExactlyTheChunksWhollyInTheFuture) {
  // The chunks each query block reads, in order, for each rank: kv_chunk order minus chunk_needed.
  auto needed = [](const SpAttentionPlan& p, uint32_t rank, uint32_t q_block) {
    std::vector<uint32_t> v;
    for (uint32_t j = 0; j < p.num_kv_chunks(); ++j) {
      const uint32_t ch = p.kv_chunk(rank, j);
      if (p.chunk_needed(rank, p.q_rows(q_block), ch)) v.push_back(ch);
    }
    return v;
  };
  using V = std::vector<uint32_t>;
  // Contiguous, 2 ranks x 8 tokens, chunks of 4 (ch0 0-3, ch1 4-7, ch2 8-11, ch3 12-15), query
  // blocks of 4.
  const SpAttentionPlan c = small_plan(2, 8, 4, 4, true, SeqLayout::kContiguous);
  EXPECT_EQ(needed(c, 0, 0), (V{0}));           // queries 0-3
  EXPECT_EQ(needed(c, 0, 1), (V{0, 1}));        // queries 4-7
  EXPECT_EQ(needed(c, 1, 0), (V{2, 0, 1}));     // queries 8-11: own shard first
  EXPECT_EQ(needed(c, 1, 1), (V{2, 3, 0, 1}));  // queries 12-15
  // Zig-zag, same sizes: rank 0 holds 0-3 and 12-15 (ch0, ch1), rank 1 holds 4-7 and 8-11 (ch2,
  // ch3). Both ranks read 5 chunks in all: the zig-zag balance.
  const SpAttentionPlan z = small_plan(2, 8, 4, 4, true, SeqLayout::kZigZag);
  EXPECT_EQ(needed(z, 0, 0), (V{0}));           // queries 0-3
  EXPECT_EQ(needed(z, 0, 1), (V{0, 1, 2, 3}));  // queries 12-15
  EXPECT_EQ(needed(z, 1, 0), (V{2, 0}));        // queries 4-7
  EXPECT_EQ(needed(z, 1, 1), (V{2, 3, 0}));     // queries 8-11
  // A chunk whose first key is the block's last query is read: 1 rank x 6 tokens, chunks of 3
  // (ch0 0-2, ch1 3-5), query blocks of 4 (0-3, 4-5).
  const SpAttentionPlan e = small_plan(1, 6, 3, 4, true, SeqLayout::kContiguous);
  EXPECT_EQ(needed(e, 0, 0), (V{0, 1}));
  EXPECT_EQ(needed(e, 0, 1), (V{0, 1}));
  const SpAttentionPlan e3 = small_plan(1, 6, 3, 3, true, SeqLayout::kContiguous);  // blocks 0-2, 3-5
  EXPECT_EQ(needed(e3, 0, 0), (V{0}));
  EXPECT_EQ(needed(e3, 0, 1), (V{0, 1}));
  // Without the mask nothing is skipped.
  const SpAttentionPlan full = small_plan(2, 8, 4, 4, false, SeqLayout::kZigZag);
  EXPECT_EQ(needed(full, 1, 0), (V{2, 3, 0, 1}));
}

TEST(SpAttentionPlan, SectionsRunTheirKvHeadsItemsTogether) {
  // 8 q heads on 4 kv heads (2 each), 3 query blocks, sections of 2 kv heads: q heads 0-3 over
  // blocks 0, 1, 2, then q heads 4-7; under the causal mask each section's blocks last first.
  SpAttentionPlan p = make_plan({1, 24, 8, 8, 8, 4, 4, false, SeqLayout::kContiguous, AgMethod::kPull,
                                 CommOrder::kFullMesh, false});
  p.section_kv_heads = 2;
  ASSERT_EQ(check_sp_attention_plan(p, 4), "");
  ASSERT_EQ(p.num_items(), 24u);
  std::vector<std::pair<uint32_t, uint32_t>> got;
  for (uint32_t i = 0; i < p.num_items(); ++i) got.emplace_back(p.item(i).head, p.item(i).q_block);
  std::vector<std::pair<uint32_t, uint32_t>> want;
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t b = 0; b < 3; ++b) {
      for (uint32_t h = 0; h < 4; ++h) want.emplace_back(4 * s + h, b);
    }
  }
  EXPECT_EQ(got, want);
  p.causal = true;
  EXPECT_EQ(p.item(0).q_block, 2u);
  EXPECT_EQ(p.item(4).q_block, 1u);
  EXPECT_EQ(p.item(12).head, 4u);
  EXPECT_EQ(p.item(12).q_block, 2u);
  // One section (0, or all 4 kv heads): blocks outermost over every head.
  for (uint32_t sec : {0u, 4u}) {
    p.section_kv_heads = sec;
    p.causal = false;
    for (uint32_t i = 0; i < p.num_items(); ++i) {
      EXPECT_EQ(p.item(i).head, i % 8);
      EXPECT_EQ(p.item(i).q_block, i / 8);
    }
  }
  // Every section size: each (head, block) exactly once.
  for (uint32_t sec : {1u, 2u, 4u}) {
    p.section_kv_heads = sec;
    std::vector<int> seen(p.num_items(), 0);
    for (uint32_t i = 0; i < p.num_items(); ++i) ++seen[p.item(i).head * p.q_blocks() + p.item(i).q_block];
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), int(p.num_items())) << "sections of " << sec;
  }
  p.section_kv_heads = 3;
  EXPECT_NE(check_sp_attention_plan(p, 4).find("'section_kv_heads' = 3"), std::string::npos);
}

TEST(SpAttentionPlan, CheckNamesTheBadField) {
  SpAttentionPlan p = small_plan(2, 8, 4, 4, true, SeqLayout::kZigZag);
  EXPECT_EQ(check_sp_attention_plan(p, 4), "");
  SpAttentionPlan odd = small_plan(2, 7, 4, 4, true, SeqLayout::kZigZag);
  EXPECT_NE(check_sp_attention_plan(odd, 4).find("'ag.map.rows_per_rank' = 7"), std::string::npos);
  SpAttentionPlan gqa = p;
  gqa.q_heads = 3;
  gqa.kv_heads = 2;
  EXPECT_NE(check_sp_attention_plan(gqa, 4).find("'q_heads' = 3"), std::string::npos);
  SpAttentionPlan rows = p;
  rows.ag.row_bytes = 16;
  EXPECT_NE(check_sp_attention_plan(rows, 4).find("'ag.row_bytes' = 16"), std::string::npos);
  SpAttentionPlan big = p;
  big.bq = kSpAttentionMaxBq + 1;
  EXPECT_NE(check_sp_attention_plan(big, 4).find("'bq'"), std::string::npos);
}

}  // namespace
}  // namespace tilelink::test
