// The tuning cache of `tilelink tune`: the best configuration found per GPU, world, op, shape and
// dtype, in a JSON file. AgGemm and GemmRs apply a cached configuration when the caller leaves
// every knob on automatic (AgGemmConfig{}, GemmRsConfig{}); `tilelink bench` therefore uses it too.
//
// File: $TILELINK_TUNE_CACHE if set ("off" disables the cache), else
// $XDG_CACHE_HOME/tilelink/tune.json, else $HOME/.cache/tilelink/tune.json. A missing file is an
// empty cache; a malformed one is an error naming the file. Entries of ops this build does not
// tune are kept in the file and not applied. (Builds before GEMM+RS entries read every entry as
// AG+GEMM's and refuse a file holding GEMM+RS ones.)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct TuneKey {
  std::string gpu;  // device name
  int sms = 0;      // SMs of the device
  int world = 0;
  bool virtual_ranks = false;
  std::string op;
  uint32_t m = 0, n = 0, k = 0;  // the op's problem (AG+GEMM: rows of C, columns per rank, K;
                                 // GEMM+RS: rows of the output over all ranks, N, K per rank)
  std::string dtype = "bf16";
  std::string str() const;
};

// The key of `op` on (m, n, k) for `world` (device of rank 0).
TuneKey make_tune_key(const World& world, const std::string& op, uint32_t m, uint32_t n, uint32_t k);

struct TuneEntry {
  AgGemmConfig config;    // op "ag_gemm"
  double time_us = 0;     // the tuned config, median per call
  double default_us = 0;  // the default config, same run
  std::string date;       // when tuned (UTC, ISO 8601)
  std::string op = "ag_gemm";  // which configuration is the entry's: `config` or `gemm_rs`
  GemmRsConfig gemm_rs;        // op "gemm_rs"
};

class TuneCache {
 public:
  static std::string default_path();  // "" when disabled
  // Throws InvalidArgument naming the file when it exists but is not a tune cache.
  static TuneCache load(const std::string& path);

  const std::string& path() const { return path_; }
  std::optional<TuneEntry> find(const TuneKey& key) const;
  void put(const TuneKey& key, const TuneEntry& entry);
  // Writes the file (creating its directory); throws Error when it cannot.
  void save() const;
  size_t size() const { return entries_.size(); }

 private:
  std::string path_;
  std::map<std::string, TuneEntry> entries_;
  std::map<std::string, std::string> foreign_;  // entries of ops this build does not tune, as JSON text
};

// Text forms of the configurations (also used by the tool's output).
std::string describe(const AgGemmConfig& c);
std::string describe(const GemmRsConfig& c);
// True when every knob is on automatic (the configuration AgGemmConfig{} / GemmRsConfig{} gives).
bool is_automatic(const AgGemmConfig& c);
bool is_automatic(const GemmRsConfig& c);
// True when two all-gather configurations are the same, field by field.
bool same_comm(const AllGatherConfig& a, const AllGatherConfig& b);

}  // namespace tilelink
