// The vector loops of MoE part 2's memory-bound sums, one place for the combine blocks
// (moe_combine.cu), the epilogue combine (sm90_moe_gemm.cuh) and the owners' reductions: the same
// code, so the same bits whichever runs them. Internal to the MoE ops.
#pragma once

#include <cstdint>

#include "ops/common/bf16x8.cuh"
#include "tilelink/core/macros.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"

namespace tilelink::detail {

// Top-k weighted sums of `total` 16-byte vectors (8 bf16 each) by `threads` threads, kVec vectors
// per thread and step (kVec * topk loads in flight): for each vector e of this thread,
// store(e, bf16(sum over j = 0..topk-1 in order of w_j * v_j)) in fp32 (fma_bf16x8), where
// load(e, j, &v, &w) gives pair j's vector and routing weight.
template <int kVec, class Load, class Store>
TL_DEVICE void topk_weighted_sums(uint32_t total, uint32_t thread, uint32_t threads, uint32_t topk, Load&& load,
                                  Store&& store) {
  for (uint32_t e0 = thread; e0 < total; e0 += kVec * threads) {
    float acc[kVec][8] = {};
    for (uint32_t j = 0; j < topk; ++j) {
      uint4 v[kVec];
      float w[kVec];
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        if (e0 + u * threads < total) load(e0 + u * threads, j, v[u], w[u]);
      }
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        if (e0 + u * threads < total) fma_bf16x8(acc[u], w[u], v[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      if (e0 + u * threads < total) store(e0 + u * threads, pack_bf16x8(acc[u]));
    }
  }
}

// The owner's sum of rows [row0, row0 + rows) (within its tokens), columns `cols`, over the P
// senders' slots of `recv` in rank order (fp32, bf16 out) into `out` (tokens_per_rank x n bf16),
// by `threads` threads, kVec vectors each per step.
template <int kVec>
TL_DEVICE void sum_sender_slots(const MoeRsPlan& plan, const __nv_bfloat16* recv, uint4* out, uint32_t row0,
                                uint32_t rows, ColRange cols, uint32_t thread, uint32_t threads) {
  const uint32_t row_vectors = plan.n / 8, item_vectors = cols.cols / 8, total = rows * item_vectors;
  // Vector e of the rows within a slot (and the output): recomputed where used, fewer registers.
  auto at = [&](uint32_t e) {
    return uint64_t(row0 + e / item_vectors) * row_vectors + cols.col0 / 8 + e % item_vectors;
  };
  for (uint32_t e0 = thread; e0 < total; e0 += kVec * threads) {
    float acc[kVec][8] = {};
    for (uint32_t s = 0; s < plan.world(); ++s) {
      const uint4* slot = reinterpret_cast<const uint4*>(plan.slot(recv, s));
      uint4 v[kVec];
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        if (e0 + u * threads < total) v[u] = slot[at(e0 + u * threads)];
      }
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        if (e0 + u * threads < total) add_bf16x8(acc[u], v[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      if (e0 + u * threads < total) out[at(e0 + u * threads)] = pack_bf16x8(acc[u]);
    }
  }
}

}  // namespace tilelink::detail
