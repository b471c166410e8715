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
// timing, and whichever of the two combines below runs (MoeCombine).
//
// The combine in combine blocks (MoeCombine::kBlocks, moe_combine_reduce_block):
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
//  - Staged (`staged`: the put-with-signal transport, where no kernel stores into a peer): a
//    combine for a peer stores into this rank's `send` staging instead (the token's global row)
//    and sets a local "combined" channel of the block; the rank's stream (moe_staged_put) waits for
//    each block in the combines' order and puts it into the owner's slot with the owner's receive
//    channel set behind it. The own block and the reductions are unchanged; the exit barrier runs
//    on the stream after the combine kernel and the puts.
//
// The combine in the GEMM's epilogue (MoeCombine::kEpilogue): no CTA beside the GEMM, and no GEMM
// CTA ever waits. An item is (token block g, column tile c): the block's tokens, the GEMM tile's
// columns. Tile row t counts on every item of the token blocks its span reaches
// (moe_tile_blocks: an over-estimate where a block in the span holds none of its pairs, which
// only delays that item); each item expects as many tiles (moe_block_tiles, counted once per call
// before the GEMM). The CTA whose finished tile (t, c) is the last to count on an item (an
// acq_rel fetch-add on the item's counter: it sees every other tile's data) combines the item --
// the same sums, in the same order, as a combine block -- into the owner's slot of this rank (the
// output with no peers) and notifies the owner on (sender, block, column tile)
// (moe_epilogue_combine_tile). After the GEMM, on the compute stream, the rank's CTAs sum its own
// blocks column tile by column tile over the P senders in rank order (moe_reduce_own_blocks; it
// waits only for GEMMs that never wait), then the exit barrier.
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

// Who combines each token's top-k rows in part 2 (MoeGemmRsConfig::combine; see the top):
// combine blocks beside the GEMM, the GEMM's epilogue, or automatic (moe_policy::combine).
enum class MoeCombine : uint32_t { kBlocks = 0, kEpilogue = 1, kAuto = 2 };

inline const char* to_string(MoeCombine c) {
  return c == MoeCombine::kBlocks ? "blocks" : c == MoeCombine::kEpilogue ? "epilogue" : "auto";
}

struct MoeRsPlan {
  RowShardMapping tokens;  // T/P tokens per rank, in blocks of comm_rows (one signal per block)
  uint32_t n = 0;          // columns of the output (the hidden size); rows of n floats, n % 4 == 0
  uint32_t max_tiles = 0;  // the mapping's tile-row capacity
  uint32_t bn = 0;         // the GEMM's tile width: a channel per tile, n_tiles() per tile row
  // Receive channels per (sender, block): 1 (a combine block's whole rows) or n_tiles() (the
  // epilogue combine's column tiles).
  uint32_t recv_columns = 1;
  // Combine blocks only: peers' combines staged in this rank's memory and put by the stream (above).
  bool staged = false;

  TL_HOST_DEVICE uint32_t world() const { return tokens.world; }
  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  // Tile (row t of the sorted rows, column tile c).
  TL_HOST_DEVICE uint32_t tile_channel(uint32_t t, uint32_t c) const {
    return exit_barrier_channels(world()) + t * n_tiles() + c;
  }
  // On owner q: sender s's block b (b indexes q's blocks), column tile c of recv_columns.
  TL_HOST_DEVICE uint32_t recv_channel(uint32_t sender, uint32_t block, uint32_t c = 0) const {
    return tile_channel(max_tiles, 0) + (sender * tokens.chunks_per_rank() + block) * recv_columns + c;
  }
  // The columns of receive column tile c: all n with one, else the GEMM tile's.
  TL_HOST_DEVICE ColRange recv_cols(uint32_t c) const {
    return recv_columns == 1 ? ColRange{0, n} : tile_cols(c, bn, n);
  }
  // Staged: token block g (global numbering) is combined in this rank's `send` staging.
  TL_HOST_DEVICE uint32_t combined_channel(uint32_t g) const { return recv_channel(world(), 0) + g; }
  TL_HOST_DEVICE uint32_t num_channels() const {
    return staged ? combined_channel(tokens.num_channels()) : recv_channel(world(), 0);
  }
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

// What channel `channel` of a slice with `plan` carries, in words, for timeout reports (the op's
// slice describer): the exit barrier, a GEMM tile, a sender's part of a token block, or a staged
// block of this rank's combine.
std::string describe_moe_rs_channel(const MoeRsPlan& plan, uint32_t channel);

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
      if (plan.staged && owner != rank) {  // in `send`: the stream puts it (moe_staged_put)
        ctx.producer_tile_notify(sig, plan.combined_channel(plan.tokens.channel(owner, b)));
      } else if (world > 1) {
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
  if (world > 1 && !plan.staged) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

// Staged combine, one rank's stream beside the combine kernel (which must not be on this stream:
// its reductions wait for the peers' puts): for each round and peer owner in the combines' order,
// wait for the block's combine in `send` (tokens x n elements of `elem_bytes`, global rows), then
// put it into the owner's slot of this rank in `recv` with the owner's receive channel behind it.
// The caller runs the exit barrier on the stream after this and the combine kernel.
template <class HostCtx>
void moe_staged_put(HostCtx& h, const MoeRsPlan& plan, const SignalView& sig, const SymmetricView& heap,
                    const void* send, void* recv, uint32_t elem_bytes) {
  const uint32_t rank = static_cast<uint32_t>(h.rank()), world = plan.world();
  const uint64_t row_bytes = uint64_t(plan.n) * elem_bytes;
  for (uint32_t b = 0; b < plan.tokens.chunks_per_rank(); ++b) {
    for (uint32_t pos = 0; pos + 1 < world; ++pos) {
      const uint32_t owner = swizzled_peer(rank, 1 + pos, world);
      const uint32_t g = plan.tokens.channel(owner, b);
      const RowRange rows = plan.tokens.rows_of_channel(g);
      h.rank_wait(sig, plan.combined_channel(g));
      char* dst = static_cast<char*>(recv) +
                  (uint64_t(rank) * plan.tokens.rows_per_rank + rows.row0 - owner * plan.tokens.rows_per_rank) * row_bytes;
      const uint64_t bytes = uint64_t(rows.rows) * row_bytes;
      h.rank_put_signal(heap, dst, static_cast<const char*>(send) + uint64_t(rows.row0) * row_bytes, bytes,
                        TileShape{1, static_cast<uint32_t>(bytes)}, sig, plan.recv_channel(rank, b),
                        static_cast<int>(owner));
    }
  }
}

// ---- the combine in the GEMM's epilogue (MoeCombine::kEpilogue; see the top) -------------------

// The token blocks (global channels of plan.tokens) that tile row t's span reaches; none for a
// tile of padding only.
TL_HOST_DEVICE ChannelRange moe_tile_blocks(const MoeRsPlan& plan, const MoeMappingView& m, uint32_t t) {
  if (m.tile_span[t] == 0) return ChannelRange{0, 0};
  return plan.tokens.channels_for_rows(m.tile_token0[t], m.tile_span[t]);
}

// How many of the first `tiles` tile rows reach token block g (moe_tile_blocks): the tiles each
// of g's items (g, column tile) waits to be counted on.
TL_HOST_DEVICE uint32_t moe_block_tiles(const MoeRsPlan& plan, const MoeMappingView& m, uint32_t tiles,
                                        uint32_t g) {
  uint32_t count = 0;
  for (uint32_t t = 0; t < tiles; ++t) {
    const ChannelRange r = moe_tile_blocks(plan, m, t);
    count += g >= r.first && g < r.first + r.count ? 1u : 0u;
  }
  return count;
}

// A GEMM CTA after its tile (t, c) has landed: arrive(g, c) counts the tile on item (g, c) for each
// token block g it reaches -- an acq_rel fetch-add that returns true for the item's last tile --
// and for those, combine(owner, rows, c) stores the weighted top-k sums of token rows `rows`
// (global numbering), columns of tile c, into the owner's slot of this rank (the output with no
// peers), and the owner is notified on (this rank, block, c). The GPU's epilogue issues the
// arrivals of a tile together, then combines; the outcome is the same.
TL_PROTOCOL
template <class Ctx, class Arrive, class Combine>
TL_HOST_DEVICE void moe_epilogue_combine_tile(Ctx& ctx, const MoeRsPlan& plan, const MoeMappingView& m,
                                              const SignalView& sig, uint32_t t, uint32_t c, Arrive&& arrive,
                                              Combine&& combine) {
  const uint32_t rank = static_cast<uint32_t>(ctx.rank()), world = plan.world();
  const ChannelRange blocks = moe_tile_blocks(plan, m, t);
  for (uint32_t g = blocks.first; g < blocks.first + blocks.count; ++g) {
    if (!arrive(g, c)) continue;
    const uint32_t owner = plan.tokens.rank_of_channel(g);
    combine(owner, plan.tokens.rows_of_channel(g), c);
    if (world > 1) {
      ctx.peer_tile_notify(sig, plan.recv_channel(rank, g - owner * plan.tokens.chunks_per_rank(), c),
                           static_cast<int>(owner));
    } else {
      ctx.sync();
    }
  }
}

// After the rank's GEMM (with peers): item (own block b, column tile c) waits for the P senders'
// parts and sum_tile(row0, rows, cols) sums the slots' rows [row0, row0 + rows) (within the
// rank's tokens), columns `cols`, in rank order into the output; then the exit barrier. It waits
// only on combines that GEMM CTAs make without waiting.
TL_PROTOCOL
template <class Ctx, class SumTile>
TL_HOST_DEVICE void moe_reduce_own_blocks(Ctx& ctx, const MoeRsPlan& plan, const SignalView& sig,
                                          SumTile&& sum_tile) {
  const uint32_t items = plan.tokens.chunks_per_rank() * plan.recv_columns;
  for (uint32_t i = ctx.block(); i < items; i += ctx.num_blocks()) {
    const uint32_t b = i / plan.recv_columns, c = i % plan.recv_columns;
    for (uint32_t s = 0; s < plan.world(); ++s) {
      ctx.consumer_tile_wait(sig, plan.recv_channel(s, b, c), 1, 1, static_cast<int32_t>(i));
    }
    const RowRange rows = plan.tokens.rows_of_channel(plan.tokens.channel(0, b));
    sum_tile(rows.row0, rows.rows, plan.recv_cols(c));
  }
  rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
