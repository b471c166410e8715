#include "tilelink/tune/tune_cache.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tilelink/core/error.hpp"

namespace tilelink {
namespace {

using nlohmann::json;

// The enum `field` of `j` by its name (to_string), one of `values`; else InvalidArgument naming the
// file, the field and what was expected.
template <class E>
E parse_enum(const json& j, const char* field, std::initializer_list<E> values, const std::string& file) {
  const std::string v = j.at(field).get<std::string>();
  std::string expected;
  for (E e : values) {
    if (v == to_string(e)) return e;
    expected += (expected.empty() ? "'" : ", '") + std::string(to_string(e)) + "'";
  }
  throw InvalidArgument("tune cache '" + file + "': field '" + field + "' = '" + v + "': expected one of " + expected);
}

json to_json(const AllGatherConfig& c) {
  return json{{"resource", to_string(c.resource)}, {"method", to_string(c.method)},
              {"path", to_string(c.path)},         {"order", to_string(c.order)},
              {"comm_rows", c.comm_rows},          {"num_blocks", c.num_blocks},
              {"threads", c.threads}};
}

AllGatherConfig comm_from_json(const json& m, const std::string& file) {
  AllGatherConfig c;
  c.resource = parse_enum(m, "resource", {CommResource::kCopyEngine, CommResource::kSm}, file);
  c.method = parse_enum(m, "method", {AgMethod::kPull, AgMethod::kPush}, file);
  c.path = parse_enum(m, "path", {DataPath::kLdSt, DataPath::kBulk}, file);
  c.order = parse_enum(m, "order", {CommOrder::kFullMesh, CommOrder::kRing}, file);
  c.comm_rows = m.at("comm_rows").get<uint32_t>();
  c.num_blocks = m.at("num_blocks").get<uint32_t>();
  c.threads = m.at("threads").get<uint32_t>();
  return c;
}

json to_json(const AgGemmConfig& c) {
  return json{{"kernel", c.kernel}, {"swizzle", c.swizzle}, {"gemm_sms", c.gemm_sms}, {"comm", to_json(c.comm)}};
}

AgGemmConfig config_from_json(const json& j, const std::string& file) {
  AgGemmConfig c;
  c.kernel = j.at("kernel").get<std::string>();
  c.swizzle = j.at("swizzle").get<uint32_t>();
  c.gemm_sms = j.at("gemm_sms").get<uint32_t>();
  c.comm = comm_from_json(j.at("comm"), file);
  return c;
}

json to_json(const MoeLayerConfig& c) {
  const MoeAgGroupGemmConfig& a = c.part1;
  const MoeGemmRsConfig& b = c.part2;
  return json{{"part1",
               {{"kernel", a.kernel},
                {"swizzle", a.swizzle},
                {"gather_blocks", a.gather_blocks},
                {"gemm_sms", a.gemm_sms},
                {"comm", to_json(a.comm)}}},
              {"part2",
               {{"kernel", b.kernel},
                {"swizzle", b.swizzle},
                {"comm_rows", b.comm_rows},
                {"combine_blocks", b.combine_blocks},
                {"gemm_sms", b.gemm_sms},
                {"weight_sweeps", b.weight_sweeps}}}};
}

MoeLayerConfig moe_config_from_json(const json& j, const std::string& file) {
  MoeLayerConfig c;
  const json& a = j.at("part1");
  c.part1.kernel = a.at("kernel").get<std::string>();
  c.part1.swizzle = a.at("swizzle").get<uint32_t>();
  c.part1.gather_blocks = a.at("gather_blocks").get<uint32_t>();
  c.part1.gemm_sms = a.at("gemm_sms").get<uint32_t>();
  c.part1.comm = comm_from_json(a.at("comm"), file);
  const json& b = j.at("part2");
  c.part2.kernel = b.at("kernel").get<std::string>();
  c.part2.swizzle = b.at("swizzle").get<uint32_t>();
  c.part2.comm_rows = b.at("comm_rows").get<uint32_t>();
  c.part2.combine_blocks = b.at("combine_blocks").get<uint32_t>();
  c.part2.gemm_sms = b.at("gemm_sms").get<uint32_t>();
  c.part2.weight_sweeps = b.at("weight_sweeps").get<uint32_t>();
  return c;
}

json to_json(const SpAttentionConfig& c) {
  return json{{"comm", to_json(c.comm)},
              {"local_first", c.local_first},
              {"attention_sms", c.attention_sms},
              {"section_kv_heads", c.section_kv_heads}};
}

SpAttentionConfig sp_attention_config_from_json(const json& j, const std::string& file) {
  SpAttentionConfig c;
  c.comm = comm_from_json(j.at("comm"), file);
  c.local_first = j.at("local_first").get<bool>();
  c.attention_sms = j.at("attention_sms").get<uint32_t>();
  c.section_kv_heads = j.at("section_kv_heads").get<uint32_t>();
  return c;
}

json to_json(const GemmRsConfig& c) {
  return json{{"scatter", to_string(c.scatter)},
              {"granularity", to_string(c.granularity)},
              {"reduce_blocks", c.reduce_blocks},
              {"gemm_sms", c.gemm_sms},
              {"swizzle", c.swizzle}};
}

GemmRsConfig gemm_rs_config_from_json(const json& j, const std::string& file) {
  GemmRsConfig c;
  c.scatter = parse_enum(j, "scatter", {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine},
                         file);
  c.granularity = parse_enum(j, "granularity",
                             {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}, file);
  c.reduce_blocks = j.at("reduce_blocks").get<uint32_t>();
  c.gemm_sms = j.at("gemm_sms").get<uint32_t>();
  c.swizzle = j.at("swizzle").get<uint32_t>();
  return c;
}

}  // namespace

std::string TuneKey::str() const {
  std::ostringstream s;
  s << gpu << " (" << sms << " SMs) / world " << world << (virtual_ranks ? " virtual" : "") << " / " << op << " / "
    << m << "x" << n << "x" << k << " / " << dtype;
  if (!variant.empty()) s << " / " << variant;
  return s.str();
}

TuneKey make_tune_key(const World& world, const std::string& op, uint32_t m, uint32_t n, uint32_t k,
                      const std::string& variant) {
  cudaDeviceProp prop{};
  TL_CUDA_CHECK(cudaGetDeviceProperties(&prop, world.device(0)));
  TuneKey key;
  key.gpu = prop.name;
  key.sms = prop.multiProcessorCount;
  key.world = world.size();
  key.virtual_ranks = world.size() > 1 && world.device(0) == world.device(world.size() - 1);
  key.op = op;
  key.m = m;
  key.n = n;
  key.k = k;
  key.variant = variant;
  return key;
}

TuneKey ag_gemm_tune_key(const World& world, const AgGemmArguments& a) {
  return make_tune_key(world, "ag_gemm", a.m_per_rank * static_cast<uint32_t>(world.size()), a.n, a.k);
}

TuneKey gemm_rs_tune_key(const World& world, const GemmRsArguments& a) {
  return make_tune_key(world, "gemm_rs", a.m, a.n, a.k);
}

TuneKey moe_tune_key(const World& world, const MoeLayerArguments& a) {
  return make_tune_key(world, "moe", a.tokens_per_rank * static_cast<uint32_t>(world.size()), a.hidden,
                       a.intermediate,
                       std::to_string(a.experts) + " experts, top-" + std::to_string(a.topk) + ", " +
                           to_string(a.config.activation));
}

TuneKey sp_attention_tune_key(const World& world, const SpAttentionArguments& a) {
  return make_tune_key(world, "sp_attention", a.seq_per_rank * static_cast<uint32_t>(world.size()), a.q_heads,
                       a.kv_heads,
                       "head dim " + std::to_string(a.head_dim) + ", " + (a.causal ? "causal" : "non-causal") + ", " +
                           to_string(a.config.layout));
}

std::optional<TuneEntry> find_tuned(const TuneKey& key, std::string* path) {
  *path = TuneCache::default_path();
  if (path->empty()) return std::nullopt;
  std::optional<TuneEntry> entry = TuneCache::load(*path).find(key);
  if (!entry || entry->op != key.op) return std::nullopt;
  return entry;
}

std::string TuneCache::default_path() {
  if (const char* env = std::getenv("TILELINK_TUNE_CACHE")) return std::string(env) == "off" ? "" : env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/tilelink/tune.json";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/tilelink/tune.json";
  }
  return "";
}

TuneCache TuneCache::load(const std::string& path) {
  TuneCache cache;
  cache.path_ = path;
  if (path.empty()) return cache;
  std::ifstream in(path);
  if (!in) return cache;  // no file yet: an empty cache
  try {
    const json j = json::parse(in);
    if (j.at("format").get<std::string>() != "tilelink-tune-1") {
      throw InvalidArgument("tune cache '" + path + "': field 'format' = '" + j.at("format").get<std::string>() +
                            "': expected 'tilelink-tune-1'");
    }
    for (const auto& [key, e] : j.at("entries").items()) {
      TuneEntry entry;
      entry.op = e.value("op", std::string("ag_gemm"));  // files before GEMM+RS entries have no op
      if (entry.op == "gemm_rs") {
        entry.gemm_rs = gemm_rs_config_from_json(e.at("config"), path);
      } else if (entry.op == "moe") {
        entry.moe = moe_config_from_json(e.at("config"), path);
      } else if (entry.op == "sp_attention") {
        entry.sp_attention = sp_attention_config_from_json(e.at("config"), path);
      } else if (entry.op == "ag_gemm") {
        entry.config = config_from_json(e.at("config"), path);
      } else {
        // An op a later build tunes: kept in the file (save() writes it back unchanged), never
        // applied here.
        cache.foreign_[key] = e.dump();
        continue;
      }
      entry.time_us = e.at("time_us").get<double>();
      entry.default_us = e.at("default_us").get<double>();
      entry.date = e.at("date").get<std::string>();
      cache.entries_[key] = entry;
    }
  } catch (const json::exception& e) {
    throw InvalidArgument("tune cache '" + path + "' is not a tilelink tune cache: " + e.what());
  }
  return cache;
}

std::optional<TuneEntry> TuneCache::find(const TuneKey& key) const {
  const auto it = entries_.find(key.str());
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuneCache::put(const TuneKey& key, const TuneEntry& entry) { entries_[key.str()] = entry; }

void TuneCache::save() const {
  if (path_.empty()) throw Error("tune cache: no file to write (TILELINK_TUNE_CACHE=off, or no HOME)");
  json j;
  j["format"] = "tilelink-tune-1";
  j["entries"] = json::object();
  for (const auto& [key, e] : foreign_) j["entries"][key] = json::parse(e);
  for (const auto& [key, e] : entries_) {
    const json config = e.op == "gemm_rs"        ? to_json(e.gemm_rs)
                        : e.op == "moe"          ? to_json(e.moe)
                        : e.op == "sp_attention" ? to_json(e.sp_attention)
                                                 : to_json(e.config);
    j["entries"][key] = {{"op", e.op},
                         {"config", config},
                         {"time_us", e.time_us},
                         {"default_us", e.default_us},
                         {"date", e.date}};
  }
  const std::filesystem::path p(path_);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(path_);
  if (!out || !(out << j.dump(2) << "\n")) throw Error("tune cache: cannot write '" + path_ + "'");
}

std::string describe(const AgGemmConfig& c) {
  std::string s = "kernel " + (c.kernel.empty() ? std::string("default") : c.kernel) + ", swizzle " +
                  (c.swizzle == 0 ? std::string("auto") : std::to_string(c.swizzle)) + ", " +
                  to_string(c.comm.resource) + " " + to_string(c.comm.method) + " " + to_string(c.comm.order);
  if (c.comm.resource == CommResource::kSm) {
    s += std::string(" ") + to_string(c.comm.path) + " " +
         (c.comm.num_blocks == 0 ? std::string("auto") : std::to_string(c.comm.num_blocks)) + " CTAs";
  }
  s += ", comm rows " + (c.comm.comm_rows == 0 ? std::string("auto") : std::to_string(c.comm.comm_rows));
  if (c.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(c.gemm_sms);
  return s;
}

std::string describe(const GemmRsConfig& c) {
  auto num = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  std::string s = std::string("scatter ") + to_string(c.scatter) + ", signal per " + to_string(c.granularity) +
                  ", reduction CTAs " + num(c.reduce_blocks) + ", swizzle " + num(c.swizzle);
  if (c.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(c.gemm_sms);
  return s;
}

std::string describe(const MoeLayerConfig& c) {
  auto num = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  auto kernel = [](const std::string& k) { return k.empty() ? std::string("default") : k; };
  const MoeAgGroupGemmConfig& a = c.part1;
  const MoeGemmRsConfig& b = c.part2;
  std::string s = "part 1: kernel " + kernel(a.kernel) + ", swizzle " + num(a.swizzle) + ", " +
                  to_string(a.comm.resource) + " all-gather";
  if (a.comm.resource == CommResource::kSm) s += std::string(" ") + num(a.comm.num_blocks) + " CTAs";
  s += ", comm rows " + num(a.comm.comm_rows) + ", gather CTAs " + num(a.gather_blocks);
  if (a.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(a.gemm_sms);
  s += "; part 2: kernel " + kernel(b.kernel) + ", swizzle " + num(b.swizzle) + ", order " +
       (b.weight_sweeps == MoeGemmRsConfig::kTokenOrder ? std::string("token")
        : b.weight_sweeps == 0                          ? std::string("auto")
                                                        : std::to_string(b.weight_sweeps) + " sweeps") +
       ", comm rows " + num(b.comm_rows) + ", combine CTAs " + num(b.combine_blocks);
  if (b.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(b.gemm_sms);
  return s;
}

std::string describe(const SpAttentionConfig& c) {
  auto num = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  std::string s = "section heads " + num(c.section_kv_heads) + ", " + (c.local_first ? "local first" : "one pass") +
                  ", " + to_string(c.comm.resource) + " all-gather";
  if (c.comm.resource == CommResource::kSm) s += std::string(" ") + num(c.comm.num_blocks) + " CTAs";
  s += ", comm rows " + num(c.comm.comm_rows);
  if (c.attention_sms != 0) s += ", attention SMs " + std::to_string(c.attention_sms);
  return s;
}

bool is_automatic(const MoeLayerConfig& c) {
  const MoeAgGroupGemmConfig a;
  const MoeGemmRsConfig b;
  return c.part1.kernel == a.kernel && c.part1.swizzle == a.swizzle && c.part1.gather_blocks == a.gather_blocks &&
         c.part1.gemm_sms == a.gemm_sms && same_comm(c.part1.comm, a.comm) && c.part2.kernel == b.kernel &&
         c.part2.swizzle == b.swizzle && c.part2.comm_rows == b.comm_rows &&
         c.part2.combine_blocks == b.combine_blocks && c.part2.gemm_sms == b.gemm_sms &&
         c.part2.weight_sweeps == b.weight_sweeps;
}

bool is_automatic(const SpAttentionConfig& c) {
  const SpAttentionConfig d;
  return same_comm(c.comm, d.comm) && c.local_first == d.local_first && c.attention_sms == d.attention_sms &&
         c.section_kv_heads == d.section_kv_heads;
}

bool is_automatic(const GemmRsConfig& c) {
  const GemmRsConfig d;
  return c.scatter == d.scatter && c.granularity == d.granularity && c.reduce_blocks == d.reduce_blocks &&
         c.gemm_sms == d.gemm_sms && c.swizzle == d.swizzle;
}

bool same_comm(const AllGatherConfig& a, const AllGatherConfig& b) {
  return a.resource == b.resource && a.method == b.method && a.path == b.path && a.order == b.order &&
         a.comm_rows == b.comm_rows && a.num_blocks == b.num_blocks && a.threads == b.threads;
}

bool is_automatic(const AgGemmConfig& c) {
  const AgGemmConfig d;
  return c.kernel == d.kernel && c.swizzle == d.swizzle && c.gemm_sms == d.gemm_sms && same_comm(c.comm, d.comm);
}

}  // namespace tilelink
