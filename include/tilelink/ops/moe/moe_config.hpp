// The MoE ops' configurations: part 1, part 2 and the layer that runs both; the layer's text
// form, and the JSON form in which the tune cache stores it (runtime/tune_cache.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/ops/common/mlp_activation.hpp"
#include "tilelink/ops/common/op_method.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"

namespace tilelink {

// MoE part 1 (MoeAgGroupGemm, moe_ag_gemm.hpp).
struct MoeAgGroupGemmConfig {
  // The all-gather of the tokens (as AgGemmConfig::comm; comm_rows 0 = automatic).
  AllGatherConfig comm = kAutomaticAllGather;
  // CTAs of the gather stage per rank; 0 = automatic: about sm_budget * 300 / n (enough to keep
  // ahead of the GEMM), at most sm_budget / 4.
  uint32_t gather_blocks = 0;
  // CTAs of the grouped GEMM per rank; 0 = automatic: the SM budget minus the gather's and the
  // SM all-gather's blocks, minus AG+GEMM's 2 SMs of slack when world > 1.
  uint32_t gemm_sms = 0;
  // The grouped GEMM's tile rows per band, walked column by column (1, 2, 4, 8 or 16; 0 =
  // automatic: moe_policy::swizzle, 8): a wave reads its B tiles once for the band's rows.
  uint32_t swizzle = 0;
  std::string kernel;  // kernel configuration by name (MoeAgGroupGemm::kernel_names()); "" = default
  // How a call runs (op_method.hpp): fused (above) or non-overlapped (the whole all-gather, then
  // the gather with a CTA per SM, then the plain grouped GEMM, all on the compute stream); auto =
  // the tune cache's measured winner (tune moe), else fused with peers and non-overlapped at
  // world 1 (moe_policy::method) -- no estimate: the routing, which sets the work, is known only
  // at run time (`tilelink plan moe` predicts both for a synthetic one). Decomposed is not built
  // for MoE and is refused.
  OpMethod method = OpMethod::kAuto;
};

// MoE part 2 (MoeGemmRs, moe_gemm_rs.hpp).
struct MoeGemmRsConfig {
  uint32_t comm_rows = 0;       // tokens per combine/reduce block (one signal each); 0 = automatic (64)
  // Who combines (moe_rs_protocol.hpp): combine blocks beside the GEMM (kBlocks), or the GEMM's
  // own CTAs in their epilogue with the owners' sums after the GEMM (kEpilogue: no SM set
  // aside, fused only); auto = moe_policy::combine (the epilogue with peers, blocks for one rank or under put_signal).
  MoeCombine combine = MoeCombine::kAuto;
  // CTAs of the combine and reduction per rank; 0 = automatic (enough to keep up). kEpilogue: the
  // reduction's CTAs after the GEMM; 0 = the SM budget.
  uint32_t combine_blocks = 0;
  uint32_t gemm_sms = 0;        // CTAs of the grouped GEMM; 0 = the SM budget less the combine (kBlocks)
  uint32_t swizzle = 0;         // tile rows per band, as part 1's (0 = automatic)
  // The GEMM's tile order: the combine's token order (kTokenOrder) or the rounds cut into this
  // many weight sweeps, expert by expert within each (build_combine_order); 0 = automatic
  // (moe_policy::weight_sweeps).
  uint32_t weight_sweeps = 0;
  static constexpr uint32_t kTokenOrder = 0xFFFFFFFFu;
  std::string kernel;           // kernel configuration by name (MoeAgGroupGemm::kernel_names()); "" = default
  // As part 1's: non-overlapped runs the grouped GEMM on every SM of the budget, then the combine
  // and reduction with a CTA per SM, on the compute stream; auto = the tune cache's, else as part 1's.
  OpMethod method = OpMethod::kAuto;
};

// The MoE layer (MoeLayer, moe_layer.hpp): part 1, the activation, part 2.
struct MoeLayerConfig {
  MlpActivation activation = MlpActivation::kSwiGlu;
  MoeAgGroupGemmConfig part1;  // part1.kernel and part2.kernel must have the same tile height
  MoeGemmRsConfig part2;
  // With every knob of both parts on automatic, the layer runs the configuration `tilelink tune
  // moe` stored for this GPU, world, shape, experts, top-k and activation, if the tune cache has
  // one (runtime/tune_cache.hpp). It was tuned on a synthetic routing (uniform unless told).
  bool use_tune_cache = true;
};

// The configuration in words ("part 1: kernel default, swizzle auto, ...; part 2: ...").
std::string describe(const MoeLayerConfig& c);
// True when every knob of both parts is on automatic, as in MoeLayerConfig{} (the activation is the
// problem's, not a knob; nor is use_tune_cache; the parts' methods are left to the cache unless the
// caller chose them).
bool is_automatic(const MoeLayerConfig& c);
// The knobs as a JSON object (text): part1 {kernel, swizzle, gather_blocks, gemm_sms, comm,
// op_method}, part2 {kernel, swizzle, comm_rows, combine, combine_blocks, gemm_sms, weight_sweeps,
// op_method} (op_method absent in entries written before it existed: auto).
std::string to_config_json(const MoeLayerConfig& c);
// `c` = the configuration in `json` (to_config_json's form; the activation and use_tune_cache at
// their defaults); an InvalidArgument naming `source` and the field when `json` is not one.
void from_config_json(const std::string& json, const std::string& source, MoeLayerConfig& c);

}  // namespace tilelink
