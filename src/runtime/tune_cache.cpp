#include "tilelink/runtime/tune_cache.hpp"

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
  s << gpu << " (" << sms << " SMs) / world " << world << (virtual_ranks ? " virtual" : "")
    << (transport.empty() ? "" : " " + transport) << " / " << op << " / " << m << "x" << n << "x" << k << " / "
    << dtype;
  if (!variant.empty()) s << " / " << variant;
  return s.str();
}

TuneKey make_tune_key(const World& world, const std::string& op, uint32_t m, uint32_t n, uint32_t k,
                      const std::string& variant) {
  cudaDeviceProp prop{};
  TL_CUDA_CHECK(cudaGetDeviceProperties(&prop, world.device(world.local_ranks().front())));
  TuneKey key;
  key.gpu = prop.name;
  key.sms = prop.multiProcessorCount;
  key.world = world.size();
  key.virtual_ranks = world.size() > 1 && world.mode() == WorldMode::kVirtual;
  key.transport = world.transport() == Transport::kPutSignal ? "put_signal" : "";
  key.op = op;
  key.m = m;
  key.n = n;
  key.k = k;
  key.variant = variant;
  return key;
}

std::optional<TuneCache::Entry> find_tuned(const TuneKey& key, std::string* path) {
  *path = TuneCache::default_path();
  if (path->empty()) return std::nullopt;
  std::optional<TuneCache::Entry> entry = TuneCache::load(*path).find(key);
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
      Entry entry;
      entry.op = e.value("op", std::string("ag_gemm"));  // files before GEMM+RS entries have no op
      const json& config = e.at("config");
      if (!config.is_object()) {
        throw InvalidArgument("tune cache '" + path + "': entry '" + key + "': field 'config' is not an object");
      }
      entry.config = config.dump();
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

std::optional<TuneCache::Entry> TuneCache::find(const TuneKey& key) const {
  const auto it = entries_.find(key.str());
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuneCache::put(const TuneKey& key, const Entry& entry) {
  const json config = json::parse(entry.config, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    throw InvalidArgument("TuneCache::put: entry '" + key.str() + "': argument 'config' = '" + entry.config +
                          "': expected a JSON object (the op's to_config_json)");
  }
  entries_[key.str()] = entry;
}

void TuneCache::save() const {
  if (path_.empty()) throw Error("tune cache: no file to write (TILELINK_TUNE_CACHE=off, or no HOME)");
  json j;
  j["format"] = "tilelink-tune-1";
  j["entries"] = json::object();
  for (const auto& [key, e] : entries_) {
    j["entries"][key] = {{"op", e.op},
                         {"config", json::parse(e.config)},
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
