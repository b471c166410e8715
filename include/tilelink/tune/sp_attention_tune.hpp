// SP attention's search space for `tilelink tune sp_attention` (DESIGN.md §3, decoupled), in two
// stages:
//  1. compute: the kernel's L2 sections (section_kv_heads: automatic, then every divisor of the
//     kv heads), communication on automatic;
//  2. communication and schedule around the best section: the K/V all-gather (copy engine with
//     several chunk sizes; SM blocks with several chunk sizes and block counts) x the local pass
//     first or one pass -- ranked by the plan model (sim/sp_attention_sim.hpp, its default
//     attention rate and no all-gather slowdown), only the best predicted ones are timed.
// Pure functions: the tool times the candidates (src/tools/tune_runner.cpp); the CPU suite checks the space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/sim/sp_attention_sim.hpp"
#include "tilelink/tune/ranked.hpp"

namespace tilelink {

// The problem the searches model: the plan model's (tokens over all ranks, heads, head dim, mask,
// world) on ranks of `sm_budget` SMs, and the sequence's layout.
struct SpAttentionTuneShape {
  sim::SpAttentionProblem problem;
  int sm_budget = 16;  // SMs of one rank
  SeqLayout layout = SeqLayout::kContiguous;
};

using RankedSpAttentionConfig = RankedConfig<SpAttentionConfig>;

// Stage 1: section_kv_heads {auto, every divisor of kv_heads}, the all-automatic configuration
// first; `layout` is the problem's and kept.
std::vector<SpAttentionConfig> sp_attention_compute_candidates(uint32_t kv_heads, SeqLayout layout);

// Stage 2: communication and schedule variants of `base` ranked by predicted time, at most
// `top`, with the automatic ones (copy-engine all-gather, one pass) always among them. World 1
// (nothing to gather): only those.
std::vector<RankedSpAttentionConfig> sp_attention_comm_candidates(const SpAttentionConfig& base,
                                                                  const SpAttentionTuneShape& shape, size_t top,
                                                                  const sim::CostModel& gpu = {});

}  // namespace tilelink
