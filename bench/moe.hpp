// `tilelink bench moe_ag|moe`: MoE part 1 and the MoE layer against their non-overlapped chains.
#pragma once

#include <cstdint>
#include <string>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/moe_gemm_rs.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::bench {

struct MoeBenchOptions : RunOptions {
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 4096;         // Mixtral-8x7B
  uint32_t intermediate = 14336;  // each expert's, over all ranks
  uint32_t experts = 8;
  uint32_t topk = 2;
  SyntheticRouting routing = SyntheticRouting::kUniform;
  MoeAgGroupGemmConfig config;   // part 1 (and bench moe_ag)
  MoeGemmRsConfig part2;         // bench moe: part 2
  MlpActivation activation = MlpActivation::kSwiGlu;  // bench moe
  bool use_tune_cache = true;  // bench moe: MoeLayerConfig::use_tune_cache
};

// MoeAgGroupGemm::run (all-gather + gather + grouped GEMM) against the non-overlapped chain
// (copy-engine all-gather, row gather, a cuBLAS GEMM per expert), its parts, a dense cuBLAS GEMM
// of the same FLOPs and the ideal max(T_gemm, T_ag). moe.cu.
Table bench_moe_ag(const MoeBenchOptions& options);

// MoeLayer::run (part 1 -> activation -> part 2) against the non-overlapped chain (copy-engine
// all-gather, row gather, cuBLAS per expert, activation, cuBLAS per expert, top-k combine,
// copy-engine reduce-scatter), its parts and the ideal max(T_gemm1, T_ag) + T_act + max(T_gemm2,
// T_rs). moe.cu.
Table bench_moe_layer(const MoeBenchOptions& options);

}  // namespace tilelink::bench
