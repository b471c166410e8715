// MoE, part 2 (grouped GEMM + top-k weighted reduce + reduce-scatter): the protocol.
//
// Every rank holds, in the expert-sorted row order of the mapping (moe_mapping.hpp), the rows of
// the intermediate activations H (its slice of the intermediate dimension, k columns) and each
// expert's slice of the second weight W2_e (k x n). The op returns to rank q, for each token t it
// owns (rows [q T/P, (q+1) T/P) of the tokens):
//
//   out[t] = sum over ranks r (0..P-1) of  sum over j (0..topk-1) of  weight[t][j] * (H_r[row(t, j)] * W2_r[e(t, j)])
//
// in exactly that order (fp32): the same inputs give the same bits, whatever the timing.
//
//  - Compute blocks run the grouped GEMM tile by tile into the rank's local Y (sorted rows x n)
//    and mark each finished tile (producer_tile_notify on the tile's channel, this rank).
//  - Combine blocks walk the tokens in blocks of comm_rows, owners in swizzled order (rank+1's
//    first, its own last); for each token they wait for the tiles holding its top-k rows, sum the
//    rows weighted in j order, and push the block into the owner's receive slot of this rank
//    (tile_push_data), then notify the owner (peer_tile_notify on (sender, block)).
//  - Reduction blocks of the owner sum the P slots of each of its token blocks in rank order once
//    all have arrived, then pass the exit barrier (slots are rewritten in the next call).
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

struct MoeRsPlan {
  RowShardMapping tokens;  // T/P tokens per rank, in blocks of comm_rows (one signal per block)
  uint32_t n = 0;          // columns of the output (the hidden size); rows of n floats, n % 4 == 0
  uint32_t max_tiles = 0;  // the mapping's tile capacity (one channel per tile)

  TL_HOST_DEVICE uint32_t world() const { return tokens.world; }
  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t tile_channel(uint32_t tile) const { return exit_barrier_channels(world()) + tile; }
  // On owner q: sender s's block b (b indexes q's blocks).
  TL_HOST_DEVICE uint32_t recv_channel(uint32_t sender, uint32_t block) const {
    return tile_channel(max_tiles) + sender * tokens.chunks_per_rank() + block;
  }
  TL_HOST_DEVICE uint32_t num_channels() const { return recv_channel(world(), 0); }
  // recv on every rank: world slots of T/P rows x n floats; slot s holds sender s's partial.
  TL_HOST_DEVICE float* slot(float* recv, uint32_t sender) const {
    return recv + uint64_t(sender) * tokens.rows_per_rank * n;
  }
};

// Compute blocks of one rank: the grouped GEMM, tiles in index order (any order is correct: the
// combine waits per tile). h: m.rows() x k floats (sorted rows), w2: experts x k x n floats,
// y: m.rows() x n floats; padding rows are left unwritten (no token reads them).
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void moe_group_gemm_rs_compute_block(Ctx& ctx, const MoeRsPlan& plan, const MoeMappingView& m,
                                                    const SignalView& sig, const float* h, uint32_t k,
                                                    const float* w2, float* y) {
  const Lanes lanes = ctx.lanes();
  for (uint32_t t = ctx.block(); t < m.num_tiles; t += ctx.num_blocks()) {
    const float* w_e = w2 + uint64_t(m.tile_expert[t]) * k * plan.n;
    for (uint32_t e = lanes.id; e < m.bm * plan.n; e += lanes.count) {
      const uint32_t row = t * m.bm + e / plan.n, col = e % plan.n;
      if (m.row_pair[row] == kPadRow) continue;
      y[uint64_t(row) * plan.n + col] = naive_dot(h + uint64_t(row) * k, w_e, k, plan.n, col);
    }
    ctx.producer_tile_notify(sig, plan.tile_channel(t));
  }
}

// Combine blocks of one rank: token blocks of every owner (rank+1's first, its own last), each
// token's top-k rows weighted and summed in j order into `scratch` (comm_rows x n floats per
// block instance: scratch + block() * comm_rows * n), then pushed to the owner's slot of this rank
// in `recv` (symmetric). pair_row: tokens x topk, the sorted row of each pair; weights: the same
// shape.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void moe_combine_scatter_block(Ctx& ctx, const MoeRsPlan& plan, const MoeMappingView& m,
                                              const uint32_t* pair_row, const float* weights, const SignalView& sig,
                                              const SymmetricView& heap, const float* y, float* scratch, float* recv) {
  const Lanes lanes = ctx.lanes();
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const uint32_t blocks = plan.tokens.chunks_per_rank();
  float* mine = scratch + uint64_t(ctx.block()) * plan.tokens.comm_rows * plan.n;
  for (uint32_t i = ctx.block(); i < plan.world() * blocks; i += ctx.num_blocks()) {
    const uint32_t owner = swizzled_peer(rank, 1 + i / blocks, plan.world());
    const uint32_t b = i % blocks;
    const RowRange rows = plan.tokens.rows_of_channel(plan.tokens.channel(owner, b));  // global token rows
    for (uint32_t r = 0; r < rows.rows; ++r) {
      for (uint32_t j = 0; j < m.topk; ++j) {
        const uint32_t tile = pair_row[uint64_t(rows.row0 + r) * m.topk + j] / m.bm;
        ctx.consumer_tile_wait(sig, plan.tile_channel(tile), 1, 1, static_cast<int32_t>(tile));
      }
    }
    for (uint32_t e = lanes.id; e < rows.rows * plan.n; e += lanes.count) {
      const uint32_t token = rows.row0 + e / plan.n, col = e % plan.n;
      float acc = 0.f;
      for (uint32_t j = 0; j < m.topk; ++j) {
        const uint64_t pair = uint64_t(token) * m.topk + j;
        acc += weights[pair] * y[uint64_t(pair_row[pair]) * plan.n + col];
      }
      mine[uint64_t(e / plan.n) * plan.n + col] = acc;
    }
    float* dst = plan.slot(recv, rank) + uint64_t(rows.row0 - owner * plan.tokens.rows_per_rank) * plan.n;
    ctx.sync();
    ctx.tile_push_data(heap, {dst, uint64_t(plan.n) * 4u}, static_cast<int>(owner), TileShape{rows.rows, plan.n * 4u},
                       {mine, uint64_t(plan.n) * 4u});
    ctx.peer_tile_notify(sig, plan.recv_channel(rank, b), static_cast<int>(owner));
  }
}

// Reduction blocks of one owner: each of its token blocks once every sender's slot has arrived,
// summed in rank order into out (T/P x n floats); then the exit barrier.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void moe_rs_reduce_block(Ctx& ctx, const MoeRsPlan& plan, const SignalView& sig, float* recv,
                                        float* out) {
  const Lanes lanes = ctx.lanes();
  for (uint32_t b = ctx.block(); b < plan.tokens.chunks_per_rank(); b += ctx.num_blocks()) {
    for (uint32_t s = 0; s < plan.world(); ++s) {
      ctx.consumer_tile_wait(sig, plan.recv_channel(s, b), 1, 1, static_cast<int32_t>(b));
    }
    const uint32_t row0 = b * plan.tokens.comm_rows;
    const uint32_t rows = plan.tokens.rows_per_rank - row0 < plan.tokens.comm_rows ? plan.tokens.rows_per_rank - row0
                                                                                   : plan.tokens.comm_rows;
    for (uint32_t e = lanes.id; e < rows * plan.n; e += lanes.count) {
      const uint64_t at = uint64_t(row0) * plan.n + e;
      float acc = 0.f;
      for (uint32_t s = 0; s < plan.world(); ++s) acc += plan.slot(recv, s)[at];
      out[at] = acc;
    }
  }
  rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
