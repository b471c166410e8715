// The SP attention kernel's online softmax, in fp32 registers of a consumer thread: the mask of a
// key tile's scores S, the running row max m and sum l, the factor alpha that rescales O, and the
// exponentials.
//
// Register layout (the GMMA accumulator of a 64-row warpgroup tile): a thread holds values of two
// query rows; accumulator element e lies in row (e / 2) % 2 of them, and the four threads of a quad
// share those rows, so row reductions end with two shuffles across the quad.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "ops/attention/sm90_flash_attention_tile_walk.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"

namespace tilelink::detail {

// 2^x on the MUFU unit with subnormal results flushed to zero: exp2f keeps them, at three more
// instructions per call on the FMA pipe, which the softmax shares with the rescaling. A
// probability below 2^-126 of the row's largest adds nothing to O or l in fp32.
CUTE_DEVICE float flash_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

CUTE_DEVICE float flash_quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
CUTE_DEVICE float flash_quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The mask of one item's scores: keys past the shard's end (a short last tile), and under the
// causal mask keys after the query, by global position (zig-zag shards work).
struct FlashMask {
  const SpAttentionPlan& plan;
  uint32_t q_pos[2];  // positions of this thread's two query rows (0 for rows past the shard's end)
  uint32_t q_first;   // position of the item's first query

  // The mask of the item with local query rows `rows` of `rank`; row_of: this thread's two rows
  // among them; spr: plan.seq_per_rank().
  static CUTE_DEVICE FlashMask of_item(const SpAttentionPlan& plan, uint32_t spr, uint32_t rank, RowRange rows,
                                       const int (&row_of)[2]) {
    uint32_t q_pos[2];
    for (int r = 0; r < 2; ++r) {
      const uint32_t local = rows.row0 + static_cast<uint32_t>(row_of[r]);
      q_pos[r] = local < spr ? plan.position(rank, local) : 0u;
    }
    const uint32_t q_first = plan.position(rank, rows.row0);
    return FlashMask{plan, {q_pos[0], q_pos[1]}, q_first};
  }

  // S = -inf where key tile `kt` hides a key from a query; only where the tile needs a mask.
  // tScS: (row, col) of every element of tSrS; spr: plan.seq_per_rank().
  template <int kBlockN, class FrgS, class CoordS>
  CUTE_DEVICE void apply(FrgS& tSrS, CoordS const& tScS, const FlashKeyTile& kt, uint32_t spr) const {
    using namespace cute;
    const uint32_t row_in_shard0 = kt.g0 - kt.shard * spr;
    const bool causal_cut = plan.causal && plan.position(kt.shard, row_in_shard0 + kt.rows - 1) > q_first;
    if (kt.rows < static_cast<uint32_t>(kBlockN) || causal_cut) {
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tSrS); ++e) {
        const uint32_t col = static_cast<uint32_t>(get<1>(tScS(e)));
        bool visible = col < kt.rows;
        if (causal_cut) visible = visible && plan.position(kt.shard, row_in_shard0 + col) <= q_pos[(e >> 1) & 1];
        if (!visible) tSrS(e) = -INFINITY;
      }
    }
  }
};

// The running state of this thread's two query rows: max m (of the unscaled scores), sum l (this
// thread's part of the quad's until reduce_l), and alpha = exp(m_old - m_new) of the last step.
struct FlashSoftmax {
  float l[2] = {0.f, 0.f};
  float m[2] = {-INFINITY, -INFINITY};
  float alpha[2] = {1.f, 1.f};

  // One key tile: the new running max, alpha, S <- P = exp(S - m_new), l. Scores of masked keys
  // are -inf.
  template <class FrgS>
  CUTE_DEVICE void step(FrgS& tSrS, float scale_log2) {
    using namespace cute;
    float mx[2] = {m[0], m[1]};
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < size(tSrS); ++e) mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], tSrS(e));
    float bias[2];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      mx[r] = flash_quad_max(mx[r]);
      // A row with no visible key yet keeps m = -inf: exponents against 0 give P = 0.
      alpha[r] = mx[r] == -INFINITY ? 1.f : flash_exp2((m[r] - mx[r]) * scale_log2);
      bias[r] = mx[r] == -INFINITY ? 0.f : mx[r] * scale_log2;
      m[r] = mx[r];
      l[r] *= alpha[r];
    }
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < size(tSrS); e += 2) {
      const int r = (e >> 1) & 1;
      tSrS(e) = flash_exp2(tSrS(e) * scale_log2 - bias[r]);
      tSrS(e + 1) = flash_exp2(tSrS(e + 1) * scale_log2 - bias[r]);
      l[r] += tSrS(e) + tSrS(e + 1);
    }
  }

  // O *= alpha of the last step, row by row.
  template <class FrgO>
  CUTE_DEVICE void rescale_o(FrgO& tOrO) const {
    using namespace cute;
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < size(tOrO); ++e) tOrO(e) *= alpha[(e >> 1) & 1];
  }

  // l of the whole row, in every thread of the quad.
  CUTE_DEVICE void reduce_l() {
    for (int r = 0; r < 2; ++r) l[r] = flash_quad_sum(l[r]);
  }
};

}  // namespace tilelink::detail
