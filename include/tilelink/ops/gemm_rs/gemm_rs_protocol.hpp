// GEMM+RS protocol: row-parallel linear layer. Every rank holds A_r (M x K_r) and B_r (K_r x N)
// and computes a partial C_r = A_r * B_r; rank o ends with rows [o * M/P, (o + 1) * M/P) of
// sum_r C_r. The sum runs in rank order 0..P-1 whatever the arrival order: bit-identical results.
//
// Compute blocks walk C in owner blocks of M/P rows, other ranks' blocks first (swizzled, so
// rank r starts with r + 1's block and computes its own last), each block cut into BM x BN tiles.
// The epilogue hands every finished tile to its owner: tile_push_data into the owner's receive
// slot of this rank (its own tiles: a local store) and an add-mode notify on the owner's channel
// for the tile's signal group. Reduction blocks of the owner wait per group for all world
// arrivals, then sum the world slots of each of its tiles.
//
// Signal granularity (a Config knob, decoupled from the tile size): one channel per tile, per
// row of tiles, or per rank (one channel for the whole block).
//
// Requirements: n and bn multiples of 4 (tiles move as 16-byte vectors). Across calls, the op
// must order a rank's compute of call e+1 after its reduction of call e (same stream or an
// event): the entry barrier then guarantees no peer pushes into a receive slot still being read.
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

enum class SignalGranularity : uint32_t { kTile = 0, kTileRow = 1, kRank = 2 };

struct GemmRsPlan {
  uint32_t world = 1;
  uint32_t rows_per_rank = 0;  // M / P: rows of each owner block
  uint32_t n = 0;              // columns of C (floats; recv rows are n floats), a multiple of 4
  uint32_t k = 0;              // K_r, this rank's slice of the inner dimension
  uint32_t bm = 0;
  uint32_t bn = 0;             // a multiple of 4
  SignalGranularity granularity = SignalGranularity::kTile;

  TL_HOST_DEVICE uint32_t m_tiles() const { return (rows_per_rank + bm - 1) / bm; }  // per block
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  TL_HOST_DEVICE uint32_t tiles_per_block() const { return m_tiles() * n_tiles(); }
  TL_HOST_DEVICE uint32_t num_tiles() const { return world * tiles_per_block(); }

  TL_HOST_DEVICE uint32_t barrier_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t group_channel0() const { return entry_barrier_channels(world); }
  TL_HOST_DEVICE uint32_t groups() const {
    return granularity == SignalGranularity::kTile ? tiles_per_block()
           : granularity == SignalGranularity::kTileRow ? m_tiles()
                                                        : 1u;
  }
  TL_HOST_DEVICE uint32_t num_channels() const { return group_channel0() + groups(); }
  // Signal group of tile t (0 <= t < tiles_per_block, row-major in the block) and the notifies
  // that complete it in one call.
  TL_HOST_DEVICE uint32_t group_of(uint32_t t) const {
    return granularity == SignalGranularity::kTile ? t
           : granularity == SignalGranularity::kTileRow ? t / n_tiles()
                                                        : 0u;
  }
  // Notifies that complete a group in one call: every rank notifies once per tile of the group
  // (the three granularities split a block into equal groups).
  TL_HOST_DEVICE uint32_t arrivals_per_group() const { return world * (tiles_per_block() / groups()); }

  // Compute order of rank `rank`: tile i of the schedule -> (owner, tile within the block).
  struct Item {
    uint32_t owner;
    uint32_t tile;
  };
  TL_HOST_DEVICE Item item(uint32_t rank, uint32_t i) const {
    const uint32_t step = i / tiles_per_block();
    return {swizzled_peer(rank, 1 + step, world), i % tiles_per_block()};  // own block last
  }
  TL_HOST_DEVICE RowRange tile_rows(uint32_t t) const {  // within the block
    const uint32_t row0 = (t / n_tiles()) * bm;
    return {row0, rows_per_rank - row0 < bm ? rows_per_rank - row0 : bm};
  }
  TL_HOST_DEVICE RowRange tile_cols(uint32_t t) const {
    const uint32_t col0 = (t % n_tiles()) * bn;
    return {col0, n - col0 < bn ? n - col0 : bn};
  }
  // recv: world slots of rows_per_rank x n floats; slot s holds sender s's part.
  TL_HOST_DEVICE float* slot(float* recv, uint32_t sender) const {
    return recv + uint64_t(sender) * rows_per_rank * n;
  }
};

// Compute blocks of one rank: C tiles in swizzled owner order, naive GEMM (the fused kernel runs
// its CUTLASS mainloop here), then the epilogue hand-off. `tile` is scratch of bm x bn floats
// per block (16-byte aligned rows when bn is a multiple of 4).
// A: M x k floats (row-major), B: k x n floats, recv: symmetric, see GemmRsPlan::slot.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void gemm_rs_compute_block(Ctx& ctx, const GemmRsPlan& plan, const SignalView& sig,
                                          const SymmetricView& heap, const float* a, const float* b,
                                          float* recv, float* tile) {
  rank_barrier(ctx, sig, plan.barrier_channel());
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const Lanes lanes = ctx.lanes();
  for (uint32_t i = ctx.block(); i < plan.num_tiles(); i += ctx.num_blocks()) {
    const GemmRsPlan::Item it = plan.item(rank, i);
    const RowRange rows = plan.tile_rows(it.tile);
    const RowRange cols = plan.tile_cols(it.tile);
    for (uint32_t e = lanes.id; e < rows.rows * cols.rows; e += lanes.count) {
      const uint32_t r = e / cols.rows, col = cols.row0 + e % cols.rows;
      const float* a_row = a + (uint64_t(it.owner) * plan.rows_per_rank + rows.row0 + r) * plan.k;
      const float acc = naive_dot(a_row, b, plan.k, plan.n, col);
      tile[uint64_t(r) * plan.bn + (e % cols.rows)] = acc;
    }
    // Epilogue: this tile into the owner's slot for this rank, then its group's notify.
    float* dst = plan.slot(recv, rank) + uint64_t(rows.row0) * plan.n + cols.row0;
    const TileShape shape{rows.rows, cols.rows * 4u};
    ctx.sync();
    ctx.tile_push_data(heap, {dst, uint64_t(plan.n) * 4u}, static_cast<int>(it.owner), shape,
                       {tile, uint64_t(plan.bn) * 4u});
    ctx.peer_tile_notify(sig, plan.group_channel0() + plan.group_of(it.tile), static_cast<int>(it.owner),
                         NotifyMode::kAdd);
  }
}

// Reduction blocks of one rank: each of its block's tiles, once its group is complete, summed
// over the world slots in rank order into `out` (rows_per_rank x n floats).
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void gemm_rs_reduce_block(Ctx& ctx, const GemmRsPlan& plan, const SignalView& sig,
                                         float* recv, float* out) {
  const Lanes lanes = ctx.lanes();
  for (uint32_t t = ctx.block(); t < plan.tiles_per_block(); t += ctx.num_blocks()) {
    ctx.consumer_tile_wait(sig, plan.group_channel0() + plan.group_of(t), 1, plan.arrivals_per_group(),
                           static_cast<int32_t>(t));
    const RowRange rows = plan.tile_rows(t);
    const RowRange cols = plan.tile_cols(t);
    for (uint32_t e = lanes.id; e < rows.rows * cols.rows; e += lanes.count) {
      const uint64_t at = uint64_t(rows.row0 + e / cols.rows) * plan.n + cols.row0 + e % cols.rows;
      float acc = 0.f;
      for (uint32_t q = 0; q < plan.world; ++q) acc += plan.slot(recv, q)[at];
      out[at] = acc;
    }
  }
}

}  // namespace tilelink
