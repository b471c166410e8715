// The tune cache (file round trip of AG+GEMM, GEMM+RS, MoE and SP attention entries, each op's
// configuration as data; files of earlier builds; refusals naming the file and field) and the
// search spaces of `tilelink tune` (the first stage covers
// every compute variant once; the last is ranked by the plan model and always keeps the automatic
// communication).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <unistd.h>

#include "tilelink/core/error.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/tune/ag_gemm_tune.hpp"
#include "tilelink/tune/gemm_rs_tune.hpp"
#include "tilelink/tune/moe_tune.hpp"
#include "tilelink/tune/sp_attention_tune.hpp"

namespace tilelink::test {
namespace {

std::string temp_path(const char* name) {
  return std::string(::testing::TempDir()) + "tilelink_" + std::to_string(::getpid()) + "_" + name;
}

// The configuration an entry holds, read back as its op reads it.
template <class Config>
Config config_of(const TuneCache::Entry& e) {
  Config c;
  from_config_json(e.config, "test entry", c);
  return c;
}

template <class Config>
TuneCache::Entry entry_of(const std::string& op, const Config& c, double time_us = 1, double default_us = 2) {
  return {op, to_config_json(c), time_us, default_us, "2026-12-02T00:00:00Z"};
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

// The transport is part of the machine: a put-with-signal world does not reuse a load/store
// world's entry, and keys written before the field existed read as load/store.
TEST(TuneCache, TheTransportIsPartOfTheKey) {
  TuneKey put = key(4096);
  put.virtual_ranks = false;
  TuneKey load_store = put;
  put.transport = "put_signal";
  EXPECT_NE(put.str(), load_store.str());
  EXPECT_NE(put.str().find("world 8 put_signal / ag_gemm"), std::string::npos) << put.str();
  EXPECT_EQ(load_store.str().find("put_signal"), std::string::npos) << load_store.str();
  const std::string path = temp_path("tune_transport.json");
  std::remove(path.c_str());
  TuneCache cache = TuneCache::load(path);
  cache.put(load_store, entry_of("ag_gemm", AgGemmConfig{}));
  EXPECT_TRUE(cache.find(load_store).has_value());
  EXPECT_FALSE(cache.find(put).has_value());
  std::remove(path.c_str());
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
  a.method = OpMethod::kDecomposed;
  AgGemmConfig b;
  b.comm.comm_rows = 2048;
  empty.put(key(8192), entry_of("ag_gemm", a, 1234.5, 1500.25));
  empty.put(key(4096), entry_of("ag_gemm", b, 10.0, 11.0));
  empty.save();

  const TuneCache back = TuneCache::load(path);
  ASSERT_EQ(back.size(), 2u);
  const auto e = back.find(key(8192));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->op, "ag_gemm");
  const AgGemmConfig c = config_of<AgGemmConfig>(*e);
  EXPECT_EQ(describe(c), describe(a));
  EXPECT_EQ(c.comm.num_blocks, 6u);
  EXPECT_EQ(c.comm.threads, 512u);
  EXPECT_EQ(c.method, OpMethod::kDecomposed);
  EXPECT_EQ(config_of<AgGemmConfig>(*back.find(key(4096))).method, OpMethod::kAuto);
  EXPECT_DOUBLE_EQ(e->time_us, 1234.5);
  EXPECT_DOUBLE_EQ(e->default_us, 1500.25);
  EXPECT_EQ(config_of<AgGemmConfig>(*back.find(key(4096))).comm.comm_rows, 2048u);
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
  std::ofstream(path) << R"({"format": "tilelink-tune-1", "entries": {"k": {"config": 7, "time_us": 1,
      "default_us": 1, "date": ""}}})";
  EXPECT_THROW(TuneCache::load(path), InvalidArgument) << "a configuration that is not an object";
  // The cache keeps an op's configuration as data; the op refuses a field it does not know when
  // it reads the entry, naming the file and the field.
  std::ofstream(path) << R"({"format": "tilelink-tune-1", "entries": {")" << key(8192).str()
                      << R"(": {"config": {"kernel": "", "swizzle": 0, "gemm_sms": 0, "comm": {"resource": "gpu",
      "method": "pull", "path": "ldst", "order": "mesh", "comm_rows": 0, "num_blocks": 0, "threads": 512}},
      "time_us": 1, "default_us": 1, "date": ""}}})";
  const std::optional<TuneCache::Entry> bad = TuneCache::load(path).find(key(8192));
  ASSERT_TRUE(bad.has_value());
  try {
    AgGemmConfig c;
    from_config_json(bad->config, "tune cache 'f'", c);
    FAIL() << "an unknown resource was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tune cache 'f': field 'resource' = 'gpu': expected one of 'ce', 'sm'"),
              std::string::npos)
        << e.what();
  }
  try {
    GemmRsConfig c;
    from_config_json(R"({"scatter": "pull"})", "tune cache 'f'", c);
    FAIL() << "a configuration without its fields was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tune cache 'f': not a GEMM+RS configuration"), std::string::npos)
        << e.what();
  }
  TuneCache writer = TuneCache::load("");
  EXPECT_THROW(writer.put(key(8192), {"ag_gemm", "not json", 1, 1, ""}), InvalidArgument);
  std::remove(path.c_str());
}

// Files written by earlier builds load and apply: the oldest had no "op" (every entry AG+GEMM's),
// later ones named it; the fields of each configuration are the same.
TEST(TuneCache, ReadsTheFilesOfEarlierBuilds) {
  const std::string path = temp_path("old.json");
  TuneKey rs_key = key(8192);
  rs_key.op = "gemm_rs";
  std::ofstream(path) << R"({"format": "tilelink-tune-1", "entries": {")" << key(4096).str()
                      << R"(": {"config": {"comm": {"comm_rows": 512, "method": "push", "num_blocks": 6, "order": "ring",
      "path": "bulk", "resource": "sm", "threads": 512}, "gemm_sms": 0, "kernel": "256x128x64_c1x2", "swizzle": 4},
      "date": "2026-12-02T00:00:00Z", "default_us": 11.0, "time_us": 10.0}, ")"
                      << rs_key.str() << R"(": {"config": {"gemm_sms": 0, "granularity": "row",
      "reduce_blocks": 4, "scatter": "ce", "swizzle": 2}, "date": "2026-12-03T00:00:00Z", "default_us": 6900.0,
      "op": "gemm_rs", "time_us": 6500.0}}})";
  const TuneCache cache = TuneCache::load(path);
  ASSERT_EQ(cache.size(), 2u);
  const std::optional<TuneCache::Entry> ag = cache.find(key(4096));
  ASSERT_TRUE(ag.has_value());
  EXPECT_EQ(ag->op, "ag_gemm");
  EXPECT_EQ(describe(config_of<AgGemmConfig>(*ag)),
            "kernel 256x128x64_c1x2, swizzle 4, sm push ring bulk 6 CTAs, comm rows 512");
  const std::optional<TuneCache::Entry> rs = cache.find(rs_key);
  ASSERT_TRUE(rs.has_value());
  EXPECT_EQ(describe(config_of<GemmRsConfig>(*rs)), "scatter ce, signal per row, reduction CTAs 4, swizzle 2");
  EXPECT_EQ(config_of<GemmRsConfig>(*rs).push_notify, GemmRsPushNotify::kDeferred) << "absent: the default";
  EXPECT_EQ(config_of<GemmRsConfig>(*rs).kernel, "") << "absent: the default";
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
  c = {};
  c.method = OpMethod::kNonOverlapped;
  EXPECT_TRUE(is_automatic(c)) << "a chosen method keeps the cache's other knobs (AgGemm keeps the method)";
}

TEST(TuneCache, KeepsGemmRsEntriesApartFromAgGemmOnes) {
  const std::string path = temp_path("tune_rs.json");
  std::remove(path.c_str());
  TuneCache cache = TuneCache::load(path);
  GemmRsConfig rs_config;
  rs_config.scatter = GemmRsScatter::kCopyEngine;
  rs_config.granularity = SignalGranularity::kTileRow;
  rs_config.reduce_blocks = 4;
  rs_config.swizzle = 2;
  rs_config.push_notify = GemmRsPushNotify::kImmediate;
  const TuneCache::Entry e = entry_of("gemm_rs", rs_config, 6500, 6900);
  TuneKey k = key(8192);
  k.op = "gemm_rs";
  cache.put(k, e);
  cache.put(key(8192), entry_of("ag_gemm", AgGemmConfig{}));
  cache.save();
  const TuneCache back = TuneCache::load(path);
  ASSERT_EQ(back.size(), 2u);
  const auto rs = back.find(k);
  ASSERT_TRUE(rs.has_value());
  EXPECT_EQ(rs->op, "gemm_rs");
  EXPECT_EQ(describe(config_of<GemmRsConfig>(*rs)), describe(rs_config));
  EXPECT_EQ(describe(rs_config), "scatter ce, signal per row, reduction CTAs 4, swizzle 2, push notify immediate");
  EXPECT_EQ(config_of<GemmRsConfig>(*rs).reduce_blocks, 4u);
  EXPECT_EQ(config_of<GemmRsConfig>(*rs).push_notify, GemmRsPushNotify::kImmediate);
  EXPECT_EQ(config_of<GemmRsConfig>(*rs).engine, GemmRsEngine::kAuto);
  EXPECT_DOUBLE_EQ(rs->default_us, 6900);
  // The engine round-trips; a configured engine is a knob (the cache then does not apply).
  GemmRsConfig small;
  small.engine = GemmRsEngine::kSmallM;
  EXPECT_FALSE(is_automatic(small));
  GemmRsConfig small_back;
  from_config_json(to_config_json(small), "test", small_back);
  EXPECT_EQ(small_back.engine, GemmRsEngine::kSmallM);
  EXPECT_EQ(describe(small), "scatter auto, signal per tile, reduction CTAs auto, swizzle auto, engine small_m");
  // So does a kernel by name.
  GemmRsConfig named;
  named.kernel = "128x128x64_c2x1";
  EXPECT_FALSE(is_automatic(named));
  GemmRsConfig named_back;
  from_config_json(to_config_json(named), "test", named_back);
  EXPECT_EQ(named_back.kernel, "128x128x64_c2x1");
  EXPECT_EQ(describe(named), "scatter auto, signal per tile, reduction CTAs auto, swizzle auto, kernel 128x128x64_c2x1");
  try {
    GemmRsConfig bad;
    from_config_json(R"({"scatter": "pull", "granularity": "tile", "reduce_blocks": 0, "gemm_sms": 0, "swizzle": 0,
                         "engine": "tiny"})",
                     "tune cache 'f'", bad);
    FAIL() << "an unknown engine was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("field 'engine'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(back.find(key(8192))->op, "ag_gemm");
  // The cache knows no op: an entry of an op this build does not tune (a later build's) is kept
  // as it is, and written back when this build saves.
  std::ofstream(path) << R"({"format": "tilelink-tune-1", "entries": {"k": {"op": "expert_parallel", "config": {"x": 7},
      "time_us": 1, "default_us": 1, "date": ""}}})";
  TuneCache mixed = TuneCache::load(path);
  EXPECT_EQ(mixed.size(), 1u);
  mixed.put(k, e);
  mixed.save();
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"expert_parallel\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"x\": 7"), std::string::npos) << text;
  EXPECT_EQ(TuneCache::load(path).size(), 2u);
  EXPECT_EQ(TuneCache::load(path).find(k)->op, "gemm_rs");
  std::remove(path.c_str());
  EXPECT_TRUE(is_automatic(GemmRsConfig{}));
  GemmRsConfig c;
  c.granularity = SignalGranularity::kRank;
  EXPECT_FALSE(is_automatic(c));
  c = {};
  c.push_notify = GemmRsPushNotify::kImmediate;
  EXPECT_FALSE(is_automatic(c));
}

TEST(GemmRsTuneSpace, ComputeThenCommunicationRankedByTheModel) {
  const std::vector<GemmRsConfig> compute = gemm_rs_compute_candidates();
  ASSERT_EQ(compute.size(), 10u) << "the swizzles, the fused, non-overlapped and decomposed methods, the two engines";
  EXPECT_TRUE(is_automatic(compute.front()));
  EXPECT_EQ(compute[5].method, OpMethod::kFused);
  EXPECT_EQ(compute[6].method, OpMethod::kNonOverlapped);
  EXPECT_EQ(compute[7].method, OpMethod::kDecomposed);
  EXPECT_EQ(compute[8].engine, GemmRsEngine::kOwnerTiles);
  EXPECT_EQ(compute[9].engine, GemmRsEngine::kSmallM);
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
  ASSERT_EQ(c.size(), kernels.size() * 5 + 3) << "every kernel x swizzle, and the three methods";
  EXPECT_TRUE(is_automatic(c.front()));
  EXPECT_EQ(c.front().method, OpMethod::kAuto);
  std::set<OpMethod> methods;
  for (const AgGemmConfig& x : c) methods.insert(x.method);
  EXPECT_EQ(methods, (std::set<OpMethod>{OpMethod::kAuto, OpMethod::kFused, OpMethod::kDecomposed,
                                          OpMethod::kNonOverlapped}));
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

TEST(TuneCache, RoundTripsMoeAndSpAttentionEntriesUnderTheirVariants) {
  const std::string path = temp_path("tune_layers.json");
  std::remove(path.c_str());
  TuneCache cache = TuneCache::load(path);
  MoeLayerConfig moe;
  moe.part1.kernel = "128x128x64_c1x2";
  moe.part1.swizzle = 2;
  moe.part1.gather_blocks = 3;
  moe.part1.comm = {CommResource::kSm, AgMethod::kPush, DataPath::kBulk, CommOrder::kRing, 256, 4, 512};
  moe.part2.weight_sweeps = MoeGemmRsConfig::kTokenOrder;
  moe.part2.comm_rows = 32;
  moe.part2.combine_blocks = 6;
  moe.part2.method = OpMethod::kNonOverlapped;
  moe.part2.combine = MoeCombine::kBlocks;
  TuneKey moe_key = key(8192);
  moe_key.op = "moe";
  moe_key.variant = "8 experts, top-2, swiglu";
  cache.put(moe_key, entry_of("moe", moe, 900, 1000));
  SpAttentionConfig attn;
  attn.comm.comm_rows = 1024;
  attn.local_first = true;
  attn.section_kv_heads = 2;
  attn.attention_sms = 120;
  attn.method = OpMethod::kDecomposed;
  TuneKey attn_key = key(32768);
  attn_key.op = "sp_attention";
  attn_key.variant = "head dim 128, causal, zigzag";
  cache.put(attn_key, entry_of("sp_attention", attn));
  cache.save();

  const TuneCache back = TuneCache::load(path);
  ASSERT_EQ(back.size(), 2u);
  const auto m = back.find(moe_key);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->op, "moe");
  const MoeLayerConfig m_config = config_of<MoeLayerConfig>(*m);
  EXPECT_EQ(describe(m_config), describe(moe));
  EXPECT_EQ(m_config.part1.comm.path, DataPath::kBulk);
  EXPECT_EQ(m_config.part2.weight_sweeps, MoeGemmRsConfig::kTokenOrder);
  EXPECT_EQ(m_config.part1.method, OpMethod::kAuto);
  EXPECT_EQ(m_config.part2.method, OpMethod::kNonOverlapped);
  EXPECT_EQ(m_config.part2.combine, MoeCombine::kBlocks);
  EXPECT_DOUBLE_EQ(m->time_us, 900);
  const auto a = back.find(attn_key);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(describe(config_of<SpAttentionConfig>(*a)), describe(attn));
  EXPECT_EQ(config_of<SpAttentionConfig>(*a).method, OpMethod::kDecomposed);
  EXPECT_EQ(config_of<SpAttentionConfig>(*a).attention_sms, 120u);
  TuneKey other = attn_key;
  other.variant = "head dim 128, causal, contiguous";
  EXPECT_FALSE(back.find(other).has_value()) << "the layout is part of the key";
  EXPECT_NE(attn_key.str().find("zigzag"), std::string::npos) << attn_key.str();
  EXPECT_EQ(key(8192).str().find(" / zigzag"), std::string::npos) << "the GEMMs' keys have no variant";
  std::remove(path.c_str());
}

TEST(TuneCache, TheProblemsActivationAndLayoutAreNotKnobs) {
  MoeLayerConfig m;
  EXPECT_TRUE(is_automatic(m));
  m.activation = MlpActivation::kGelu;
  m.use_tune_cache = false;
  EXPECT_TRUE(is_automatic(m));
  m.part2.combine_blocks = 2;
  EXPECT_FALSE(is_automatic(m));
  m = {};
  m.part2.combine = MoeCombine::kEpilogue;
  EXPECT_FALSE(is_automatic(m));
  m = {};
  m.part1.comm.resource = CommResource::kSm;
  EXPECT_FALSE(is_automatic(m));
  SpAttentionConfig s;
  s.layout = SeqLayout::kZigZag;
  EXPECT_TRUE(is_automatic(s));
  s.local_first = true;
  EXPECT_FALSE(is_automatic(s));
  s = {};
  s.section_kv_heads = 1;
  EXPECT_FALSE(is_automatic(s));
}

TEST(MoeTuneSpace, KernelPairsThenOrdersThenRankedCommunication) {
  // Two compiled 128-row kernels and a hypothetical 64-row one: pairs only of one tile height.
  const std::vector<std::string> kernels{"128x256x64_c1x2", "128x128x64_c1x2", "64x128x64_c1x2"};
  const std::vector<MoeLayerConfig> stage1 = moe_kernel_candidates(kernels);
  // 2 x 2 of 128 rows, 1 of 64 rows, the three non-fused method pairs, the combine both ways.
  ASSERT_EQ(stage1.size(), 10u);
  EXPECT_EQ(stage1[7].part1.method, OpMethod::kNonOverlapped);
  EXPECT_EQ(stage1[7].part2.method, OpMethod::kNonOverlapped);
  EXPECT_EQ(stage1[8].part2.combine, MoeCombine::kEpilogue);
  EXPECT_EQ(stage1[8].part2.method, OpMethod::kAuto);
  EXPECT_EQ(stage1[9].part2.combine, MoeCombine::kBlocks);
  EXPECT_TRUE(is_automatic(stage1.front()));
  std::set<std::string> seen;
  for (const MoeLayerConfig& c : stage1) {
    EXPECT_FALSE(c.use_tune_cache) << "a candidate must be timed as given";
    EXPECT_TRUE(seen.insert(describe(c)).second) << "duplicate " << describe(c);
    EXPECT_EQ(c.part1.kernel.substr(0, 2) == "64", c.part2.kernel.substr(0, 2) == "64") << describe(c);
  }
  EXPECT_THROW(moe_kernel_candidates({}), InvalidArgument);

  MoeLayerConfig base = stage1[2];
  const std::vector<MoeLayerConfig> stage2 = moe_order_candidates(base);
  EXPECT_EQ(stage2.size(), 44u);  // 3 part-1 bands x 3 part-2 bands x 5 orders, less the base
  seen.clear();
  for (const MoeLayerConfig& c : stage2) {
    EXPECT_TRUE(seen.insert(describe(c)).second) << "duplicate " << describe(c);
    EXPECT_NE(describe(c), describe(base)) << "the base was timed already";
    EXPECT_EQ(c.part1.kernel, base.part1.kernel);
    EXPECT_EQ(c.part2.kernel, base.part2.kernel);
  }

  MoeTuneShape shape;  // Mixtral-8x7B at world 8, 16 SMs a rank
  shape.kernels = {"128x256x64_c1x2", "128x128x64_c1x2"};
  base = stage2[3];
  const std::vector<RankedMoeConfig> ranked = moe_comm_candidates(base, shape, 6);
  ASSERT_GE(ranked.size(), 6u);
  ASSERT_LE(ranked.size(), 7u);
  bool has_auto = false;
  seen.clear();
  for (size_t i = 0; i < ranked.size(); ++i) {
    const MoeLayerConfig& c = ranked[i].config;
    EXPECT_GT(ranked[i].predicted_us, 0.0);
    if (i + 1 < 6) EXPECT_LE(ranked[i].predicted_us, ranked[i + 1].predicted_us);
    EXPECT_TRUE(seen.insert(describe(c)).second) << "duplicate " << describe(c);
    EXPECT_EQ(c.part2.weight_sweeps, base.part2.weight_sweeps) << "stage 3 keeps stage 2's winner";
    EXPECT_EQ(c.part1.swizzle, base.part1.swizzle);
    EXPECT_LE((c.part2.comm_rows == 0 ? 64 : c.part2.comm_rows) * shape.problem.topk, 4096u);
    EXPECT_LE(c.part1.gather_blocks, 4u) << "at most a quarter of the rank's SMs";
    EXPECT_LE(c.part2.combine_blocks, 4u);
    has_auto = has_auto || (c.part1.comm.resource == CommResource::kCopyEngine && c.part1.comm.comm_rows == 0 &&
                            c.part1.gather_blocks == 0 && c.part2.comm_rows == 0 && c.part2.combine_blocks == 0);
  }
  EXPECT_TRUE(has_auto) << "the automatic communication is always timed";

  shape.problem.world = 1;  // no peers: the all-gather stays automatic
  shape.sm_budget = 132;
  for (const RankedMoeConfig& r : moe_comm_candidates(base, shape, 40)) {
    EXPECT_EQ(r.config.part1.comm.comm_rows, 0u) << describe(r.config);
    EXPECT_EQ(r.config.part1.comm.resource, CommResource::kCopyEngine);
  }
}

TEST(SpAttentionTuneSpace, SectionsThenRankedAllGatherAndLocalPass) {
  const std::vector<SpAttentionConfig> stage1 = sp_attention_compute_candidates(8, SeqLayout::kZigZag);
  ASSERT_EQ(stage1.size(), 8u);  // automatic, 1, 2, 4, 8, and the three methods
  EXPECT_TRUE(is_automatic(stage1.front()));
  std::set<std::string> seen;
  for (const SpAttentionConfig& c : stage1) {
    EXPECT_FALSE(c.use_tune_cache);
    EXPECT_EQ(c.layout, SeqLayout::kZigZag) << "the layout is the problem's";
    EXPECT_TRUE(c.section_kv_heads == 0 || 8 % c.section_kv_heads == 0);
    EXPECT_TRUE(seen.insert(describe(c)).second) << "duplicate " << describe(c);
  }
  EXPECT_EQ(sp_attention_compute_candidates(6, SeqLayout::kContiguous).size(), 8u);  // automatic, 1, 2, 3, 6, methods
  EXPECT_EQ(stage1[5].method, OpMethod::kFused);
  EXPECT_EQ(stage1[6].method, OpMethod::kDecomposed);
  EXPECT_EQ(stage1[7].method, OpMethod::kNonOverlapped);

  SpAttentionTuneShape shape;
  shape.problem.world = 1;
  shape.sm_budget = 132;
  const auto one = sp_attention_comm_candidates(stage1[2], shape, 6);
  ASSERT_EQ(one.size(), 1u) << "world 1 has nothing to gather";
  EXPECT_EQ(one.front().config.section_kv_heads, stage1[2].section_kv_heads);
  EXPECT_FALSE(one.front().config.local_first);

  shape.problem.world = 8;
  shape.sm_budget = 16;
  shape.problem.seq = 8192;  // 1024 tokens a rank: no chunk may be longer
  shape.layout = SeqLayout::kZigZag;
  const auto ranked = sp_attention_comm_candidates(stage1[2], shape, 40);
  ASSERT_GT(ranked.size(), 6u);
  bool has_auto = false, has_local = false, has_sm = false;
  seen.clear();
  for (size_t i = 0; i < ranked.size(); ++i) {
    const SpAttentionConfig& c = ranked[i].config;
    EXPECT_GT(ranked[i].predicted_us, 0.0);
    EXPECT_TRUE(seen.insert(describe(c)).second) << "duplicate " << describe(c);
    EXPECT_LE(c.comm.comm_rows, 1024u);
    EXPECT_EQ(c.comm.comm_rows % 128, 0u);
    EXPECT_EQ(c.section_kv_heads, stage1[2].section_kv_heads) << "stage 2 keeps stage 1's winner";
    EXPECT_EQ(c.layout, SeqLayout::kZigZag);
    has_auto = has_auto || (is_automatic(c) || (c.comm.comm_rows == 0 && !c.local_first &&
                                                c.comm.resource == CommResource::kCopyEngine));
    has_local = has_local || c.local_first;
    has_sm = has_sm || c.comm.resource == CommResource::kSm;
  }
  EXPECT_TRUE(has_auto && has_local && has_sm);
  for (size_t top : {1u, 3u}) {
    const auto few = sp_attention_comm_candidates(stage1[0], shape, top);
    EXPECT_LE(few.size(), top + 1);
    for (size_t i = 0; i + 1 < std::min(few.size(), top); ++i) EXPECT_LE(few[i].predicted_us, few[i + 1].predicted_us);
    // Cut to `top`, the automatic schedule is still timed (appended when it did not rank).
    EXPECT_TRUE(std::any_of(few.begin(), few.end(), [](const RankedSpAttentionConfig& r) {
      return r.config.comm.resource == CommResource::kCopyEngine && r.config.comm.comm_rows == 0 && !r.config.local_first;
    }));
  }
}

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
