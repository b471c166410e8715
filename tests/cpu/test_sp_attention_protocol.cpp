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
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/testing/attention_reference.hpp"
#include "tilelink/testing/sp_attention_naive_blocks.hpp"

namespace tilelink::test {
namespace {

struct SpCase {
  int world;
  uint32_t seq_per_rank, comm_rows, bq, q_heads, kv_heads, head_dim;
  bool causal;
  SeqLayout layout;
  AgMethod method;
  CommOrder order;
  bool copy_engine;
  uint32_t pitch_pad = 0;  // bytes between gathered K/V rows beyond the row itself
  bool local_first = false;
  uint32_t section_kv_heads = 0;
};

std::string describe(const SpCase& c) {
  return "world " + std::to_string(c.world) + (c.causal ? " causal" : " full") +
         (c.layout == SeqLayout::kZigZag ? " zigzag" : " contiguous") + (c.copy_engine ? " ce" : "") +
         (c.method == AgMethod::kPull ? " pull" : " push") + (c.order == CommOrder::kRing ? " ring" : " mesh") +
         " seq/rank " + std::to_string(c.seq_per_rank) + " comm_rows " + std::to_string(c.comm_rows) + " bq " +
         std::to_string(c.bq) + " heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) + " d " +
         std::to_string(c.head_dim) + (c.pitch_pad ? " pitch pad " + std::to_string(c.pitch_pad) : "") +
         (c.local_first ? " local pass first" : "") +
         (c.section_kv_heads ? " sections of " + std::to_string(c.section_kv_heads) + " kv heads" : "");
}

SpAttentionPlan make_plan(const SpCase& c) {
  SpAttentionPlan p;
  p.ag.map = RowShardMapping{c.seq_per_rank, c.comm_rows, uint32_t(c.world)};
  p.ag.method = c.method;
  p.ag.order = c.order;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.bq = c.bq;
  p.causal = c.causal;
  p.layout = c.layout;
  p.local_first = c.local_first;
  p.section_kv_heads = c.section_kv_heads;
  p.ag.row_bytes = p.kv_row_elems() * 4;
  p.ag.pitch = p.ag.row_bytes + c.pitch_pad;
  return p;
}

struct Wait {
  uint32_t channel;
  uint32_t count;
  int32_t tile;
};

// The attention blocks' context: a BlockCtx that logs the consumer waits it completes.
class LoggingCtx {
 public:
  LoggingCtx(cpu::BlockCtx& ctx, std::vector<Wait>& log) : ctx_(ctx), log_(log) {}
  int rank() const { return ctx_.rank(); }
  int world() const { return ctx_.world(); }
  uint32_t block() const { return ctx_.block(); }
  uint32_t num_blocks() const { return ctx_.num_blocks(); }
  Lanes lanes() const { return ctx_.lanes(); }
  void sync() { ctx_.sync(); }
  void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count = 1, uint32_t arrivals = 1,
                          int32_t tile = -1) {
    ctx_.consumer_tile_wait(sig, channel, count, arrivals, tile);
    log_.push_back({channel, count, tile});
  }

 private:
  cpu::BlockCtx& ctx_;
  std::vector<Wait>& log_;
};

// The slice channels an item's block must wait on, in order, worked out from the definitions: all
// chunks, sorted (stably) by the all-gather step that delivers them; under the causal mask only
// those holding a key that some query of the block can see.
std::vector<uint32_t> expected_waits(const SpAttentionPlan& p, uint32_t rank, uint32_t item) {
  std::vector<uint32_t> chunks(p.num_kv_chunks());
  for (uint32_t ch = 0; ch < chunks.size(); ++ch) chunks[ch] = ch;
  std::stable_sort(chunks.begin(), chunks.end(), [&](uint32_t a, uint32_t b) {
    const RowRange ra = p.ag.map.rows_of_channel(a), rb = p.ag.map.rows_of_channel(b);
    return arrival_step(p.ag, rank, ra.row0, ra.rows) < arrival_step(p.ag, rank, rb.row0, rb.rows);
  });
  const RowRange q = p.q_rows(p.item(item).q_block);
  std::vector<uint32_t> waits;
  for (uint32_t ch : chunks) {
    const RowRange keys = p.ag.map.rows_of_channel(ch);
    bool seen = !p.causal;
    for (uint32_t i = q.row0; i < q.row0 + q.rows && !seen; ++i) {
      for (uint32_t g = keys.row0; g < keys.row0 + keys.rows && !seen; ++g) {
        seen = p.kv_position(g) <= p.position(rank, i);
      }
    }
    if (seen) waits.push_back(p.ag.tile_channel(ch));
  }
  return waits;
}

std::string join(const std::vector<uint32_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s + "}";
}

bool within_tolerance(float got, float want) { return std::fabs(got - want) <= 1e-4f * std::fabs(want) + 1e-5f; }

// Runs `calls` consecutive calls with fresh Q, K, V each; returns "" or the first mismatch.
std::string run_sp_attention(const SpCase& c, uint64_t seed, int calls) {
  const SpAttentionPlan p = make_plan(c);
  if (std::string e = check_sp_attention_plan(p, 4); !e.empty()) return describe(c) + ": " + e;
  const uint32_t w = p.world(), spr = p.seq_per_rank(), seq = p.seq_len(), d = p.head_dim;
  const size_t q_elems = size_t(spr) * p.q_heads * d;
  constexpr uint32_t kAttentionBlocks = 3;

  cpu::Executor ex(c.world, 16 << 20, p.ag.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("sp_attention");
  const size_t kv_off = ex.allocate(size_t(seq) * p.ag.pitch);
  const size_t q_off = ex.allocate(q_elems * 4);
  const size_t o_off = ex.allocate(q_elems * 4);
  const size_t lse_off = ex.allocate(size_t(p.q_heads) * spr * 4);
  const size_t ml_off = ex.allocate(size_t(2) * p.q_heads * spr * 4);

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    // The whole sequence in position order; each rank gets its tokens' Q in its local rows and its
    // tokens' K/V rows in place in the gathered buffer, every other K/V row poisoned.
    const std::vector<float> q = random_floats(rng, size_t(seq) * p.q_heads * d);
    const std::vector<float> k = random_floats(rng, size_t(seq) * p.kv_heads * d);
    const std::vector<float> v = random_floats(rng, size_t(seq) * p.kv_heads * d);
    const size_t k_bytes = size_t(p.kv_heads) * d * 4;
    for (uint32_t r = 0; r < w; ++r) {
      std::memset(ex.at<char>(r, kv_off), kPoison, size_t(seq) * p.ag.pitch);
      std::memset(ex.at<char>(r, o_off), kPoison, q_elems * 4);
      std::memset(ex.at<char>(r, lse_off), kPoison, size_t(p.q_heads) * spr * 4);
      std::memset(ex.at<char>(r, ml_off), kPoison, size_t(2) * p.q_heads * spr * 4);
      for (uint32_t i = 0; i < spr; ++i) {
        const uint32_t pos = p.position(r, i);
        std::memcpy(ex.at<float>(r, q_off) + size_t(i) * p.q_heads * d, q.data() + size_t(pos) * p.q_heads * d,
                    size_t(p.q_heads) * d * 4);
        char* row = ex.at<char>(r, kv_off) + (size_t(r) * spr + i) * p.ag.pitch;
        std::memcpy(row, k.data() + size_t(pos) * p.kv_heads * d, k_bytes);
        std::memcpy(row + k_bytes, v.data() + size_t(pos) * p.kv_heads * d, k_bytes);
      }
    }
    std::vector<std::vector<Wait>> logs(size_t(w) * kAttentionBlocks);
    const uint64_t epoch = static_cast<uint64_t>(call);
    auto sig = [&](int r) { return ex.signals(r, 0, p.ag.num_channels(), epoch, op); };
    std::vector<cpu::Role> roles;
    if (c.copy_engine) {
      roles.push_back({"copy_engine", 1, [&](cpu::BlockCtx& ctx) {
                         all_gather_stream(ctx, p.ag, sig(ctx.rank()), ex.heap(ctx.rank()),
                                           ex.at<char>(ctx.rank(), kv_off));
                       }});
    } else {
      roles.push_back({"comm", 2, [&](cpu::BlockCtx& ctx) {
                         all_gather_block(ctx, p.ag, sig(ctx.rank()), ex.heap(ctx.rank()),
                                          ex.at<char>(ctx.rank(), kv_off));
                       }});
    }
    roles.push_back({"attention", kAttentionBlocks, [&](cpu::BlockCtx& ctx) {
                       const int r = ctx.rank();
                       LoggingCtx logged(ctx, logs[size_t(r) * kAttentionBlocks + ctx.block()]);
                       sp_attention_block(logged, p, sig(r), ex.at<float>(r, q_off), ex.at<char>(r, kv_off),
                                          ex.at<float>(r, o_off), ex.at<float>(r, lse_off), ex.at<float>(r, ml_off));
                     }});
    ex.run(roles);

    std::vector<float> o_ref(q.size()), lse_ref(size_t(p.q_heads) * seq);
    attention_reference({seq, p.q_heads, p.kv_heads, d, p.causal}, q.data(), k.data(), v.data(), o_ref.data(),
                        lse_ref.data());
    const std::string at = describe(c) + ": call " + std::to_string(call) + ", rank ";
    for (uint32_t r = 0; r < w; ++r) {
      for (uint32_t h = 0; h < p.q_heads; ++h) {
        for (uint32_t i = 0; i < spr; ++i) {
          const uint32_t pos = p.position(r, i);
          const std::string where = at + std::to_string(r) + " head " + std::to_string(h) + " row " +
                                    std::to_string(i) + " (position " + std::to_string(pos) + ")";
          const float got_lse = ex.at<float>(r, lse_off)[size_t(h) * spr + i];
          const float want_lse = lse_ref[size_t(h) * seq + pos];
          if (!within_tolerance(got_lse, want_lse)) {
            return where + ": LSE " + std::to_string(got_lse) + ", expected " + std::to_string(want_lse);
          }
          for (uint32_t e = 0; e < d; ++e) {
            const float got = ex.at<float>(r, o_off)[(size_t(i) * p.q_heads + h) * d + e];
            const float want = o_ref[(size_t(pos) * p.q_heads + h) * d + e];
            if (!within_tolerance(got, want)) {
              return where + ": O[" + std::to_string(e) + "] " + std::to_string(got) + ", expected " +
                     std::to_string(want);
            }
          }
        }
      }
      if (p.local_first) {  // a block reads its own shard for every item before any remote chunk
        std::vector<uint32_t> own;
        for (uint32_t c = 0; c < p.ag.map.chunks_per_rank(); ++c) own.push_back(p.ag.tile_channel(p.ag.map.channel(r, c)));
        for (uint32_t b = 0; b < kAttentionBlocks; ++b) {
          bool remote = false;
          for (const Wait& wt : logs[size_t(r) * kAttentionBlocks + b]) {
            const bool is_own = std::find(own.begin(), own.end(), wt.channel) != own.end();
            if (is_own && remote) {
              return at + std::to_string(r) + " block " + std::to_string(b) + ": own chunk " +
                     std::to_string(wt.channel) + " read after a remote one";
            }
            remote = remote || !is_own;
          }
        }
      }
      for (uint32_t item = 0; item < p.num_items(); ++item) {
        std::vector<uint32_t> got;
        for (const Wait& wt : logs[size_t(r) * kAttentionBlocks + item % kAttentionBlocks]) {
          if (wt.tile != int32_t(item)) continue;
          if (wt.count != 1) return at + std::to_string(r) + " item " + std::to_string(item) + ": a multi-chunk wait";
          got.push_back(wt.channel);
        }
        const std::vector<uint32_t> want = expected_waits(p, r, item);
        if (got != want) {
          return at + std::to_string(r) + " item " + std::to_string(item) + " waited on channels " + join(got) +
                 ", expected " + join(want);
        }
      }
    }
  }
  return "";
}

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
