// The GEMM+RS search space of `tilelink tune gemm_rs`, in two stages as for AG+GEMM
// (ag_gemm_tune.hpp):
//  1. compute: the rasterization swizzle {automatic, 1, 2, 4, 8}, communication on automatic (one
//     GEMM configuration is compiled);
//  2. communication around the best compute configuration: scatter (pull, push, copy engine) x
//     signal granularity (tile, tile row, owner block; the copy engine needs row or block) x
//     reduction CTAs -- ranked by the plan model (sim/gemm_rs_sim.hpp), only the best predicted
//     ones are timed.
// Pure functions: the tool times the candidates (src/tools/tune_runner.cpp); the CPU suite checks the space.
#pragma once

#include <cstddef>
#include <vector>

#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/sim/timeline.hpp"
#include "tilelink/tune/ranked.hpp"

namespace tilelink {

struct GemmRsTuneShape {
  int world = 8;
  int sm_budget = 16;                          // SMs of one rank
  uint32_t m = 8192, n = 8192, k_local = 3584;  // output rows over all ranks, columns, K per rank
  bool one_rank_per_gpu = false;               // the machine: the op's automatic reduction by it
  DType dtype = DType::kBf16;                  // e4m3: the FP8 kernel's tile and rate in the model
  Fp8Scaling scaling = Fp8Scaling::kRow;       // e4m3: which FP8 kernel
  bool affine_heap = true;                     // the heap allows the push (SymmetricHeap::affine_stride)
};

using RankedGemmRsConfig = RankedConfig<GemmRsConfig>;

// Stage 1: swizzle {auto, 1, 2, 4, 8}; the all-automatic configuration first.
std::vector<GemmRsConfig> gemm_rs_compute_candidates();

// Stage 2: communication variants of `base` ranked by predicted time, at most `top`, with the
// automatic communication always among them (appended if it did not rank). World 1 (no
// communication): only it.
std::vector<RankedGemmRsConfig> gemm_rs_comm_candidates(const GemmRsConfig& base, const GemmRsTuneShape& shape,
                                                        size_t top, const sim::CostModel& gpu = {});

}  // namespace tilelink
