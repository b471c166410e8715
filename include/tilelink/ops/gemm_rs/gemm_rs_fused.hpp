// GEMM+RS as the fused kernel runs it: the protocol of its three scatter variants.
//
// Rank r computes its partial P_r = A_r * B_r^T (M x N) tile by tile, owner blocks of other ranks
// first (rank r starts with r + 1's rows, its own last). Owner q ends with rows
// [q * R, min((q + 1) * R, M)) of sum_r P_r, R = ceil(M / P) (torch.chunk's split: any M, ranks
// past the end own no rows), summed in rank order 0..P-1 in fp32 whatever the arrival order: the
// same inputs give bit-identical outputs, and all three variants give the same bits.
//
// Any M: the GEMM walks each owner block in its own tile rows (ceil(R / bm) of them), so a tile
// never straddles two owners; a block's last tile row is partial, and the rows it would have past
// the block (past M, or the next owner's) are never reduced or copied. Symmetric buffers hold P
// blocks of R rows (P * R >= M), the rows of block q at q * R.
//
// Where a finished tile goes (GemmRsScatter), with `buf` the op's symmetric P * R x N buffer:
//  - kPull: into r's own buf (row = global row); the epilogue notifies the tile's group on r
//    (producer_tile_notify). Owner q's reduction waits on every sender's channel (peer_tile_wait)
//    and reads the senders' buf rows of its block remotely.
//  - kEpiloguePush: into owner q's buf, slot r (rows [r * R, (r + 1) * R) hold sender r's
//    part); the epilogue notifies q (peer_tile_notify). q's reduction waits on its own channel for
//    all senders' arrivals and reads only local memory.
//  - kCopyEngine: as kPull into r's own buf; the copy engine, on r's comm stream, waits for each
//    finished group (rank_wait), puts it into q's receive buffer `recv`, slot r,
//    and sets q's channel for (sender r, group) behind them (rank_put_signal). q's reduction reads
//    its own block from its buf, every other sender's slot from its recv.
//
// Signal granularity (decoupled from the tile size): one channel per GEMM tile, per row of tiles,
// or per owner block. The copy engine moves whole groups, which must be contiguous rows: per tile
// row or per owner block.
//
// Who sums (GemmRsReducer): reduction blocks beside the GEMM, or -- kEpilogue -- the GEMM block
// that computed the owner's own part of a tile, right after storing it, with every GEMM block
// taking part and no SM set aside; the reduction blocks then only count the sums and pass the
// exit barrier.
//
// Across calls: in call e+1 a rank's GEMM overwrites its buf and its copies overwrite peers' recv
// slots, which owners read in call e; the reduction's exit barrier (every rank done reading)
// precedes the rank's next GEMM and copies.
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

// Signal granularity (decoupled from the tile size): one channel per tile, per row of tiles, or
// per rank (one channel for an owner's whole block).
enum class SignalGranularity : uint32_t { kTile = 0, kTileRow = 1, kRank = 2 };

// kAuto: in a configuration only (GemmRsConfig), the op's rule (gemm_rs_policy::path); a plan's
// scatter is always one of the other three.
enum class GemmRsScatter : uint32_t { kPull = 0, kEpiloguePush = 1, kCopyEngine = 2, kAuto = 3 };

// Who sums an owner's tiles: reduction CTAs beside the GEMM (kBlocks: `reduce_blocks` SMs taken
// from the GEMM for the whole call), or the owner's own GEMM CTAs, each right after the epilogue
// of one of its own tiles (kEpilogue: no SM taken; the reduction is spread over the GEMM, one own
// tile row per round over the owners).
// kAuto: in a configuration only (GemmRsConfig), the op's rule (gemm_rs_policy::path).
// kEpilogue needs a signal per tile (so pull or push, not the copy engine's groups): an own tile's
// sum waits for its own part too, which with coarser groups would include later tiles of its own
// GEMM (found by the protocol fuzzer: a tile-row group deadlocks).
enum class GemmRsReducer : uint32_t { kBlocks = 0, kEpilogue = 1, kAuto = 2 };

// When a tile pushed into its owner (kEpiloguePush) is announced. kImmediate: the storing warp
// waits for the tile's stores to land, then notifies; the CTA stalls for the store's trip over
// the link. kDeferred: the CTA goes on to its next tile's mainloop while the store drains, and
// announces the pending tile at its next tile's epilogue (before that tile's store) or at its
// end. No CTA waits while it holds a pending notify (an own tile's sum waits only after its
// epilogue began). But the CTAs of a cluster share their mainloop's operand stages: one waiting
// in an own tile's sum stops its cluster-mates' next mainloop, and with it their flush. So a
// tile whose cluster holds an own tile row is announced at once (GemmRsFusedPlan::
// may_defer_notify): found by review; a pair [peer tile, own tile] on every rank deadlocks.
enum class GemmRsPushNotify : uint32_t { kDeferred = 0, kImmediate = 1 };

// The tool's names: --granularity tile|row|rank.
inline const char* to_string(SignalGranularity g) {
  return g == SignalGranularity::kTile ? "tile" : g == SignalGranularity::kTileRow ? "row" : "rank";
}

inline const char* to_string(GemmRsScatter s) {
  return s == GemmRsScatter::kPull           ? "pull"
         : s == GemmRsScatter::kEpiloguePush ? "push"
         : s == GemmRsScatter::kCopyEngine   ? "ce"
                                             : "auto";
}

inline const char* to_string(GemmRsReducer r) {
  return r == GemmRsReducer::kBlocks ? "blocks" : r == GemmRsReducer::kEpilogue ? "epilogue" : "auto";
}

inline const char* to_string(GemmRsPushNotify n) { return n == GemmRsPushNotify::kDeferred ? "deferred" : "immediate"; }

struct GemmRsFusedPlan {
  uint32_t world = 1;
  uint32_t m = 0;              // rows of the product over all owners
  uint32_t rows_per_rank = 0;  // R = ceil(M / P): the owner blocks' pitch (set by set_rows)
  uint32_t n = 0;
  uint32_t bm = 0;             // GEMM tile
  uint32_t bn = 0;
  SignalGranularity granularity = SignalGranularity::kTile;
  GemmRsScatter scatter = GemmRsScatter::kPull;
  GemmRsReducer reducer = GemmRsReducer::kBlocks;
  uint32_t band = 1;           // tile rows the GEMM walks together along N (its rasterization band)
  // kEpiloguePush: a pushed peer tile's notify waits for the block's next tile (GemmRsPushNotify::
  // kDeferred); false: right after its store has landed. Read only with the push.
  bool defer_push_notify = false;
  // The decomposed method (gemm_rs_decomposed): the owner's reduction follows its own block's GEMM
  // in stream order, so it does not wait for its own part (no tile of it is notified).
  bool own_part_in_order = false;
  // The exit barrier runs on the stream after the reduction kernel (rank_exit_barrier_stream: its
  // notifies follow the world's transport), not in the kernel's blocks (peer stores): the
  // put-with-signal transport, where the copy-engine paths reach peers only through NVSHMEM.
  bool exit_on_stream = false;

  // make_gemm_rs_m_order's entry at `pos` (< world * m_tiles()) for `rank`, and its inverse, the
  // position of tile row m_tile: bands of band_tiles() rows (the last may be shorter), each a
  // round over the owners rank+1, rank+2, ..., rank itself last, band_rows(b) rows each.
  TL_HOST_DEVICE uint32_t order_tile(uint32_t rank, uint32_t pos) const {
    const uint32_t full = world * band_tiles(), b = pos / full, r = pos % full, rows = band_rows(b);
    return swizzled_peer(rank, r / rows + 1, world) * m_tiles() + b * band_tiles() + r % rows;
  }
  TL_HOST_DEVICE uint32_t order_position(uint32_t rank, uint32_t m_tile) const {
    const uint32_t owner = tile_owner(m_tile), t = m_tile - owner * m_tiles(), b = t / band_tiles();
    const uint32_t step = (owner + world - rank) % world;
    return b * world * band_tiles() + ((step == 0 ? world : step) - 1) * band_rows(b) + t % band_tiles();
  }
  // Whether `rank`'s pushed tile of row m_tile may defer its notify (defer_push_notify): a peer's
  // tile, and with the epilogue reducer no own tile row in its cluster -- the `cluster_m` tile rows
  // the scheduler gives one cluster are consecutive positions of the order, aligned -- since a
  // cluster-mate waiting in its own tile's sum holds this CTA's next mainloop.
  TL_HOST_DEVICE bool may_defer_notify(uint32_t rank, uint32_t m_tile, uint32_t cluster_m) const {
    if (!defer_push_notify || scatter != GemmRsScatter::kEpiloguePush || tile_owner(m_tile) == rank) return false;
    if (reducer != GemmRsReducer::kEpilogue || cluster_m <= 1) return true;
    const uint32_t pos = order_position(rank, m_tile), first = pos - pos % cluster_m, rows = world * m_tiles();
    for (uint32_t q = first; q < first + cluster_m && q < rows; ++q) {
      if (q != pos && tile_owner(order_tile(rank, q)) == rank) return false;
    }
    return true;
  }

  // The pitch of owner blocks for M rows over P ranks.
  TL_HOST_DEVICE static uint32_t owner_pitch(uint32_t m, uint32_t world) { return tilelink::owner_pitch(m, world); }
  // M rows over `ranks` owners: world, m and the pitch R that follows from them (kept as a field,
  // not recomputed, because the kernels' address arithmetic reads it per tile).
  TL_HOST_DEVICE void set_rows(uint32_t rows, uint32_t ranks) {
    world = ranks;
    m = rows;
    rows_per_rank = owner_pitch(rows, ranks);
  }
  TL_HOST_DEVICE uint32_t m_tiles() const { return (rows_per_rank + bm - 1) / bm; }  // per owner block
  // Rows owner `owner` ends with (R, fewer for the last, none past M).
  TL_HOST_DEVICE uint32_t block_rows(uint32_t owner) const { return owner_block(m, rows_per_rank, owner).rows; }
  // Rows of tile row `row` (within a block) that hold owner `owner`'s data.
  TL_HOST_DEVICE uint32_t tile_rows(uint32_t owner, uint32_t row) const {
    const uint32_t rows = block_rows(owner);
    return rows <= row * bm ? 0u : (rows - row * bm < bm ? rows - row * bm : bm);
  }
  // A kernel tile row (over all owners: owner * m_tiles() + row) -> its first row of M, its rows.
  TL_HOST_DEVICE uint32_t tile_row0(uint32_t m_tile) const {
    const uint32_t owner = tile_owner(m_tile);
    return owner * rows_per_rank + (m_tile - owner * m_tiles()) * bm;
  }
  TL_HOST_DEVICE uint32_t rows_of_tile(uint32_t m_tile) const {
    const uint32_t owner = tile_owner(m_tile);
    return tile_rows(owner, m_tile - owner * m_tiles());
  }
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  TL_HOST_DEVICE uint32_t tiles_per_block() const { return m_tiles() * n_tiles(); }
  TL_HOST_DEVICE uint32_t groups() const {
    return granularity == SignalGranularity::kTile      ? tiles_per_block()
           : granularity == SignalGranularity::kTileRow ? m_tiles()
                                                        : 1u;
  }
  // Tile t of a block (row-major over m_tiles x n_tiles) -> its group; notifies per group per call.
  TL_HOST_DEVICE uint32_t group_of(uint32_t t) const {
    return granularity == SignalGranularity::kTile      ? t
           : granularity == SignalGranularity::kTileRow ? t / n_tiles()
                                                        : 0u;
  }
  TL_HOST_DEVICE uint32_t arrivals_per_group() const { return tiles_per_block() / groups(); }
  // Rows [row0, row0 + rows) of owner `owner`'s block that group g covers (tile-row and block
  // groups only); its tile rows.
  TL_HOST_DEVICE uint32_t group_row0(uint32_t g) const { return granularity == SignalGranularity::kRank ? 0 : g * bm; }
  TL_HOST_DEVICE uint32_t group_rows(uint32_t owner, uint32_t g) const {
    return granularity == SignalGranularity::kRank ? block_rows(owner) : tile_rows(owner, g);
  }
  TL_HOST_DEVICE uint32_t group_tile_rows() const { return granularity == SignalGranularity::kRank ? m_tiles() : 1u; }

  // Tile rows per band within a block: `band`, at least 1, at most the block's.
  TL_HOST_DEVICE uint32_t band_tiles() const { return band < m_tiles() ? (band > 0 ? band : 1) : m_tiles(); }
  TL_HOST_DEVICE uint32_t bands() const { return (m_tiles() + band_tiles() - 1) / band_tiles(); }
  // Tile rows of band b (the last band may be shorter).
  TL_HOST_DEVICE uint32_t band_rows(uint32_t b) const {
    return m_tiles() - b * band_tiles() < band_tiles() ? m_tiles() - b * band_tiles() : band_tiles();
  }
  // The reduction's i-th tile of a block, in the order the GEMM finishes them: band by band,
  // column by column within a band.
  TL_HOST_DEVICE uint32_t reduce_tile(uint32_t i) const {
    const uint32_t b = i / (band_tiles() * n_tiles()), in = i % (band_tiles() * n_tiles());
    const uint32_t rows = band_rows(b);
    return (b * band_tiles() + in % rows) * n_tiles() + in / rows;
  }

  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  // kPull, kCopyEngine: on the sender, per owner; kEpiloguePush: on the owner (owner == rank).
  TL_HOST_DEVICE uint32_t group_channel(uint32_t owner, uint32_t group) const {
    return exit_barrier_channels(world) + owner * groups() + group;
  }
  // kCopyEngine: on the owner, set by sender's copy of group g.
  TL_HOST_DEVICE uint32_t recv_channel(uint32_t sender, uint32_t group) const {
    return group_channel(world, 0) + sender * groups() + group;
  }
  // kEpilogue: on the owner, one arrival per own tile summed (the exit barrier waits for all).
  TL_HOST_DEVICE uint32_t reduced_channel() const {
    return scatter == GemmRsScatter::kCopyEngine ? recv_channel(world, 0) : group_channel(world, 0);
  }
  TL_HOST_DEVICE uint32_t num_channels() const {
    return reduced_channel() + (reducer == GemmRsReducer::kEpilogue ? 1u : 0u);
  }

  // The channel a GEMM tile (m_tile over all of M, n_tile) notifies, and the owner of its rows.
  TL_HOST_DEVICE uint32_t tile_owner(uint32_t m_tile) const { return m_tile / m_tiles(); }
  TL_HOST_DEVICE uint32_t tile_channel(uint32_t m_tile, uint32_t n_tile) const {
    const uint32_t owner = tile_owner(m_tile);
    const uint32_t t = (m_tile - owner * m_tiles()) * n_tiles() + n_tile;
    return group_channel(owner, group_of(t));
  }
  // Row of `buf` (P * R x N) on the rank the tile's data lands on, for row `row` of M computed by
  // `rank`: its own buf (kPull, kCopyEngine) or the owner's slot `rank` (kEpiloguePush).
  TL_HOST_DEVICE uint32_t landing_row(uint32_t rank, uint32_t row) const {
    if (scatter != GemmRsScatter::kEpiloguePush) return row;
    return rank * rows_per_rank + row % rows_per_rank;
  }
};

// Tile rows (of M) in rank `rank`'s compute order: band by band, and within a band round the
// owners in swizzled order, rank+1's rows first, its own last. Every owner's tiles complete
// round by round on all ranks, so its reduction runs under the GEMM and only the last round's
// is left after it (owner blocks one after the other would leave every owner's whole
// reduction for the end: each needs its own partial, computed last).
inline void make_gemm_rs_m_order(const GemmRsFusedPlan& plan, uint32_t rank, uint32_t* m_order) {
  uint32_t j = 0;
  for (uint32_t b = 0; b < plan.bands(); ++b) {
    for (uint32_t step = 1; step <= plan.world; ++step) {
      const uint32_t owner = swizzled_peer(rank, step, plan.world);
      for (uint32_t t = 0; t < plan.band_rows(b); ++t) m_order[j++] = owner * plan.m_tiles() + b * plan.band_tiles() + t;
    }
  }
}

// One rank's copy of group g of owner's block: its rows (none: a block or tile row past M) into
// the owner's recv slot of this rank, the owner's channel set behind them. `buf` and `recv`: this
// rank's P * R x n buffers of `elem` bytes per element.
template <class HostCtx>
void gemm_rs_put_group(HostCtx& h, const GemmRsFusedPlan& plan, const SignalView& sig, const SymmetricView& heap,
                       uint32_t owner, uint32_t g, const void* buf, void* recv, uint32_t elem) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  const uint64_t row_bytes = uint64_t(plan.n) * elem;
  const uint64_t src_row = uint64_t(owner) * plan.rows_per_rank + plan.group_row0(g);
  const uint64_t dst_row = uint64_t(rank) * plan.rows_per_rank + plan.group_row0(g);
  h.rank_put_signal(heap, static_cast<char*>(recv) + dst_row * row_bytes,
                    static_cast<const char*>(buf) + src_row * row_bytes, row_bytes,
                    TileShape{plan.group_rows(owner, g), static_cast<uint32_t>(row_bytes)}, sig,
                    plan.recv_channel(rank, g), static_cast<int>(owner));
}

// kCopyEngine, one rank's comm stream: for each group of another owner, in the order the GEMM
// completes them (the last of its tile rows in m_order), wait for the group's tiles, then
// gemm_rs_put_group. m_order: make_gemm_rs_m_order's.
template <class HostCtx>
void gemm_rs_copy_engine_scatter(HostCtx& h, const GemmRsFusedPlan& plan, const SignalView& sig,
                                 const SymmetricView& heap, const uint32_t* m_order, const void* buf, void* recv,
                                 uint32_t elem) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  const uint32_t tile_rows_per_group = plan.group_tile_rows();
  for (uint32_t j = 0; j < plan.world * plan.m_tiles(); ++j) {
    const uint32_t owner = plan.tile_owner(m_order[j]);
    const uint32_t row_in_block = m_order[j] - owner * plan.m_tiles();
    if (owner == rank || (row_in_block + 1) % tile_rows_per_group != 0) continue;  // not a group's last row
    const uint32_t g = row_in_block / tile_rows_per_group;
    h.rank_wait(sig, plan.group_channel(owner, g), plan.arrivals_per_group());
    gemm_rs_put_group(h, plan, sig, heap, owner, g, buf, recv, elem);
  }
}

// The decomposed method (async-TP's chain), one rank: for each other owner in swizzled order
// (rank+1's first), gemm(owner) computes the rank's partial of that owner's block (a plain GEMM,
// on `h`'s compute side) and after_gemm(owner) hands its completion to the copy side, which puts
// every group of the block (gemm_rs_put_group: with one group per block, one copy); then
// gemm(rank), the own block, which is never copied. The owner's reduction (waits on the receive
// channels, as for kCopyEngine) follows. The CPU executor runs the same steps. plan.granularity is
// rank or tile row (a group is whole tile rows; GemmRs uses rank: one copy per block).
template <class HostCtx, class Gemm, class AfterGemm>
void gemm_rs_decomposed(HostCtx& h, const GemmRsFusedPlan& plan, const SignalView& sig, const SymmetricView& heap,
                        const void* buf, void* recv, uint32_t elem, Gemm&& gemm, AfterGemm&& after_gemm) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  for (uint32_t step = 1; step < plan.world; ++step) {
    const uint32_t owner = swizzled_peer(rank, step, plan.world);
    gemm(owner);
    after_gemm(owner);
    for (uint32_t g = 0; g < plan.groups(); ++g) gemm_rs_put_group(h, plan, sig, heap, owner, g, buf, recv, elem);
  }
  gemm(rank);
}

// Where owner `rank`'s reduction finds sender s's rows of its block: the address of row 0 (of
// the block), in elements of T, given this rank's buf and recv.
template <class T>
TL_HOST_DEVICE const T* gemm_rs_sender_rows(const GemmRsFusedPlan& plan, const SymmetricView& heap, uint32_t rank,
                                            uint32_t s, const T* buf, const T* recv) {
  switch (plan.scatter) {
    case GemmRsScatter::kPull:
      return heap.translate(buf + uint64_t(rank) * plan.rows_per_rank * plan.n, static_cast<int>(s));
    case GemmRsScatter::kEpiloguePush:
      return buf + uint64_t(s) * plan.rows_per_rank * plan.n;
    default:
      return (s == rank ? buf : recv) + uint64_t(s) * plan.rows_per_rank * plan.n;  // own block: never copied
  }
}

// The waits before owner ctx.rank() sums tile t of its block (row-major over m_tiles x n_tiles):
// every sender's part of the tile's group has arrived (on its own channel for the epilogue push,
// on each sender's for the pull, on its receive channels for the copy engine, its own part on its
// own channel).
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void gemm_rs_wait_parts(Ctx& ctx, const GemmRsFusedPlan& plan, const SignalView& sig, uint32_t t) {
  const uint32_t owner = static_cast<uint32_t>(ctx.rank());
  const uint32_t g = plan.group_of(t);
  const uint32_t channel = plan.group_channel(owner, g);
  const int32_t tile = static_cast<int32_t>(t);
  if (plan.scatter == GemmRsScatter::kEpiloguePush) {
    ctx.consumer_tile_wait(sig, channel, 1, plan.world * plan.arrivals_per_group(), tile);
    return;
  }
  for (uint32_t s = 0; s < plan.world; ++s) {
    if (s == owner && plan.own_part_in_order) continue;
    if (plan.scatter == GemmRsScatter::kCopyEngine && s != owner) {
      ctx.consumer_tile_wait(sig, plan.recv_channel(s, g), 1, 1, tile);
    } else {
      ctx.peer_tile_wait(sig, channel, static_cast<int>(s), plan.arrivals_per_group(), tile);
    }
  }
}

// Tile t of owner `owner`'s block handed to `sum_tile(t, row0, rows, col0, cols)`: rows [row0,
// row0 + rows) of the block (see gemm_rs_sender_rows; rows may be 0 past M), columns [col0, col0 +
// cols), to be summed over the senders in rank order 0..P-1.
template <class SumTile>
TL_HOST_DEVICE void gemm_rs_sum_tile(const GemmRsFusedPlan& plan, uint32_t owner, uint32_t t, SumTile&& sum_tile) {
  const uint32_t col0 = (t % plan.n_tiles()) * plan.bn, row = t / plan.n_tiles();
  sum_tile(t, row * plan.bm, plan.tile_rows(owner, row), col0, plan.n - col0 < plan.bn ? plan.n - col0 : plan.bn);
}

// Reduction blocks of one owner. kBlocks: each tile of its block once every sender's part has
// arrived (gemm_rs_wait_parts), in block-strided order over the GEMM's finishing order
// (reduce_tile), summed by `sum_tile` (gemm_rs_sum_tile). kEpilogue: the GEMM's own CTAs sum (each
// own tile after its epilogue: gemm_rs_epilogue_reduce); the blocks only wait until all of them
// have (reduced_channel). Then the exit barrier: peers read or write this rank's buffers until
// every rank is past it (with plan.exit_on_stream the caller runs it on the stream after them).
TL_PROTOCOL
template <class Ctx, class SumTile>
TL_HOST_DEVICE void gemm_rs_fused_reduce_block(Ctx& ctx, const GemmRsFusedPlan& plan, const SignalView& sig,
                                               SumTile&& sum_tile) {
  const uint32_t owner = static_cast<uint32_t>(ctx.rank());
  if (plan.reducer == GemmRsReducer::kEpilogue) {
    ctx.consumer_tile_wait(sig, plan.reduced_channel(), 1, plan.tiles_per_block());
  } else {
    for (uint32_t i = ctx.block(); i < plan.tiles_per_block(); i += ctx.num_blocks()) {
      const uint32_t t = plan.reduce_tile(i);
      gemm_rs_wait_parts(ctx, plan, sig, t);
      gemm_rs_sum_tile(plan, owner, t, sum_tile);
    }
  }
  if (!plan.exit_on_stream) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

// kEpilogue, a GEMM block of owner ctx.rank() that has just stored and notified its own part of
// tile t of its own block: wait for every sender's part, sum (gemm_rs_sum_tile), and count the
// tile summed. Deadlock-free with persistent blocks that take tiles in time order: every rank
// computes an owner round's other owners' tiles before its own (make_gemm_rs_m_order), so the
// parts an own tile waits for are never behind a block that waits on a later round.
TL_PROTOCOL
template <class Ctx, class SumTile>
TL_HOST_DEVICE void gemm_rs_epilogue_reduce(Ctx& ctx, const GemmRsFusedPlan& plan, const SignalView& sig, uint32_t t,
                                            SumTile&& sum_tile) {
  gemm_rs_wait_parts(ctx, plan, sig, t);
  gemm_rs_sum_tile(plan, static_cast<uint32_t>(ctx.rank()), t, sum_tile);
  ctx.producer_tile_notify(sig, plan.reduced_channel(), NotifyMode::kAdd);
}

}  // namespace tilelink
