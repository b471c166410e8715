// AG+GEMM's configuration: the knobs of AgGemm (ag_gemm.hpp), their text form, and the JSON form
// in which the tune cache stores them (runtime/tune_cache.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/ops/common/op_method.hpp"

namespace tilelink {

struct AgGemmConfig {
  // The all-gather half. Its comm_rows (rows per communication tile and signal) is independent
  // of the GEMM's tiles; 0 = automatic: 128 rows on SMs, and on the copy engine the fewest rows
  // (a multiple of 128) that make a tile of at least 8 MiB -- each copy-engine tile costs a copy
  // and a memop of host enqueue and ~5 µs of fixed time. With CommResource::kSm and
  // num_blocks = 0 the op takes max(1, sm_budget / 8) blocks per rank.
  AllGatherConfig comm = kAutomaticAllGather;
  // CTAs of the persistent GEMM per rank; 0 = automatic: the rank's SM budget, minus the SM
  // all-gather's blocks, minus 2 SMs of slack when world > 1 (measured on the H200: with every SM
  // of the budget taken, the all-gather's CTAs and copies wait for SMs behind the spinning GEMM
  // and the op serializes). Rounded down to whole clusters.
  uint32_t gemm_sms = 0;
  // Rasterization swizzle (1, 2, 4 or 8): the scheduler walks bands of `swizzle` cluster rows of
  // tiles column by column, so that concurrent tiles share rows of A and columns of B in L2 --
  // TileLink's band (banded_cell), which adds no tile where N's tile count is not a multiple of
  // the swizzle, as CUTLASS's own swizzle would.
  // 0 = automatic: the widest band that stays inside one rank's shard (a band never waits for
  // two all-gather steps) and whose rows of A fit in the rank's share of L2 (virtual ranks share
  // one L2).
  uint32_t swizzle = 0;
  // Kernel configuration by name (see AgGemm::kernel_names()); "" = the default.
  std::string kernel;
  // How a call runs (op_method.hpp): fused (the all-gather under the waiting GEMM), decomposed (a
  // plain GEMM per shard once it has landed, on the copy engine's or SM blocks' all-gather), or
  // non-overlapped (the whole all-gather, then the plain GEMM); auto = the tune cache's measured
  // winner, else ag_gemm_policy::estimate_methods' fastest. AgGemm::method() says which runs.
  OpMethod method = OpMethod::kAuto;
  // With every knob above on automatic, use the configuration `tilelink tune` stored for this
  // GPU, world and shape, if the tune cache has one (runtime/tune_cache.hpp).
  bool use_tune_cache = true;
};

// The configuration in words ("kernel default, swizzle auto, ce pull mesh, comm rows auto", then
// the method unless auto).
std::string describe(const AgGemmConfig& c);
// True when every knob but the method is on automatic, as in AgGemmConfig{} (use_tune_cache is not
// a knob): the tune cache then supplies them, and the method too unless the caller chose one.
bool is_automatic(const AgGemmConfig& c);
// The knobs as a JSON object (text): kernel, swizzle, gemm_sms, op_method and comm {resource,
// method, path, order, comm_rows, num_blocks, threads}. An entry without op_method (written
// before the knob existed) reads as auto.
std::string to_config_json(const AgGemmConfig& c);
// `c` = the configuration in `json` (to_config_json's form; use_tune_cache at its default); an
// InvalidArgument naming `source` and the field when `json` is not one.
void from_config_json(const std::string& json, const std::string& source, AgGemmConfig& c);

}  // namespace tilelink
