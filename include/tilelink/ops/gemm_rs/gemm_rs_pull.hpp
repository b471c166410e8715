// GEMM+RS, pull form: the protocol of the fused kernel's first variant.
//
// Rank r computes its partial P_r = A_r * B_r^T (M x N) into its own `partial` buffer (symmetric,
// row-major), owner blocks of other ranks first (rank r starts with r + 1's rows, its own last).
// The epilogue, once a tile's stores have landed, notifies the tile's signal group on rank r
// itself (producer_tile_notify, add mode). Reduction blocks of owner q wait on every sender's
// channel for q's group (peer_tile_wait) and sum the senders' tiles of q's rows in rank order
// 0..P-1 in fp32: the same inputs give bit-identical outputs, whatever the arrival order.
//
// Signal granularity (decoupled from the tile size): one channel per GEMM tile, per row of tiles,
// or per owner block. Owner blocks are whole GEMM tile rows (rows_per_rank % bm == 0).
// Across calls: a rank's GEMM of call e+1 overwrites its partial, which peers read in call e; the
// reduction's exit barrier (all ranks done reading) precedes the next call's GEMM on every rank.
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_protocol.hpp"

namespace tilelink {

struct GemmRsPullPlan {
  uint32_t world = 1;
  uint32_t rows_per_rank = 0;  // M / P, a multiple of bm
  uint32_t n = 0;
  uint32_t bm = 0;             // GEMM tile
  uint32_t bn = 0;
  SignalGranularity granularity = SignalGranularity::kTile;

  TL_HOST_DEVICE uint32_t m_tiles() const { return rows_per_rank / bm; }  // per owner block
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

  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t group_channel(uint32_t owner, uint32_t group) const {
    return exit_barrier_channels(world) + owner * groups() + group;
  }
  TL_HOST_DEVICE uint32_t num_channels() const { return group_channel(world, 0); }

  // The channel a GEMM tile (m_tile over all of M, n_tile) notifies.
  TL_HOST_DEVICE uint32_t tile_channel(uint32_t m_tile, uint32_t n_tile) const {
    const uint32_t owner = m_tile / m_tiles();
    const uint32_t t = (m_tile - owner * m_tiles()) * n_tiles() + n_tile;
    return group_channel(owner, group_of(t));
  }
};

// Tile rows (of M) in rank `rank`'s compute order: owner rank+1's block first, its own last.
inline void make_gemm_rs_m_order(const GemmRsPullPlan& plan, uint32_t rank, uint32_t* m_order) {
  uint32_t j = 0;
  for (uint32_t step = 1; step <= plan.world; ++step) {
    const uint32_t owner = swizzled_peer(rank, step, plan.world);
    for (uint32_t t = 0; t < plan.m_tiles(); ++t) m_order[j++] = owner * plan.m_tiles() + t;
  }
}

}  // namespace tilelink
