// The typed tune-cache entry of earlier builds (one field per tuned op), for callers that still
// fill one by hand: the ops' tune-cache tests on the GPU. The cache stores an op's configuration as
// data (runtime/tune_cache.hpp: TuneCache::Entry holds the op's to_config_json); a TuneEntry
// converts to that. New code writes TuneCache::Entry{op, to_config_json(config), ...} itself;
// remove this header once nothing includes it.
#pragma once

#include <string>

#include "tilelink/ops/ag_gemm/ag_gemm_config.hpp"
#include "tilelink/ops/attention/sp_attention_config.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"
#include "tilelink/ops/moe/moe_config.hpp"
#include "tilelink/runtime/tune_cache.hpp"

namespace tilelink {

struct TuneEntry {
  AgGemmConfig config;  // op "ag_gemm"
  double time_us = 0;
  double default_us = 0;
  std::string date;
  std::string op = "ag_gemm";      // which field is the entry's configuration
  GemmRsConfig gemm_rs;            // op "gemm_rs"
  MoeLayerConfig moe;              // op "moe"
  SpAttentionConfig sp_attention;  // op "sp_attention"

  // The entry as the cache stores it: the configuration `op` names, as data.
  operator TuneCache::Entry() const {
    const std::string json = op == "gemm_rs"        ? to_config_json(gemm_rs)
                             : op == "moe"          ? to_config_json(moe)
                             : op == "sp_attention" ? to_config_json(sp_attention)
                                                    : to_config_json(config);
    return {op, json, time_us, default_us, date};
  }
};

}  // namespace tilelink
