// The tuning cache of `tilelink tune`: the best configuration found per GPU, world, op, shape and
// dtype, in a JSON file. The cache stores an op's configuration as data -- a JSON object the op
// writes and reads back itself (to_config_json / from_config_json in ops/<op>/<op>_config.hpp) --
// and knows no op. AgGemm, GemmRs, MoeLayer and SpAttention apply their entry when the caller
// leaves every knob on automatic (src/ops/common/tuned_config.hpp); `tilelink bench` therefore
// uses it too.
//
// File: $TILELINK_TUNE_CACHE if set ("off" disables the cache), else
// $XDG_CACHE_HOME/tilelink/tune.json, else $HOME/.cache/tilelink/tune.json. A missing file is an
// empty cache; a file that is not a cache is an error naming the file; an entry's configuration
// is checked by its op when the op applies it. Every entry is kept when the file is written again,
// whichever op it is for. (Files written before entries named their op hold AG+GEMM entries.)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct TuneKey {
  std::string gpu;  // device name
  int sms = 0;      // SMs of the device
  int world = 0;
  bool virtual_ranks = false;
  // How peers are reached (WorldOptions::transport): "" load/store through peer pointers (keys
  // written before the field existed), "put_signal" NVSHMEM put-with-signal -- another machine
  // for the tuner: the copies' costs and the paths an op may take differ.
  std::string transport;
  std::string op;
  uint32_t m = 0, n = 0, k = 0;  // the op's problem (AG+GEMM: rows of C, columns per rank, K;
                                 // GEMM+RS: rows of the output over all ranks, N, K per rank;
                                 // MoE: tokens over all ranks, hidden, intermediate over all
                                 // ranks; SP attention: tokens over all ranks, q heads, kv heads)
  std::string dtype = "bf16";
  std::string variant;  // what else the op's configuration depends on ("" for the GEMMs)
  std::string str() const;
};

// The key of `op` on (m, n, k) for `world` (device of rank 0). Each op's own key function
// (ag_gemm_tune_key, ... next to the op) says what its m, n, k and variant are.
TuneKey make_tune_key(const World& world, const std::string& op, uint32_t m, uint32_t n, uint32_t k,
                      const std::string& variant = "");

class TuneCache {
 public:
  struct Entry {
    std::string op;         // the op whose configuration `config` is ("ag_gemm", "gemm_rs", "moe", ...)
    std::string config;     // that configuration: a JSON object (text), the op's to_config_json
    double time_us = 0;     // the tuned configuration, median per call
    double default_us = 0;  // the automatic configuration, same run
    std::string date;       // when tuned (UTC, ISO 8601)
  };

  static std::string default_path();  // "" when disabled
  // Throws InvalidArgument naming the file when it exists but is not a tune cache.
  static TuneCache load(const std::string& path);

  const std::string& path() const { return path_; }
  std::optional<Entry> find(const TuneKey& key) const;
  // Throws InvalidArgument when entry.config is not a JSON object.
  void put(const TuneKey& key, const Entry& entry);
  // Writes the file (creating its directory); throws Error when it cannot.
  void save() const;
  size_t size() const { return entries_.size(); }

 private:
  std::string path_;
  std::map<std::string, Entry> entries_;
};

// The entry for `key`, if it is an entry of key.op, from the default cache file (path in
// `*path`); nothing when the cache is off, has no such entry, or its file is missing.
std::optional<TuneCache::Entry> find_tuned(const TuneKey& key, std::string* path);

}  // namespace tilelink
