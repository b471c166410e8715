// The AG+GEMM search space of `tilelink tune` (DESIGN.md §3: compute configuration x
// communication tile size x resource x order), split in two stages as the design is decoupled:
//  1. compute: every compiled kernel x rasterization swizzle, communication on automatic;
//  2. communication around the best compute configuration: copy engine with several tile sizes,
//     SM blocks with each method, data path, order, tile size and block count -- ranked by the
//     plan model (sim/ag_gemm_sim.hpp), only the best predicted ones are timed.
// Pure functions: the tool times the candidates (src/tools/tune_runner.cpp); the CPU suite checks the space.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/sim/timeline.hpp"
#include "tilelink/tune/ranked.hpp"

namespace tilelink {

struct AgGemmTuneShape {
  int world = 8;
  int sm_budget = 16;  // SMs of one rank
  uint32_t m_per_rank = 1024, n = 3584, k = 8192;  // n: columns per rank
  DType dtype = DType::kBf16;  // e4m3: the FP8 kernels' tiles, rate and packed rows in the model
  Fp8Scaling scaling = Fp8Scaling::kTensor;
};

using RankedAgGemmConfig = RankedConfig<AgGemmConfig>;

// Stage 1: kernels x swizzle {auto, 1, 2, 4, 8}; the all-automatic configuration first.
std::vector<AgGemmConfig> ag_gemm_compute_candidates(const std::vector<std::string>& kernels);

// Stage 2: communication variants of `base` ranked by predicted time, at most `top`, with the
// automatic communication always among them (appended if it did not rank). World 1: only it.
std::vector<RankedAgGemmConfig> ag_gemm_comm_candidates(const AgGemmConfig& base, const AgGemmTuneShape& shape,
                                                        size_t top, const sim::CostModel& gpu = {});

}  // namespace tilelink
