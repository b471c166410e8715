// What GemmRs's validation (gemm_rs_checks.cpp) and its construction and launch (gemm_rs.cpp)
// share: the operands' row layout, the kernel for the data type, the SM split, the plan, the
// swizzle and the channel descriptions of timeout reports. Internal to GEMM+RS.
#pragma once

#include <cstdint>
#include <string>

#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::gemm_rs_internal {

bool fp8(const GemmRsArguments& a);
// Bytes of one row of A: K bf16, or the packed FP8 row's.
uint64_t a_row_bytes(const GemmRsArguments& a);
// A's row pitch in elements, as the kernel takes it (bf16 K, e4m3 the packed row's bytes).
uint64_t a_lda(const GemmRsArguments& a);
// The kernel for `a`'s operands (once check_fp8_operands accepted the dtype and scaling):
// config.kernel's, or the first compiled for them. InvalidArgument where kernel_refusal refuses.
const detail::Sm90GemmRsConfigInfo& kernel_for(const GemmRsArguments& a);
// "" if config.kernel is empty or names a compiled configuration for `a`'s operands, else why not.
std::string kernel_refusal(const GemmRsArguments& a);
// The named kernel's tile for the estimates (gemm_rs_policy::MethodShape::tile); {0, 0} (the
// default's) where config.kernel is empty or refused.
gemm_rs_policy::GemmTile named_tile(const GemmRsArguments& a);
// "" if the FP8 operands (or their absence, for bf16) suit `a`, else why not.
std::string check_fp8_operands(const World& world, const GemmRsArguments& a);
// "" if the epilogue push can store through the heap's affine view for `a`, else why not.
std::string push_view_fits(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a);
// `a` with its scatter and reducer resolved (gemm_rs_policy::path: the configured ones, else by
// the world, its transport and the heap); every rule and check below takes resolved arguments.
GemmRsArguments with_path(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a);
// The reduction CTAs beside the GEMM (none when the GEMM's epilogue sums), and the GEMM's CTAs for
// `method` (fused: the budget less the reduction; otherwise the whole budget).
uint32_t reduce_blocks_of(const World& world, const GemmRsArguments& a);
int gemm_sm_count(const World& world, int rank, const GemmRsArguments& a, OpMethod method = OpMethod::kFused);
GemmRsFusedPlan make_plan(const World& world, const GemmRsArguments& a, const detail::Sm90GemmRsConfigInfo& kernel);
uint32_t choose_swizzle(const World& world, const GemmRsArguments& a, const detail::Sm90GemmRsConfigInfo& kernel);
// What channel `ch` of the slice carries, for timeout reports (the layout of GemmRsFusedPlan).
std::string describe_gemm_rs_channel(const GemmRsFusedPlan& plan, uint32_t ch, int waiter, int peer);
// What the decomposed method needs beyond the fused path's checks: "" if it can run.
std::string decomposed_needs(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a);
// The owner_tiles engine's method estimates (gemm_rs_policy::estimate_methods) for resolved `a`
// with `reduce_blocks` reduction CTAs beside the fused GEMM; the SM budget is the tightest rank's
// (alike in every process).
gemm_rs_policy::MethodShape method_shape(const World& world, const GemmRsArguments& a, uint32_t reduce_blocks);

// The small-M engine (gemm_rs_engine.cpp): GEMM+AR's arguments for the caller's `a` (knobs as
// GemmRsConfig::engine says; the tune cache is GemmRs's, not GEMM+AR's), and why `a` cannot run
// on it ("" if it can).
GemmArArguments small_m_arguments(const GemmRsArguments& a);
std::string small_m_refusal(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a);
// The engine the caller's `a` runs: as configured, else the estimates' faster (each engine's
// automatic method), and why; the same in every process (the world's shared facts only).
struct EngineChoice {
  GemmRsEngine engine = GemmRsEngine::kOwnerTiles;
  double owner_tiles = 0, small_m = 0;  // the estimates, seconds (0: not estimated)
  std::string why;
};
EngineChoice choose_engine(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a);

}  // namespace tilelink::gemm_rs_internal
