// GEMM+AR as the fused kernels run it (issue 21): every rank r computes its partial
// P_r = A_r * B_r^T (M x N, any M) tile by tile, and ends with C = sum_r P_r on every rank, summed
// in fp32 in rank order 0..P-1 whatever the arrival order: bit-identical on every rank and from
// call to call. Optionally the decode layer boundary follows the sum (`norm`): h = C + residual is
// written as the new residual, and out = RMSNorm(h) * weight.
//
// Split K: the GEMM may cut each rank's K into `splits` slices, each a partial of its own
// (slice s of rank r at partial + s * M * N): a weight-bandwidth-bound GEMM at small M gets
// splits x as many CTAs streaming the weight, and the reduction that all-reduce needs anyway sums
// the slices too (order: rank, then slice), so split K costs no extra pass.
//
// Every (tile, slice) the GEMM finishes adds 1 to the tile's "ready" channel on its own rank
// (splits notifies per tile and call; `in_place`: the GEMM ran before and notified nothing, and
// the reduction blocks set every ready channel themselves first). Then, by method:
//  - one-shot: every rank reduces every tile: waits for each rank's ready channel of the tile and
//    reads the ranks' partial tiles remotely (one exchange; world - 1 remote reads of the
//    partials per rank: decode's latency-bound sizes);
//  - two-shot: tile t is reduced by its owner t % world only, which writes the sum into its
//    symmetric `reduced` buffer and sets its "reduced" channel; the other ranks copy the tile from
//    the owner (a reduce-scatter of tiles, then an all-gather: 2 (world - 1) / world of the buffer
//    per rank, for larger M).
// With `norm`, each tile's h goes to residual_out (and, two-shot, to the owner's `reduced`); a
// rank's "row done" channel of tile row mt counts its tiles of h in place (n_tiles per call), and
// then the rows of mt are normalised, one row per block at a time.
//
// Channels of the slice: [0, world + 1) exit barrier (peers read this rank's partial and, two-
// shot, its reduced buffer until every rank is past it); ready(t); two-shot reduced(t); norm
// row_done(mt). Across calls: a rank's next GEMM overwrites its partial only after its reduction
// of this call, and so every peer's reading, is past the exit barrier (the op orders the compute
// stream after the comm stream).
//
// The copy-engine path (`copy_engine`; the only one under the put-with-signal transport, where no
// kernel may load or store another rank's memory): the exchange is done by the ranks' streams,
// and the reduction blocks read only this rank's memory.
//  - push (gemm_ar_copy_engine_push, a stream): tile row by tile row, in order (fed by the GEMM:
//    after a stream wait for each of the row's tiles), every slice's rows of the tile row go into
//    this rank's `recv` slot at every peer (one-shot) or at the row's owner, mt % world (two-shot),
//    and the peer's arrived(mt, this rank) channel is set behind them (rank_put_signal);
//  - the reduction kernel (gemm_ar_reduce_block) waits for arrived(mt, q) of each peer, in its own
//    memory, and sums its partial and the recv slots in order (rank, slice) -- the same bits as the
//    load/store path;
//  - two-shot: pass kReduce sums the owned tile rows into `reduced`; the stream then puts them into
//    every peer's `reduced` with gathered(mt) behind them and waits for the other owners'
//    (gemm_ar_copy_engine_gather); pass kFinish copies the other rows from `reduced` and normalises;
//  - the exit barrier runs on the stream after the last kernel (rank_exit_barrier_stream): no rank
//    puts the next call's rows before every rank is done with this call's staging.
// Channels: those of the load/store path (no reduced(t)), then arrived(mt, q) for every tile row
// and rank, then two-shot gathered(mt).
//
// Reduce-scatter (`scatter`, GemmRs's small-M engine): the same GEMM and waits, but rank r sums
// only the rows it owns, owned(r) = [r R, min((r + 1) R, M)) with R = ceil(M / world) (torch.chunk's
// split, GemmRs's), one-shot's way (every rank's and slice's partial, in order), and writes them
// at the top of its `out` (owned(r).rows x N). Its work is the tiles of the tile rows that meet
// its block, each clipped to the block; nothing is fetched, no norm. On the copy-engine path a
// rank puts into each peer only the rows of the peer's block.
#pragma once

#include <cstdint>

#include "tilelink/comm/all_reduce.hpp"
#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/comm/work_queue.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

struct GemmArPlan {
  uint32_t world = 1;
  uint32_t m = 0, n = 0;    // the output's extent (any m > 0; n a multiple of 8)
  uint32_t bm = 0, bn = 0;  // GEMM tile
  uint32_t splits = 1;      // K slices per rank (partials per rank)
  ArMethod method = ArMethod::kOneShot;
  bool norm = false;        // residual add + RMSNorm after the sum
  // The partials are in place before the reduction starts (a GEMM that does not notify ran first:
  // the non-overlapped chain): the reduction blocks announce them themselves, one per tile.
  bool in_place = false;
  // Column parts per tile: the reduction's unit of work is a part (several CTAs share a tile at
  // decode's few tiles); bn / parts columns each, a multiple of 8.
  uint32_t parts = 1;
  // The copy-engine path (above): the streams move the partials and the two-shot sums.
  bool copy_engine = false;
  // Reduce-scatter (above): each rank gets only its block of rows (one-shot's protocol, no norm).
  bool scatter = false;

  TL_HOST_DEVICE uint32_t ready_arrivals() const { return in_place ? 1u : splits; }

  TL_HOST_DEVICE uint32_t m_tiles() const { return (m + bm - 1) / bm; }
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  TL_HOST_DEVICE uint32_t tiles() const { return m_tiles() * n_tiles(); }
  // Two-shot: the rank that sums tile t -- by tile, or on the copy-engine path by tile row (a tile
  // row's rows are contiguous, one put per slice).
  TL_HOST_DEVICE uint32_t owner(uint32_t t) const { return copy_engine ? row_owner(t / n_tiles()) : t % world; }
  TL_HOST_DEVICE uint32_t row_owner(uint32_t mt) const { return mt % world; }
  // Rows and columns of tile t (tail tiles are short).
  TL_HOST_DEVICE RowRange tile_rows(uint32_t t) const {
    const uint32_t row0 = (t / n_tiles()) * bm;
    return {row0, m - row0 < bm ? m - row0 : bm};
  }
  TL_HOST_DEVICE RowRange tile_cols(uint32_t t) const {
    const uint32_t col0 = (t % n_tiles()) * bn;
    return {col0, n - col0 < bn ? n - col0 : bn};
  }
  // Columns of part p of tile t (empty past a tail tile's end).
  TL_HOST_DEVICE RowRange part_cols(uint32_t t, uint32_t p) const {
    const RowRange c = tile_cols(t);
    const uint32_t width = bn / parts, start = p * width;
    if (start >= c.rows) return {c.row0 + c.rows, 0};
    return {c.row0 + start, c.rows - start < width ? c.rows - start : width};
  }
  TL_HOST_DEVICE uint64_t elems() const { return uint64_t(m) * n; }  // of one partial, out, reduced

  // Reduce-scatter: the rows each rank owns (R = ceil(m / world); ranks past the end own none).
  // Without `scatter` every rank's result is every row.
  TL_HOST_DEVICE uint32_t rows_per_rank() const { return owner_pitch(m, world); }
  TL_HOST_DEVICE RowRange owned(uint32_t rank) const {
    return scatter ? owner_block(m, rows_per_rank(), rank) : RowRange{0, m};
  }
  // The tile rows [first, end) that meet owned(rank) (none for a rank that owns no rows).
  TL_HOST_DEVICE uint32_t first_owned_tile_row(uint32_t rank) const { return owned(rank).row0 / bm; }
  TL_HOST_DEVICE uint32_t end_owned_tile_row(uint32_t rank) const {
    const RowRange o = owned(rank);
    return o.rows == 0 ? first_owned_tile_row(rank) : (o.row0 + o.rows + bm - 1) / bm;
  }
  // The rows of tile row mt's tiles that `rank` sums: all of them, or with `scatter` those in its
  // block (possibly none).
  TL_HOST_DEVICE RowRange reduced_rows(uint32_t rank, uint32_t t) const {
    const RowRange rows = tile_rows(t), o = owned(rank);
    const uint32_t lo = rows.row0 > o.row0 ? rows.row0 : o.row0;
    const uint32_t hi_t = rows.row0 + rows.rows, hi_o = o.row0 + o.rows, hi = hi_t < hi_o ? hi_t : hi_o;
    return {lo, hi > lo ? hi - lo : 0u};
  }

  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t ready_channel(uint32_t t) const { return exit_barrier_channels(world) + t; }
  TL_HOST_DEVICE uint32_t reduced_channel(uint32_t t) const { return ready_channel(tiles()) + t; }
  TL_HOST_DEVICE uint32_t row_channel(uint32_t mt) const {
    return reduced_channel(method == ArMethod::kTwoShot && !copy_engine ? tiles() : 0u) + mt;
  }
  // Copy-engine path: rank q's rows of tile row mt are in this rank's recv slot q.
  TL_HOST_DEVICE uint32_t arrived_channel(uint32_t mt, uint32_t q) const {
    return row_channel(norm ? m_tiles() : 0u) + mt * world + q;
  }
  // Copy-engine two-shot: the owner's sums of tile row mt are in this rank's `reduced`.
  TL_HOST_DEVICE uint32_t gathered_channel(uint32_t mt) const { return arrived_channel(m_tiles(), 0) + mt; }
  TL_HOST_DEVICE uint32_t num_channels() const {
    if (!copy_engine) return row_channel(norm ? m_tiles() : 0u);
    return gathered_channel(method == ArMethod::kTwoShot ? m_tiles() : 0u);
  }

  // Notifies per call on a reduced channel (one per part) and on a row channel (every part of the
  // tile row's tiles, reduced or fetched).
  TL_HOST_DEVICE uint32_t reduced_arrivals() const { return parts; }
  TL_HOST_DEVICE uint32_t row_arrivals() const { return n_tiles() * parts; }

  // Copy-engine two-shot: the tile rows `rank` owns.
  TL_HOST_DEVICE uint32_t owned_rows(uint32_t rank) const {
    return rank < m_tiles() ? (m_tiles() - rank + world - 1) / world : 0u;
  }
  // The tiles `rank` reduces: all (one-shot), those it owns (two-shot) or those of the tile rows
  // that meet its block (scatter), in the GEMM's order.
  TL_HOST_DEVICE uint32_t num_reduced(uint32_t rank) const {
    if (scatter) return (end_owned_tile_row(rank) - first_owned_tile_row(rank)) * n_tiles();
    if (method == ArMethod::kOneShot) return tiles();
    if (copy_engine) return owned_rows(rank) * n_tiles();
    return rank < tiles() ? (tiles() - rank + world - 1) / world : 0u;
  }
  TL_HOST_DEVICE uint32_t reduced_tile(uint32_t rank, uint32_t i) const {
    if (scatter) return first_owned_tile_row(rank) * n_tiles() + i;
    if (method == ArMethod::kOneShot) return i;
    if (copy_engine) return (rank + (i / n_tiles()) * world) * n_tiles() + i % n_tiles();
    return rank + i * world;
  }
  // Two-shot: the tiles `rank` copies from their owners, in order (world >= 2).
  TL_HOST_DEVICE uint32_t num_fetched(uint32_t rank) const {
    return method == ArMethod::kOneShot || scatter ? 0u : tiles() - num_reduced(rank);
  }
  TL_HOST_DEVICE uint32_t fetched_tile(uint32_t rank, uint32_t i) const {
    // The i-th unit not owned by `rank` (a tile, or on the copy-engine path a tile row's tile):
    // skip one in every `world`, starting after `rank`.
    const uint32_t others = world - 1;
    const uint32_t unit = copy_engine ? i / n_tiles() : i;
    const uint32_t round = unit / others, k = unit % others;
    const uint32_t u = round * world + (k < rank ? k : k + 1);
    return copy_engine ? u * n_tiles() + i % n_tiles() : u;
  }
};

// Which part of the reduction a kernel runs: everything (the load/store path, and copy-engine
// one-shot), or copy-engine two-shot's two kernels around the stream's gather.
enum class GemmArPass : uint32_t {
  kAll = 0,
  kReduce = 1,  // the owned tiles' sums (into `reduced`), nothing after
  kFinish = 2,  // the other owners' rows from `reduced`, then the norm
};

// A reduction kernel's work on one rank, in the order its blocks take it from the rank's queue:
// the in-place partial's announcement (one unit), then the parts of the tiles the rank sums, then
// the parts of the tiles it copies from their owners (two-shot), then the norm's rows in groups.
// Every unit waits only on units before it in some rank's order -- the GEMMs' tiles, the owners'
// sums (which wait on the GEMMs only), this rank's earlier units -- so a unit that a resident block
// took always completes, whichever of the grid's blocks are resident.
struct GemmArWork {
  uint32_t announce = 0;  // 1: announce the in-place partial's tiles
  uint32_t reduce = 0;    // (tile, part) units summed
  uint32_t fetch = 0;     // (tile, part) units copied from their owners
  uint32_t norm = 0;      // groups of `group_rows` consecutive rows normalised
  uint32_t group_rows = 1;
  TL_HOST_DEVICE uint32_t total() const { return announce + reduce + fetch + norm; }
};

TL_HOST_DEVICE GemmArWork gemm_ar_work(const GemmArPlan& plan, uint32_t rank, GemmArPass pass,
                                       uint32_t blocks) {
  GemmArWork w;
  const bool ce = plan.copy_engine;
  if (pass != GemmArPass::kFinish) {
    // One rank whose partials are in place has nothing to announce (the stream ordered the GEMM
    // first), and the copy-engine path's streams announce nothing either.
    w.announce = plan.in_place && !ce && plan.world > 1 ? 1u : 0u;
    w.reduce = plan.num_reduced(rank) * plan.parts;
  }
  if (pass == GemmArPass::kReduce) return w;
  if (!ce || pass == GemmArPass::kFinish) w.fetch = plan.num_fetched(rank) * plan.parts;
  if (plan.norm) {
    // About two groups per block (blocks >= 1): few claims, and still every block busy.
    const uint32_t want = 2 * blocks;
    w.group_rows = (plan.m + want - 1) / want;
    w.norm = (plan.m + w.group_rows - 1) / w.group_rows;
  }
  return w;
}

// One reduction block of one rank. The data work is the caller's (typed, vectorised on the GPU),
// on one part of a tile at a time (`cols` = the part's columns; possibly none, past a tail tile):
//   reduce_tile(t, rows, cols)  sum every rank's (and slice's) partial of tile t in rank order
//                               into this rank's destination (out, or with norm residual_out after
//                               adding the residual; with scatter `rows` is clipped to the rank's
//                               block, and row i goes to out's row i - owned(rank).row0) and,
//                               two-shot, into its `reduced`;
//   fetch_tile(t, owner, rows, cols)  two-shot: copy tile t from the owner's `reduced` (on the
//                               copy-engine path, from this rank's, where the owner put it);
//   norm_row(row)               out[row] = RMSNorm(residual_out[row]) * weight.
// The units (GemmArWork) come from `queue`, the rank's counter for this kernel (for_each_queued_unit,
// comm/work_queue.hpp: each unit to one block, the counter back to 0 at the end). No unit is bound
// to a block: under MPS a grid within the budget may be only partly resident while peers' blocks spin (GEMM+AR's rank 3 had blocks 8-10 never scheduled: 4 processes
// on one H100, docs/PERF.md, 2026-12-06), and any one resident block of a rank does all its work.
// On the copy-engine path the waits are on this rank's own channels only (the streams' puts) and
// the exit barrier is the stream's, after the kernel.
TL_PROTOCOL
template <class Ctx, class Queue, class ReduceTile, class FetchTile, class NormRow>
TL_HOST_DEVICE void gemm_ar_reduce_block(Ctx& ctx, const GemmArPlan& plan, const SignalView& sig, Queue& queue,
                                         ReduceTile&& reduce_tile, FetchTile&& fetch_tile, NormRow&& norm_row,
                                         GemmArPass pass = GemmArPass::kAll) {
  const uint32_t w = plan.world;
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const bool two_shot = plan.method == ArMethod::kTwoShot;
  const bool ce = plan.copy_engine;
  // One rank whose partials are in place: nothing to wait for, and no peer reads this rank's
  // buffers (no exit barrier).
  const bool alone = w == 1 && plan.in_place;
  const uint32_t parts = plan.parts;
  const GemmArWork work = gemm_ar_work(plan, rank, pass, static_cast<uint32_t>(ctx.num_blocks()));
  for_each_queued_unit(ctx, queue, work.total(), [&](uint32_t u) {
    if (u < work.announce) {
      // The GEMM before this kernel wrote every tile of the partial: one unit announces them all.
      ctx.producer_tiles_notify(sig, plan.ready_channel(0), plan.tiles());
      return;
    }
    u -= work.announce;
    if (u < work.reduce) {
      const uint32_t t = plan.reduced_tile(rank, u / parts);
      if (ce) {
        // The stream enqueued this kernel after its own rows' waits; the peers' rows land here.
        for (uint32_t s = 1; s < w; ++s) {
          const uint32_t q = swizzled_peer(rank, s, w);
          ctx.consumer_tile_wait(sig, plan.arrived_channel(t / plan.n_tiles(), q), 1, 1, static_cast<int32_t>(t));
        }
      } else {
        for (uint32_t s = 0; s < w && !alone; ++s) {  // own rank first, then the peers in ring order
          const uint32_t q = swizzled_peer(rank, s, w);
          ctx.peer_tile_wait(sig, plan.ready_channel(t), static_cast<int>(q), plan.ready_arrivals(),
                             static_cast<int32_t>(t));
        }
      }
      reduce_tile(t, plan.reduced_rows(rank, t), plan.part_cols(t, u % parts));
      if (two_shot && !ce) ctx.producer_tile_notify(sig, plan.reduced_channel(t), NotifyMode::kAdd);
      if (plan.norm) ctx.producer_tile_notify(sig, plan.row_channel(t / plan.n_tiles()), NotifyMode::kAdd);
      return;
    }
    u -= work.reduce;
    if (u < work.fetch) {
      const uint32_t t = plan.fetched_tile(rank, u / parts);
      const uint32_t o = plan.owner(t);
      if (!ce) {  // the copy-engine path's stream waited for the owners' puts before this kernel
        ctx.peer_tile_wait(sig, plan.reduced_channel(t), static_cast<int>(o), plan.reduced_arrivals(),
                           static_cast<int32_t>(t));
      }
      fetch_tile(t, o, plan.tile_rows(t), plan.part_cols(t, u % parts));
      if (plan.norm) ctx.producer_tile_notify(sig, plan.row_channel(t / plan.n_tiles()), NotifyMode::kAdd);
      return;
    }
    u -= work.fetch;
    // Rows [u * group_rows, ...): each of their tile rows complete on this rank, in increasing order.
    const uint32_t row0 = u * work.group_rows;
    const uint32_t row_end = row0 + work.group_rows < plan.m ? row0 + work.group_rows : plan.m;
    for (uint32_t mt = row0 / plan.bm; mt * plan.bm < row_end; ++mt) {
      ctx.consumer_tile_wait(sig, plan.row_channel(mt), 1, plan.row_arrivals(), static_cast<int32_t>(mt));
    }
    for (uint32_t row = row0; row < row_end; ++row) norm_row(row);
  });
  if (pass == GemmArPass::kReduce) return;
  if (w > 1 && !ce) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

// Copy-engine path, one rank's stream, before the reduction kernel: the partial's tile rows to the
// peers that sum them (see above): every peer's rows (one-shot), the owner's (two-shot), the rows
// of the peer's block (scatter). `partial` holds plan.splits slices of M x N elements of
// `elem_bytes`, `recv` world slots of as many (slot q: rank q's partial). Fed by the GEMM
// (!in_place): each tile row waits for its tiles' notifies first -- every row, own ones included,
// so that the kernel after this on the stream finds every tile of the rank's partial done.
template <class HostCtx>
void gemm_ar_copy_engine_push(HostCtx& h, const GemmArPlan& plan, const SignalView& sig, const SymmetricView& heap,
                              const void* partial, void* recv, uint32_t elem_bytes) {
  const uint32_t w = plan.world;
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  const uint64_t slice_bytes = plan.elems() * elem_bytes;
  for (uint32_t mt = 0; mt < plan.m_tiles(); ++mt) {
    if (!plan.in_place) {
      for (uint32_t nt = 0; nt < plan.n_tiles(); ++nt) {
        h.rank_wait(sig, plan.ready_channel(mt * plan.n_tiles() + nt), plan.ready_arrivals());
      }
    }
    for (uint32_t s = 1; s < w; ++s) {
      const uint32_t q = swizzled_peer(rank, s, w);
      if (plan.method == ArMethod::kTwoShot && !plan.scatter && q != plan.row_owner(mt)) continue;
      const RowRange rows = plan.reduced_rows(q, mt * plan.n_tiles());  // the tile row's, or its rows of q's block
      if (rows.rows == 0) continue;
      const uint64_t offset = uint64_t(rows.row0) * plan.n * elem_bytes;
      // The slices' rows: one row of the copy per slice, slice_bytes apart.
      const TileShape shape{plan.splits, static_cast<uint32_t>(uint64_t(rows.rows) * plan.n * elem_bytes)};
      char* dst = static_cast<char*>(recv) + uint64_t(rank) * plan.splits * slice_bytes + offset;
      h.rank_put_signal(heap, dst, static_cast<const char*>(partial) + offset, slice_bytes, shape, sig,
                        plan.arrived_channel(mt, rank), static_cast<int>(q));
    }
  }
}

// Copy-engine two-shot, between the kReduce and kFinish kernels on the stream: the owned tile
// rows' sums (`reduced`, M x N elements) into every peer's `reduced`, gathered(mt) set behind
// them; then a wait for every other owner's.
template <class HostCtx>
void gemm_ar_copy_engine_gather(HostCtx& h, const GemmArPlan& plan, const SignalView& sig, const SymmetricView& heap,
                                void* reduced, uint32_t elem_bytes) {
  const uint32_t w = plan.world;
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  for (uint32_t j = 0; j < plan.owned_rows(rank); ++j) {
    const uint32_t mt = rank + j * w;
    const RowRange rows = plan.tile_rows(mt * plan.n_tiles());
    char* at = static_cast<char*>(reduced) + uint64_t(rows.row0) * plan.n * elem_bytes;
    const TileShape shape{1, static_cast<uint32_t>(uint64_t(rows.rows) * plan.n * elem_bytes)};
    for (uint32_t s = 1; s < w; ++s) {
      h.rank_put_signal(heap, at, at, shape.row_bytes, shape, sig, plan.gathered_channel(mt),
                        static_cast<int>(swizzled_peer(rank, s, w)));
    }
  }
  for (uint32_t mt = 0; mt < plan.m_tiles(); ++mt) {
    if (plan.row_owner(mt) != rank) h.rank_wait(sig, plan.gathered_channel(mt));
  }
}

}  // namespace tilelink
