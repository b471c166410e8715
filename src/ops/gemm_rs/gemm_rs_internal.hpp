// What GemmRs's validation (gemm_rs_checks.cpp) and its construction and launch (gemm_rs.cpp)
// share: the operands' row layout, the kernel for the data type, the SM split, the plan, the
// swizzle and the channel descriptions of timeout reports. Internal to GEMM+RS.
#pragma once

#include <cstdint>
#include <string>

#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::gemm_rs_internal {

bool fp8(const GemmRsArguments& a);
// Bytes of one row of A: K bf16, or the packed FP8 row's.
uint64_t a_row_bytes(const GemmRsArguments& a);
// A's row pitch in elements, as the kernel takes it (bf16 K, e4m3 the packed row's bytes).
uint64_t a_lda(const GemmRsArguments& a);
// The kernel for `a`'s operands (once check_fp8_operands accepted the dtype and scaling).
const detail::Sm90GemmRsConfigInfo& kernel_for(const GemmRsArguments& a);
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

}  // namespace tilelink::gemm_rs_internal
