// SP attention's blocks with naive inner products: the chunk order, causal skips and waits of
// sp_attention_protocol.hpp, run by the CPU protocol executor in CI.
#pragma once

#include <cmath>
#include <cstdint>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/testing/naive_dot.hpp"

namespace tilelink {

// One query row's online-softmax step over one chunk (gathered rows `keys`): fold the chunk's
// visible keys into (m, l, o). A row that sees no key of the chunk is left as it is.
TL_HOST_DEVICE void sp_attention_row_step(const SpAttentionPlan& plan, const float* q_row, uint32_t q_pos,
                                          const void* kv, RowRange keys, uint32_t kv_h, float scale, float& m,
                                          float& l, float* o_row) {
  const uint32_t d = plan.head_dim;
  auto visible = [&](uint32_t g) { return !plan.causal || plan.kv_position(g) <= q_pos; };
  float chunk_max = -INFINITY;
  for (uint32_t g = keys.row0; g < keys.row0 + keys.rows; ++g) {
    if (!visible(g)) continue;
    chunk_max = fmaxf(chunk_max, scale * naive_dot(q_row, plan.kv_row(kv, g) + plan.k_offset(kv_h), d, 1, 0));
  }
  if (chunk_max == -INFINITY) return;
  const float m_new = fmaxf(m, chunk_max);
  const float alpha = expf(m - m_new);  // 0 on the first chunk (m = -inf)
  l *= alpha;
  for (uint32_t e = 0; e < d; ++e) o_row[e] *= alpha;
  for (uint32_t g = keys.row0; g < keys.row0 + keys.rows; ++g) {
    if (!visible(g)) continue;
    const float p = expf(scale * naive_dot(q_row, plan.kv_row(kv, g) + plan.k_offset(kv_h), d, 1, 0) - m_new);
    l += p;
    const float* v = plan.kv_row(kv, g) + plan.v_offset(kv_h);
    for (uint32_t e = 0; e < d; ++e) o_row[e] += p * v[e];
  }
  m = m_new;
}

// Attention blocks of one rank, with naive inner products standing in for the tensor-core
// mainloop (whose producer does the same waits in the same order). Float data:
//   q    local Q, seq_per_rank x q_heads x head_dim;
//   kv   gathered K/V rows (ag.pitch bytes apart), world * seq_per_rank of them;
//   o    local O, seq_per_rank x q_heads x head_dim (also the accumulator until the last chunk);
//   lse  local LSE, q_heads x seq_per_rank;
//   ml   with plan.local_first: scratch for (m, l) between the passes, 2 x q_heads x seq_per_rank.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void sp_attention_block(Ctx& ctx, const SpAttentionPlan& plan, const SignalView& sig, const float* q,
                                       const void* kv, float* o, float* lse, float* ml = nullptr) {
  const Lanes lanes = ctx.lanes();
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const uint32_t d = plan.head_dim;
  const uint64_t token_elems = uint64_t(plan.q_heads) * d;
  const uint64_t lse_elems = uint64_t(plan.q_heads) * plan.seq_per_rank();
  const float scale = 1.f / sqrtf(float(d));
  // Chunks [0, own) of the arrival order are the rank's own shard (arrival step 0).
  const uint32_t own = plan.ag.map.chunks_per_rank(), chunks = plan.num_kv_chunks();
  float m[kSpAttentionMaxBq];
  float l[kSpAttentionMaxBq];
  for (uint32_t pass = plan.local_first ? 0 : 1; pass < 2; ++pass) {
    // Pass 0 folds the own shard, pass 1 the rest (everything without the local pass).
    const uint32_t j0 = plan.local_first && pass == 1 ? own : 0;
    const uint32_t j1 = plan.local_first && pass == 0 ? own : chunks;
    if (j0 == j1) continue;  // world 1: the local pass was everything
    for (uint32_t i = ctx.block(); i < plan.num_items(); i += ctx.num_blocks()) {
      const SpAttentionItem it = plan.item(i);
      const RowRange rows = plan.q_rows(it.q_block);
      const uint32_t kv_h = plan.kv_head(it.head);
      auto q_row = [&](uint32_t r) { return q + (rows.row0 + r) * token_elems + it.head * d; };
      auto o_row = [&](uint32_t r) { return o + (rows.row0 + r) * token_elems + it.head * d; };
      const uint64_t at = uint64_t(it.head) * plan.seq_per_rank() + rows.row0;  // the item's LSE / (m, l) slots
      for (uint32_t r = lanes.id; r < rows.rows; r += lanes.count) {
        if (j0 == 0) {
          m[r] = -INFINITY;
          l[r] = 0.f;
          for (uint32_t e = 0; e < d; ++e) o_row(r)[e] = 0.f;
        } else {
          m[r] = ml[at + r];
          l[r] = ml[lse_elems + at + r];
        }
      }
      for (uint32_t j = j0; j < j1; ++j) {
        const uint32_t ch = plan.kv_chunk(rank, j);
        if (!plan.chunk_needed(rank, rows, ch)) continue;
        const RowRange keys = plan.ag.map.rows_of_channel(ch);
        all_gather_wait_rows(ctx, plan.ag, sig, keys.row0, keys.rows, static_cast<int32_t>(i));
        for (uint32_t r = lanes.id; r < rows.rows; r += lanes.count) {
          sp_attention_row_step(plan, q_row(r), plan.position(rank, rows.row0 + r), kv, keys, kv_h, scale, m[r],
                                l[r], o_row(r));
        }
      }
      for (uint32_t r = lanes.id; r < rows.rows; r += lanes.count) {
        if (j1 < chunks) {  // the item resumes in the next pass
          ml[at + r] = m[r];
          ml[lse_elems + at + r] = l[r];
          continue;
        }
        // Every query row sees at least one key (causal: itself, in its own shard), so l > 0.
        for (uint32_t e = 0; e < d; ++e) o_row(r)[e] /= l[r];
        lse[at + r] = m[r] + logf(l[r]);
      }
    }
  }
}

}  // namespace tilelink
