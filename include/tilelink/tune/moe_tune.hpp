// The MoE layer's search space for `tilelink tune moe` (DESIGN.md §3, decoupled), in three stages:
//  1. compute: the grouped GEMM kernel of each part (pairs of the same tile height: the parts
//     share the mapping), everything else automatic;
//  2. order: part 1's and part 2's rasterization swizzle x part 2's GEMM order (token order or
//     weight sweeps), around the best kernels;
//  3. communication around the best of those: part 1's all-gather (copy engine with several tile
//     sizes; SM blocks) x gather CTAs, part 2's combine rows x combine CTAs -- ranked by the plan
//     model (sim/moe_sim.hpp: predict_moe_ag + predict_moe_gemm_rs, the activation between them
//     the same for all), only the best predicted ones are timed.
// Pure functions: the tool times the candidates (src/tools/tune_runner.cpp); the CPU suite checks the space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/sim/moe_sim.hpp"
#include "tilelink/sim/synthetic_routing.hpp"
#include "tilelink/tune/ranked.hpp"

namespace tilelink {

// The problem the searches model: the plan model's (tokens, hidden, each expert's intermediate
// over all ranks, experts, top-k, the routing tuned on -- its ids, or empty for a synthetic one --
// and the world) on ranks of `sm_budget` SMs.
struct MoeTuneShape {
  sim::MoeProblem problem;
  int sm_budget = 16;  // SMs of one rank
  MlpActivation activation = MlpActivation::kSwiGlu;
  std::vector<std::string> kernels;  // MoeAgGroupGemm::kernel_names(); the first is the default
};

using RankedMoeConfig = RankedConfig<MoeLayerConfig>;

// Stage 1: the all-automatic configuration first, then every other (part 1, part 2) kernel pair
// of one tile height, the three pairs of methods with a non-overlapped part, and part 2 with the
// combine in its epilogue.
std::vector<MoeLayerConfig> moe_kernel_candidates(const std::vector<std::string>& kernels);

// Stage 2: `base` with part 1's swizzle {auto, 2} x part 2's swizzle {auto, 2} x part 2's order
// {auto, token order, 2, 4, 8 sweeps}, `base` itself left out.
std::vector<MoeLayerConfig> moe_order_candidates(const MoeLayerConfig& base);

// Stage 3: communication variants of `base` ranked by predicted time, at most `top`, with the
// automatic communication always among them (appended if it did not rank).
std::vector<RankedMoeConfig> moe_comm_candidates(const MoeLayerConfig& base, const MoeTuneShape& shape, size_t top,
                                                 const sim::CostModel& gpu = {});

}  // namespace tilelink
