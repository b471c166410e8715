// The tune cache (file round trip of AG+GEMM and GEMM+RS entries, refusals naming the file and
// field) and the AG+GEMM and GEMM+RS search spaces of `tilelink tune` (stage 1 covers every
// compute variant once; stage 2 is ranked by the plan model and always keeps the automatic
// communication).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <unistd.h>

#include "tilelink/core/error.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tilelink/tune/gemm_rs_tune.hpp"
#include "tilelink/tune/tune_cache.hpp"

namespace tilelink::test {
namespace {

std::string temp_path(const char* name) {
  return std::string(::testing::TempDir()) + "tilelink_" + std::to_string(::getpid()) + "_" + name;
}

TuneKey key(uint32_t m) {
  TuneKey k;
  k.gpu = "NVIDIA H200";
  k.sms = 132;
  k.world = 8;
  k.virtual_ranks = true;
  k.op = "ag_gemm";
  k.m = m;
  k.n = 3584;
  k.k = 8192;
  return k;
}

TEST(TuneCache, RoundTripsEntriesThroughTheFile) {
  const std::string path = temp_path("tune.json");
  std::remove(path.c_str());
  TuneCache empty = TuneCache::load(path);  // no file yet
  EXPECT_EQ(empty.size(), 0u);
  AgGemmConfig a;
  a.kernel = "256x128x64_c1x2";
  a.swizzle = 4;
  a.comm = {CommResource::kSm, AgMethod::kPush, DataPath::kBulk, CommOrder::kRing, 256, 6, 512};
  AgGemmConfig b;
  b.comm.comm_rows = 2048;
  empty.put(key(8192), {a, 1234.5, 1500.25, "2026-12-02T00:00:00Z"});
  empty.put(key(4096), {b, 10.0, 11.0, "2026-12-02T00:00:01Z"});
  empty.save();

  const TuneCache back = TuneCache::load(path);
  ASSERT_EQ(back.size(), 2u);
  const auto e = back.find(key(8192));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(describe(e->config), describe(a));
  EXPECT_EQ(e->config.comm.num_blocks, 6u);
  EXPECT_EQ(e->config.comm.threads, 512u);
  EXPECT_DOUBLE_EQ(e->time_us, 1234.5);
  EXPECT_DOUBLE_EQ(e->default_us, 1500.25);
  EXPECT_EQ(back.find(key(4096))->config.comm.comm_rows, 2048u);
  EXPECT_FALSE(back.find(key(2048)).has_value());
  TuneKey other = key(8192);
  other.world = 4;
  EXPECT_FALSE(back.find(other).has_value()) << "a key differs by world";
  std::remove(path.c_str());
}

TEST(TuneCache, RefusesFilesThatAreNotACacheNamingTheFile) {
  const std::string path = temp_path("bad.json");
  std::ofstream(path) << "{ not json";
  try {
    TuneCache::load(path);
    FAIL() << "a malformed file was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::ofstream(path) << R"({"format": "tilelink-tune-1", "entries": {"k": {"config": {"kernel": "", "swizzle": 0,
      "gemm_sms": 0, "comm": {"resource": "gpu", "method": "pull", "path": "ldst", "order": "mesh",
      "comm_rows": 0, "num_blocks": 0, "threads": 512}}, "time_us": 1, "default_us": 1, "date": ""}}})";
  try {
    TuneCache::load(path);
    FAIL() << "an unknown resource was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'resource' = 'gpu'"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(TuneCache, OnlyAllAutomaticConfigsTakeTheCache) {
  EXPECT_TRUE(is_automatic(AgGemmConfig{}));
  AgGemmConfig c;
  c.swizzle = 2;
  EXPECT_FALSE(is_automatic(c));
  c = {};
  c.comm.resource = CommResource::kSm;
  EXPECT_FALSE(is_automatic(c));
  c = {};
  c.use_tune_cache = false;
  EXPECT_TRUE(is_automatic(c)) << "use_tune_cache is not a knob";
}

TEST(TuneCache, KeepsGemmRsEntriesApartFromAgGemmOnes) {
  const std::string path = temp_path("tune_rs.json");
  std::remove(path.c_str());
  TuneCache cache = TuneCache::load(path);
  TuneEntry e;
  e.op = "gemm_rs";
  e.gemm_rs.scatter = GemmRsScatter::kCopyEngine;
  e.gemm_rs.granularity = SignalGranularity::kTileRow;
  e.gemm_rs.reduce_blocks = 4;
  e.gemm_rs.swizzle = 2;
  e.time_us = 6500;
  e.default_us = 6900;
  TuneKey k = key(8192);
  k.op = "gemm_rs";
  cache.put(k, e);
  cache.put(key(8192), {AgGemmConfig{}, 1.0, 2.0, "2026-12-03T00:00:00Z"});
  cache.save();
  const TuneCache back = TuneCache::load(path);
  ASSERT_EQ(back.size(), 2u);
  const auto rs = back.find(k);
  ASSERT_TRUE(rs.has_value());
  EXPECT_EQ(rs->op, "gemm_rs");
  EXPECT_EQ(describe(rs->gemm_rs), describe(e.gemm_rs));
  EXPECT_EQ(rs->gemm_rs.reduce_blocks, 4u);
  EXPECT_EQ(back.find(key(8192))->op, "ag_gemm");
  // An entry of an op this build does not tune (a later build's) is neither applied nor lost:
  // the file keeps it when this build saves.
  std::ofstream(path) << R"({"format": "tilelink-tune-1", "entries": {"k": {"op": "moe", "config": {"x": 7},
      "time_us": 1, "default_us": 1, "date": ""}}})";
  TuneCache mixed = TuneCache::load(path);
  EXPECT_EQ(mixed.size(), 0u);
  mixed.put(k, e);
  mixed.save();
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"moe\""), std::string::npos) << text;
  EXPECT_EQ(TuneCache::load(path).size(), 1u);
  EXPECT_EQ(TuneCache::load(path).find(k)->op, "gemm_rs");
  std::remove(path.c_str());
  EXPECT_TRUE(is_automatic(GemmRsConfig{}));
  GemmRsConfig c;
  c.granularity = SignalGranularity::kRank;
  EXPECT_FALSE(is_automatic(c));
}

TEST(GemmRsTuneSpace, ComputeThenCommunicationRankedByTheModel) {
  const std::vector<GemmRsConfig> compute = gemm_rs_compute_candidates();
  ASSERT_EQ(compute.size(), 5u);
  EXPECT_TRUE(is_automatic(compute.front()));
  std::set<std::string> seen;
  for (const GemmRsConfig& x : compute) {
    EXPECT_FALSE(x.use_tune_cache) << "a candidate must be timed as given";
    EXPECT_TRUE(seen.insert(describe(x)).second) << "duplicate " << describe(x);
  }
  const GemmRsTuneShape world1{1, 132, 8192, 8192, 28672};
  const auto one = gemm_rs_comm_candidates(compute[2], world1, 6);
  ASSERT_EQ(one.size(), 1u) << "world 1 has no communication to tune";
  EXPECT_EQ(one.front().config.swizzle, compute[2].swizzle) << "stage 2 keeps stage 1's winner";

  const GemmRsTuneShape world8{8, 16, 8192, 8192, 3584};
  const auto ranked = gemm_rs_comm_candidates(compute.front(), world8, 6);
  ASSERT_GE(ranked.size(), 6u);
  ASSERT_LE(ranked.size(), 7u);
  bool has_auto = false;
  seen.clear();
  for (size_t i = 0; i < ranked.size(); ++i) {
    const GemmRsConfig& c = ranked[i].config;
    EXPECT_GT(ranked[i].predicted_us, 0.0);
    EXPECT_FALSE(c.scatter == GemmRsScatter::kCopyEngine && c.granularity == SignalGranularity::kTile)
        << "the op refuses the copy engine per tile";
    EXPECT_LE(c.reduce_blocks, 8u);
    EXPECT_TRUE(seen.insert(describe(c)).second) << "duplicate " << describe(c);
    if (i + 1 < 6) EXPECT_LE(ranked[i].predicted_us, ranked[i + 1].predicted_us);
    has_auto = has_auto || is_automatic(c);
  }
  EXPECT_TRUE(has_auto);
  EXPECT_THROW(gemm_rs_comm_candidates(compute.front(), world8, 0), InvalidArgument);
}

TEST(AgGemmTuneSpace, ComputeStageCoversEveryKernelAndSwizzleOnce) {
  const std::vector<std::string> kernels = {"128x256x64_c2x1", "256x128x64_c1x2", "128x256x64_c1x1"};
  const std::vector<AgGemmConfig> c = ag_gemm_compute_candidates(kernels);
  ASSERT_EQ(c.size(), kernels.size() * 5);
  EXPECT_TRUE(is_automatic(c.front()));
  std::set<std::string> seen;
  for (const AgGemmConfig& x : c) {
    EXPECT_FALSE(x.use_tune_cache) << "a candidate must be timed as given";
    EXPECT_TRUE(seen.insert(describe(x)).second) << "duplicate " << describe(x);
  }
}

TEST(AgGemmTuneSpace, CommunicationStageIsRankedByTheModelAndKeepsTheAutomaticOne) {
  const AgGemmConfig base = ag_gemm_compute_candidates(AgGemm::kernel_names()).front();
  const AgGemmTuneShape world1{1, 132, 8192, 28672, 8192};
  const auto one = ag_gemm_comm_candidates(base, world1, 6);
  ASSERT_EQ(one.size(), 1u) << "world 1 has no communication to tune";
  EXPECT_TRUE(is_automatic(one.front().config));

  const AgGemmTuneShape world8{8, 16, 1024, 3584, 8192};
  const auto ranked = ag_gemm_comm_candidates(base, world8, 6);
  ASSERT_GE(ranked.size(), 6u);
  ASSERT_LE(ranked.size(), 7u);
  bool has_auto = false;
  for (size_t i = 0; i < ranked.size(); ++i) {
    EXPECT_GT(ranked[i].predicted_us, 0.0);
    EXPECT_LE(ranked[i].config.comm.comm_rows, world8.m_per_rank);
    if (i + 1 < 6) EXPECT_LE(ranked[i].predicted_us, ranked[i + 1].predicted_us);
    has_auto = has_auto || is_automatic(ranked[i].config);
  }
  EXPECT_TRUE(has_auto);
  EXPECT_THROW(ag_gemm_comm_candidates(base, world8, 0), InvalidArgument);
}

}  // namespace
}  // namespace tilelink::test

namespace tilelink::test {
namespace {

TEST(TuneCache, DefaultPathFollowsTheEnvironment) {
  const char* saved = std::getenv("TILELINK_TUNE_CACHE");
  const std::string keep = saved != nullptr ? saved : "";
  setenv("TILELINK_TUNE_CACHE", "off", 1);
  EXPECT_EQ(TuneCache::default_path(), "") << "off disables the cache";
  setenv("TILELINK_TUNE_CACHE", "/tmp/x/tune.json", 1);
  EXPECT_EQ(TuneCache::default_path(), "/tmp/x/tune.json");
  unsetenv("TILELINK_TUNE_CACHE");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(TuneCache::default_path(), "/tmp/xdg/tilelink/tune.json");
  unsetenv("XDG_CACHE_HOME");
  if (saved != nullptr) setenv("TILELINK_TUNE_CACHE", keep.c_str(), 1);
  EXPECT_EQ(TuneCache::load("").size(), 0u) << "no path: an empty cache";
  EXPECT_THROW(TuneCache::load("").save(), Error);
}

}  // namespace
}  // namespace tilelink::test
