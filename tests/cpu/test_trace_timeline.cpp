// The measured device timeline as tilelink trace writes it: records to lanes and intervals, and
// the Chrome / Perfetto JSON parsed back (the structure Perfetto's JSON importer reads).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tilelink/sim/gemm_rs_rates.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {
namespace {

TraceRecord rec(TraceKind kind, uint32_t tile, uint16_t rank, uint16_t role, uint32_t block, uint64_t t0,
                uint64_t t1) {
  TraceRecord r;
  r.start_ns = t0;
  r.end_ns = t1;
  r.kind = static_cast<uint32_t>(kind);
  r.tile = tile;
  r.rank = rank;
  r.role = role;
  r.block = block;
  return r;
}

std::vector<TraceRecord> sample() {
  return {rec(TraceKind::kEpilogue, 7, 1, 1, 3, 5'000, 6'000), rec(TraceKind::kWait, 7, 1, 0, 3, 1'000, 2'500),
          rec(TraceKind::kLoad, 7, 1, 0, 3, 2'500, 5'500),     rec(TraceKind::kCopy, 0xFFFFFFFFu, 0, 2, 0, 1'200, 2'000),
          rec(TraceKind::kNotify, 12, 0, 2, 0, 2'000, 2'100),  rec(TraceKind::kWait, 0, 0, 0, 1, 900, 950)};
}

TEST(TraceTimeline, LanesByRankRoleAndCtaTimesFromTheFirstRecord) {
  const std::vector<Interval> t = trace_intervals(sample());
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].lane, "r0 c1 P");
  EXPECT_EQ(t[0].name, "wait 0");
  EXPECT_DOUBLE_EQ(t[0].start, 0.0);
  EXPECT_DOUBLE_EQ(t[0].end, 50e-9);
  EXPECT_EQ(t[1].lane, "r0 b0 comm");
  EXPECT_EQ(t[1].name, "copy");  // a copy names no tile
  EXPECT_EQ(t[2].name, "notify 12");
  EXPECT_EQ(t[3].lane, "r1 c3 P");
  EXPECT_EQ(t[3].name, "wait 7");
  EXPECT_EQ(t[4].name, "load 7");
  EXPECT_DOUBLE_EQ(t[4].start, 1600e-9);
  EXPECT_EQ(t[5].lane, "r1 c3 C");
  EXPECT_EQ(t[5].name, "epilogue 7");
}

TEST(TraceTimeline, APartsLanesCarryItsNameAndKeepTheCommonClock) {
  // trace mlp: fc2's records on the clock of the whole call (t0 = fc1's first record, 400 ns).
  const std::vector<Interval> t = trace_intervals(sample(), "fc2 ", 400);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].lane, "fc2 r0 c1 P");
  EXPECT_DOUBLE_EQ(t[0].start, 500e-9);
  EXPECT_EQ(t[5].lane, "fc2 r1 c3 C");
  EXPECT_EQ(t[5].name, "epilogue 7");
  EXPECT_DOUBLE_EQ(t[5].end, 5600e-9);
  EXPECT_EQ(to_string(TraceKind::kReduce), std::string("reduce"));
}

TEST(TraceTimeline, ChromeJsonParsesWithOneCompleteEventPerIntervalAndNamedThreads) {
  const std::vector<Interval> t = trace_intervals(sample());
  const nlohmann::json j = nlohmann::json::parse(to_chrome_trace(t, "tilelink trace \"ag_gemm\""));
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_TRUE(j["traceEvents"].is_array());
  size_t complete = 0;
  std::set<int> tids, named;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer());
    ASSERT_TRUE(e.contains("name") && e["name"].is_string());
    if (e["ph"] == "X") {
      ++complete;
      ASSERT_TRUE(e["ts"].is_number());
      ASSERT_TRUE(e["dur"].is_number());
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      tids.insert(e["tid"].get<int>());
    } else {
      ASSERT_EQ(e["ph"], "M");
      if (e["name"] == "thread_name") named.insert(e["tid"].get<int>());
      if (e["name"] == "process_name") EXPECT_EQ(e["args"]["name"], "tilelink trace \"ag_gemm\"");
    }
  }
  EXPECT_EQ(complete, t.size());
  EXPECT_EQ(tids.size(), 4u);  // r0 c1 P, r0 b0 comm, r1 c3 P, r1 c3 C
  EXPECT_EQ(named, tids);
  // Microseconds: the load of tile 7 starts 1.6 µs after the first record and lasts 3 µs.
  bool found = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "load 7") {
      EXPECT_NEAR(e["ts"].get<double>(), 1.6, 1e-9);
      EXPECT_NEAR(e["dur"].get<double>(), 3.0, 1e-9);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}


// GEMM+RS's rates from a trace: world 2, 2 tile rows per owner block, 3 tile columns, 128 x 256
// bf16 tiles (64 KiB). Rank 1's epilogues of tiles 6..11 (owner 1) are its own, of 0..5 its
// peer's; medians over random durations, the same whatever the order.
TEST(GemmRsTraceRates, MediansPerKindAndOwnerFromRandomSpans) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::uniform_int_distribution<uint64_t> jitter(0, 400);
  std::vector<TraceRecord> records;
  std::vector<uint64_t> own, peer, esum, bsum;
  for (uint32_t tile = 0; tile < 12; ++tile) {
    const uint64_t d = 1'000 + jitter(rng) + (tile >= 6 ? 0 : 3'000);
    (tile >= 6 ? own : peer).push_back(d);
    records.push_back(rec(TraceKind::kEpilogue, tile, 1, 1, tile, 10'000, 10'000 + d));
  }
  for (uint32_t t = 0; t < 5; ++t) {
    const uint64_t e = 2'000 + jitter(rng), b = 4'000 + jitter(rng);
    esum.push_back(e);
    bsum.push_back(b);
    records.push_back(rec(TraceKind::kReduce, 6 + t, 1, 1, t, 50'000, 50'000 + e));  // consumer: the epilogue's
    records.push_back(rec(TraceKind::kReduce, 6 + t, 1, 2, t, 60'000, 60'000 + b));  // comm: a reduction block's
  }
  records.push_back(rec(TraceKind::kNotify, 3, 1, 1, 0, 0, 99'999));  // neither kind counts
  std::shuffle(records.begin(), records.end(), rng);
  GemmRsTraceShape shape;
  shape.world = 2;
  shape.m_tiles = 2;
  shape.n_tiles = 3;
  shape.bm = 128;
  shape.bn = 256;
  shape.push = true;
  auto median = [](std::vector<uint64_t> v) {
    std::sort(v.begin(), v.end());
    return double(v[v.size() / 2]);
  };
  const double tile = 128.0 * 256 * 2;
  const GemmRsTraceRates r = gemm_rs_trace_rates(records, shape);
  EXPECT_EQ(r.own_epilogue.spans, 6u);
  EXPECT_EQ(r.peer_epilogue.spans, 6u);
  EXPECT_NEAR(r.own_epilogue.median_us, median(own) / 1e3, 1e-9);
  EXPECT_NEAR(r.peer_epilogue.gbps, tile / median(peer), 1e-9);
  EXPECT_EQ(r.epilogue_sum.spans, 5u);
  EXPECT_NEAR(r.epilogue_sum.gbps, 3 * tile / median(esum), 1e-9);  // two parts read, one written
  EXPECT_NEAR(r.block_sum.gbps, 3 * tile / median(bsum), 1e-9);
  const std::vector<std::string> lines = describe(r, shape);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[1].find("into the owner"), std::string::npos) << lines[1];
  // No records: no spans, no lines.
  EXPECT_TRUE(describe(gemm_rs_trace_rates({}, shape), shape).empty());
}


// The order check of `tilelink trace gemm_rs`: a reduction block's span (comm lanes) must begin
// after every sender's notify of its tile; the epilogue reducer's (consumer lanes, its wait for the
// parts inside) must end after them; a missing notify is out of order whatever the clock.
TEST(GemmRsNotifyOrder, BlocksByTheirStartTheEpilogueByItsEnd) {
  std::vector<TraceRecord> records;
  // Tile 4 of owner 0 (kernel tile 4): rank 0 notified at 1000, rank 1 at 3000 (twice: the last counts).
  records.push_back(rec(TraceKind::kNotify, 4, 0, 1, 0, 1'000, 1'100));
  records.push_back(rec(TraceKind::kNotify, 4, 1, 1, 0, 2'000, 2'100));
  records.push_back(rec(TraceKind::kNotify, 4, 1, 1, 0, 3'000, 3'100));
  records.push_back(rec(TraceKind::kNotify, 4, 1, 2, 0, 9'000, 9'100));  // a comm lane's (exit barrier): not a part
  auto order = [&](std::vector<TraceRecord> extra, uint32_t world, bool one_clock) {
    std::vector<TraceRecord> all = records;
    all.insert(all.end(), extra.begin(), extra.end());
    return gemm_rs_notify_order(all.data(), all.data() + all.size(), world, one_clock);
  };
  // A reduction block beginning at 3500: after both; at 2500: before rank 1's last notify.
  NotifyOrder o = order({rec(TraceKind::kReduce, 4, 0, 2, 0, 3'500, 4'000)}, 2, true);
  EXPECT_EQ(o.pairs, 2u);
  EXPECT_EQ(o.violations, 0u);
  EXPECT_EQ(order({rec(TraceKind::kReduce, 4, 0, 2, 0, 2'500, 4'000)}, 2, true).violations, 1u);
  // The epilogue's sum from 2500 (its wait inside) to 4000: in order; one that ended at 2900 is not.
  EXPECT_EQ(order({rec(TraceKind::kReduce, 4, 0, 1, 0, 2'500, 4'000)}, 2, true).violations, 0u);
  EXPECT_EQ(order({rec(TraceKind::kReduce, 4, 0, 1, 0, 2'500, 2'900)}, 2, true).violations, 1u);
  // Clocks of different GPUs: only that each notify was recorded.
  EXPECT_EQ(order({rec(TraceKind::kReduce, 4, 0, 2, 0, 500, 600)}, 2, false).violations, 0u);
  // A third sender never notified tile 4: out of order on any clock.
  EXPECT_EQ(order({rec(TraceKind::kReduce, 4, 0, 2, 0, 3'500, 4'000)}, 3, false).violations, 1u);
}

}  // namespace
}  // namespace tilelink::sim
