// GEMM+RS's compute blocks with a naive GEMM (gemm_rs_fused.hpp's protocol as the fused kernel
// runs it), run by the CPU protocol executor in CI.
#pragma once

#include <cstdint>

#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/testing/naive_dot.hpp"

namespace tilelink {

// Compute blocks of one rank: the fused kernel's tile order (rows of m_order, all N tiles of a
// row before the next) with a naive GEMM standing in for the CUTLASS mainloop, each tile stored
// where plan.scatter puts it and then notified, as the kernel's epilogue does; with
// plan.reducer == kEpilogue, an own tile is then summed there (gemm_rs_epilogue_reduce, by
// `sum_tile`). The CPU executor runs it in CI. a: M x k, b: n x k (k contiguous), buf: symmetric
// P * R x n (R = plan.rows_per_rank), all floats.
TL_PROTOCOL
template <class Ctx, class SumTile>
TL_HOST_DEVICE void gemm_rs_fused_compute_block(Ctx& ctx, const GemmRsFusedPlan& plan, const SignalView& sig,
                                                const SymmetricView& heap, const uint32_t* m_order, const float* a,
                                                const float* b, uint32_t k, float* buf, SumTile&& sum_tile) {
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const bool push = plan.scatter == GemmRsScatter::kEpiloguePush;
  const uint32_t tiles = plan.world * plan.m_tiles() * plan.n_tiles();
  // plan.defer_push_notify: a pushed peer tile announced after the block's next tile (as the
  // kernel's next epilogue does, before any wait of that tile), or after its last.
  constexpr uint32_t kNone = 0xffffffffu;
  uint32_t pending_m = kNone, pending_n = 0;
  for (uint32_t i = ctx.block(); i < tiles; i += ctx.num_blocks()) {
    const uint32_t m_tile = m_order[i / plan.n_tiles()];
    const uint32_t n_tile = i % plan.n_tiles();
    const uint32_t owner = plan.tile_owner(m_tile);
    float* dst = push ? heap.translate(buf, static_cast<int>(owner)) : buf;
    const ColRange cols = tile_cols(n_tile, plan.bn, plan.n);
    // The block's rows of the tile (the kernel also computes the rest, which lands nowhere read).
    for_each_tile_element(ctx.lanes(), plan.tile_row0(m_tile), plan.rows_of_tile(m_tile), cols,
                          [&](uint32_t row, uint32_t col) {
      const float acc = naive_dot(a + uint64_t(row) * k, b + uint64_t(col) * k, k, 1, 0);  // b is n x k
      dst[uint64_t(plan.landing_row(rank, row)) * plan.n + col] = acc;
    });
    if (push) {
      ctx.sync();  // the block's stores, then one notify for the tile (or for the pending one)
      if (pending_m != kNone) {
        ctx.peer_tile_notify(sig, plan.tile_channel(pending_m, pending_n), static_cast<int>(plan.tile_owner(pending_m)),
                             NotifyMode::kAdd);
        pending_m = kNone;
      }
      if (plan.may_defer_notify(rank, m_tile, 1)) {  // one tile per block: no cluster-mates
        pending_m = m_tile, pending_n = n_tile;
      } else {
        ctx.peer_tile_notify(sig, plan.tile_channel(m_tile, n_tile), static_cast<int>(owner), NotifyMode::kAdd);
      }
    } else {
      ctx.producer_tile_notify(sig, plan.tile_channel(m_tile, n_tile), NotifyMode::kAdd);
    }
    if (plan.reducer == GemmRsReducer::kEpilogue && owner == rank) {
      gemm_rs_epilogue_reduce(ctx, plan, sig, (m_tile - owner * plan.m_tiles()) * plan.n_tiles() + n_tile, sum_tile);
    }
  }
  if (pending_m != kNone) {
    ctx.peer_tile_notify(sig, plan.tile_channel(pending_m, pending_n), static_cast<int>(plan.tile_owner(pending_m)),
                         NotifyMode::kAdd);
  }
}

}  // namespace tilelink
