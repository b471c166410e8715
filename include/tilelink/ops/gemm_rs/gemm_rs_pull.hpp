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

// Compute blocks of one rank: the fused kernel's tile order (rows of m_order, all N tiles of a
// row before the next) with a naive GEMM standing in for the CUTLASS mainloop, each tile written
// to this rank's partial and then notified, as the kernel's epilogue does. The CPU executor runs
// it in CI. a: M x k, b: n x k (k contiguous), partial: M x n, all floats.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void gemm_rs_pull_compute_block(Ctx& ctx, const GemmRsPullPlan& plan, const SignalView& sig,
                                               const uint32_t* m_order, const float* a, const float* b, uint32_t k,
                                               float* partial) {
  const Lanes lanes = ctx.lanes();
  const uint32_t tiles = plan.world * plan.m_tiles() * plan.n_tiles();
  for (uint32_t i = ctx.block(); i < tiles; i += ctx.num_blocks()) {
    const uint32_t m_tile = m_order[i / plan.n_tiles()];
    const uint32_t n_tile = i % plan.n_tiles();
    const uint32_t col0 = n_tile * plan.bn;
    const uint32_t cols = plan.n - col0 < plan.bn ? plan.n - col0 : plan.bn;
    for (uint32_t e = lanes.id; e < plan.bm * cols; e += lanes.count) {
      const uint32_t row = m_tile * plan.bm + e / cols, col = col0 + e % cols;
      float acc = 0.f;
      for (uint32_t kk = 0; kk < k; ++kk) acc += a[uint64_t(row) * k + kk] * b[uint64_t(col) * k + kk];
      partial[uint64_t(row) * plan.n + col] = acc;
    }
    ctx.producer_tile_notify(sig, plan.tile_channel(m_tile, n_tile), NotifyMode::kAdd);
  }
}

// Reduction blocks of one owner: each tile of its block once every sender's group is complete,
// in block-strided order; `sum_tile(t, row0, col0, cols)` sums the senders' partial rows
// [row0, row0 + bm) (within the block), columns [col0, col0 + cols), in rank order 0..P-1. Then
// the exit barrier: peers read this rank's partial until every rank is past it.
TL_PROTOCOL
template <class Ctx, class SumTile>
TL_HOST_DEVICE void gemm_rs_pull_reduce_block(Ctx& ctx, const GemmRsPullPlan& plan, const SignalView& sig,
                                              SumTile&& sum_tile) {
  const uint32_t owner = static_cast<uint32_t>(ctx.rank());
  for (uint32_t t = ctx.block(); t < plan.tiles_per_block(); t += ctx.num_blocks()) {
    const uint32_t channel = plan.group_channel(owner, plan.group_of(t));
    for (uint32_t s = 0; s < plan.world; ++s) {
      ctx.peer_tile_wait(sig, channel, static_cast<int>(s), plan.arrivals_per_group(), static_cast<int32_t>(t));
    }
    const uint32_t col0 = (t % plan.n_tiles()) * plan.bn;
    sum_tile(t, (t / plan.n_tiles()) * plan.bm, col0, plan.n - col0 < plan.bn ? plan.n - col0 : plan.bn);
  }
  rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
