#include "tilelink/tune/tune_cache.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tilelink/core/error.hpp"

namespace tilelink {

using nlohmann::json;

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
      const std::string config = e.at("config").dump();
      const std::string source = "tune cache '" + path + "'";
      if (entry.op == "gemm_rs") {
        from_config_json(config, source, entry.gemm_rs);
      } else if (entry.op == "moe") {
        from_config_json(config, source, entry.moe);
      } else if (entry.op == "sp_attention") {
        from_config_json(config, source, entry.sp_attention);
      } else if (entry.op == "ag_gemm") {
        from_config_json(config, source, entry.config);
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
    const json config = json::parse(e.op == "gemm_rs"        ? to_config_json(e.gemm_rs)
                                    : e.op == "moe"          ? to_config_json(e.moe)
                                    : e.op == "sp_attention" ? to_config_json(e.sp_attention)
                                                             : to_config_json(e.config));
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

}  // namespace tilelink
