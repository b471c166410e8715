// The device timeline (TraceBuffer; AgGemm, SpAttention and GemmRs::set_trace) on virtual ranks: every GEMM tile of every
// rank records one wait, one load and one epilogue span, the loads begin after the wait ends, the
// SM all-gather records its copies and notifies, tracing does not change the result, off records
// nothing, and a full buffer counts what it dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gemm_rs_problem.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/runtime/trace_buffer.hpp"

namespace tilelink::test::trace {
namespace {

constexpr uint32_t kMPerRank = 384, kN = 512, kK = 256;  // 128x256 tiles: 3 x 2 per rank block

struct Case {
  TestWorld env;
  SymmetricBuffer gathered;
  std::vector<DeviceBuffer> b, c;
  AgGemmArguments args;

  Case(int world_size, CommResource resource, std::mt19937_64& rng)
      : env(world_size, size_t(kMPerRank) * world_size * kK * 2 + (2 << 20), 4096),
        gathered(env.heap.allocate(size_t(kMPerRank) * world_size * kK * 2)) {
    args.a = &gathered;
    args.m_per_rank = kMPerRank;
    args.n = kN;
    args.k = kK;
    args.config.comm.resource = resource;
    args.config.comm.comm_rows = 128;
    const size_t shard = size_t(kMPerRank) * kK * 2;
    const auto a_host = random_bf16(size_t(kMPerRank) * world_size * kK, rng);
    for (int r = 0; r < world_size; ++r) {
      b.emplace_back(size_t(kN) * kK * 2, env.world.device(r));
      c.emplace_back(size_t(kMPerRank) * world_size * kN * 2, env.world.device(r));
      upload(b[r].get(), random_bf16(size_t(kN) * kK, rng).data(), b[r].bytes());
      upload(static_cast<char*>(gathered.data(r)) + r * shard, reinterpret_cast<const char*>(a_host.data()) + r * shard,
             shard);
      args.b.push_back(b[r].get());
      args.c.push_back(c[r].get());
    }
  }
};

class TraceTest : public ::testing::TestWithParam<std::tuple<int, CommResource>> {};

TEST_P(TraceTest, EveryTileWaitsThenLoadsThenStores) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, resource] = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  Case c(world_size, resource, rng);
  AgGemm op(c.env.world, c.env.heap, c.env.signals, c.args, "trace_test");
  TraceBuffer buffer(c.env.world, 1 << 16);

  op.run();  // untraced
  c.env.world.synchronize();
  ASSERT_TRUE(buffer.records().empty()) << "an op without set_trace recorded";
  std::vector<std::vector<uint8_t>> untraced;
  for (int r = 0; r < world_size; ++r) untraced.push_back(download<uint8_t>(c.c[r].get(), c.c[r].bytes()));

  op.set_trace(&buffer);
  for (int r = 0; r < world_size; ++r) poison(c.c[r].get(), c.c[r].bytes());
  op.run();
  c.env.world.synchronize();
  for (int r = 0; r < world_size; ++r) {
    EXPECT_TRUE(bytes_equal(download<uint8_t>(c.c[r].get(), c.c[r].bytes()), untraced[r])) << "rank " << r;
  }

  const uint32_t tiles = kMPerRank * world_size / 128 * (kN / 256);
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<TraceRecord>> by;  // (rank, kind, tile)
  uint32_t copies = 0, notifies = 0;
  for (const TraceRecord& rec : buffer.records()) {
    ASSERT_LT(rec.rank, uint32_t(world_size));
    ASSERT_LE(rec.start_ns, rec.end_ns);
    if (rec.role == uint16_t(TraceRole::kComm)) {
      copies += rec.kind == uint32_t(TraceKind::kCopy);
      notifies += rec.kind == uint32_t(TraceKind::kNotify);
      continue;
    }
    by[{rec.rank, rec.kind, rec.tile}].push_back(rec);
  }
  for (uint32_t r = 0; r < uint32_t(world_size); ++r) {
    for (uint32_t t = 0; t < tiles; ++t) {
      const auto& wait = by[{r, uint32_t(TraceKind::kWait), t}];
      const auto& load = by[{r, uint32_t(TraceKind::kLoad), t}];
      const auto& epilogue = by[{r, uint32_t(TraceKind::kEpilogue), t}];
      ASSERT_EQ(wait.size(), 1u) << "rank " << r << " tile " << t;
      ASSERT_EQ(load.size(), 1u) << "rank " << r << " tile " << t;
      ASSERT_EQ(epilogue.size(), 1u) << "rank " << r << " tile " << t;
      EXPECT_LE(wait[0].end_ns, load[0].start_ns) << "rank " << r << " tile " << t;
      EXPECT_LE(load[0].start_ns, epilogue[0].end_ns) << "rank " << r << " tile " << t;
    }
  }
  if (resource == CommResource::kSm && world_size > 1) {
    // Pull, full mesh: every rank copies each peer's kMPerRank / 128 tiles and notifies each.
    EXPECT_EQ(copies, uint32_t(world_size) * (world_size - 1) * (kMPerRank / 128));
    EXPECT_GE(notifies, copies);
  } else {
    EXPECT_EQ(copies, 0u);
  }
  EXPECT_EQ(buffer.dropped(), 0u);

  buffer.clear();
  op.set_trace(nullptr);
  op.run();
  c.env.world.synchronize();
  EXPECT_TRUE(buffer.records().empty()) << "set_trace(nullptr) did not turn recording off";
}

INSTANTIATE_TEST_SUITE_P(AgGemm, TraceTest,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(CommResource::kCopyEngine, CommResource::kSm)),
                         [](const ::testing::TestParamInfo<TraceTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

TEST(TraceBuffer, CountsWhatDoesNotFit) {
  TL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  Case c(2, CommResource::kCopyEngine, rng);
  AgGemm op(c.env.world, c.env.heap, c.env.signals, c.args, "trace_small");
  TraceBuffer buffer(c.env.world, 5);
  op.set_trace(&buffer);
  op.run();
  c.env.world.synchronize();
  EXPECT_EQ(buffer.records().size(), 10u);  // 5 per rank
  const uint32_t per_rank = 3 * (kMPerRank * 2 / 128) * (kN / 256);
  EXPECT_EQ(buffer.dropped(), 2u * (per_rank - 5));
}


// SpAttention::set_trace: per work item, one wait and one load span for exactly the K/V chunks
// the item reads (the plan's chunk_needed), loads after the wait, one store span per item;
// results unchanged by tracing.
class SpAttentionTraceTest : public ::testing::TestWithParam<int> {};

TEST_P(SpAttentionTraceTest, EveryChunkReadWaitsThenLoads) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = GetParam();
  constexpr uint32_t kSpr = 512, kQHeads = 4, kKvHeads = 2, kDim = 128;
  const size_t row_bytes = size_t(2) * kKvHeads * kDim * 2, q_bytes = size_t(kSpr) * kQHeads * kDim * 2;
  std::mt19937_64 rng(std::random_device{}());
  TestWorld env(world_size, size_t(kSpr) * world_size * row_bytes + (2 << 20), 4096);
  SymmetricBuffer kv = env.heap.allocate(size_t(kSpr) * world_size * row_bytes);
  std::vector<DeviceBuffer> q, o, lse;
  SpAttentionArguments args;
  args.kv = &kv;
  args.seq_per_rank = kSpr;
  args.q_heads = kQHeads;
  args.kv_heads = kKvHeads;
  args.head_dim = kDim;
  args.causal = true;
  args.config.comm.comm_rows = 128;
  args.config.method = OpMethod::kFused;  // the fused kernel's waits are what is traced (auto may not fuse)
  for (int r = 0; r < world_size; ++r) {
    q.emplace_back(q_bytes, env.world.device(r));
    o.emplace_back(q_bytes, env.world.device(r));
    lse.emplace_back(size_t(kSpr) * kQHeads * 4, env.world.device(r));
    upload(q[r].get(), random_bf16(q_bytes / 2, rng).data(), q_bytes);
    upload(static_cast<char*>(kv.data(r)) + r * kSpr * row_bytes, random_bf16(kSpr * row_bytes / 2, rng).data(),
           kSpr * row_bytes);
    args.q.push_back(q[r].get());
    args.o.push_back(o[r].get());
    args.lse.push_back(lse[r].get<float>());
  }
  SpAttention op(env.world, env.heap, env.signals, args, "trace_test.sp_attention");
  TraceBuffer buffer(env.world, 1 << 16);
  op.run();
  env.world.synchronize();
  std::vector<std::vector<uint8_t>> untraced;
  for (int r = 0; r < world_size; ++r) untraced.push_back(download<uint8_t>(o[r].get(), q_bytes));

  op.set_trace(&buffer);
  for (int r = 0; r < world_size; ++r) poison(o[r].get(), q_bytes);
  op.run();
  env.world.synchronize();
  op.set_trace(nullptr);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_TRUE(bytes_equal(download<uint8_t>(o[r].get(), q_bytes), untraced[r])) << "rank " << r;
  }

  const SpAttentionPlan& plan = op.plan();
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> expected, waits, loads;  // (rank, chunk, 0) -> count
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> stores;                            // (rank, item)
  for (uint32_t r = 0; r < uint32_t(world_size); ++r) {
    for (uint32_t i = 0; i < plan.num_items(); ++i) {
      const RowRange rows = plan.q_rows(plan.item(i).q_block);
      for (uint32_t ch = 0; ch < plan.num_kv_chunks(); ++ch) expected[{r, ch, 0}] += plan.chunk_needed(r, rows, ch);
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, std::vector<TraceRecord>> producers;  // (rank, block)
  for (const TraceRecord& rec : buffer.records()) {
    ASSERT_LE(rec.start_ns, rec.end_ns);
    if (rec.role == uint16_t(TraceRole::kConsumer)) {
      ASSERT_EQ(rec.kind, uint32_t(TraceKind::kEpilogue));
      ++stores[{rec.rank, rec.tile}];
    } else if (rec.role == uint16_t(TraceRole::kProducer)) {
      (rec.kind == uint32_t(TraceKind::kWait) ? waits : loads)[{rec.rank, rec.tile, 0}] += 1;
      producers[{rec.rank, rec.block}].push_back(rec);
    }
  }
  for (auto& [key, n] : expected) {
    if (n == 0) continue;
    EXPECT_EQ(waits[key], n) << "rank " << std::get<0>(key) << " chunk " << std::get<1>(key);
    EXPECT_EQ(loads[key], n) << "rank " << std::get<0>(key) << " chunk " << std::get<1>(key);
  }
  for (uint32_t r = 0; r < uint32_t(world_size); ++r) {
    for (uint32_t i = 0; i < plan.num_items(); ++i) EXPECT_EQ((stores[{r, i}]), 1u) << "rank " << r << " item " << i;
  }
  // A producer's records alternate wait, loads of the same chunk, in time.
  for (auto& [key, recs] : producers) {
    std::sort(recs.begin(), recs.end(), [](const TraceRecord& a, const TraceRecord& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.kind < b.kind;
    });
    for (size_t k = 0; k + 1 < recs.size(); k += 2) {
      ASSERT_EQ(recs[k].kind, uint32_t(TraceKind::kWait)) << "rank " << key.first << " block " << key.second;
      ASSERT_EQ(recs[k + 1].kind, uint32_t(TraceKind::kLoad));
      EXPECT_EQ(recs[k].tile, recs[k + 1].tile);
      EXPECT_LE(recs[k].end_ns, recs[k + 1].start_ns);
    }
  }
  EXPECT_EQ(buffer.dropped(), 0u);
}

INSTANTIATE_TEST_SUITE_P(SpAttention, SpAttentionTraceTest, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return "world" + std::to_string(info.param); });

// GemmRs::set_trace: every rank records one epilogue and, inside it, one notify per GEMM tile; every
// owner one reduction per tile of its block, which begins after each sender's notify of that tile
// began (one GPU: one clock); the reduction blocks record their waits and their exit barrier's
// notifies, nothing else; results unchanged.
class GemmRsTraceTest : public ::testing::TestWithParam<std::tuple<int, GemmRsScatter>> {};

TEST_P(GemmRsTraceTest, EveryReductionFollowsEverySendersNotify) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, scatter] = GetParam();
  constexpr uint32_t kRowsPerRank = 256, kCols = 264, kInner = 200;
  const uint32_t m = kRowsPerRank * world_size;
  const size_t partial_bytes = size_t(m) * kCols * 2, out_bytes = size_t(kRowsPerRank) * kCols * 2;
  std::mt19937_64 rng(std::random_device{}());
  TestWorld env(world_size, 2 * partial_bytes + (2 << 20), 4096);
  GemmRsProblem problem(env, m, kCols, kInner, rng);
  GemmRsArguments& args = problem.args;
  std::vector<DeviceBuffer>& out = problem.out;
  args.config.scatter = scatter;
  args.config.granularity = scatter == GemmRsScatter::kCopyEngine ? SignalGranularity::kTileRow : SignalGranularity::kTile;
  args.config.engine = GemmRsEngine::kOwnerTiles;  // the owner-tile GEMM's trace (small-M: GEMM+AR's)
  ASSERT_EQ(GemmRs::can_implement(env.world, env.heap, args), "");
  GemmRs op(env.world, env.heap, env.signals, args, "trace_test.gemm_rs");
  TraceBuffer buffer(env.world, 1 << 16);
  op.run();
  env.world.synchronize();
  ASSERT_TRUE(buffer.records().empty()) << "an op without set_trace recorded";
  std::vector<std::vector<uint8_t>> untraced;
  for (int r = 0; r < world_size; ++r) untraced.push_back(download<uint8_t>(out[r].get(), out_bytes));

  op.set_trace(&buffer);
  for (int r = 0; r < world_size; ++r) poison(out[r].get(), out_bytes);
  op.run();
  env.world.synchronize();
  op.set_trace(nullptr);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_TRUE(bytes_equal(download<uint8_t>(out[r].get(), out_bytes), untraced[r])) << "rank " << r;
  }

  const GemmRsFusedPlan& plan = op.plan();
  const uint32_t block_tiles = plan.tiles_per_block(), tiles = block_tiles * uint32_t(world_size);
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<TraceRecord>> by;  // (rank, kind, tile)
  uint32_t waits = 0;
  for (const TraceRecord& rec : buffer.records()) {
    ASSERT_LT(rec.rank, uint32_t(world_size));
    ASSERT_LE(rec.start_ns, rec.end_ns);
    const bool comm = rec.role == uint16_t(TraceRole::kComm);
    if (comm && rec.kind == uint32_t(TraceKind::kWait)) {
      ++waits;
      continue;
    }
    if (comm && rec.kind == uint32_t(TraceKind::kNotify)) continue;  // the exit barrier's
    if (comm) ASSERT_EQ(rec.kind, uint32_t(TraceKind::kReduce)) << "a reduction block recorded " << rec.kind;
    if (!comm) {
      ASSERT_EQ(rec.role, uint16_t(TraceRole::kConsumer));
      ASSERT_TRUE(rec.kind == uint32_t(TraceKind::kEpilogue) || rec.kind == uint32_t(TraceKind::kNotify)) << rec.kind;
    }
    ASSERT_LT(rec.tile, tiles);
    by[{rec.rank, rec.kind, rec.tile}].push_back(rec);
  }
  for (uint32_t r = 0; r < uint32_t(world_size); ++r) {
    for (uint32_t t = 0; t < tiles; ++t) {
      const auto& epilogue = by[{r, uint32_t(TraceKind::kEpilogue), t}];
      const auto& notify = by[{r, uint32_t(TraceKind::kNotify), t}];
      ASSERT_EQ(epilogue.size(), 1u) << "rank " << r << " tile " << t;
      ASSERT_EQ(notify.size(), 1u) << "rank " << r << " tile " << t;
      EXPECT_LE(epilogue[0].start_ns, notify[0].start_ns) << "rank " << r << " tile " << t;
      // A tile pushed into a peer is announced after its epilogue, at the CTA's next tile or end
      // (GemmRsPushNotify::kDeferred); every other tile inside its epilogue.
      const bool deferred = plan.may_defer_notify(r, t / plan.n_tiles(), 2);  // the kernel's 2x1 clusters
      if (deferred) {
        EXPECT_GE(notify[0].start_ns, epilogue[0].end_ns) << "rank " << r << " tile " << t << ": a deferred notify";
      } else {
        EXPECT_LE(notify[0].end_ns, epilogue[0].end_ns) << "rank " << r << " tile " << t;
      }
    }
  }
  for (uint32_t r = 0; r < uint32_t(world_size); ++r) {  // every notify is there (asserted above)
    for (uint32_t t = r * block_tiles; t < (r + 1) * block_tiles; ++t) {
      const auto& reduce = by[{r, uint32_t(TraceKind::kReduce), t}];
      ASSERT_EQ(reduce.size(), 1u) << "owner " << r << " tile " << t;
      for (uint32_t s = 0; s < uint32_t(world_size); ++s) {
        const uint64_t notified = by[{s, uint32_t(TraceKind::kNotify), t}][0].start_ns;
        EXPECT_LE(notified, reduce[0].start_ns) << "owner " << r << " tile " << t << " sender " << s;
      }
    }
    for (uint32_t t = 0; t < tiles; ++t) {
      const bool none = by[{r, uint32_t(TraceKind::kReduce), t}].empty();
      if (t / block_tiles != r) EXPECT_TRUE(none) << "rank " << r << " reduced tile " << t << " of another owner";
    }
  }
  EXPECT_GE(waits, tiles);  // at least one per reduced tile
  EXPECT_EQ(buffer.dropped(), 0u);

  buffer.clear();
  op.run();
  env.world.synchronize();
  EXPECT_TRUE(buffer.records().empty()) << "set_trace(nullptr) did not turn recording off";
}

INSTANTIATE_TEST_SUITE_P(GemmRs, GemmRsTraceTest,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush,
                                                              GemmRsScatter::kCopyEngine)),
                         [](const ::testing::TestParamInfo<GemmRsTraceTest::ParamType>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace tilelink::test::trace
