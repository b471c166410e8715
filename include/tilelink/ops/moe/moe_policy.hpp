// The MoE ops' automatic resource split, one place for the ops and the plan model
// (tilelink plan moe_ag / moe). Header-only, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tilelink/ops/common/op_method.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"

namespace tilelink::moe_policy {

// The token / expert / top-k arguments both MoE ops take: "" if they suit the ops' tables
// (at most 1024 experts; world * tokens_per_rank * topk below 2^31), else which argument is
// wrong and what was expected.
inline std::string check_shape(uint32_t tokens_per_rank, int world, uint32_t experts, uint32_t topk) {
  if (tokens_per_rank == 0) return "argument 'tokens_per_rank' = 0: expected at least one token";
  if (experts == 0 || experts > 1024) {
    return "argument 'experts' = " + std::to_string(experts) + ": expected 1 to 1024";
  }
  if (topk == 0 || topk > experts) {
    return "argument 'topk' = " + std::to_string(topk) + ": expected 1 to the number of experts (" +
           std::to_string(experts) + ")";
  }
  if (uint64_t(tokens_per_rank) * static_cast<uint64_t>(world) * topk > 0x7FFFFFFFull) {
    return "argument 'tokens_per_rank' = " + std::to_string(tokens_per_rank) +
           ": expected world * tokens_per_rank * topk below 2^31";
  }
  return "";
}

// "" if the MoE ops run `method` (auto, fused or non-overlapped), else why not, naming `field`.
inline std::string check_method(OpMethod method, const char* field) {
  if (method == OpMethod::kAuto || method == OpMethod::kFused || method == OpMethod::kNonOverlapped) return "";
  if (method == OpMethod::kDecomposed) {
    return std::string("argument '") + field + "' = decomposed: the MoE ops have no decomposed path; expected auto, " +
           "fused or non_overlapped";
  }
  return std::string("argument '") + field + "' = " + std::to_string(static_cast<uint32_t>(method)) +
         ": expected auto, fused or non_overlapped";
}

// The MoE ops' method where config.method is auto and no tune cache entry chose one: fused with
// peers; non-overlapped at world 1, where nothing crosses a link to hide and the fused op only
// shares the SMs between stages -- each stage on the whole budget in turn is faster. Measured on
// an H100 (docs/PERF.md, seventeenth session), Mixtral-8x7B at world 1: part 1 fused 8349 us
// (bound by its 2 gather CTAs) against a 5725 us cuBLAS loop the banded GEMM matches; part 2 fused
// 3260 against its GEMM alone 2805 + a ~83 us combine. `fused_only`: a configuration only the
// fused path runs (part 2's epilogue combine) keeps fused.
inline OpMethod method(OpMethod configured, int world, bool fused_only = false) {
  if (configured != OpMethod::kAuto) return configured;
  return world == 1 && !fused_only ? OpMethod::kNonOverlapped : OpMethod::kFused;
}

// The grouped GEMM's rasterization "swizzle": tile rows per band of the scheduler
// (sm90_row_ordered_scheduler.cuh), which walks a band of rows column by column, adding no tile.
// A wave then reads each B column once for the band's rows; one row at a time re-reads the
// whole of one expert's B for every tile row a wave covers -- on Mixtral-8x7B at world 1 (N =
// 28672: 1.2 tile rows a wave) 235 MB a row, 5.5 TB/s at the GEMM's pace, more than HBM gives
// (measured: part 1 at 6.3 ms on the H200, 9.3 ms on the H100 against 5.5 ms for the cuBLAS
// loop). The CUTLASS swizzle this replaced rounded both extents up to the swizzle and computed
// the padding (2.7x the tiles on Qwen1.5-MoE at swizzle 8), hence its measured losses. Auto: 8
// where it matters, else 1. It matters where one wave of the GEMM's CTAs covers fewer than 8 tile
// rows (a wide N: each row re-reads B); where a wave already spans 8 rows, its B columns serve
// them all and a band would only hold back the gather's and the combine's pipelines.
constexpr uint32_t kAutoBand = 8;
inline uint32_t swizzle(uint32_t configured, uint32_t n, uint32_t tile_n, uint32_t cluster_n, int ctas) {
  if (configured != 0) return configured;
  const uint32_t cols = ((n + tile_n - 1) / tile_n + cluster_n - 1) / cluster_n;
  const uint32_t wave_rows = static_cast<uint32_t>(std::max(ctas, 0)) / std::max(cluster_n, 1u) / std::max(cols, 1u);
  return wave_rows >= kAutoBand ? 1u : kAutoBand;
}

// Part 2's configured swizzle as its kernel takes it: row by row (1) where the combine runs in the
// GEMM's epilogue and the swizzle is automatic, else as configured (0 = the kernel's swizzle()).
// The epilogue combine sums a token's rows as its tile rows finish, so it wants whole tile rows
// early; a band finishes none of its rows before its last column. Measured on an H100 at 8 virtual
// ranks (docs/PERF.md, eighteenth session), part 2 with the epilogue combine: band 8 (swizzle()'s
// choice at 16 SMs a rank) 7851 us (Qwen1.5-MoE) and 9746 us (Mixtral-8x7B), row by row 3125 and
// 7384; the combine blocks, beside the GEMM, keep swizzle()'s band (Mixtral-8x7B 7682 against 8500).
inline uint32_t part2_swizzle(uint32_t configured, MoeCombine combine) {
  return configured == 0 && combine == MoeCombine::kEpilogue ? 1u : configured;
}

// "" if `band` (a configured swizzle, resolved) is 1, 2, 4, 8 or 16, else the refusal.
inline std::string check_band(uint32_t band) {
  if (band == 1 || band == 2 || band == 4 || band == 8 || band == 16) return "";
  return "argument 'config.swizzle' = " + std::to_string(band) + ": expected 1, 2, 4, 8 or 16 tile rows per band";
}

// Part 1's gather CTAs: enough to copy the rows in ~70 % of the grouped GEMM's time. Per rank the
// gather moves 4 * pairs * hidden bytes (read + write), the GEMM does 2 * pairs * n * hidden FLOPs
// at ~5.3 TFLOP/s per SM, a gather CTA ~50 GB/s (measured: 35-55) -- about budget * 300 / n CTAs;
// at most a quarter of the budget (for small n the gather costs as much as the GEMM).
inline uint32_t gather_blocks(int sm_budget, uint32_t n) {
  const int want = static_cast<int>((uint64_t(sm_budget) * 300 + n - 1) / n);
  return static_cast<uint32_t>(std::max(1, std::min(want, sm_budget / 4)));
}

// Part 2's combine CTAs: enough to keep up with the GEMM's tiles in ~70 % of its time. Per rank
// the combine moves about (pairs + tokens) * n * 2 bytes, the reduction (with peers) tokens * n *
// 2 more; a CTA ~30 GB/s next to the GEMM (measured on the H200, Mixtral-8x7B at world 1: 2 CTAs
// moved 201 MB in ~3.5 ms); the GEMM does 2 * pairs * n * k FLOPs at ~5.3 TFLOP/s per SM -- about
// (1 + 2/topk) * budget * 250 / k CTAs (1 + 1/topk with no peers); at most a quarter of the
// budget. Whole clusters of `cluster` CTAs.
inline uint32_t combine_blocks(int sm_budget, uint32_t topk, uint32_t k, int world, uint32_t cluster) {
  const double per_pair = world > 1 ? 1.0 + 2.0 / std::max(topk, 1u) : 1.0 + 1.0 / std::max(topk, 1u);
  const double want = per_pair * sm_budget * 250.0 / std::max(k, 1u);
  const uint32_t cap = std::max(static_cast<uint32_t>(sm_budget / 4), 1u);
  const uint32_t blocks = std::min(std::max(static_cast<uint32_t>(want + 0.999), 1u), cap);
  return (blocks + cluster - 1) / cluster * cluster;
}

// Most (token, k) pairs of one part-2 combine block (comm_rows * topk): the combine stages their
// rows and weights in shared memory.
constexpr uint32_t kCombineMaxPairs = 4096;

// Part 2's tokens per combine / reduction block (one signal each): the configured count, else
// 64, fewer when top-k makes 64 tokens more pairs than a block holds.
inline uint32_t combine_rows(uint32_t configured, uint32_t topk) {
  if (configured != 0) return configured;
  return std::max(1u, std::min(64u, kCombineMaxPairs / std::max(topk, 1u)));
}

// Part 2's GEMM order: weight sweeps over the combine's rounds (MoeMappingBuffers::
// build_combine_order). Token order (0) interleaves every expert in each wave of tiles, which
// costs nothing while the experts' weights stay in L2 but re-streams them per tile row when they
// do not. Measured on the H200 (docs/PERF.md), Mixtral-8x7B part 2's grouped GEMM: world 1 (117
// MB per expert slice) 4107 µs in token order, 2808 µs with 4 sweeps (cuBLAS per-expert loop
// ~2900); world 8 virtual (14.7 MB) 4441 -> 3773 µs. So: token order when one expert's slice is
// at most 8 MB, else 4 sweeps (the combine of the last quarter runs after the GEMM).
inline uint32_t weight_sweeps(uint32_t n, uint32_t k) {
  return uint64_t(n) * k * 2 <= (8u << 20) ? 0u : 4u;
}

// Part 2's combine (MoeGemmRsConfig::combine): the configured one; automatic = the GEMM's
// epilogue where there are peers to reach by load and store (`staged` false: not the put_signal
// transport) and the fused GEMM runs (`method` not non-overlapped: the epilogue combine lives in
// the fused GEMM), else the combine blocks. Measured on an H100 (docs/PERF.md, fourteenth session,
// `bench moe`): at 8 virtual ranks the epilogue combine took 0.95x (Mixtral-8x7B) and 0.95x
// (Qwen1.5-MoE) the combine blocks' time; at world 1 1.09x and 2.3x, so one rank keeps the blocks.
// On 8 H200s the model predicts 1148 against 1775 us (Mixtral-8x7B layer, `plan moe --world 8`).
inline MoeCombine combine(MoeCombine configured, int world, bool staged = false, OpMethod method = OpMethod::kAuto) {
  if (configured != MoeCombine::kAuto) return configured;
  return world > 1 && !staged && method != OpMethod::kNonOverlapped ? MoeCombine::kEpilogue : MoeCombine::kBlocks;
}

}  // namespace tilelink::moe_policy
