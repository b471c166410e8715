// `tilelink tune <op>` on the GPUs present: the staged searches of tune/*_tune.hpp, each candidate
// timed as the whole op over all ranks (tune_runner.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "bench/bench.hpp"
#include "tilelink/tune/moe_tune.hpp"
#include "tilelink/tune/sp_attention_tune.hpp"

namespace tilelink::tool {

namespace tb = tilelink::bench;

// A search on the GPUs present: the op's bench options (its problem, timing and seed; the search
// sets the configuration), the communication variants to time (the plan model's best) and the
// cache file to update ("" = none).
template <class BenchOptions>
struct TuneOptions {
  BenchOptions op;
  size_t top = 6;
  std::string cache;
};

// `tilelink tune ag_gemm`: the two-stage search (tune/ag_gemm_tune.hpp), one progress line per
// configuration on `progress`; returns the tuned configuration against the automatic one.
tb::Table tune_ag_gemm(const TuneOptions<tb::AgGemmBenchOptions>& options, std::ostream& progress);
// `tilelink tune gemm_rs`: the two-stage search (tune/gemm_rs_tune.hpp), as tune_ag_gemm.
tb::Table tune_gemm_rs(const TuneOptions<tb::GemmRsBenchOptions>& options, std::ostream& progress);
// `tilelink tune mlp`: tune_ag_gemm on fc1's shape (M, 2I or I, H: op.config.activation) and
// tune_gemm_rs on fc2's (M, H, I), both into the cache, where an all-automatic Mlp's AgGemm and
// GemmRs find them; one table with both ops' rows.
tb::Table tune_mlp(const TuneOptions<tb::MlpBenchOptions>& options, std::ostream& progress);
// `tilelink tune moe`: the three-stage search of tune/moe_tune.hpp over the MoE layer (kernels,
// then orders, then the communication the plan model ranks best), timed as bench times the fused
// layer (its shape, routing, activation and seed); the winner against the automatic
// configuration, its output checked against the automatic one's, stored in the cache.
tb::Table tune_moe(const TuneOptions<tb::MoeBenchOptions>& options, std::ostream& progress);
// `tilelink tune sp_attention`: the two-stage search of tune/sp_attention_tune.hpp (L2 sections,
// then all-gather x local pass first ranked by the plan model) on the options' shape, mask and
// layout, as tune_moe.
tb::Table tune_sp_attention(const TuneOptions<tb::SpAttentionBenchOptions>& options, std::ostream& progress);

// The searches' view of a bench problem on ranks of `sm_budget` SMs (pure: the dry runs need no
// GPU); MoE's with the routing MoeLayerSetup draws from the options' seed.
MoeTuneShape moe_tune_shape(const tb::MoeBenchOptions& options, int sm_budget);
SpAttentionTuneShape sp_attention_tune_shape(const tb::SpAttentionBenchOptions& options, int sm_budget);

}  // namespace tilelink::tool
