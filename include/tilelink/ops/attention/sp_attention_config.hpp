// SP attention's configuration: the knobs of SpAttention (sp_attention.hpp), their text form, and
// the JSON form in which the tune cache stores them (runtime/tune_cache.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/ops/common/op_method.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"

namespace tilelink {

struct SpAttentionConfig {
  // The K/V all-gather. comm_rows (tokens per chunk and signal) must be a multiple of 128, the
  // kernel's key tile; 0 = automatic: 128 on SMs, and on the copy engine the fewest multiple of
  // 128 that makes a chunk of at least 8 MiB of one rank's rows, capped at seq_per_rank.
  AllGatherConfig comm = kAutomaticAllGather;
  SeqLayout layout = SeqLayout::kContiguous;
  // The local pass first (SpAttentionPlan::local_first): every CTA folds its items' own shard
  // before any remote chunk, so that the first wave does not wait for the all-gather; each item's
  // state (fp32 o, m, l) is parked in the op's scratch between the passes (4 + 8 / head_dim
  // bytes per element of O per rank: twice O's own size). Measured on 8 virtual ranks (32k
  // tokens, zig-zag causal) it cut the fused call by 10 %; off by default for that memory, and
  // because with a fast all-gather the first wave barely waits. No effect at world 1.
  bool local_first = false;
  // CTAs of the persistent attention kernel per rank; 0 = automatic: the rank's SM budget, less
  // the SM all-gather's blocks, less 2 SMs of slack when world > 1 (as AG+GEMM) -- for virtual
  // ranks on the copy engine, 2 SMs of the GPU between all ranks (the device-local copies need
  // SMs; a grid that fills every SM while it waits for them would never finish).
  uint32_t attention_sms = 0;
  // The kernel runs its items in sections of this many kv heads (SpAttentionPlan::section_kv_heads;
  // a divisor of kv_heads), so that the CTAs running at once stream the K/V of few heads through
  // L2. 0 = automatic: the most heads whose gathered K/V fit in 5/8 of the rank's share of L2, at
  // least 1.
  uint32_t section_kv_heads = 0;
  // How run() runs a call (op_method.hpp): fused (the all-gather under the waiting kernel),
  // non-overlapped (run_non_overlapped: the whole all-gather, then the kernel) or decomposed (the
  // ring schedule of run_ring; one-process worlds only); auto = the tune cache's measured winner,
  // else sp_attention_policy::estimate_methods' fastest. SpAttention::method() says which runs.
  OpMethod method = OpMethod::kAuto;
  // With every knob above (all but `layout`) on automatic, the op runs the configuration `tilelink
  // tune sp_attention` stored for this GPU, world, shape, mask and layout, if the tune cache has
  // one (runtime/tune_cache.hpp).
  bool use_tune_cache = true;
};

// The configuration in words ("section heads auto, one pass, ce all-gather, comm rows auto").
std::string describe(const SpAttentionConfig& c);
// True when every knob is on automatic, as in SpAttentionConfig{} (the layout is the problem's,
// not a knob; nor is use_tune_cache; the method is left to the cache unless the caller chose one).
bool is_automatic(const SpAttentionConfig& c);
// The knobs as a JSON object (text): comm, local_first, attention_sms, section_kv_heads, op_method
// (absent in entries written before it existed: auto).
std::string to_config_json(const SpAttentionConfig& c);
// `c` = the configuration in `json` (to_config_json's form; the layout and use_tune_cache at
// their defaults); an InvalidArgument naming `source` and the field when `json` is not one.
void from_config_json(const std::string& json, const std::string& source, SpAttentionConfig& c);

}  // namespace tilelink
