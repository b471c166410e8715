// GEMM+RS's configuration: the knobs of GemmRs (gemm_rs.hpp), their text form, and the JSON form
// in which the tune cache stores them (runtime/tune_cache.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/ops/common/op_method.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"

namespace tilelink {

// Which GEMM and reduction run the op (docs/gemm_rs.md).
enum class GemmRsEngine : uint32_t {
  kAuto = 0,        // small_m where gemm_rs_policy::choose_engine's estimate puts it ahead, else
                    // owner_tiles
  kOwnerTiles = 1,  // the GEMM+RS kernel over P owner blocks of whole tile rows, each tile summed
                    // by its owner (the knobs below)
  kSmallM = 2,      // GEMM+AR's engine (ops/gemm_ar, gemm_ar_protocol.hpp's reduce-scatter): 64- or
                    // 128-row tiles over all M rows, K cut into slices, each owner summing its block
                    // of every rank's and slice's partial in rank order. For decode's M, where owner
                    // blocks of whole 128-row tiles are mostly padding. bf16 only.
};
inline const char* to_string(GemmRsEngine e) {
  return e == GemmRsEngine::kOwnerTiles ? "owner_tiles" : e == GemmRsEngine::kSmallM ? "small_m" : "auto";
}

struct GemmRsConfig {
  // How each peer's tiles reach their owner: pull (the owner reads them), push (the GEMM's
  // epilogue stores them into the owner), ce (the copy engine, per signal group); auto =
  // gemm_rs_policy::path, with the reducer below, by the machine the ranks run on.
  GemmRsScatter scatter = GemmRsScatter::kAuto;
  SignalGranularity granularity = SignalGranularity::kTile;  // per tile, per tile row, per owner block
  uint32_t reduce_blocks = 0;  // reduction CTAs per rank (whole GEMM clusters); 0 = automatic
                               // (gemm_rs_policy::reduce_blocks: by the machine the ranks run on)
  uint32_t gemm_sms = 0;       // GEMM CTAs per rank; 0 = budget - reduce_blocks
  uint32_t swizzle = 0;        // rasterization swizzle: 1, 2, 4 or 8; 0 = automatic (GemmRs::swizzle())
  // Who sums the owner's tiles: reduction CTAs beside the GEMM (blocks, reduce_blocks of them) or
  // the GEMM's own CTAs after their own tiles' epilogues (epilogue: no SM taken, needs a signal
  // per tile); auto = gemm_rs_policy::path.
  GemmRsReducer reducer = GemmRsReducer::kAuto;
  // With the push: a pushed tile announced at the CTA's next tile (deferred: the store drains
  // under that tile's mainloop) or as soon as its store has landed (immediate: the CTA waits for
  // the link). See GemmRsPushNotify. Ignored by the other scatters.
  GemmRsPushNotify push_notify = GemmRsPushNotify::kDeferred;
  // How a call runs (op_method.hpp): fused (the reduction under the GEMM, as above),
  // non-overlapped (the GEMM on every SM of the budget, then the reduction with every SM, on the
  // compute stream) or decomposed (async-TP's chain: a GEMM per owner block on every SM, own block
  // last, each peer block copied by the copy engine into its owner's `recv` as soon as its GEMM is
  // done, then the reduction with every SM; needs `recv`; scatter and granularity are the fused
  // kernel's knobs and do not apply); auto = the tune cache's measured winner, else
  // gemm_rs_policy::estimate_methods' fastest (decomposed only where `recv` is given).
  // GemmRs::method() says which runs. reduce_blocks and gemm_sms size the fused path; the others
  // give each phase the whole budget (gemm_sms still caps their GEMMs).
  OpMethod method = OpMethod::kAuto;
  // The engine (GemmRsEngine). With small_m, method fused / non_overlapped / auto are GEMM+AR's
  // schedules, reduce_blocks and gemm_sms its CTA counts, scatter ce its copy-engine path (pull
  // or auto: its load/store path; push is refused); granularity, swizzle, reducer and push_notify
  // are the owner_tiles engine's. GemmRs::engine() says which runs and why.
  GemmRsEngine engine = GemmRsEngine::kAuto;
  // The owner_tiles engine's GEMM kernel configuration by name (GemmRs::kernel_names(), e.g.
  // "128x128x64_c2x1"); "" = the first compiled one for the operands' data type and scaling
  // (GemmRs::kernel_name()). The small_m engine has GEMM+AR's kernels and refuses a name.
  std::string kernel;
  // With every knob above on automatic, use the configuration `tilelink tune gemm_rs` stored for
  // this GPU, world and shape, if the tune cache has one (runtime/tune_cache.hpp).
  bool use_tune_cache = true;
};

// The configuration in words ("scatter pull, signal per tile, reduction CTAs auto, swizzle auto").
std::string describe(const GemmRsConfig& c);
// True when every knob but the method is on automatic, as in GemmRsConfig{} (use_tune_cache is not
// a knob): the tune cache then supplies them, and the method too unless the caller chose one.
bool is_automatic(const GemmRsConfig& c);
// The knobs as a JSON object (text): scatter, granularity, reduce_blocks, gemm_sms, swizzle,
// reducer, push_notify, op_method, engine and kernel (reducer, op_method and engine absent in
// entries written before they existed: auto; push_notify absent: deferred; kernel absent: "").
std::string to_config_json(const GemmRsConfig& c);
// `c` = the configuration in `json` (to_config_json's form; use_tune_cache at its default); an
// InvalidArgument naming `source` and the field when `json` is not one.
void from_config_json(const std::string& json, const std::string& source, GemmRsConfig& c);

}  // namespace tilelink
