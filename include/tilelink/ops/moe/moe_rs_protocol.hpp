// MoE, part 2 (grouped GEMM + top-k weighted reduce + reduce-scatter): the protocol.
//
// Every rank holds, in the expert-sorted row order of the mapping (moe_mapping.hpp), the rows of
// the intermediate activations H (its slice of the intermediate dimension, k columns) and each
// expert's slice of the second weight W2_e (k x n). The op returns to rank q, for each token t it
// owns (rows [q T/P, (q+1) T/P) of the tokens):
//
//   out[t] = sum over ranks r (0..P-1) of  sum over j (0..topk-1) of  weight[t][j] * (H_r[row(t, j)] * W2_r[e(t, j)])
//
// in exactly that order (fp32 accumulation): the same inputs give the same bits, whatever the
// timing.
//
//  - Compute blocks run the grouped GEMM tile by tile (bm sorted rows x bn columns) into the
//    rank's local Y (sorted rows x n) and notify each finished tile on its own channel
//    (producer_tile_notify; a tile the routing of a call does not use is simply not notified).
//  - Combine blocks walk the tokens in rounds: round b is token block b (comm_rows tokens) of
//    every owner, in swizzled order (rank+1's first, its own last), then -- with peers -- the
//    reduction of the rank's own block b. A combine waits for every tile of every tile row
//    holding one of the block's pairs (consumer_tiles_wait, spread over the block's lanes),
//    stores each token's weighted sum of its top-k rows (j order) straight into the owner's
//    receive slot of this rank (a remote store through the symmetric heap; with no peers, into
//    the output) and notifies the owner (peer_tile_notify on (sender, block)). The reduction
//    waits for the P senders' parts of the block and sums the slots in rank order. Round by
//    round, every owner's reductions follow the GEMM instead of all waiting for its end (the
//    GEMM's tile order follows the rounds: make the tiles of round 0 first). Combines never wait
//    on reductions, so a block waiting in a reduction cannot deadlock the others. Then the exit
//    barrier (slots are rewritten by the next call).
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
  uint32_t max_tiles = 0;  // the mapping's tile-row capacity
  uint32_t bn = 0;         // the GEMM's tile width: a channel per tile, n_tiles() per tile row

  TL_HOST_DEVICE uint32_t world() const { return tokens.world; }
  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  // Tile (row t of the sorted rows, column tile c).
  TL_HOST_DEVICE uint32_t tile_channel(uint32_t t, uint32_t c) const {
    return exit_barrier_channels(world()) + t * n_tiles() + c;
  }
  // On owner q: sender s's block b (b indexes q's blocks).
  TL_HOST_DEVICE uint32_t recv_channel(uint32_t sender, uint32_t block) const {
    return tile_channel(max_tiles, 0) + sender * tokens.chunks_per_rank() + block;
  }
  TL_HOST_DEVICE uint32_t num_channels() const { return recv_channel(world(), 0); }
  // recv on every rank: world slots of T/P rows x n elements; slot s holds sender s's partial.
  template <class T>
  TL_HOST_DEVICE T* slot(T* recv, uint32_t sender) const {
    return recv + uint64_t(sender) * tokens.rows_per_rank * n;
  }
  // Work items per round: the world's combines and, with peers, the reduction.
  TL_HOST_DEVICE uint32_t items_per_round() const { return world() > 1 ? world() + 1 : 1; }
  TL_HOST_DEVICE uint32_t items() const { return tokens.chunks_per_rank() * items_per_round(); }
  // The round of token t (global numbering) in `rank`'s work, times the world, plus the position
  // of its owner among the round's combines: the order in which `rank` needs the tiles.
  TL_HOST_DEVICE uint32_t combine_key(uint32_t rank, uint32_t token) const {
    const uint32_t owner = token / tokens.rows_per_rank;
    const uint32_t round = (token - owner * tokens.rows_per_rank) / tokens.comm_rows;
    return round * world() + (owner + 2 * world() - rank - 1) % world();
  }
  TL_HOST_DEVICE uint32_t combine_keys() const { return tokens.chunks_per_rank() * world(); }
};

// Combine blocks of one rank (see the top): round by round, combine(owner, rows) stores the
// weighted top-k sums of the token rows `rows` (global numbering) into the owner's slot of this
// rank (plan.slot(recv, rank) on the owner, through the heap; with no peers, the output) once the
// tile rows of all their pairs are done (pair_row: tokens x topk, the sorted row of each pair);
// with peers, sum_block(b, row0, rows) then sums the P slots' rows [row0, row0 + rows) (within
// the rank's tokens) in rank order into the output once all have arrived.
TL_PROTOCOL
template <class Ctx, class Combine, class SumBlock>
TL_HOST_DEVICE void moe_combine_reduce_block(Ctx& ctx, const MoeRsPlan& plan, const MoeMappingView& m,
                                             const uint32_t* pair_row, const SignalView& sig, Combine&& combine,
                                             SumBlock&& sum_block) {
  const uint32_t rank = static_cast<uint32_t>(ctx.rank()), world = plan.world();
  for (uint32_t i = ctx.block(); i < plan.items(); i += ctx.num_blocks()) {
    const uint32_t b = i / plan.items_per_round(), pos = i % plan.items_per_round();
    if (pos < world) {
      const uint32_t owner = swizzled_peer(rank, 1 + pos, world);
      const RowRange rows = plan.tokens.rows_of_channel(plan.tokens.channel(owner, b));
      const uint64_t pair0 = uint64_t(rows.row0) * m.topk;
      ctx.consumer_tiles_wait(sig, plan.tile_channel(0, 0), rows.rows * m.topk,
                              [&](uint32_t p) { return pair_row[pair0 + p] / m.bm; }, plan.n_tiles());
      combine(owner, rows);
      if (world > 1) {
        ctx.peer_tile_notify(sig, plan.recv_channel(rank, b), static_cast<int>(owner));
      } else {
        ctx.sync();  // the block's stores of this item before its next item's staging
      }
    } else {
      for (uint32_t s = 0; s < world; ++s) {
        ctx.consumer_tile_wait(sig, plan.recv_channel(s, b), 1, 1, static_cast<int32_t>(b));
      }
      const RowRange rows = plan.tokens.rows_of_channel(plan.tokens.channel(0, b));
      sum_block(b, rows.row0, rows.rows);
    }
  }
  if (world > 1) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
