// The tuning cache of `tilelink tune`: the best configuration found per GPU, world, op, shape and
// dtype, in a JSON file. AgGemm, GemmRs, MoeLayer and SpAttention apply a cached configuration
// when the caller leaves every knob on automatic (AgGemmConfig{}, GemmRsConfig{}, MoeLayerConfig{}
// but for the activation, SpAttentionConfig{} but for the layout); `tilelink bench` therefore uses
// it too.
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
#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct TuneKey {
  std::string gpu;  // device name
  int sms = 0;      // SMs of the device
  int world = 0;
  bool virtual_ranks = false;
  std::string op;
  uint32_t m = 0, n = 0, k = 0;  // the op's problem (AG+GEMM: rows of C, columns per rank, K;
                                 // GEMM+RS: rows of the output over all ranks, N, K per rank;
                                 // MoE: tokens over all ranks, hidden, intermediate over all
                                 // ranks; SP attention: tokens over all ranks, q heads, kv heads)
  std::string dtype = "bf16";
  std::string variant;  // what else the op's configuration depends on ("" for the GEMMs)
  std::string str() const;
};

// The key of `op` on (m, n, k) for `world` (device of rank 0).
TuneKey make_tune_key(const World& world, const std::string& op, uint32_t m, uint32_t n, uint32_t k,
                      const std::string& variant = "");
// Each op's key, one definition for the op and the tool: AG+GEMM (m = rows of C, n = columns per
// rank, k), GEMM+RS (m, n, k per rank), the MoE layer (variant: experts, top-k, activation) and SP
// attention (variant: head dim, mask, layout).
TuneKey ag_gemm_tune_key(const World& world, const AgGemmArguments& args);
TuneKey gemm_rs_tune_key(const World& world, const GemmRsArguments& args);
TuneKey moe_tune_key(const World& world, const MoeLayerArguments& args);
TuneKey sp_attention_tune_key(const World& world, const SpAttentionArguments& args);

struct TuneEntry {
  AgGemmConfig config;    // op "ag_gemm"
  double time_us = 0;     // the tuned config, median per call
  double default_us = 0;  // the default config, same run
  std::string date;       // when tuned (UTC, ISO 8601)
  std::string op = "ag_gemm";  // which configuration is the entry's: `config`, `gemm_rs`, `moe`, `sp_attention`
  GemmRsConfig gemm_rs;        // op "gemm_rs"
  MoeLayerConfig moe;          // op "moe" (its activation is the key's)
  SpAttentionConfig sp_attention;  // op "sp_attention" (its layout is the key's)
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

// The cache's entry for `key` when `op` is its op, from the default cache file (path in `*path`);
// nothing when the cache is off, has no such entry, or its file is missing. The ops call it when
// every knob is on automatic, and run the entry's configuration if it passes can_implement.
std::optional<TuneEntry> find_tuned(const TuneKey& key, std::string* path);


// An op's arguments with the cache's configuration (the entry's `field`) in place of an
// all-automatic one, when the cache holds one for `key_of()` and Op::can_implement accepts it;
// `keep(tuned, callers)` copies back what is the problem's, not a knob (the MoE activation, the
// attention's layout). `*from` names the cache file when it applied. Otherwise `a` itself.
template <class Op, class Args, class Config, class KeyOf, class Keep>
Args with_tuned_config(const World& world, const SymmetricHeap& heap, const Args& a, KeyOf&& key_of,
                       Config TuneEntry::*field, Keep&& keep, std::string* from) {
  if (!a.config.use_tune_cache || !is_automatic(a.config)) return a;
  std::string path;
  const std::optional<TuneEntry> entry = find_tuned(key_of(), &path);
  if (!entry) return a;
  Args tuned = a;
  tuned.config = (*entry).*field;
  keep(tuned.config, a.config);
  tuned.config.use_tune_cache = false;
  if (!Op::can_implement(world, heap, tuned).empty()) return a;
  *from = path;
  return tuned;
}

}  // namespace tilelink
