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

struct TuneOptions {
  int world = 8;
  uint32_t m = 8192, n = 28672, k = 8192;  // as AgGemmBenchOptions
  size_t top = 6;                          // communication variants timed (best predicted)
  tb::TimingOptions timing{2, 5};
  uint64_t seed = 1;
  std::string cache;  // tune cache file to update ("" = none)
};

// `tilelink tune ag_gemm`: the two-stage search (tune/ag_gemm_tune.hpp), one progress line per
// configuration on `progress`; returns the tuned configuration against the automatic one. tune_runner.cpp.
tb::Table tune_ag_gemm(const TuneOptions& options, std::ostream& progress);
struct GemmRsTuneOptions {
  int world = 8;
  uint32_t m = 8192, n = 8192, k = 28672;  // as tb::GemmRsBenchOptions
  size_t top = 6;                          // communication variants timed (best predicted)
  tb::TimingOptions timing{2, 5};
  uint64_t seed = 1;
  std::string cache;  // tune cache file to update ("" = none)
};
// `tilelink tune gemm_rs`: the two-stage search (tune/gemm_rs_tune.hpp), as tune_ag_gemm. tune_runner.cpp.
tb::Table tune_gemm_rs(const GemmRsTuneOptions& options, std::ostream& progress);
struct MlpTuneOptions {
  int world = 8;
  uint32_t m = 8192, hidden = 8192, intermediate = 28672;  // as tb::MlpBenchOptions
  MlpActivation activation = MlpActivation::kSwiGlu;
  size_t top = 6;
  tb::TimingOptions timing{2, 5};
  uint64_t seed = 1;
  std::string cache;
};
// `tilelink tune mlp`: tune_ag_gemm on fc1's shape (M, 2I or I, H) and tune_gemm_rs on fc2's
// (M, H, I), both into the cache, where an all-automatic Mlp's AgGemm and GemmRs find them; one
// table with both ops' rows. tune_runner.cpp.
tb::Table tune_mlp(const MlpTuneOptions& options, std::ostream& progress);

struct MoeTuneOptions {
  tb::MoeBenchOptions op;  // the layer's shape, routing, activation and seed (its configs are not read)
  size_t top = 6;      // communication variants timed (best predicted)
  std::string cache;   // tune cache file to update ("" = none)
};
// `tilelink tune moe`: the three-stage search of tune/moe_tune.hpp over the MoE layer (kernels,
// then orders, then the communication the plan model ranks best), timed as bench times the fused
// layer; the winner against the automatic configuration, its output checked against the
// automatic one's, stored in the cache. tune_runner.cpp.
tb::Table tune_moe(const MoeTuneOptions& options, std::ostream& progress);
// The search's view of a bench MoE problem on ranks of `sm_budget` SMs, with the routing
// MoeLayerSetup draws from the options' seed (pure: `tune moe --dry-run` needs no GPU). tune_runner.cpp.
MoeTuneShape moe_tune_shape(const tb::MoeBenchOptions& options, int sm_budget);
struct SpAttentionTuneOptions {
  tb::SpAttentionBenchOptions op;  // shape, mask, layout, seed (the other config knobs are not read)
  size_t top = 6;
  std::string cache;
};
// `tilelink tune sp_attention`: the two-stage search of tune/sp_attention_tune.hpp (L2 sections,
// then all-gather x local pass first ranked by the plan model), as tune_moe. tune_runner.cpp.
tb::Table tune_sp_attention(const SpAttentionTuneOptions& options, std::ostream& progress);
// The search's view of a bench SP attention problem on ranks of `sm_budget` SMs. tune_runner.cpp.
SpAttentionTuneShape sp_attention_tune_shape(const tb::SpAttentionBenchOptions& options, int sm_budget);

}  // namespace tilelink::tool
