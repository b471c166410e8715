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
#pragma once

#include <cstdint>

#include "tilelink/comm/all_reduce.hpp"
#include "tilelink/comm/protocol_common.hpp"
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

  TL_HOST_DEVICE uint32_t ready_arrivals() const { return in_place ? 1u : splits; }

  TL_HOST_DEVICE uint32_t m_tiles() const { return (m + bm - 1) / bm; }
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  TL_HOST_DEVICE uint32_t tiles() const { return m_tiles() * n_tiles(); }
  TL_HOST_DEVICE uint32_t owner(uint32_t t) const { return t % world; }
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

  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t ready_channel(uint32_t t) const { return exit_barrier_channels(world) + t; }
  TL_HOST_DEVICE uint32_t reduced_channel(uint32_t t) const { return ready_channel(tiles()) + t; }
  TL_HOST_DEVICE uint32_t row_channel(uint32_t mt) const {
    return reduced_channel(method == ArMethod::kTwoShot ? tiles() : 0u) + mt;
  }
  TL_HOST_DEVICE uint32_t num_channels() const { return row_channel(norm ? m_tiles() : 0u); }

  // Notifies per call on a reduced channel (one per part) and on a row channel (every part of the
  // tile row's tiles, reduced or fetched).
  TL_HOST_DEVICE uint32_t reduced_arrivals() const { return parts; }
  TL_HOST_DEVICE uint32_t row_arrivals() const { return n_tiles() * parts; }

  // The tiles `rank` reduces: all (one-shot) or those it owns (two-shot), in the GEMM's order.
  TL_HOST_DEVICE uint32_t num_reduced(uint32_t rank) const {
    if (method == ArMethod::kOneShot) return tiles();
    return rank < tiles() ? (tiles() - rank + world - 1) / world : 0u;
  }
  TL_HOST_DEVICE uint32_t reduced_tile(uint32_t rank, uint32_t i) const {
    return method == ArMethod::kOneShot ? i : rank + i * world;
  }
  // Two-shot: the tiles `rank` copies from their owners, in order (world >= 2).
  TL_HOST_DEVICE uint32_t num_fetched(uint32_t rank) const {
    return method == ArMethod::kOneShot ? 0u : tiles() - num_reduced(rank);
  }
  TL_HOST_DEVICE uint32_t fetched_tile(uint32_t rank, uint32_t i) const {
    const uint32_t others = world - 1;
    const uint32_t round = i / others, k = i % others;
    return round * world + (k < rank ? k : k + 1);
  }
};

// One reduction block of one rank. The data work is the caller's (typed, vectorised on the GPU),
// on one part of a tile at a time (`cols` = the part's columns; possibly none, past a tail tile):
//   reduce_tile(t, rows, cols)  sum every rank's (and slice's) partial of tile t in rank order
//                               into this rank's destination (out, or with norm residual_out after
//                               adding the residual) and, two-shot, into its `reduced`;
//   fetch_tile(t, owner, rows, cols)  two-shot: copy tile t from the owner's `reduced`;
//   norm_row(row)               out[row] = RMSNorm(residual_out[row]) * weight.
// The waits depend only on the GEMMs (every rank's), the owners' reductions and this rank's own
// blocks, so on the GPU every rank's blocks must be resident at once (a grid within the budget).
TL_PROTOCOL
template <class Ctx, class ReduceTile, class FetchTile, class NormRow>
TL_HOST_DEVICE void gemm_ar_reduce_block(Ctx& ctx, const GemmArPlan& plan, const SignalView& sig,
                                         ReduceTile&& reduce_tile, FetchTile&& fetch_tile, NormRow&& norm_row) {
  const uint32_t w = plan.world;
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const bool two_shot = plan.method == ArMethod::kTwoShot;
  // One rank whose partials are in place: nothing to announce or wait for (the stream ordered the
  // GEMM first), and no peer reads this rank's buffers (no exit barrier).
  const bool alone = w == 1 && plan.in_place;
  if (plan.in_place && !alone) {
    for (uint32_t t = ctx.block(); t < plan.tiles(); t += ctx.num_blocks()) {
      ctx.producer_tile_notify(sig, plan.ready_channel(t));
    }
  }
  // Work items: (tile, part), parts of a tile on consecutive blocks.
  const uint32_t parts = plan.parts;
  for (uint32_t i = ctx.block(); i < plan.num_reduced(rank) * parts; i += ctx.num_blocks()) {
    const uint32_t t = plan.reduced_tile(rank, i / parts);
    for (uint32_t s = 0; s < w && !alone; ++s) {  // own rank first, then the peers in ring order
      const uint32_t q = swizzled_peer(rank, s, w);
      ctx.peer_tile_wait(sig, plan.ready_channel(t), static_cast<int>(q), plan.ready_arrivals(), static_cast<int32_t>(t));
    }
    reduce_tile(t, plan.tile_rows(t), plan.part_cols(t, i % parts));
    if (two_shot) ctx.producer_tile_notify(sig, plan.reduced_channel(t), NotifyMode::kAdd);
    if (plan.norm) ctx.producer_tile_notify(sig, plan.row_channel(t / plan.n_tiles()), NotifyMode::kAdd);
  }
  for (uint32_t i = ctx.block(); i < plan.num_fetched(rank) * parts; i += ctx.num_blocks()) {
    const uint32_t t = plan.fetched_tile(rank, i / parts);
    const uint32_t o = plan.owner(t);
    ctx.peer_tile_wait(sig, plan.reduced_channel(t), static_cast<int>(o), plan.reduced_arrivals(),
                       static_cast<int32_t>(t));
    fetch_tile(t, o, plan.tile_rows(t), plan.part_cols(t, i % parts));
    if (plan.norm) ctx.producer_tile_notify(sig, plan.row_channel(t / plan.n_tiles()), NotifyMode::kAdd);
  }
  if (plan.norm) {
    // Rows block-strided over the whole output; a block waits for a tile row once, before its
    // first row there (in increasing order, so a later row never waits for an earlier tile row).
    uint32_t waited = ~0u;
    for (uint32_t row = ctx.block(); row < plan.m; row += ctx.num_blocks()) {
      const uint32_t mt = row / plan.bm;
      if (mt != waited) {
        ctx.consumer_tile_wait(sig, plan.row_channel(mt), 1, plan.row_arrivals(), static_cast<int32_t>(mt));
        waited = mt;
      }
      norm_row(row);
    }
  }
  if (w > 1) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
